"""``needlebench eval`` around lm-eval, in the main environment (no vLLM): length check, servers, resume, thinking.

* rows that do not fit the model window stop the run before it starts, with one line per-task counts (exit 2);
* ``local-completions`` against a fake OpenAI server (``http.server`` on loopback) gets the server's window as
  ``max_length`` and a timeout that fits the longest row when the user sets neither (one line says so); a server
  that reports no window leaves lm-eval's 2048, which the length check enforces; the retired round-robin models
  and lm-eval's ``vllm`` with ``data_parallel_size > 1`` are one line; the health keys land in the results and
  the report;
* ``--reasoning`` doubles / sets ``max_gen_toks`` (seen as ``max_tokens`` by the server);
* ``--resume``: a run killed after a few rows, started again, computes only the rows it had not finished;
* reasoning is stripped before scoring; an unclosed block counts as no final answer, and is scored on its text
  (``--think-unclosed keep``, the default) or as empty (``--think-unclosed empty``); the ``*_reference`` metrics
  read it as OpenCompass does, and ``needlebench report --scoring reference`` shows them.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.report import write_report
from needlebench.evaluation.runner.evaluate import run_eval
from needlebench.evaluation.runner.guard import needlebench_configs
from needlebench.evaluation.runner.options import parse_eval
from needlebench.evaluation.scoring import thinking
from needlebench.evaluation.scoring.thinking import has_final_answer, reference_text, strip_reasoning
from support import build_data, results_with_health, single_row
from support.smollm import smollm_dir

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(
        ["single_en_4k", "atc_en", "counting_stars_acquisition_en_128k"], tmp_path_factory.mktemp("d") / "nb"
    )


def _metadata(data_dir: Path) -> str:
    return json.dumps({"data_dir": str(data_dir)})


# --------------------------------------------------------------------------------------------- fake server


class FakeOpenAI:
    """An OpenAI-compatible completions server on loopback that records what it is asked."""

    def __init__(self, answer: str | list[str], max_model_len: int | None = 8192) -> None:
        self.answers = [answer] if isinstance(answer, str) else list(answer)  # answered in turn
        self.max_model_len = max_model_len
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def _send(self, payload: dict[str, Any]) -> None:
                body = json.dumps(payload).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.startswith("/v1/models"):
                    self._send({"data": [{"id": "fake", "max_model_len": outer.max_model_len}]})
                else:
                    self.send_error(404)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                payload = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.startswith("/v1/completions"):
                    self.send_error(404)
                    return
                with outer.lock:
                    outer.requests.append(payload)
                    answer = outer.answers[(len(outer.requests) - 1) % len(outer.answers)]
                prompts = payload.get("prompt")
                count = len(prompts) if isinstance(prompts, list) and prompts and not isinstance(prompts[0], int) else 1
                self._send({"choices": [{"index": i, "text": answer, "finish_reason": "stop"} for i in range(count)]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/completions"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def _results(output: Path) -> dict[str, Any]:
    paths = sorted(output.rglob("results_*.json"))
    assert paths, f"no results under {output}"
    return results_with_health(paths[-1])


def _server_run(data_dir: Path, output: Path, url: str, *extra: str, concurrent: int = 2) -> int:
    model_args = (
        f"model=fake,base_url={url},tokenizer={smollm_dir()},tokenizer_backend=huggingface,"
        f"tokenized_requests=False,num_concurrent={concurrent},max_length=8192,max_retries=1"
    )
    return run_eval(
        [
            "run",
            "--model",
            "local-completions",
            "--model_args",
            model_args,
            "--tasks",
            "needlebench_single_en_4k",
            "--metadata",
            _metadata(data_dir),
            "--output_path",
            str(output),
            "--log_samples",
            *extra,
        ]
    )


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.slow
def test_too_long_rows_refuse_with_one_line(data_dir: Path):
    """Counting-Stars rows 2 and 3 (8,097 and 12,097 cl100k tokens) do not fit SmolLM2's 8192 window."""
    command = [
        sys.executable, "-c", "from needlebench.cli import main; main()", "eval", "run", "--model", "hf",
        "--model_args", f"pretrained={smollm_dir()}", "--apply_chat_template",
        "--tasks", "needlebench_counting_stars_acquisition_en_128k,needlebench_single_en_4k",
        "--limit", "3", "--metadata", _metadata(data_dir),
    ]  # fmt: skip
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-2000:]
    assert "2 row(s) do not fit the window of 8192 tokens" in lines[0]
    assert "needlebench_counting_stars_acquisition_en_128k 2/3" in lines[0]
    assert "needlebench_single_en_4k" not in lines[0] and "--skip-too-long" in lines[0]


@pytest.mark.slow
def test_skip_too_long_leaves_out_a_task_none_of_whose_rows_fit(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """--skip-too-long when every selected row of a task is too long (Counting-Stars rows 2 and 3: 12k and 16k):
    lm-eval cannot run a task without rows, so the task is left out, said so, and counted in the results and the
    report; when no task is left the run refuses with one line and writes nothing."""
    tasks = "needlebench_single_en_4k,needlebench_counting_stars_acquisition_en_128k"
    samples = {"needlebench_single_en_4k": [0, 1], "needlebench_counting_stars_acquisition_en_128k": [2, 3]}
    model_args = (
        f"model=fake,base_url={{url}},tokenizer={smollm_dir()},tokenizer_backend=huggingface,max_length=8192,"
        "max_retries=1"
    )
    common = ["--metadata", _metadata(data_dir), "--samples", json.dumps(samples), "--skip-too-long", "--log_samples"]
    with FakeOpenAI("Hidden on Emerald Island is the legendary Stardust Shard.") as server:
        argv = [
            "run",
            "--model",
            "local-completions",
            "--model_args",
            model_args.format(url=server.url),
            "--tasks",
            tasks,
        ]
        assert run_eval([*argv, *common, "--output_path", str(tmp_path / "out")]) == 0
        assert len(server.requests) == 2  # the two S-RT rows; nothing of the skipped task
        err = capsys.readouterr().err
        assert (
            "needlebench: skipping 1 task(s) none of whose rows fit the window of 8191 tokens: "
            "needlebench_counting_stars_acquisition_en_128k (2 rows)" in err
        )
        results = _results(tmp_path / "out")
        raw = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text(encoding="utf-8"))
        assert "needlebench_counting_stars_acquisition_en_128k" not in raw["results"]  # as lm-eval wrote it
        assert not any(key.startswith("skipped_too_long") for key in raw["results"]["needlebench_single_en_4k"])
        assert len(list((tmp_path / "out").rglob("needlebench_health_*.json"))) == 1
        assert results["results"]["needlebench_single_en_4k"]["skipped_too_long,none"] == 0
        assert results["results"]["needlebench_counting_stars_acquisition_en_128k"]["skipped_too_long,none"] == 2
        assert results["n-samples"]["needlebench_counting_stars_acquisition_en_128k"] == {"original": 2, "effective": 0}
        skipped = json.loads((tmp_path / "out" / "needlebench_skipped.json").read_text(encoding="utf-8"))
        assert skipped == {
            "needlebench_counting_stars_acquisition_en_128k": {
                "skipped": 2,
                "ids": ["counting_stars_acquisition_en_128k-L12000", "counting_stars_acquisition_en_128k-L16000"],
                "task_skipped": True,
            }
        }
        write_report(tmp_path / "out", tmp_path / "report")
        health = (tmp_path / "report" / "run_health.md").read_text(encoding="utf-8")
        assert re.search(r"\| needlebench_counting_stars_acquisition_en_128k \| 0 \| 2 \|", health), health
        # nothing left to run: one line, exit status 2, no output folder
        only = ["--tasks", "needlebench_counting_stars_acquisition_en_128k", "--output_path", str(tmp_path / "none")]
        done = subprocess.run(
            [sys.executable, "-c", "from needlebench.cli import main; main()", "eval", *argv[:-2], *only, *common],
            capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        "needlebench: error: no selected row fits the window of 8191 tokens "
        "(max_length 8192 (lm-eval keeps max_length - 1)) "
        "with max_gen_toks: needlebench_counting_stars_acquisition_en_128k 2/2; nothing "
        "is left to run: raise max_model_len / max_length or choose shorter configs"
    ]
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
def test_health_is_reported_in_the_results_and_the_report(data_dir: Path, tmp_path: Path):
    # every other answer closes its reasoning, the rest never do (no final answer)
    with FakeOpenAI(["<think>the needle</think> Hidden on Emerald Island", "<think>still thinking"]) as server:
        assert _server_run(data_dir, tmp_path / "out", server.url, "--limit", "6") == 0
        assert len(server.requests) == 6 and all(request["max_tokens"] == 256 for request in server.requests)
    result = _results(tmp_path / "out")["results"]["needlebench_single_en_4k"]
    assert result["no_final_answer,none"] == pytest.approx(0.5)
    assert result["skipped_too_long,none"] == 0 and result["output_truncated,none"] == 0
    report = write_report(tmp_path / "out", tmp_path / "report")
    health = (tmp_path / "report" / "run_health.md").read_text(encoding="utf-8")
    assert tmp_path / "report" / "run_health.md" in report
    assert "| fake | needlebench_single_en_4k | 6 | 0 | 0 | 50.0 |" in health


def _longest_row(data_dir: Path) -> tuple[int, str]:
    """Index and prompt of the longest S-RT 4k row."""
    rows = harness.load_dataset(needlebench_config="single_en_4k", data_dir=str(data_dir))["test"]
    index = max(range(len(rows)), key=lambda i: len(rows[i]["prompt"]))
    return index, str(rows[index]["prompt"])


@pytest.mark.slow
def test_api_models_get_the_servers_window_and_a_timeout_that_fits_unless_the_user_sets_them(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """lm-eval's API models default to max_length=2048 (left-truncating longer prompts) and timeout=300: without
    max_length in --model_args the run passes the server's window, so a ~4k-token prompt reaches the server whole."""
    from transformers import AutoTokenizer

    index, prompt = _longest_row(data_dir)
    tokens = len(AutoTokenizer.from_pretrained(str(smollm_dir())).encode(prompt))
    assert tokens > 2048  # lm-eval's default would have cut it
    samples = json.dumps({"needlebench_single_en_4k": [index]})
    common = ["--tasks", "needlebench_single_en_4k", "--metadata", _metadata(data_dir), "--samples", samples]
    with FakeOpenAI("Hidden on Emerald Island", max_model_len=8192) as server:
        model_args = f"model=fake,base_url={server.url},tokenizer={smollm_dir()},tokenizer_backend=huggingface"
        argv = ["run", "--model", "local-completions", "--model_args", model_args, *common]
        assert run_eval([*argv, "--output_path", str(tmp_path / "defaults")]) == 0
        assert len(server.requests) == 1 and len(server.requests[0]["prompt"][0]) == tokens  # token ids, none cut
        err = capsys.readouterr().err
        assert (
            "needlebench: local-completions: max_length=8192 (the server's max_model_len) and timeout=300 s (the "
            f"longest row, {tokens:,} prompt tokens," in err
        )
        raw = json.loads(next((tmp_path / "defaults").rglob("results_*.json")).read_text(encoding="utf-8"))
        assert raw["config"]["model_args"]["max_length"] == 8192 and raw["config"]["model_args"]["timeout"] == 300
        # the user's values win, and nothing is said
        argv[4] = f"{model_args},max_length=6000,timeout=50"
        assert run_eval([*argv, "--output_path", str(tmp_path / "own")]) == 0
        assert "needlebench: local-completions: max_length" not in capsys.readouterr().err
        raw = json.loads(next((tmp_path / "own").rglob("results_*.json")).read_text(encoding="utf-8"))
        assert raw["config"]["model_args"]["max_length"] == 6000 and raw["config"]["model_args"]["timeout"] == 50
    # a longer wait per request with more in flight: the timeout grows with num_concurrent
    with FakeOpenAI("x", max_model_len=8192) as server:
        model_args = (
            f"model=fake,base_url={server.url},tokenizer={smollm_dir()},tokenizer_backend=huggingface,num_concurrent=64"
        )
        argv = ["run", "--model", "local-completions", "--model_args", model_args, *common]
        assert run_eval([*argv, "--output_path", str(tmp_path / "busy")]) == 0
        expected = math.ceil((tokens / 1000 + 256 / 10) * 64)
        assert f"timeout={expected} s" in capsys.readouterr().err


@pytest.mark.slow
def test_a_server_without_a_window_keeps_lm_evals_2048_and_longer_rows_are_refused(data_dir: Path):
    index, _prompt = _longest_row(data_dir)
    with FakeOpenAI("x", max_model_len=None) as server:
        model_args = f"model=fake,base_url={server.url},tokenizer={smollm_dir()},tokenizer_backend=huggingface"
        done = subprocess.run(
            [
                sys.executable, "-c", "from needlebench.cli import main; main()", "eval", "run",
                "--model", "local-completions", "--model_args", model_args, "--tasks", "needlebench_single_en_4k",
                "--metadata", _metadata(data_dir), "--samples", json.dumps({"needlebench_single_en_4k": [index]}),
            ],
            capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )  # fmt: skip
        assert not server.requests
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "do not fit the window of 2047 tokens (lm-eval's default max_length 2048" in lines[0]
    assert "pass max_length=N in --model_args" in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "model_args", "expected"),
    [
        ("vllm", "pretrained=/no/such/model,data_parallel_size=2", "--model vllm with data_parallel_size=2 loads"),
        ("needlebench-local-completions", "model=m,base_urls=http://127.0.0.1:9/v1/completions", "is gone"),
    ],
)
def test_engines_that_spread_or_reload_by_hand_are_one_line_at_the_command(model, model_args, expected, tmp_path):
    """Refused before anything loads (vLLM is not even installed in this environment) and before any folder is
    made."""
    done = subprocess.run(
        [
            sys.executable, "-c", "from needlebench.cli import main; main()", "eval", "run", "--model", model,
            "--model_args", model_args, "--tasks", "needlebench_single_en_4k", "--output_path", str(tmp_path / "o"),
        ],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0] and "docs/scaling-out.md" in lines[0], lines
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_reasoning_doubles_or_sets_max_gen_toks(data_dir: Path, tmp_path: Path):
    with FakeOpenAI("x") as server:
        assert _server_run(data_dir, tmp_path / "a", server.url, "--limit", "2", "--reasoning") == 0
        assert _server_run(data_dir, tmp_path / "b", server.url, "--limit", "2", "--reasoning=300") == 0
    assert [request["max_tokens"] for request in server.requests] == [512, 512, 300, 300]


@pytest.mark.slow
def test_output_that_uses_all_of_max_gen_toks_is_counted(data_dir: Path, tmp_path: Path):
    with FakeOpenAI(" apple" * 40) as server:  # 40 tokens in SmolLM2's tokenizer
        assert _server_run(data_dir, tmp_path / "t", server.url, "--limit", "3", "--gen_kwargs", "max_gen_toks=40") == 0
    result = _results(tmp_path / "t")["results"]["needlebench_single_en_4k"]
    assert result["output_truncated,none"] == 3


@pytest.mark.slow
def test_killed_run_resumes_without_recomputing_finished_rows(data_dir: Path, tmp_path: Path):
    log = tmp_path / "requests.log"
    output = tmp_path / "out"
    command = [
        sys.executable, "-c", "from needlebench.cli import main; main()", "eval", "run",
        "--model", "needlebench-oracle", "--model_args", f"delay=0.5,request_log={log}",
        "--tasks", "needlebench_single_en_4k", "--limit", "20", "--metadata", _metadata(data_dir),
        "--output_path", str(output), "--log_samples", "--resume",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 600
    while not log.exists() or len(log.read_text().split()) < 6:  # kill after six answers
        assert first.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no answers within 10 minutes"
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    answered = log.read_text().split()
    assert 6 <= len(answered) < 20
    assert not list(output.rglob("results_*.json"))

    log.unlink()
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-2000:]
    match = re.search(r"Cached requests: (\d+), Requests remaining: (\d+)", second.stderr)
    assert match, second.stderr[-2000:]
    cached, remaining = int(match.group(1)), int(match.group(2))
    # answers are stored as they are produced; the last one or two may not be committed at the kill
    assert len(answered) - 2 <= cached <= len(answered) and cached + remaining == 20
    recomputed = log.read_text().split()
    assert len(recomputed) == remaining  # only the rows without a stored answer were computed again
    assert not set(recomputed) & set(answered[:cached])  # the oracle answers in row order
    assert _results(output)["results"]["needlebench_single_en_4k"]["score,none"] == 100.0


def _report_csv(folder: Path, name: str) -> list[dict[str, str]]:
    with (folder / f"{name}.csv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_unclosed_reasoning_keep_or_empty_and_the_reference_report(data_dir: Path, tmp_path: Path):
    """The issue's example end to end: an output that names the keyword inside a ``<think>`` block it never closes."""
    rows = harness.load_dataset(needlebench_config="single_en_4k", data_dir=str(data_dir))["test"]
    needle = str(rows[0]["needles"][0]).strip()
    assert all(rows[i]["needles"][0] == rows[0]["needles"][0] for i in range(4))  # one (length, repeat) cell
    answer = f"<think>I recall that {needle} so the answer"
    with FakeOpenAI(answer) as server:
        assert _server_run(data_dir, tmp_path / "keep", server.url, "--limit", "4") == 0
        assert _server_run(data_dir, tmp_path / "empty", server.url, "--limit", "4", "--think-unclosed", "empty") == 0
    keep = _results(tmp_path / "keep")["results"]["needlebench_single_en_4k"]
    empty = _results(tmp_path / "empty")["results"]["needlebench_single_en_4k"]
    assert keep["score,none"] == 100.0 and keep["score_reference,none"] == 100.0
    assert empty["score,none"] < 20.0 and empty["score_reference,none"] == 100.0  # 0.2 x similarity, at most 20
    assert keep["no_final_answer,none"] == empty["no_final_answer,none"] == 1.0
    # the report through the command line: default numbers, then the reference ones, each table saying which
    command = [sys.executable, "-c", "from needlebench.cli import main; main()", "report", str(tmp_path / "empty")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for scoring, expected in (("default", empty["score,none"]), ("reference", 100.0)):
        out = tmp_path / f"report-{scoring}"
        done = subprocess.run(
            [*command, "--out", str(out), "--no-figures", *(["--scoring", scoring] if scoring != "default" else [])],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        (row,) = _report_csv(out, "needlebench_4k")
        assert float(row["S-RT EN"]) == pytest.approx(expected)
        for table in out.glob("*.md"):
            if table.name != "README.md":
                assert f"[scoring: {scoring} (" in table.read_text(encoding="utf-8").splitlines()[0], table.name
        scores = _report_csv(out, "scores")
        assert {row["Scorer"] for row in scores} == {
            "rule (lm-eval metric)" if scoring == "default" else "rule (lm-eval *_reference metric)"
        }
    bad = subprocess.run(
        [*command, "--out", str(tmp_path / "bad"), "--scoring", "opencompass"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()
    assert bad.stderr.strip().splitlines() == [
        "needlebench: error: --scoring 'opencompass' is not allowed; allowed: default, reference"
    ]


def test_reasoning_is_stripped_before_scoring():
    row = single_row()
    answer = "Hidden on Emerald Island is the legendary Stardust Shard."
    closed = harness.process_single(row, [f"<think>Is it the Crimson Lotus?</think>\n{answer}"])
    assert closed == {"score": 100.0, "score_reference": 100.0}
    # a closed block that names the keyword, then a wrong answer: stripped for both (OpenCompass's reasoning configs
    # remove a closed block too)
    wrong = harness.process_single(row, ["<think>the Stardust Shard?</think> No idea."])
    assert wrong["score"] < 20.0 and wrong["score_reference"] < 20.0
    unclosed = "<think>maybe the Stardust Shard"
    # default (keep, the OpenCompass way): an unclosed block is scored on its text
    assert harness.process_single(row, [unclosed]) == {"score": 100.0, "score_reference": 100.0}
    # empty: no final answer, no credit from the default metric; the reference twin still reads the text. The policy
    # is the task metadata's, which the loader records for the config's rows
    thinking.set_policy(row["config"], thinking.policy_from({"think_unclosed": "empty"}))
    result = harness.process_single(row, [unclosed])
    assert result["score"] < 100.0 and result["score_reference"] == 100.0
    assert harness.process_single({**row, "config": "other"}, [unclosed])["score"] == 100.0  # another config: keep
    with pytest.raises(NeedlebenchError, match="metadata think_unclosed 'drop' is not allowed; allowed: keep, empty"):
        thinking.policy_from({"think_unclosed": "drop"})
    with pytest.raises(NeedlebenchError, match="metadata think_end 3 is not a string"):
        thinking.policy_from({"think_end": 3})
    assert not has_final_answer("<think>maybe") and has_final_answer("plain answer")
    assert strip_reasoning("[REASON]x[/REASON] final", "[/REASON]") == "final"
    assert strip_reasoning("<think>a</think>b", "[/REASON]") == "<think>a</think>b"
    assert strip_reasoning("<think>a</think>b", "") == "<think>a</think>b"


def test_reference_text_is_opencompass_extract_non_reasoning_content():
    # opencompass/utils/text_postprocessors.py extract_non_reasoning_content, hand-computed
    assert reference_text("This is a test.</think> How are you?", "</think>") == "How are you?"
    assert reference_text("Start<think>reasoning here</think> End", "</think>") == "Start End"
    assert reference_text("<think>a</think>B<think>c</think>D", "</think>") == "BD"
    assert reference_text("<think>unclosed, kept", "</think>") == "<think>unclosed, kept"
    assert reference_text("  plain answer \n", "</think>") == "  plain answer \n"  # no marker: the raw text
    assert reference_text("<think>a</think>b", "") == "<think>a</think>b"  # stripping off


def test_own_options_are_taken_out_and_groups_expand():
    argv = ["run", "--skip-too-long", "--think-end", "</r>", "--reasoning=64", "--tasks", "x", "--resume"]
    _command, namespace, args = parse_eval([*argv, "--think-unclosed", "empty"])
    assert not any(name.startswith("needlebench_") for name in vars(namespace))  # lm-eval gets only its own
    assert args.tasks == ["x"]
    assert args.skip_too_long and args.resume and args.think_end == "</r>" and args.reasoning == "64"
    assert parse_eval(["run", "--reasoning", "--tasks", "x"])[2].reasoning == "double"
    assert args.think_unclosed == "empty" and parse_eval(["run", "--think-unclosed=keep"])[2].think_unclosed == "keep"
    with pytest.raises(NeedlebenchError, match="--think-unclosed: 'drop' is not allowed; allowed: keep, empty"):
        parse_eval(["run", "--think-unclosed", "drop"])
    assert "single_en_4k" in needlebench_configs("needlebench_4k,hellaswag")
    assert needlebench_configs("needlebench_atc_en,needlebench_atc_en") == ["atc_en"]


@pytest.mark.slow
def test_eval_without_lm_eval_says_how_to_install(tmp_path: Path):
    """A Python that cannot import lm_eval: one line naming the extra, exit 2."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nclass _Block:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'lm_eval' or name.startswith('lm_eval.'):\n            raise ModuleNotFoundError(name)\n"
        "        return None\nsys.meta_path.insert(0, _Block())\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", "eval", "run", "--model", "hf"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "needlebench: error: eval needs lm-evaluation-harness; install it with `pip install 'needlebench[eval]'`"
    ]


@pytest.mark.slow
def test_library_never_imports_vllm():
    """vLLM stays optional: importing every needlebench module (incl. the eval and server code) loads no vllm."""
    code = (
        "import importlib, pkgutil, sys, needlebench\n"
        "for m in pkgutil.walk_packages(needlebench.__path__, 'needlebench.'):\n"
        "    importlib.import_module(m.name)\n"
        "from needlebench.evaluation.runner.evaluate import register_models\n"
        "register_models()\n"
        "print(sorted(name for name in sys.modules if name == 'vllm' or name.startswith('vllm.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
