"""`needlebench judge` against a tiny OpenAI-compatible server on loopback: plumbing, parsing, nonsense, resume."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from needlebench.evaluation.judge.command import JudgeConfig, judge_results, parse_rating

LONG_CONTEXT = "haystack " * 2000


class FakeJudge(BaseHTTPRequestHandler):
    requests: list[dict] = []
    flaky: dict[str, int] = {}

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeJudge.requests.append(body)
        prompt = body["messages"][0]["content"]
        if "FLAKY" in prompt and FakeJudge.flaky.setdefault("n", 0) < 1:
            FakeJudge.flaky["n"] += 1
            self.send_response(503)
            self.end_headers()
            return
        if "NONSENSE" in prompt:
            content = "banana banana, I like trains"
        elif "Paris" in prompt.split("[Assistant's answer]")[1]:
            content = "Rating: [[10]]"
        else:
            content = "The answer is off. Rating: [[3]]"
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):  # keep the test output quiet
        pass


@pytest.fixture()
def server():
    FakeJudge.requests = []
    FakeJudge.flaky = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeJudge)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def sample(question: str, answer: str, prediction: str) -> dict:
    doc = {"question": question, "answer": answer, "prompt": LONG_CONTEXT + question}
    return {"doc_id": 0, "doc": doc, "resps": [[prediction]], "filtered_resps": [prediction], "score": 0.0}


def test_parse_rating():
    assert parse_rating("Rating: [[7]]") == 7 and parse_rating("[[ 10 ]]") == 10 and parse_rating("Rating: 4") == 4
    assert parse_rating("banana") is None and parse_rating("Rating: [[11]]") is None and parse_rating("") is None


@pytest.mark.parametrize(
    ("reply", "rating"),
    [
        # replies SmolLM2-135M-Instruct gave as a judge on vLLM (greedy, 32 tokens): an anchor restated, or no rating
        (
            "1: The answer is completely unrelated to the reference.\n\nThe reference answer is not a complete answer.",
            1,
        ),
        ("The answer is 5. The reference answer is 3, and the answer is 5. The answer is 5.", None),
        ("The reference answer is 12, and the answer is 34.\n\nThe answer is 34.\n\nThe answer is 3", None),
        (
            "The answer is not completely unrelated to the reference. The reference answer is not entirely accurate",
            None,
        ),
        ("[Reference answer]", None),
        # other common forms
        ("I would rate this answer 8/10.", 8),
        ("8 out of 10", 8),
        ("**Rating:** 9", 9),
        ("The rating is 2.", 2),
        ("Rating: [[7.0]]", 7),
        ('{"rating": 7}', 7),
        ('```json\n{"score": 6', 6),  # cut off: repaired by json-repair
        ("7: The answer aligns with the reference but has minor omissions.", 7),
        # not ratings on the 1-10 scale
        ("Rating: 3/5", None),
        ("3/4 of the stars", None),
        ('{"rating": 12}', None),
        ("5: The answer is fully correct", None),  # a number before words that are not its anchor
    ],
)
def test_parse_rating_forms(reply: str, rating: int | None):
    assert parse_rating(reply) == rating


@pytest.mark.slow
def test_judge_scores_writes_beside_and_resumes(server, tmp_path: Path):
    results = tmp_path / "results" / "model"
    results.mkdir(parents=True)
    samples = [
        sample("What is the capital of France?", "Paris", "It is Paris."),
        sample("What is the capital of France?", "Paris", "Lyon."),
        sample("NONSENSE question?", "x", "y"),
        sample("FLAKY capital of France?", "Paris", "Paris"),
    ]
    original = results / "samples_needlebench_my_test_2026-01-01T00-00-00.000000.jsonl"
    original.write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    before = original.read_bytes()
    config = JudgeConfig(server, "judge-model", concurrency=2, retries=2, backoff=0.0)
    counts = judge_results(tmp_path / "results", config, progress=False)
    expected = {"samples": 4, "requested": 4, "cached": 0, "unrated": 1, "files": 1, "failed": 0, "skipped": 0}
    assert counts == {**expected, "failure": None}
    assert original.read_bytes() == before  # the originals are never touched
    judged = [json.loads(line) for line in (results / ("judged_" + original.name)).read_text().splitlines()]
    assert [row["judge"]["score"] for row in judged] == [10, 3, None, 10]
    assert judged[2]["judge"]["reply"] == "banana banana, I like trains"
    assert judged[0]["doc"] == samples[0]["doc"] and judged[0]["judge"]["model"] == "judge-model"
    # only question, reference and answer are sent: never the long context
    assert all(LONG_CONTEXT[:100] not in r["messages"][0]["content"] for r in FakeJudge.requests)
    assert len(FakeJudge.requests) == 1 + 1 + 3 + 2  # nonsense retried twice, the 503 once
    # resumable: a second run asks nothing
    FakeJudge.requests = []
    counts = judge_results(tmp_path / "results", config, progress=False)
    assert counts["requested"] == 0 and counts["cached"] == 4 and FakeJudge.requests == []


@pytest.mark.slow
def test_judge_cli_errors(tmp_path: Path):
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from needlebench.cli import main; main()",
            "judge",
            str(tmp_path),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "no samples_*.jsonl" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
