"""Local inputs of a build read only what the user meant (issue 33): an experiment file's folder is opened once, a
haystack folder's entries are never followed, and an experiment's tokenizer never comes from the current folder.

Each attack runs the `needlebench` command (a subprocess) in the sandbox of :mod:`support.sandbox` (a fake HOME with
the user's files) and hashes that HOME before and after.

1. ``build --experiment shared/x/exp.yaml``: a second process renames ``shared/x`` away and puts a link to the user's
   HOME at its name right after the YAML was read (driven inside the command's process, ``sitecustomize``, at that
   very moment every time). The inputs the file names (``haystack: diary.txt``, ``needles_file: needles.jsonl``)
   still come from the folder that was opened, never from ``~/diary.txt``.
2. ``build --haystack-en hay`` / ``verify --haystack-en hay``: a ``.txt`` entry of the folder that is a link to
   ``~/notes.txt`` is a one-line refusal naming it, never read into the prompts.
3. An experiment's ``tokenizer: hf:NAME`` that is no folder beside the file is not loaded from the user's current
   folder (``--allow-path`` allows that folder); ``hf:../tok`` is the folder beside the file's folder, not the one
   beside the current folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from support.sandbox import refused, run, snapshot

pytestmark = pytest.mark.slow

DIARY = "DIARYSECRET my private diary entry, never to be shared. " * 200
STORY = "The river ran quietly past the old mill, and the miller counted his sacks of grain. " * 300
NEEDLE = {"needle": "The vault code is 4711.", "question": "What is the vault code?", "keyword": "4711"}


def _experiment(folder: Path, **changes) -> Path:
    data = {"name": "myexp", "kind": "single", "language": "en", "lengths": [1000], "depths": [10, 50]}
    data["needles"] = [NEEDLE]
    data.update(changes)
    data = {key: value for key, value in data.items() if value is not None}
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _rows(out: Path) -> str:
    texts = []
    for file in sorted(out.rglob("*.parquet")):
        texts += [json.dumps(row, ensure_ascii=False, default=str) for row in pq.read_table(file).to_pylist()]
    assert texts
    return "\n".join(texts)


# --- 1. the experiment file's folder swapped for a link to HOME once the file was read ----------------------------

#: Loaded into the `needlebench` process (``sitecustomize`` on its PYTHONPATH): right after the experiment file was
#: parsed, its folder is renamed away and a link to the user's HOME takes its name.
_SWAPPER = """
import os
FOLDER, TARGET = os.environ["SWAP_FOLDER"], os.environ["SWAP_TARGET"]

import needlebench.tasks.experiment as experiment
real = experiment.load_user_yaml
def load_user_yaml(*args, **kwargs):
    data = real(*args, **kwargs)
    os.rename(FOLDER, FOLDER + ".moved")
    os.symlink(TARGET, FOLDER)
    return data
experiment.load_user_yaml = load_user_yaml
"""


def _needles_line(needle: str) -> str:
    return json.dumps(
        {
            "needle": needle,
            "retrieval_question": "What is the vault code?",
            "arg1": "",
            "arg2": "4711",
            "language": "English",
        }  # fmt: skip
    )


@pytest.mark.parametrize("key", ["haystack", "needles_file"])
def test_an_experiment_folder_swapped_for_a_link_to_home_after_the_file_was_read(sandbox, tmp_path, key):
    shared = sandbox / "work" / "shared"
    folder = shared / "x"
    folder.mkdir(parents=True)
    (folder / "diary.txt").write_text(STORY)  # the experiment's own haystack, under the name of the user's file
    (sandbox / "diary.txt").write_text(DIARY)
    (folder / "needles.jsonl").write_text(_needles_line("The vault code is 4711.") + "\n")
    (sandbox / "needles.jsonl").write_text(_needles_line("DIARYSECRET the vault code is 4711.") + "\n")
    if key == "haystack":
        _experiment(folder, haystack="diary.txt")
    else:
        _experiment(folder, haystack="diary.txt", needles=None, needles_file="needles.jsonl")
    racer = tmp_path / "racer"
    racer.mkdir()
    (racer / "sitecustomize.py").write_text(_SWAPPER)
    env = {
        "PYTHONPATH": f"{racer}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "SWAP_FOLDER": str(folder),
        "SWAP_TARGET": str(sandbox),
    }
    out = tmp_path / "out"
    before = snapshot(sandbox, skip=shared)
    result = run(sandbox, "build", "--experiment", "shared/x/exp.yaml", "--out", str(out), env=env)
    assert folder.is_symlink(), result.stderr[-2000:]  # the swap happened while the command ran
    assert result.returncode == 0, result.stderr[-2000:]
    rows = _rows(out)
    assert "DIARYSECRET" not in rows and "miller" in rows
    manifest = json.loads((out / "needlebench.json").read_text())
    assert manifest["recipe"]["haystack_en"]["sha256"] == hashlib.sha256(STORY.encode()).hexdigest()
    assert snapshot(sandbox, skip=shared) == before


# --- 2. a haystack folder with a .txt entry that is a link to the user's notes -----------------------------------


def _prose(seed: int, sentences: int = 400) -> str:
    """Varied sentences (a built-in config's windows need word boundaries in many places)."""
    import random

    draw = random.Random(seed)
    words = "alpha beta gamma delta river stone light market window garden city north south paper music".split()
    return "\n".join(
        " ".join(draw.choice(words) for _ in range(draw.randint(5, 15))).capitalize() + "." for _ in range(sentences)
    )


def _hay(folder: Path) -> Path:
    folder.mkdir()
    (folder / "a.txt").write_text(_prose(1))
    return folder


def test_a_haystack_folder_entry_that_is_a_link_is_refused_by_build(sandbox, tmp_path):
    hay = _hay(sandbox / "work" / "hay")
    (hay / "0.txt").symlink_to(sandbox / "notes.txt")
    out = tmp_path / "out"
    before = snapshot(sandbox)
    result = run(sandbox, "build", "single_en_4k", "--haystack-en", "hay", "--out", str(out))
    line = refused(result, "0.txt", "symbolic link")
    assert "my notes" not in line
    assert not out.exists()
    assert snapshot(sandbox) == before


def test_a_haystack_folder_entry_that_is_a_link_is_refused_by_verify(sandbox, tmp_path):
    hay = _hay(sandbox / "work" / "hay")
    (hay / "b.txt").write_text(_prose(2, 100))
    out = tmp_path / "ds"
    built = run(sandbox, "build", "single_en_4k", "--haystack-en", "hay", "--out", str(out))
    assert built.returncode == 0, built.stderr[-2000:]
    assert "my notes" not in _rows(out)
    # the folder handed over again with its b.txt now a link to the user's notes
    (hay / "b.txt").unlink()
    (hay / "b.txt").symlink_to(sandbox / "notes.txt")
    before = snapshot(sandbox)
    refused(run(sandbox, "verify", str(out), "--haystack-en", "hay"), "b.txt", "symbolic link")
    assert snapshot(sandbox) == before


# --- 3. an experiment's tokenizer named relative to the current folder ------------------------------------------


def _tokenizer(folder: Path, vocab_size: int) -> str:
    """A small byte-level BPE tokenizer folder; the sha256 of its tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator([STORY] * 5, trainer=trainer)
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    return hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()


@pytest.fixture()
def exp_folder(sandbox: Path) -> Path:
    """An experiment folder someone handed over, in the user's work folder, with a small haystack of its own."""
    folder = sandbox / "work" / "shared_exp"
    folder.mkdir()
    (folder / "story.txt").write_text(STORY)
    return folder


def _manifest_tokenizer(out: Path) -> str:
    return json.loads((out / "needlebench.json").read_text())["recipe"]["tokenizer"]


def test_an_experiment_tokenizer_name_is_not_read_from_the_current_folder(sandbox, tmp_path, exp_folder):
    sha = _tokenizer(sandbox / "work" / "my-private-tok", 300)  # the user's own, in the folder they work in
    path = _experiment(exp_folder, haystack="story.txt", lengths=[500], tokenizer="hf:my-private-tok")
    out = tmp_path / "out"
    before = snapshot(sandbox)
    line = refused(run(sandbox, "build", "--experiment", str(path), "--out", str(out)), "my-private-tok")
    assert "--allow-path" in line
    assert not out.exists()
    assert snapshot(sandbox) == before
    # the user who means that folder says so
    allowed = run(sandbox, "build", "--experiment", str(path), "--out", str(out), "--allow-path", "my-private-tok")
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert _manifest_tokenizer(out) == f"hf:my-private-tok@sha256:{sha}"


def test_an_experiment_tokenizer_beside_its_folder_is_the_one_read(sandbox, tmp_path, exp_folder):
    """``hf:../tok`` (allowed) is the folder beside the experiment's folder, not ``../tok`` of the current folder."""
    meant = _tokenizer(sandbox / "work" / "tok", 300)
    other = _tokenizer(sandbox / "tok", 320)  # ../tok as seen from the current folder (sandbox/work)
    assert meant != other
    path = _experiment(exp_folder, haystack="story.txt", lengths=[500], tokenizer="hf:../tok")
    out = tmp_path / "out"
    before = snapshot(sandbox)
    result = run(sandbox, "build", "--experiment", str(path), "--out", str(out), "--allow-path", "tok")
    assert result.returncode == 0, result.stderr[-2000:]
    assert _manifest_tokenizer(out) == f"hf:tok@sha256:{meant}"
    assert snapshot(sandbox) == before


def test_an_experiment_tokenizer_folder_beside_the_file_still_builds(sandbox, tmp_path, exp_folder):
    sha = _tokenizer(exp_folder / "tok", 300)
    _tokenizer(sandbox / "work" / "tok", 320)  # a folder of the same name in the current folder: not used
    path = _experiment(exp_folder, haystack="story.txt", lengths=[500], tokenizer="hf:tok")
    out = tmp_path / "out"
    result = run(sandbox, "build", "--experiment", str(path), "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert _manifest_tokenizer(out) == f"hf:tok@sha256:{sha}"
