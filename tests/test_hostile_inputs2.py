"""An experiment file's local inputs and a handed manifest's recipe never read the user's files (issue 33).

Each attack runs the `needlebench` command (a subprocess) in the sandbox of :mod:`support.sandbox` (a fake HOME with
the user's files) and hashes that HOME before and after.

1. A second process flips an experiment's ``haystack: race.txt`` between a file and a link to ``~/mydata/diary.txt``:
   driven inside the command's process (``sitecustomize``) at the worst moments, after the path check and after the
   read; the file is opened once relative to the experiment folder's descriptor with ``O_NOFOLLOW`` and every later
   use takes those bytes.
2. A manifest's recipe naming a local path (``haystack_en: /home/u/mydata/diary.txt``, ``tokenizer: hf:~/mydata/tok``)
   is refused by `verify` in one line naming the field and the option to use.
3. An experiment's ``tokenizer: hf:tok`` folder whose ``tokenizer.json`` is a link to ``~/.ssh/id_rsa`` is refused.
4. A hand-edited manifest experiment record (tokenizer, haystack) that does not describe what was built fails verify.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from support.sandbox import refused, run, snapshot

DIARY = "DIARYSECRET my private diary entry, never to be shared. " * 200
STORY = "The river ran quietly past the old mill, and the miller counted his sacks of grain. " * 300


def _experiment(folder: Path, **changes) -> Path:
    data = {
        "name": "myexp",
        "kind": "single",
        "language": "en",
        "lengths": [1000],
        "depths": [10, 50],
        "needles": [{"needle": "The vault code is 4711.", "question": "What is the vault code?", "keyword": "4711"}],
    }
    data.update(changes)
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _prompts(out: Path) -> str:
    texts = []
    for file in sorted(out.rglob("*.parquet")):
        table = pq.read_table(file)
        texts += [json.dumps(row, ensure_ascii=False, default=str) for row in table.to_pylist()]
    assert texts
    return "\n".join(texts)


@pytest.fixture()
def shared(sandbox: Path) -> Path:
    """A shared experiment folder in the user's work folder, and the user's diary."""
    (sandbox / "mydata" / "diary.txt").write_text(DIARY)
    folder = sandbox / "work" / "shared"
    folder.mkdir()
    (folder / "race.txt").write_text(STORY)
    return folder


# --- 1. the haystack swapped for a link between the check and the read --------------------------------------------

#: Loaded into the `needlebench` process (``sitecustomize`` on its PYTHONPATH): the second process of the race, at
#: the worst moment every time. ``checked``: right after the experiment's haystack path was checked to stay inside
#: its folder; ``read``: right after the haystack was read (every later use must take those bytes, not the path).
_RACER = """
import os, pathlib
MOMENT, TARGET, DIARY, FLAG = (os.environ[k] for k in ("RACE_MOMENT", "RACE_TARGET", "RACE_DIARY", "RACE_FLAG"))

def swap():
    if not os.path.exists(FLAG):
        pathlib.Path(FLAG).write_text("swapped")
        os.rename(TARGET, TARGET + ".real")
        os.symlink(DIARY, TARGET)

import needlebench.tasks.experiment as experiment
if MOMENT == "checked":
    real = experiment.local_path
    def local_path(value, key, *args, **kwargs):
        found = real(value, key, *args, **kwargs)
        if key == "haystack":
            swap()
        return found
    experiment.local_path = local_path
else:
    real = experiment._local_haystack
    def _local_haystack(*args, **kwargs):
        found = real(*args, **kwargs)
        swap()
        return found
    experiment._local_haystack = _local_haystack
"""


def _race_env(tmp_path: Path, moment: str, target: Path, diary: Path) -> dict:
    racer = tmp_path / "racer"
    racer.mkdir(exist_ok=True)
    (racer / "sitecustomize.py").write_text(_RACER)
    return {
        "PYTHONPATH": f"{racer}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "RACE_MOMENT": moment,
        "RACE_TARGET": str(target),
        "RACE_DIARY": str(diary),
        "RACE_FLAG": str(tmp_path / f"swapped-{moment}"),
    }


@pytest.mark.slow
def test_a_haystack_swapped_for_a_link_after_the_check_is_never_followed(sandbox, shared, tmp_path):
    path = _experiment(shared, haystack="race.txt")
    env = _race_env(tmp_path, "checked", shared / "race.txt", sandbox / "mydata" / "diary.txt")
    out = tmp_path / "out"
    before = snapshot(sandbox, skip=shared)
    result = run(sandbox, "build", "--experiment", str(path), "--out", str(out), env=env)
    assert (tmp_path / "swapped-checked").exists(), result.stderr[-2000:]
    line = refused(result, "race.txt")
    assert "link" in line or "leads outside" in line
    assert not out.exists()
    assert snapshot(sandbox, skip=shared) == before


@pytest.mark.slow
def test_a_haystack_swapped_after_it_was_read_builds_from_the_bytes_read(sandbox, shared, tmp_path):
    """The recipe's hash, the tokenised corpus and the rows all come from the bytes read once."""
    import hashlib

    path = _experiment(shared, haystack="race.txt")
    env = _race_env(tmp_path, "read", shared / "race.txt", sandbox / "mydata" / "diary.txt")
    out = tmp_path / "out"
    before = snapshot(sandbox, skip=shared)
    result = run(sandbox, "build", "--experiment", str(path), "--out", str(out), env=env)
    assert (tmp_path / "swapped-read").exists(), result.stderr[-2000:]
    assert result.returncode == 0, result.stderr[-2000:]
    assert "DIARYSECRET" not in _prompts(out) and "miller" in _prompts(out)
    manifest = json.loads((out / "needlebench.json").read_text())
    recorded = manifest["recipe"]["haystack_en"]
    assert recorded["sha256"] == hashlib.sha256(STORY.encode()).hexdigest(), recorded
    assert manifest["experiments"]["myexp"]["haystack"] == recorded
    assert snapshot(sandbox, skip=shared) == before


@pytest.mark.slow
def test_a_file_flipping_between_text_and_a_link_never_reaches_the_build(sandbox, shared, tmp_path):
    """The red team's loop: a thread flips race.txt as fast as it can while the command builds (a few rounds)."""
    path = _experiment(shared, haystack="race.txt")
    target, real, diary = shared / "race.txt", shared / "real.txt", sandbox / "mydata" / "diary.txt"
    real.write_text(STORY)
    before = snapshot(sandbox, skip=shared)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            for source in (real, diary):
                temp = shared / ".flip"
                try:
                    if source is real:
                        os.link(real, temp)
                    else:
                        os.symlink(diary, temp)
                    os.replace(temp, target)
                except OSError:
                    pass

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    try:
        for round_ in range(4):
            out = tmp_path / f"out{round_}"
            result = run(sandbox, "build", "--experiment", str(path), "--out", str(out))
            if result.returncode == 0:
                assert "DIARYSECRET" not in _prompts(out)
            else:
                refused(result, "race.txt")
    finally:
        stop.set()
        thread.join()
    assert snapshot(sandbox, skip=shared) == before


def test_a_name_that_stops_being_a_link_mid_lookup_is_looked_up_again_then_refused(tmp_path, monkeypatch):
    """The race above, made certain: ``os.path.realpath`` fails with EINVAL when a link it saw became a file before
    its readlink(2). Once is looked up again; every time is a one-line error naming the file (never exit 1)."""
    import errno

    from needlebench.errors import NeedlebenchError
    from needlebench.safe_fs import Folder
    from needlebench.tasks import experiment

    (tmp_path / "race.txt").write_text(STORY)
    real, calls, failing = os.path.realpath, [], set()

    def flaky(path, *args, **kwargs):
        calls.append(path)
        if len(calls) in failing:
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real(path, *args, **kwargs)

    with Folder.open(tmp_path) as folder:
        monkeypatch.setattr(os.path, "realpath", flaky)
        failing = {1}
        found = experiment.local_path("race.txt", "haystack", "exp.yaml", tmp_path, folder=folder)
        assert found == tmp_path / "race.txt" and len(calls) == 2
        failing, calls[:] = {1, 2, 3}, []
        with pytest.raises(NeedlebenchError, match=r"'race.txt' changed between a link and a file"):
            experiment.local_path("race.txt", "haystack", "exp.yaml", tmp_path, folder=folder)


@pytest.mark.slow
def test_a_needles_file_swapped_for_a_link_after_the_check_is_never_followed(sandbox, shared, tmp_path):
    needles = {"needle": "The vault code is 4711.", "retrieval_question": "What is the vault code?"}
    line = json.dumps({**needles, "arg1": "", "arg2": "4711", "language": "English"})
    (shared / "needles.jsonl").write_text(line + "\n")
    leaked = json.dumps({**needles, "needle": "DIARYSECRET 4711", "arg1": "", "arg2": "4711", "language": "English"})
    (sandbox / "mydata" / "needles.jsonl").write_text(leaked + "\n")
    data = yaml.safe_load(_experiment(shared).read_text())
    del data["needles"]
    data["needles_file"] = "needles.jsonl"
    path = shared / "exp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    racer = _RACER.replace('key == "haystack"', 'key == "needles_file"')
    env = _race_env(tmp_path, "checked", shared / "needles.jsonl", sandbox / "mydata" / "needles.jsonl")
    (tmp_path / "racer" / "sitecustomize.py").write_text(racer)
    out = tmp_path / "out"
    before = snapshot(sandbox, skip=shared)
    result = run(sandbox, "build", "--experiment", str(path), "--out", str(out), env=env)
    assert (tmp_path / "swapped-checked").exists(), result.stderr[-2000:]
    line = refused(result, "needles.jsonl")
    assert "link" in line or "leads outside" in line
    assert snapshot(sandbox, skip=shared) == before


# --- 2. and 4. a handed manifest names local paths, or an experiment record that was not built -------------------


@pytest.fixture()
def built(sandbox: Path, shared: Path, tmp_path: Path) -> Path:
    """An honest experiment dataset (with a local haystack), built in the sandbox."""
    out = sandbox / "work" / "ds"
    result = run(sandbox, "build", "--experiment", str(_experiment(shared, haystack="race.txt")), "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def _edit(folder: Path, change) -> None:
    path = folder / "needlebench.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest, indent=1))


@pytest.mark.slow
def test_the_honest_experiment_dataset_verifies(sandbox, built):
    result = run(sandbox, "verify", str(built))
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("haystack_en", "{home}/mydata/diary.txt", "--haystack-en"),
        ("haystack_en", "~/mydata/diary.txt", "--haystack-en"),
        ("haystack_en", "../mydata/diary.txt", "--haystack-en"),
        ("tokenizer", "hf:~/mydata/tok", "--tokenizer"),
        ("tokenizer", "hf:{home}/mydata/tok", "--tokenizer"),
        ("tokenizer", "hf:{home}/mydata/tok@sha256:" + "0" * 64, "--tokenizer"),
    ],
)
def test_a_recipe_naming_a_local_path_is_refused(sandbox, built, field, value, option):
    (sandbox / "mydata" / "tok").mkdir()
    (sandbox / "mydata" / "tok" / "tokenizer.json").write_text('{"my": "private, not json')
    value = value.format(home=sandbox)

    _edit(built, lambda manifest: manifest["recipe"].update({field: value}))
    before = snapshot(sandbox, skip=built)
    result = run(sandbox, "verify", str(built))
    line = refused(result, field, option)
    assert "4,200" not in line and "diary" not in line.replace(value, "") and "JSON" not in line
    assert snapshot(sandbox, skip=built) == before


@pytest.mark.slow
def test_a_recipe_of_built_in_configs_naming_a_local_path_is_refused(sandbox, tmp_path):
    out = sandbox / "work" / "atc"
    result = run(sandbox, "build", "atc_en", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    diary = sandbox / "mydata" / "diary.txt"
    diary.write_text(DIARY)
    _edit(out, lambda manifest: manifest["recipe"].update(haystack_en=str(diary)))
    before = snapshot(sandbox, skip=out)
    refused(run(sandbox, "verify", str(out)), "haystack_en", "--haystack-en")
    assert snapshot(sandbox, skip=out) == before


@pytest.mark.slow
@pytest.mark.parametrize("value", ["hf:nonexistent/zzz", "hf:~/mydata/tok", "hf:tok@sha256:" + "1" * 64])
def test_an_experiment_record_naming_another_tokenizer_fails_verify(sandbox, built, value):
    _edit(built, lambda manifest: manifest["experiments"]["myexp"].update(tokenizer=value))
    before = snapshot(sandbox, skip=built)
    result = run(sandbox, "verify", str(built))
    refused(result, "experiments.myexp.tokenizer", "does not describe what was built")
    assert snapshot(sandbox, skip=built) == before


@pytest.mark.slow
def test_an_experiment_record_naming_another_haystack_fails_verify(sandbox, built):
    def change(manifest: dict) -> None:
        manifest["experiments"]["myexp"]["haystack"] = dict(manifest["recipe"]["haystack_en"], sha256="2" * 64)

    _edit(built, change)
    result = run(sandbox, "verify", str(built))
    refused(result, "experiments.myexp.haystack", "does not describe what was built")


# --- 3. an experiment's tokenizer folder with links out ----------------------------------------------------------


@pytest.mark.slow
def test_a_tokenizer_folder_holding_a_link_out_is_refused(sandbox, shared, tmp_path):
    tok = shared / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").symlink_to(sandbox / ".ssh" / "id_rsa")
    (tok / "tokenizer_config.json").write_text("{}")
    path = _experiment(shared, tokenizer="hf:tok")
    out = tmp_path / "out"
    before = snapshot(sandbox, skip=shared)
    result = run(sandbox, "build", "--experiment", str(path), "--out", str(out))
    line = refused(result, "tokenizer", "tokenizer.json")
    assert "secret" not in line and "OPENSSH" not in line
    assert not out.exists()
    assert snapshot(sandbox, skip=shared) == before


@pytest.mark.slow
def test_an_experiment_tokenizer_folder_of_regular_files_builds_from_its_private_copy(sandbox, shared, tmp_path):
    """The honest case: the copy records the same ``hf:LABEL@sha256:HEX`` as the folder itself."""
    import hashlib
    import shutil

    from support.smollm import smollm_dir

    smollm = smollm_dir()
    tok = shared / smollm.name
    tok.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (smollm / name).is_file():
            shutil.copyfile(smollm / name, tok / name)
    path = _experiment(shared, tokenizer=f"hf:{smollm.name}", haystack="race.txt")
    out = tmp_path / "out"
    result = run(sandbox, "build", "--experiment", str(path), "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    sha = hashlib.sha256((smollm / "tokenizer.json").read_bytes()).hexdigest()
    manifest = json.loads((out / "needlebench.json").read_text())
    assert manifest["recipe"]["tokenizer"] == f"hf:{smollm.name}@sha256:{sha}"
    assert manifest["experiments"]["myexp"]["tokenizer"] == manifest["recipe"]["tokenizer"]
    result = run(sandbox, "verify", str(out))  # found again through the index, which names the shared folder
    assert result.returncode == 0, result.stderr[-2000:]
