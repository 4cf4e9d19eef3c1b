"""What `needlebench judge` and `needlebench report` write when the world is hostile or broken.

The judge runs against a fake OpenAI-compatible server on 127.0.0.1 (a thread per request, every reply bounded,
stopped by the fixture) that fails with HTTP 500, trickles bytes, sends 50 MB or echoes the request; the
report is written over a user's folder and with model names that are spreadsheet formulas, HTML or links.
Everything goes through the real `needlebench` command (a subprocess), as a user meets it.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

USER, PASSWORD, TOKEN, API_KEY = "alice", "S3cretPassw0rd", "T0kenValue123", "sk-ApiKeyValue456"
SECRETS = (PASSWORD, TOKEN, API_KEY, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())
CACHE = ".needlebench-judge-cache.jsonl"


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True, text=True, timeout=timeout, check=False, env={**os.environ, **(env or {})},
    )


# ------------------------------------------------------------------------------------------------ the judge


class HostileJudge(BaseHTTPRequestHandler):
    """The mode is the first part of the path: /ok, /flaky (HTTP 500 for FLAKY prompts while ``broken``),
    /trickle (a byte every 0.3 s, at most 40), /huge (50 MB), /echo (the request line and headers in the reply)."""

    requests: ClassVar[list[tuple[str, str]]] = []
    broken = True
    huge_bytes_sent = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        mode = self.path.split("/")[1]
        HostileJudge.requests.append((mode, prompt))
        if mode == "flaky" and "FLAKY" in prompt and HostileJudge.broken:
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif mode == "trickle":
            self._trickle()
        elif mode == "huge":
            self._huge()
        elif mode == "echo":
            self._reply(f"Rating: [[7]] you sent {self.requestline} with {dict(self.headers)}")
        else:
            self._reply("Rating: [[9]]")

    def _reply(self, content: str) -> None:
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _trickle(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        try:
            for _ in range(40):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.3)
        except OSError:
            pass  # the client hung up: what the deadline should do

    def _huge(self) -> None:
        size, chunk = 50_000_000, b"x" * 1_000_000
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        try:
            for _ in range(size // len(chunk)):
                self.wfile.write(chunk)
                HostileJudge.huge_bytes_sent += len(chunk)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture()
def judge_server():
    HostileJudge.requests, HostileJudge.broken, HostileJudge.huge_bytes_sent = [], True, 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), HostileJudge)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def secret_url(port: int, mode: str) -> str:
    return f"http://{USER}:{PASSWORD}@127.0.0.1:{port}/{mode}/v1?token={TOKEN}"


def sample(question: str, answer: str = "Paris", prediction: str = "Paris") -> dict:
    doc = {"question": question, "answer": answer, "prompt": "haystack " * 50 + question}
    return {"doc_id": 0, "doc": doc, "resps": [[prediction]], "filtered_resps": [prediction], "score": 0.0}


def write_run(root: Path, files: dict[str, list[dict]]) -> Path:
    folder = root / "results" / "model"
    folder.mkdir(parents=True)
    for task, rows in files.items():
        (folder / f"samples_{task}_2026-01-01T00-00-00.000000.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8"
        )
    return root / "results"


def judge(results: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    return cli("judge", str(results), "--base-url", url, "--model", "judge-model", "--api-key-env", "HOSTILE_KEY",
               *extra, env={"HOSTILE_KEY": API_KEY})


def cache_entries(results: Path) -> list[dict]:
    path = results / CACHE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def assert_no_secret(results: Path, *outputs: subprocess.CompletedProcess) -> None:
    texts = {str(path): path.read_bytes().decode("utf-8", "replace") for path in results.rglob("*") if path.is_file()}
    for run in outputs:
        texts["stdout"], texts["stderr"] = texts.get("stdout", "") + run.stdout, texts.get("stderr", "") + run.stderr
    for where, text in texts.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} written into {where}"


def test_server_errors_are_not_cached_and_a_rerun_sends_only_them(judge_server, tmp_path):
    results = write_run(tmp_path, {
        "needlebench_good": [sample("capital of France?"), sample("capital of Italy?", "Rome", "Rome")],
        "needlebench_bad": [sample("FLAKY one?"), sample("FLAKY two?"), sample("capital of Spain?", "Madrid")],
    })
    url = secret_url(judge_server, "flaky")
    first = judge(results, url, "--retries", "1")
    assert first.returncode == 1, first.stderr
    lines = first.stderr.strip().splitlines()
    assert lines[-1] == (
        f"needlebench judge: 2 of 5 rows got no verdict (HTTP 500 from http://127.0.0.1:{judge_server}/flaky/v1); "
        "their files' judged_samples_*.jsonl were not written; rerun to retry them"
    )
    flaky_asked = [prompt for _, prompt in HostileJudge.requests if "FLAKY" in prompt]
    assert len(flaky_asked) == 4 and len(HostileJudge.requests) == 3 + 4  # each failure retried once
    cached = cache_entries(results)
    assert len(cached) == 3 and all(entry["score"] == 9 for entry in cached)  # only the judge's replies
    assert all(entry["endpoint"] == f"http://127.0.0.1:{judge_server}/flaky/v1" for entry in cached)
    folder = results / "model"
    assert (folder / "judged_samples_needlebench_good_2026-01-01T00-00-00.000000.jsonl").exists()
    assert not (folder / "judged_samples_needlebench_bad_2026-01-01T00-00-00.000000.jsonl").exists()

    HostileJudge.requests, HostileJudge.broken = [], False  # the server is back
    second = judge(results, url, "--retries", "1")
    assert second.returncode == 0, second.stderr
    assert sorted(prompt.split("[Question]\n")[1].split("\n")[0] for _, prompt in HostileJudge.requests) == [
        "FLAKY one?", "FLAKY two?"
    ]
    judged = [json.loads(line) for line in
              (folder / "judged_samples_needlebench_bad_2026-01-01T00-00-00.000000.jsonl").read_text().splitlines()]
    assert [row["judge"]["score"] for row in judged] == [9, 9, 9]
    assert_no_secret(results, first, second)


def test_a_refused_connection_is_retried_not_cached_and_exits_1(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = write_run(tmp_path, {"needlebench_x": [sample("capital of France?")]})
    run = judge(results, secret_url(port, "ok"), "--retries", "1")
    assert run.returncode == 1
    assert f"1 of 1 rows got no verdict (cannot connect from http://127.0.0.1:{port}/ok/v1)" in run.stderr
    assert cache_entries(results) == [] and not list(results.rglob("judged_*"))
    assert_no_secret(results, run)


def test_a_trickling_server_is_cut_at_the_deadline(judge_server, tmp_path):
    results = write_run(tmp_path, {"needlebench_x": [sample("capital of France?")]})
    started = time.monotonic()
    run = judge(results, secret_url(judge_server, "trickle"), "--retries", "0", "--timeout", "1.5")
    elapsed = time.monotonic() - started
    assert run.returncode == 1 and "no complete reply within 1.5 s" in run.stderr
    # the server would trickle for 12 s; the command (with its own start-up) ends soon after the 1.5 s deadline
    assert elapsed < 8, elapsed
    assert cache_entries(results) == []


def test_a_50_mb_reply_is_refused_after_64_kib(judge_server, tmp_path):
    results = write_run(tmp_path, {"needlebench_x": [sample("capital of France?")]})
    run = judge(results, secret_url(judge_server, "huge"), "--retries", "2")
    assert run.returncode == 1 and "(a reply over 64 KiB from" in run.stderr
    assert len(HostileJudge.requests) == 1  # not transient: refused once, not asked again
    time.sleep(0.5)
    assert HostileJudge.huge_bytes_sent < 50_000_000  # the client hung up long before the end
    assert cache_entries(results) == []
    assert sum(path.stat().st_size for path in results.rglob("*") if path.is_file()) < 10_000


def test_credentials_are_never_written_even_when_the_reply_echoes_them(judge_server, tmp_path):
    results = write_run(tmp_path, {"needlebench_x": [sample("capital of France?"), sample("capital of Peru?", "Lima")]})
    run = judge(results, secret_url(judge_server, "echo"))
    assert run.returncode == 0, run.stderr
    judged = (results / "model" / "judged_samples_needlebench_x_2026-01-01T00-00-00.000000.jsonl").read_text()
    rows = [json.loads(line) for line in judged.splitlines()]
    assert [row["judge"]["score"] for row in rows] == [7, 7]
    assert "[redacted]" in rows[0]["judge"]["reply"] and "/echo/v1/chat/completions" in rows[0]["judge"]["reply"]
    assert_no_secret(results, run)


def test_old_caches_of_failed_requests_are_asked_again(judge_server, tmp_path):
    """needlebench 0.3.1 cached a failed request as a verdict (score null, reply 'error: ...', with the URL)."""
    results = write_run(tmp_path, {"needlebench_x": [sample("capital of France?")]})
    from needlebench.evaluation.judge import _cache_key

    key = _cache_key("judge-model", "capital of France?", "Paris", "Paris")
    poisoned = {"key": key, "model": "judge-model", "score": None,
                "reply": f"error: HTTPStatusError: Server error '500' for url '{secret_url(1, 'ok')}'"}
    (results / CACHE).write_text(json.dumps(poisoned) + "\n", encoding="utf-8")
    run = judge(results, f"http://127.0.0.1:{judge_server}/ok/v1")
    assert run.returncode == 0 and len(HostileJudge.requests) == 1
    assert [entry["score"] for entry in cache_entries(results)] == [9]
    assert_no_secret(results, run)
