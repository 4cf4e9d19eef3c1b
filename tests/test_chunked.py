"""Chunked evaluation and lean sample logs, through ``needlebench eval`` (lm-eval end to end, the oracle).

* a run in chunks of 7 rows equals the unchunked run (``--no-chunk``) on every metric, stderr, ``n-samples``,
  group and per-row score, on 4k configs (custom aggregations: CircularEval ``perf_4``, per-needle lists) and a
  128k one (Counting-Stars), with the oracle answering a fixed share of rows wrongly so that the scores vary;
* ``--resume`` reads finished chunks instead of running them;
* lean logs keep no prompt, carry its SHA-256, which ``needlebench show DIR ID --prompt`` reproduces, and
  ``needlebench report`` writes the same tables from lean and full (``--full-samples``) logs.

The runs take ``--subset 40`` rows per task (Counting-Stars has 32).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from needlebench.evaluation.report import write_report
from needlebench.evaluation.runner.chunked import CHUNK_TOKENS, plan_chunks
from needlebench.evaluation.runner.evaluate import ORACLE_MODEL, run_eval
from needlebench.evaluation.runner.lean_samples import PROMPT_HASH_KEY, lean_sample
from needlebench.evaluation.runner.options import parse_eval
from support import build_data

CONFIGS = ["single_en_4k", "multi_retrieval_en_4k", "atc_en", "counting_stars_acquisition_en_128k"]
TASKS = [f"needlebench_{config}" for config in CONFIGS]
#: A small group over two of the tasks (weighted by rows), so that group aggregation is compared too.
GROUP = """group: chunk_test_group
task:
  - needlebench_single_en_4k
  - needlebench_multi_retrieval_en_4k
aggregate_metric_list:
  - metric: score
    aggregation: mean
    weight_by_size: true
"""
#: Values that differ between any two runs (dates, timings, environment).
VOLATILE = {
    "date",
    "start_time",
    "end_time",
    "total_evaluation_time_seconds",
    "config",
    "git_hash",
    "pretty_env_info",
    "transformers_version",
    "lm_eval_version",
    "upper_git_hash",
}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
    )  # fmt: skip


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(CONFIGS, tmp_path_factory.mktemp("data") / "needlebench")


@pytest.fixture(scope="module")
def group_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("group")
    (folder / "chunk_test_group.yaml").write_text(GROUP, encoding="utf-8")
    return folder


def _run(
    data_dir: Path,
    group_dir: Path,
    output: Path,
    *extra: str,
    model_args: str = "wrong=0.3",
    tasks: str = "",
    rows: int = 40,
) -> None:
    argv = [
        "run", "--model", ORACLE_MODEL, "--model_args", model_args,
        "--tasks", tasks or ",".join([*TASKS[2:], "chunk_test_group"]), "--include_path", str(group_dir),
        "--metadata", json.dumps({"data_dir": str(data_dir)}), "--subset", str(rows),
        "--log_samples", "--output_path", str(output), *extra,
    ]  # fmt: skip
    assert run_eval(argv) == 0


def _results(output: Path) -> dict[str, Any]:
    paths = sorted(output.rglob("results_*.json"))
    assert paths, f"no results under {output}"
    data = json.loads(paths[-1].read_text(encoding="utf-8"))
    return {key: value for key, value in data.items() if key not in VOLATILE}


def _samples(output: Path) -> dict[str, list[dict[str, Any]]]:
    found = {}
    for path in sorted(output.rglob("samples_*.jsonl")):
        task = path.name.removeprefix("samples_").rsplit("_", 1)[0]
        found[task] = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return found


@pytest.fixture(scope="module")
def runs(data_dir: Path, group_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    _run(data_dir, group_dir, root / "chunked", "--chunk-rows", "7")
    _run(data_dir, group_dir, root / "whole", "--no-chunk", "--full-samples")
    return {name: root / name for name in ("chunked", "whole")}


def _leaned(samples: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Full samples as a lean log holds them (lm-eval's writer turns the empty ``arguments`` list into {})."""
    for task_samples in samples.values():
        for sample in task_samples:
            lean_sample(sample)
            sample["arguments"] = {}
    return samples


@pytest.mark.slow
def test_chunked_run_equals_unchunked_run_on_every_metric(runs: dict[str, Path]):
    chunked, whole = _results(runs["chunked"]), _results(runs["whole"])
    assert chunked == whole  # results, groups, stderr, n-samples, configs, versions, task hashes
    results = chunked["results"]
    # the comparison has something to compare: scores spread, stderr computed, groups and custom aggregations
    assert 0 < results["needlebench_single_en_4k"]["score,none"] < 100
    assert results["needlebench_single_en_4k"]["score_stderr,none"] > 0
    assert 0 < results["needlebench_atc_en"]["perf_4,none"] < 100
    assert 0 < results["needlebench_counting_stars_acquisition_en_128k"]["per_star,none"] < 1
    assert "chunk_test_group" in chunked["groups"]
    assert chunked["n-samples"]["needlebench_single_en_4k"]["effective"] == 40
    assert set(chunked["task_hashes"]) >= set(TASKS)
    # per row: the same ids, outputs and scores in the same order
    assert _samples(runs["chunked"]) == _leaned(_samples(runs["whole"]))


@pytest.mark.slow
def test_lean_logs_keep_no_prompt_and_show_recovers_it(runs: dict[str, Path], data_dir: Path):
    lean = _samples(runs["chunked"])["needlebench_single_en_4k"]
    full = {sample["doc"]["id"]: sample for sample in _samples(runs["whole"])["needlebench_single_en_4k"]}
    sample = lean[0]
    assert "prompt" not in sample["doc"] and sample["arguments"] == {}
    row_id = sample["doc"]["id"]
    prompt = full[row_id]["doc"]["prompt"]
    assert sample["doc"][PROMPT_HASH_KEY] == hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    assert sample["prompt_hash"] == full[row_id]["prompt_hash"]  # lm-eval's hash of the context the model got
    assert full[row_id]["arguments"]["gen_args_0"]["arg_0"] == prompt
    for key in ("resps", "filtered_resps", "score", "doc_hash", "target"):
        assert sample[key] == full[row_id][key], key
    shown = _cli("show", str(data_dir), row_id, "--prompt")
    assert shown.returncode == 0 and shown.stdout == prompt
    fields = _cli("show", str(data_dir), row_id)
    assert fields.returncode == 0 and sample["doc"][PROMPT_HASH_KEY] in fields.stdout
    lean_bytes = sum(path.stat().st_size for path in runs["chunked"].rglob("samples_*.jsonl"))
    full_bytes = sum(path.stat().st_size for path in runs["whole"].rglob("samples_*.jsonl"))
    assert lean_bytes * 4 < full_bytes
    bad = _cli("show", str(data_dir), "single_en_4k-L999-d0-r0")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"needlebench: error: no row 'single_en_4k-L999-d0-r0' in config single_en_4k of {data_dir}"
    ]


@pytest.mark.slow
def test_report_reads_lean_and_full_logs_alike(runs: dict[str, Path], tmp_path: Path):
    write_report(runs["chunked"], tmp_path / "lean", figures=False)
    write_report(runs["whole"], tmp_path / "full", figures=False)
    tables = sorted(path.name for path in (tmp_path / "lean").glob("*.md"))
    assert "needlebench_4k.md" in tables and "counting_stars.md" in tables
    for name in tables:
        if name != "README.md":
            assert (tmp_path / "lean" / name).read_text(encoding="utf-8") == (tmp_path / "full" / name).read_text(
                encoding="utf-8"
            ), name


@pytest.mark.slow
def test_resume_reads_finished_chunks(data_dir: Path, group_dir: Path, tmp_path: Path):
    log = tmp_path / "requests.log"
    model_args = f"wrong=0.3,request_log={log}"
    args = ("--chunk-rows", "4", "--resume")
    _run(data_dir, group_dir, tmp_path / "out", *args, model_args=model_args, tasks=TASKS[0], rows=10)
    first = log.read_text(encoding="utf-8").split()
    assert len(first) == 10  # every row once
    before = _results(tmp_path / "out")
    _run(data_dir, group_dir, tmp_path / "out", *args, model_args=model_args, tasks=TASKS[0], rows=10)
    assert log.read_text(encoding="utf-8").split() == first  # no row asked again: every chunk was read back
    assert _results(tmp_path / "out") == before


@pytest.mark.slow
def test_resume_never_takes_chunks_this_user_did_not_write(data_dir: Path, group_dir: Path, tmp_path: Path):
    """A results folder from someone else (copied here), its resume store pre-filled with perfect answers (an honest
    run's chunk files, samples edited, one with its tag removed) and a response database of lm-eval's beside them:
    every row is asked of the model again, and the scores are the model's."""
    log = tmp_path / "requests.log"
    model_args = f"wrong=0.3,request_log={log}"
    args = ("--chunk-rows", "4", "--resume")
    _run(data_dir, group_dir, tmp_path / "theirs", *args, model_args=model_args, tasks=TASKS[0], rows=10)
    honest = _results(tmp_path / "theirs")
    shutil.copytree(tmp_path / "theirs", tmp_path / "shared")
    chunks = sorted((tmp_path / "shared").rglob(".needlebench-cache/*/*.json"))
    assert len(chunks) == 3
    for number, path in enumerate(chunks):
        tag, _, payload = path.read_bytes().partition(b"\n")  # the tag's line, then the record
        record = json.loads(payload)
        for sample in record["samples"]:
            sample["score"] = 1.0  # the forger's perfect answers
        forged = json.dumps(record, ensure_ascii=False, sort_keys=True).encode("utf-8")
        path.write_bytes(forged if number == 0 else tag + b"\n" + forged)  # the first without its tag
    (chunks[0].parent.parent / f"{chunks[0].parent.name.removesuffix('-chunks')}_rank0.db").write_bytes(b"pickles")
    log.unlink()
    _run(data_dir, group_dir, tmp_path / "shared", *args, model_args=model_args, tasks=TASKS[0], rows=10)
    assert len(log.read_text(encoding="utf-8").split()) == 10  # every row asked again
    assert _results(tmp_path / "shared") == honest
    assert not list((tmp_path / "theirs").rglob("*.db"))  # lm-eval's response database is never in the output


@pytest.mark.slow
def test_resume_runs_a_chunk_again_when_scoring_options_change(
    data_dir: Path, group_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    def run(*extra: str) -> tuple[int, int]:
        """(chunks read from the resume store, chunks scored) of a resumed run in 3 chunks."""
        capsys.readouterr()
        args = ("--chunk-rows", "4", "--resume", *extra)
        _run(data_dir, group_dir, tmp_path / "out", *args, model_args="wrong=0.3", tasks=TASKS[0], rows=10)
        err = capsys.readouterr().err
        return err.count("read from the resume store"), len(re.findall(r"chunk \d/3, rows", err))

    assert run() == (0, 3)
    assert run() == (3, 0)
    # --think-end and --think-unclosed reach the scorers as task metadata: stored chunks were scored without them
    assert run("--think-end", "is") == (0, 3)
    assert run("--think-end", "is") == (3, 0)  # same options: every chunk read back
    assert run("--think-end", "is", "--think-unclosed", "empty") == (0, 3)
    assert run("--think-end", "is", "--think-unclosed", "empty", "--full-samples") == (0, 3)  # full logs, not lean
    assert "prompt" in _samples(tmp_path / "out")["needlebench_single_en_4k"][0]["doc"]


@pytest.mark.slow
def test_cache_requests_with_chunks_scores_like_an_unchunked_run(data_dir: Path, tmp_path: Path):
    cache = tmp_path / "request-cache"
    env = {"LM_HARNESS_CACHE_PATH": str(cache)}
    task = "needlebench_single_en_4k"

    def run(name: str, *extra: str) -> tuple[float, str]:
        done = _cli(
            "eval", "run", "--model", ORACLE_MODEL, "--model_args", "wrong=0.5", "--tasks", task,
            "--metadata", json.dumps({"data_dir": str(data_dir)}), "--subset", "40",
            "--log_samples", "--output_path", str(tmp_path / name), *extra, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return _results(tmp_path / name)["results"][task]["score,none"], done.stderr

    expected, _ = run("plain", "--no-chunk")
    assert 0 < expected < 100
    note = (
        f"needlebench: {task}: --cache_requests is off for this task: it runs in chunks of its rows and lm-eval's "
        "request cache is per task, not per row (--no-chunk uses the cache)"
    )
    score, err = run("chunked", "--chunk-rows", "10", "--cache_requests", "true")
    assert score == expected and err.count(note) == 1
    assert not list(cache.glob(f"requests-{task}-*"))  # no task-level cache holding one chunk's rows
    score, _ = run("cached", "--no-chunk", "--cache_requests", "true")  # lm-eval writes its cache, then reads it
    assert score == expected and list(cache.glob(f"requests-{task}-*"))
    score, err = run("chunked-again", "--chunk-rows", "10", "--cache_requests", "true")  # the full cache unread
    assert score == expected and note in err
    score, _ = run("cached-again", "--no-chunk", "--cache_requests", "true")
    assert score == expected


def test_chunk_options_and_plans():
    _command, namespace, options = parse_eval(["run", "--chunk-rows", "16", "--tasks", "x", "--full-samples"])
    assert namespace.tasks == ["x"] and options.chunk_rows == 16 and options.full_samples and options.chunked
    assert not any(name.startswith("needlebench_") for name in vars(namespace))  # lm-eval gets only its own
    assert parse_eval(["run", "--no-chunk"])[2].chunked is False
    for bad, message in [
        (["--chunk-rows", "0"], "argument --chunk-rows: '0' is not a positive number of rows, e.g. --chunk-rows 16"),
        (["--chunk-rows"], "argument --chunk-rows: expected one argument"),
        (["--chunk-rows=4", "--no-chunk"], "give --chunk-rows or --no-chunk, not both"),
    ]:
        with pytest.raises(Exception, match="^" + re.escape(message)):
            parse_eval(["run", *bad])
    assert plan_chunks([0, 1, 2, 3, 4], None, 2) == [[0, 1], [2, 3], [4]]
    million = 1_000_000
    per_chunk = CHUNK_TOKENS // million
    chunks = plan_chunks(list(range(3 * per_chunk)), [million] * (3 * per_chunk), None)
    assert [len(chunk) for chunk in chunks] == [per_chunk] * 3
    assert plan_chunks([5, 6], [CHUNK_TOKENS * 2, 10], None) == [[5], [6]]  # a row larger than a chunk: alone


@pytest.mark.slow
def test_bad_chunk_option_is_one_line_through_the_cli():
    done = _cli("eval", "run", "--model", ORACLE_MODEL, "--tasks", "needlebench_single_en_4k", "--chunk-rows", "x")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        (
            "needlebench: error: argument --chunk-rows: 'x' is not a positive number of rows, e.g. --chunk-rows 16; "
            "see `needlebench eval run --help`"
        )
    ]


# --------------------------------------------------------------------------------------------- shards


def _shard_argv(data_dir: Path, group_dir: Path, output: Path, *extra: str, model_args: str = "wrong=0.3") -> list[str]:
    """The options of the ``runs`` fixture's chunked run (``--chunk-rows 7``), into ``output``."""
    return [
        "eval", "run", "--model", ORACLE_MODEL, "--model_args", model_args,
        "--tasks", ",".join([*TASKS[2:], "chunk_test_group"]), "--include_path", str(group_dir),
        "--metadata", json.dumps({"data_dir": str(data_dir)}), "--subset", "40",
        "--log_samples", "--output_path", str(output), "--chunk-rows", "7", *extra,
    ]  # fmt: skip


#: Runs ``needlebench`` with the oracle unable to be built: a merge that built the model fails.
NO_MODEL = (
    "from needlebench.evaluation.runner import evaluate\n"
    "def refuse(*args, **kwargs):\n"
    "    raise SystemExit('the model was built')\n"
    "evaluate._oracle_class().__init__ = refuse\n"
    "from needlebench.cli import main\n"
    "main()\n"
)


def _cli_no_model(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_MODEL, *args],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
    )  # fmt: skip


def _needlebench_lines(stderr: str) -> list[str]:
    """needlebench's own lines of a run's stderr (lm-eval logs its progress beside them)."""
    return [line for line in stderr.splitlines() if line.startswith("needlebench:")]


@pytest.mark.slow
def test_shards_merged_equal_the_unsharded_chunked_run(
    runs: dict[str, Path], data_dir: Path, group_dir: Path, tmp_path: Path
):
    """Three shards into three folders, merged by one command: the results (every metric, stderr, n-samples, group)
    and the samples (every row's score) are the unsharded chunked run's, and the merge never builds the model."""
    shards = [tmp_path / f"shard{index}" for index in (1, 2, 3)]
    numbers = []
    for index, folder in enumerate(shards, start=1):
        done = _cli(*_shard_argv(data_dir, group_dir, folder, "--shard", f"{index}/3"))
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        assert not list(folder.rglob("results_*.json")) and not list(folder.rglob("samples_*.jsonl"))
        summary, merge = _needlebench_lines(done.stderr)[-2:]
        match = re.match(rf"needlebench: shard {index}/3: chunks ([\d, ]+) of (\d+) are in ", summary)
        assert match, summary
        mine = [int(number) for number in match.group(1).split(", ")]
        total = int(match.group(2))
        assert mine == list(range(index, total + 1, 3))  # round robin over the run's chunks
        numbers += mine
        assert merge.endswith(f"--chunk-rows 7 --merge-shards {folder}"), merge
        assert "--shard" not in merge.partition("--merge-shards")[0]
    assert sorted(numbers) == list(range(1, total + 1)) and total > 9  # every chunk run once, by one shard
    merged = tmp_path / "merged"
    done = _cli_no_model(*_shard_argv(data_dir, group_dir, merged, "--merge-shards", *map(str, shards)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the model was built" not in done.stderr
    assert _results(merged) == _results(runs["chunked"])
    assert _samples(merged) == _samples(runs["chunked"])
    results = _results(merged)["results"]
    assert 0 < results["needlebench_single_en_4k"]["score,none"] < 100  # scores that vary were compared
    assert "chunk_test_group" in _results(merged)["groups"]


@pytest.mark.slow
def test_a_merge_with_a_shard_missing_names_its_chunks(data_dir: Path, group_dir: Path, tmp_path: Path):
    log = tmp_path / "requests.log"
    model_args = f"wrong=0.3,request_log={log}"
    shards = [tmp_path / "shard1", tmp_path / "shard2"]
    for index, folder in enumerate(shards, start=1):
        done = _cli(*_shard_argv(data_dir, group_dir, folder, "--shard", f"{index}/3", model_args=model_args))
        assert done.returncode == 0, done.stderr[-3000:]
    asked = log.read_text(encoding="utf-8").split()
    merged = tmp_path / "merged"
    done = _cli(*_shard_argv(data_dir, group_dir, merged, "--merge-shards", *map(str, shards), model_args=model_args))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    (line,) = [line for line in _needlebench_lines(done.stderr) if line.startswith("needlebench: error:")]
    match = re.match(
        r"needlebench: error: --merge-shards: (\d+) of the (\d+) chunks of this run are in no shard's", line
    )
    assert match, line
    missing, total = int(match.group(1)), int(match.group(2))
    assert missing == total // 3
    named = [int(number) for number in re.findall(r"(?:chunk |, )(\d+) \(needlebench_", line)]
    assert named == list(range(3, 3 * min(missing, 8) + 1, 3))  # shard 3's chunks, by number
    assert f"in {shards[0]}, {shards[1]})" in line and "run the shards that hold them" in line
    assert log.read_text(encoding="utf-8").split() == asked  # no row asked of the model
    assert not list(merged.rglob("results_*.json")) and not list(merged.rglob("samples_*.jsonl"))


@pytest.mark.slow
def test_a_merge_takes_no_chunk_this_user_did_not_sign(data_dir: Path, tmp_path: Path):
    """A shard run with another secret (another user's, or a machine that was not given this user's key): its chunks
    are not taken. Given the same secret file (XDG_CONFIG_HOME/needlebench/secret.key, 0600), the shard run again
    with --resume replaces them and the merge is the unsharded run's."""
    task = TASKS[0]
    mine, theirs = tmp_path / "config-mine", tmp_path / "config-theirs"

    def run(output: Path, *extra: str, config: Path = mine) -> subprocess.CompletedProcess[str]:
        return _cli(
            "eval", "run", "--model", ORACLE_MODEL, "--model_args", "wrong=0.3", "--tasks", task,
            "--metadata", json.dumps({"data_dir": str(data_dir)}), "--subset", "10", "--chunk-rows", "4",
            "--log_samples", "--output_path", str(output), *extra, env={"XDG_CONFIG_HOME": str(config)},
        )  # fmt: skip

    assert run(tmp_path / "s1", "--shard", "1/2").returncode == 0
    assert run(tmp_path / "s2", "--shard", "2/2", config=theirs).returncode == 0
    assert len(list((tmp_path / "s2").rglob(".needlebench-cache/*/*-*-*-*.json"))) == 1  # chunk 2 of 3
    done = run(tmp_path / "merged", "--merge-shards", str(tmp_path / "s1"), str(tmp_path / "s2"))
    assert done.returncode == 2
    assert _needlebench_lines(done.stderr)[-1].startswith(
        f"needlebench: error: --merge-shards: 1 of the 3 chunks of this run are in no shard's chunk store signed by "
        f"this user (in {tmp_path / 's1'}, {tmp_path / 's2'}): chunk 2 ({task} rows 4-7); "
    )
    (theirs / "needlebench" / "secret.key").write_bytes((mine / "needlebench" / "secret.key").read_bytes())
    done = run(tmp_path / "s2", "--shard", "2/2", "--resume", config=theirs)
    assert done.returncode == 0 and "chunks 2 of 3 are in" in done.stderr and "(1 run, 0 read" in done.stderr
    assert run(tmp_path / "merged", "--merge-shards", str(tmp_path / "s1"), str(tmp_path / "s2")).returncode == 0
    assert run(tmp_path / "plain").returncode == 0
    assert _results(tmp_path / "merged") == _results(tmp_path / "plain")
    assert _samples(tmp_path / "merged") == _samples(tmp_path / "plain")


@pytest.mark.slow
def test_shards_in_one_folder_resume_their_missing_chunks_and_merge(
    data_dir: Path, group_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Shards writing into one --output_path (a shared file system): --resume on a shard runs only its chunks that
    are missing, and the merge with that one folder is the unsharded run."""
    log = tmp_path / "requests.log"
    model_args = f"wrong=0.3,request_log={log}"
    out = tmp_path / "out"

    def shard(index: int, *extra: str) -> str:
        capsys.readouterr()
        _run(data_dir, group_dir, out, "--chunk-rows", "4", "--shard", f"{index}/2", *extra,
             model_args=model_args, tasks=TASKS[0], rows=10)  # fmt: skip
        return capsys.readouterr().err

    assert "shard 1/2: chunks 1, 3 of 3 are in" in shard(1)
    assert "shard 2/2: chunks 2 of 3 are in" in shard(2)
    first = log.read_text(encoding="utf-8").split()
    assert len(first) == 10 and not list(out.rglob("results_*.json"))
    chunk_files = sorted(out.rglob(".needlebench-cache/*/needlebench_*.json"))
    assert [path.name.split("-")[1:3] for path in chunk_files] == [["0", "3"], ["4", "7"], ["8", "9"]]
    chunk_files[2].unlink()  # shard 1's last chunk lost (a job killed)
    err = shard(1, "--resume")
    assert "(1 run, 1 read from the resume store)" in err
    assert (
        log.read_text(encoding="utf-8").split() == first + first[4:6]
    )  # only rows 8-9 asked again (shard 1 asked rows 0-3, 8-9 first)
    _run(data_dir, group_dir, out, "--chunk-rows", "4", "--merge-shards", str(out),
         model_args=model_args, tasks=TASKS[0], rows=10)  # fmt: skip
    assert len(log.read_text(encoding="utf-8").split()) == 12  # the merge asked nothing
    _run(data_dir, group_dir, tmp_path / "plain", "--chunk-rows", "4", model_args=model_args, tasks=TASKS[0], rows=10)
    assert _results(out) == _results(tmp_path / "plain")
    assert _samples(out) == _samples(tmp_path / "plain")


def test_shard_options():
    assert parse_eval(["run", "--shard", "2/4", "--output_path", "o"])[2].shard == (2, 4)
    assert parse_eval(["run", "--merge-shards", "a", "b", "--output_path", "o"])[2].merge_shards == ["a", "b"]
    for bad, message in [
        (["--shard", "1/2", "--no-chunk", "--output_path", "o"], "--shard works on chunks of rows; give --shard or "
         "--no-chunk, not both"),
        (["--shard", "1/2"], "--shard needs --output_path"),
        (["--merge-shards", "a"], "--merge-shards needs --output_path"),
        (["--merge-shards", "a", "--shard", "1/2", "--output_path", "o"], "give --shard (run one shard) or "
         "--merge-shards (merge the finished shards), not both"),
    ]:  # fmt: skip
        with pytest.raises(Exception, match="^" + re.escape(message)):
            parse_eval(["run", *bad])


@pytest.mark.slow
@pytest.mark.parametrize("value", ["0/2", "3/2", "x", "1/0", "2"])
def test_a_bad_shard_is_one_line_through_the_cli(value: str, tmp_path: Path):
    done = _cli("eval", "run", "--model", ORACLE_MODEL, "--tasks", TASKS[0], "--output_path", str(tmp_path),
                "--shard", value)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"needlebench: error: argument --shard: {value!r} is not a shard; allowed: i/N with 1 <= i <= N (e.g. "
        "--shard 2/4: the second of 4 jobs); see `needlebench eval run --help`"
    ]
    assert not any(tmp_path.iterdir())


def test_the_merge_stand_in_answers_for_the_model_as_the_shards_recorded_it():
    """What ``simple_evaluate`` writes from the model into the results (tokenizer tokens, model info, chat template)
    comes out of the merge's stand-in as it came out of the shard's model, through a stored (JSON) record."""
    from types import SimpleNamespace

    from needlebench.errors import NeedlebenchError
    from needlebench.evaluation.runner import lm_eval_seam
    from needlebench.evaluation.runner.chunked import StandInModel, run_info

    class Model:
        tokenizer = SimpleNamespace(
            pad_token="<pad>", pad_token_id=0, eos_token="</s>", eos_token_id=2, bos_token=None, bos_token_id=None
        )
        eot_token_id = 2
        max_length = 131072

        def get_model_info(self) -> dict[str, Any]:
            return {"model_num_parameters": 134515008, "model_dtype": "torch.bfloat16"}

        def chat_template(self, chat_template: Any = False) -> str:
            return "{% for m in messages %}{{ m.content }}{% endfor %}"

    model = Model()
    info = json.loads(json.dumps(run_info(model, True)))
    stand_in = StandInModel("HFLM", lambda: info)
    assert lm_eval_seam.tokenizer_info(stand_in) == lm_eval_seam.tokenizer_info(model)
    assert lm_eval_seam.tokenizer_info(model)["tokenizer_pad_token"] == ["<pad>", "0"]
    assert stand_in.get_model_info() == model.get_model_info()
    assert stand_in.chat_template(True) == model.chat_template(True)
    with pytest.raises(NeedlebenchError, match="no shard recorded the chat template"):
        stand_in.chat_template("chatml")
    with pytest.raises(NeedlebenchError, match="runs no model"):
        stand_in.generate_until([])
    bare = StandInModel("NeedlebenchOracleLM", lambda: {"tokenizer": {}})
    assert lm_eval_seam.tokenizer_info(bare) == {} and not hasattr(bare, "get_model_info")
