"""A dataset folder from anyone, round 2: what `load_dataset` reads is what verify checked, a listed shard is never
read beyond what its manifest can hold, a lock someone else holds never hangs a reader, and verify rebuilds nothing a
manifest cannot give.

Each attack runs the `needlebench` command (a subprocess) in the sandbox of :mod:`support.sandbox` (a fake HOME
holding the user's files, hashed before and after: nothing of theirs changes).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from support.sandbox import CLI, REAL_CONFIG, REAL_HF_HOME, refused, run, snapshot

pytestmark = pytest.mark.slow

ROW = "atc_en-n2-r0-ABCD"
SHARD = "data/atc_en/test-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    """A real build of atc_en."""
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions

    out = tmp_path_factory.mktemp("honest") / "ds"
    build_dataset(["atc_en"], out, BuildOptions(), progress=False)
    return out


@pytest.fixture()
def dataset(honest: Path, sandbox: Path) -> Path:
    """A copy of the honest build inside the sandbox (the folder someone handed over)."""
    target = sandbox / "work" / "ds"
    shutil.copytree(honest, target, symlinks=True)
    return target


def _timed(home: Path, *args: str, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """`needlebench ARGS` in the sandbox, killed after `timeout` seconds (a hang fails the test, never blocks it)."""
    environment = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME}
    environment.update(env or {})
    try:
        return subprocess.run(
            [*CLI, *args], capture_output=True, text=True, env=environment, cwd=home / "work", timeout=timeout
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"needlebench {' '.join(args)} still running after {timeout} s")


def _budget_refused(result: subprocess.CompletedProcess, *names: str) -> str:
    """:func:`refused` for budget, whose progress bar may have started before the error (lines ``counting: ...``)."""
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("counting:")]
    return refused(subprocess.CompletedProcess(result.args, result.returncode, result.stdout, "\n".join(lines)), *names)


def _shown_row(stdout: str) -> dict:
    """The row `show` prints (a JSON object, then the prompt)."""
    return json.JSONDecoder().raw_decode(stdout)[0]


def _tokenizer(home: Path) -> Path:
    """A small byte-level BPE tokenizer folder (what budget --tokenizer takes)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder = home / "work" / "tok"
    folder.mkdir()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(["hello world"] * 20, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    return folder


# --- the card's features ----------------------------------------------------------------------------------------


def _retype(card: Path, column: str, dtype: str) -> None:
    text = card.read_text()
    old = f"  - name: {column}\n    dtype: int64\n"
    assert old in text
    card.write_text(text.replace(old, f"  - name: {column}\n    dtype: {dtype}\n", 1))


def test_card_features_that_cast_a_column_differ(dataset: Path, sandbox: Path):
    """load_dataset casts every column to the card's features (int64 num_needles 2 -> True): verify says the config
    differs, show and eval's loader refuse, naming the column and both types."""
    _retype(dataset / "README.md", "num_needles", "bool")
    before = snapshot(sandbox, skip=dataset)
    done = run(sandbox, "verify", str(dataset))
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr[-2000:])
    text = " ".join(done.stdout.split())
    assert "differs atc_en" in text and "num_needles" in text and "bool" in text and "int64" in text
    assert "building" not in done.stderr  # the files differ from what load_dataset reads: nothing is rebuilt
    line = refused(run(sandbox, "show", str(dataset), ROW), "num_needles", "bool", "int64", str(dataset))
    assert "README.md" in line
    assert snapshot(sandbox, skip=dataset) == before


def test_card_features_of_another_column_list_differ(dataset: Path, sandbox: Path):
    card = dataset / "README.md"
    text = card.read_text()
    old = "  - name: needles\n    list: string\n"
    assert old in text
    card.write_text(text.replace(old, "  - name: needles\n    dtype: string\n", 1))
    refused(run(sandbox, "show", str(dataset), ROW), "needles", "list<string>")


def test_legacy_dataset_infos_json_is_refused(dataset: Path, sandbox: Path):
    """datasets reads a dataset_infos.json beside the card (its features cast the columns of a config the card gives
    none); needlebench never writes one."""
    infos = {"atc_en": {"features": {"num_needles": {"dtype": "bool", "_type": "Value"}}}}
    (dataset / "dataset_infos.json").write_text(json.dumps(infos))
    refused(run(sandbox, "show", str(dataset), ROW), "dataset_infos.json")
    done = run(sandbox, "verify", str(dataset))
    assert done.returncode == 1 and "dataset_infos.json" in " ".join(done.stdout.split()), done.stdout


def test_honest_card_still_loads(dataset: Path, sandbox: Path):
    done = run(sandbox, "show", str(dataset), ROW)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _shown_row(done.stdout)["num_needles"] == 2


# --- shard sizes ------------------------------------------------------------------------------------------------


def test_a_huge_sparse_shard_is_refused_before_it_is_read(dataset: Path, sandbox: Path):
    """A listed shard of 200 GB (sparse: no disk used) is refused from its size alone by show, verify and budget,
    at once (it was hashed for minutes)."""
    shard = dataset / SHARD
    tokenizer = _tokenizer(sandbox)
    before = snapshot(sandbox, skip=dataset)
    os.truncate(shard, 200 * 2**30)
    try:
        line = refused(_timed(sandbox, "show", str(dataset), ROW, timeout=60), SHARD, "214,748,364,800 bytes")
        assert "720 rows" in line
        done = _timed(sandbox, "verify", str(dataset), timeout=60)
        assert done.returncode == 1 and "214,748,364,800 bytes" in " ".join(done.stdout.split()), done.stdout
        args = ("budget", "atc_en", "--tokenizer", str(tokenizer), "--max-length", "100000", "--data-dir", str(dataset))
        _budget_refused(_timed(sandbox, *args, timeout=60), SHARD, "214,748,364,800 bytes")
    finally:
        shard.unlink()
    assert snapshot(sandbox, skip=dataset) == before


# --- budget --data-dir ------------------------------------------------------------------------------------------


def _not_parquet(path: Path) -> None:
    path.write_bytes(b"junk\n")


def _no_prompt(path: Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(path).drop_columns(["prompt"]), path)


def _null_length(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    values = table.column("context_length").to_pylist()
    values[0] = None
    index = table.schema.get_field_index("context_length")
    pq.write_table(table.set_column(index, "context_length", pa.array(values, pa.int64())), path)


def _string_length(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    values = [str(value) for value in table.column("context_length").to_pylist()]
    index = table.schema.get_field_index("context_length")
    pq.write_table(table.set_column(index, "context_length", pa.array(values, pa.string())), path)


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        (_not_parquet, "not a readable Parquet file"),
        (_no_prompt, "no column prompt"),
        (_null_length, "no context_length"),
        (_string_length, "context_length of type string"),
    ],
    ids=["not parquet", "no prompt", "null length", "string length"],
)
def test_budget_data_dir_with_a_bad_shard_is_one_line(dataset: Path, sandbox: Path, tamper, said: str):
    tamper(dataset / SHARD)
    tokenizer = _tokenizer(sandbox)
    before = snapshot(sandbox, skip=dataset)
    args = ("budget", "atc_en", "--tokenizer", str(tokenizer), "--max-length", "100000", "--data-dir", str(dataset))
    _budget_refused(run(sandbox, *args), str(dataset / SHARD), said)
    assert snapshot(sandbox, skip=dataset) == before


# --- a lock someone else holds ----------------------------------------------------------------------------------


def _hold_lock(folder: Path) -> int:
    """An exclusive flock on `folder` (what anyone able to read it can take), held until the descriptor is closed."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    return descriptor


def test_a_held_lock_is_one_line_naming_the_folder_and_its_holder(dataset: Path, sandbox: Path):
    descriptor = _hold_lock(dataset)
    try:
        started = time.monotonic()
        done = _timed(sandbox, "show", str(dataset), ROW, timeout=60, env={"NEEDLEBENCH_LOCK_WAIT": "2"})
        elapsed = time.monotonic() - started
    finally:
        os.close(descriptor)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("needlebench: warning: waiting for ") and f"process {os.getpid()}" in lines[0]
    assert lines[1].startswith("needlebench: error: ") and str(dataset) in lines[1]
    assert f"process {os.getpid()}" in lines[1] and "2 s" in lines[1]
    assert elapsed < 45


def test_a_lock_released_meanwhile_is_waited_for(dataset: Path, sandbox: Path):
    """The reader says what it waits for, and goes on once the lock is released (here: when it has said so)."""
    descriptor = _hold_lock(dataset)
    environment = {**os.environ, "HOME": str(sandbox), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME}
    process = subprocess.Popen(
        [*CLI, "show", str(dataset), ROW],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=sandbox / "work",
    )
    try:
        ready, _, _ = select.select([process.stderr], [], [], 60)  # the reader says so after a second
        if not ready:
            process.kill()
            process.communicate()
            pytest.fail("show waited for the lock for 60 s without a word")
        first = process.stderr.readline()
    finally:
        os.close(descriptor)
    stdout, rest = process.communicate(timeout=60)
    assert first.startswith("needlebench: warning: waiting for ") and str(dataset) in first, first + rest
    assert process.returncode == 0, rest[-2000:]
    assert _shown_row(stdout)["id"] == ROW


def test_a_bad_lock_wait_is_one_line(dataset: Path, sandbox: Path):
    descriptor = _hold_lock(dataset)
    try:
        done = _timed(sandbox, "show", str(dataset), ROW, timeout=60, env={"NEEDLEBENCH_LOCK_WAIT": "nan"})
    finally:
        os.close(descriptor)
    refused(done, "NEEDLEBENCH_LOCK_WAIT", "nan")


# --- what verify rebuilds ---------------------------------------------------------------------------------------

EXPERIMENT = """\
name: tiny
kind: single
language: en
needles:
  - needle: "The best thing to do in San Francisco is eat a sandwich."
    question: "What is the best thing to do in San Francisco?"
    answer: "eat a sandwich"
    keyword: "sandwich"
lengths: [1000, 2000]
depths: {n: 2, spacing: linear}
runs: 1
"""


@pytest.fixture(scope="module")
def experiment_build(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("experiment")
    (folder / "e.yaml").write_text(EXPERIMENT)
    done = subprocess.run(
        [*CLI, "build", "--experiment", "e.yaml", "--out", "ds"], cwd=folder, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return folder / "ds"


@pytest.fixture()
def experiment_dataset(experiment_build: Path, sandbox: Path) -> Path:
    target = sandbox / "work" / "exp"
    shutil.copytree(experiment_build, target, symlinks=True)
    return target


def _inflate(folder: Path) -> None:
    """The experiment record asks for 800 rows of 2 million tokens (1.6 billion): the files keep their 4 rows."""
    path = folder / "needlebench.json"
    manifest = json.loads(path.read_text())
    record = manifest["experiments"]["tiny"]
    record.update(lengths=[1999997, 1999998, 1999999, 2000000], depths=[float(d) for d in range(20)], runs=10)
    path.write_text(json.dumps(manifest, indent=2))


def test_verify_does_not_rebuild_a_record_that_cannot_give_the_files(experiment_dataset: Path, sandbox: Path):
    _inflate(experiment_dataset)
    before = snapshot(sandbox, skip=experiment_dataset)
    done = _timed(sandbox, "verify", str(experiment_dataset), timeout=90)
    assert done.returncode == 1, (done.stdout, done.stderr[-2000:])
    text = " ".join(done.stdout.split())
    assert "differs tiny" in text and "800 rows" in text and "hold 4" in text
    assert "building" not in done.stderr
    assert snapshot(sandbox, skip=experiment_dataset) == before


def test_verify_does_not_rebuild_when_the_files_already_differ(experiment_dataset: Path, sandbox: Path):
    _inflate(experiment_dataset)
    with open(experiment_dataset / "data" / "tiny" / "test-00000-of-00001.parquet", "ab") as handle:
        handle.write(b"x")
    done = _timed(sandbox, "verify", str(experiment_dataset), timeout=90)
    assert done.returncode == 1, (done.stdout, done.stderr[-2000:])
    assert "fingerprint" in " ".join(done.stdout.split())
    assert "building" not in done.stderr


def test_verify_caps_the_rebuild_and_names_the_option(experiment_dataset: Path, sandbox: Path):
    line = refused(
        run(sandbox, "verify", str(experiment_dataset), "--max-tokens", "1000"), "tiny", "6,000", "--max-tokens"
    )
    assert "1,000" in line
    done = run(sandbox, "verify", str(experiment_dataset))
    assert done.returncode == 0 and "all configs match" in done.stdout, done.stderr[-2000:]


def test_the_default_rebuild_cap_is_the_largest_built_in_config():
    from needlebench.dataset.verify import check_rebuild_size, largest_standard_tokens
    from needlebench.errors import NeedlebenchError
    from needlebench.tasks.grid import registry

    largest = max(registry().values(), key=lambda spec: spec.approx_tokens)
    assert largest_standard_tokens() == largest.approx_tokens
    manifest = {"recipe": {}, "configs": {}}
    check_rebuild_size(manifest, [largest.name], "m")  # every built-in config verifies by default
    depths = [float(depth) for depth in range(101)]  # 101 depths instead of 11: beyond the largest
    with pytest.raises(NeedlebenchError, match="--max-tokens"):
        check_rebuild_size({"recipe": {"depths": depths}, "configs": {}}, [largest.name], "m")
