"""``needlebench eval run`` through ``vllm-router`` in front of two ``vllm serve`` replicas (vLLM CPU, SmolLM2).

The sibling of tests/test_vllm.py, in the same virtual environment (``scripts/install_vllm_env.sh`` also installs
``vllm-router``). Two replicas (window 8192, float32, enforce-eager, seed 0, started side by side) behind
``vllm-router --policy cache_aware``; lm-eval's ``local-completions`` model with ``num_concurrent=2`` sends test_vllm's
rows (one S-RT, M-RT, ATC and Counting-Stars task, their shortest rows) to the router's one endpoint. Greedy outputs
and scores equal the offline engine's (``lm_eval --model vllm``), row by row, and both replicas served rows: the
router's ``cache_aware`` policy sends a request whose prompt matches no replica's routed prefixes (over
``--cache-threshold``) to the replica whose prefix tree is smallest (vllm-project/router
``src/policies/cache_aware.rs``), so the second unrelated prompt goes to the replica that has not served one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import test_vllm
from needlebench.evaluation.harness import tasks as harness
from test_vllm import (
    BIN,
    METRIC,
    REPO,
    SAMPLES,
    SERVED_NAME,
    WINDOW,
    _common,
    _env,
    _free_port,
    _results,
    _run,
    _samples,
    _wait,
)

pytestmark = pytest.mark.slow

# test_vllm's module fixtures (the vLLM venv, the built rows, the SmolLM2 folder, lm_eval's offline vllm run), found
# by pytest under these names in this module
venv, data_dir, model_dir, offline_run = test_vllm.venv, test_vllm.data_dir, test_vllm.model_dir, test_vllm.offline_run


def _served_requests(replica: str) -> float:
    """Requests a replica has finished (``vllm:request_success_total``, every label)."""
    with urllib.request.urlopen(f"{replica}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total")
    )


@pytest.fixture(scope="module")
def router(venv: Path, model_dir: Path, offline_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two replicas started together, then ``vllm-router`` in front (after the offline run: one engine at a time
    on the CPU). Yields the router's root URL and the replicas' ones; every process is stopped at the end."""
    folder = tmp_path_factory.mktemp("vllm-router")
    processes: list[tuple[subprocess.Popen, Any]] = []

    def start(command: list[str], log: Path) -> subprocess.Popen:
        handle = log.open("w", encoding="utf-8")
        process = subprocess.Popen(command, env=_env(), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        processes.append((process, handle))
        return process

    try:
        replicas = []
        for index in range(2):
            port = _free_port()
            command = [
                str(BIN / "vllm"), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
                "--served-model-name", SERVED_NAME, "--max-model-len", str(WINDOW), "--dtype", "float32",
                "--enforce-eager", "--seed", "0",
            ]  # fmt: skip
            replicas.append((f"http://127.0.0.1:{port}", start(command, folder / f"serve{index}.log"), index))
        for url, process, index in replicas:
            _wait(f"{url}/v1/models", process, folder / f"serve{index}.log", timeout=900)
        port = _free_port()
        urls = [url for url, _, _ in replicas]
        command = [
            str(BIN / "vllm-router"), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *urls,
            "--policy", "cache_aware",
        ]  # fmt: skip
        process = start(command, folder / "router.log")
        root = f"http://127.0.0.1:{port}"
        _wait(f"{root}/health", process, folder / "router.log", timeout=120)
        yield root, urls
    finally:
        for process, _ in processes:  # each in its own process group: vLLM's engine core processes stop too
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process, handle in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # what is left of the group
            handle.close()


def test_routed_run_equals_the_offline_run_and_uses_both_replicas(
    router: tuple[str, list[str]], offline_run: Path, data_dir: Path, model_dir: Path, tmp_path: Path
):
    root, replicas = router
    before = [_served_requests(url) for url in replicas]
    model_args = (
        f"model={SERVED_NAME},base_url={root}/v1/completions,tokenizer={model_dir},"
        "tokenizer_backend=huggingface,num_concurrent=2,seed=0"
    )  # no max_length, no timeout: needlebench eval sets them from the window the router reports
    command = [
        str(BIN / "needlebench"), "eval", "run", "--model", "local-completions", "--model_args", model_args,
        "--include_path", str(REPO / "harness_tasks"), "--samples", json.dumps(SAMPLES), *_common(data_dir, tmp_path),
    ]  # fmt: skip
    _run(command, tmp_path / "eval.log")
    log = (tmp_path / "eval.log").read_text(encoding="utf-8")
    assert f"needlebench: local-completions: max_length={WINDOW} (the server's max_model_len) and timeout=" in log, log
    offline, routed = _samples(offline_run), _samples(tmp_path)
    assert sorted(routed) == sorted(offline)
    for row_id, sample in offline.items():
        other = routed[row_id]
        assert other["resps"][0][0] == sample["resps"][0][0], row_id  # greedy: the same text on either replica
        for metric in sample["metrics"]:
            assert other[metric] == sample[metric], (row_id, metric)
    results, offline_results = _results(tmp_path), _results(offline_run)
    for config, metric in METRIC.items():
        task = harness.task_name(config)
        for key in (f"{metric},none", f"{metric}_stderr,none"):
            assert results[task][key] == offline_results[task][key], (task, key)
    served = [_served_requests(url) - old for url, old in zip(replicas, before)]
    assert sum(served) == len(offline)  # one request per row, through the router, none retried
    assert all(count >= 1 for count in served), served  # the router spread the unrelated prompts
