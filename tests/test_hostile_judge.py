"""`needlebench judge` on a results folder from someone else, and against a judge that answers garbage.

Every attack runs the `needlebench` command (a subprocess) in the sandbox of tests/support/sandbox.py: a fake HOME
with the user's files and, under ``work/``, the hostile results folder. The judge is a fake OpenAI-compatible
server on 127.0.0.1 started by the test. The user's files are hashed before and after each run: nothing outside
the results folder may change, whatever links the folder carries.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import hmac
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from support.sandbox import refused, run, snapshot, warnings_of

DATE = "2026-01-01T00-00-00.000000"
CACHE = ".needlebench-judge-cache.jsonl"
API_KEY = "sk-hostile-judge-key"
JUDGE_SOURCES = [
    Path(__file__).resolve().parents[1] / "generator" / "needlebench" / "evaluation" / name
    for name in ("judge/command.py", "judge/files.py", "harness/lm_eval_files.py")
]


# ------------------------------------------------------------------------------------------------ the judge


def _chat(content) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


#: What the server sends for each mode (the first part of the request path).
REPLIES = {
    "ok": lambda: _chat("Rating: [[3]]"),
    # JSON nested 30,000 deep (fits the 64 KiB cap, so it reaches the JSON reader) and 100,000 deep (over the cap)
    "deep": lambda: b'{"choices": [{"message": {"content": ' + b"[" * 30_000 + b"]" * 30_000 + b"}}]}",
    "deep100k": lambda: b"[" * 100_000 + b"]" * 100_000,
    "nan": lambda: b'{"choices": [{"message": {"content": "Rating: [[10]]"}}], "usage": {"total_tokens": NaN}}',
    "infinity": lambda: b'{"choices": [{"message": {"content": Infinity}}]}',
    "digits": lambda: b'{"choices": [{"message": {"content": "Rating: [[10]]"}}], "created": ' + b"9" * 5000 + b"}",
    "content-object": lambda: _chat({"rating": 10}),
    "content-number": lambda: _chat(10),
    "choices-string": lambda: json.dumps({"choices": "Rating: [[10]]"}).encode(),
    "not-json": lambda: b"Rating: [[10]]",
    "surrogate": lambda: b'{"choices": [{"message": {"content": "Rating: [[10]] \\udc00"}}]}',
    # a text reply that is deeply nested JSON-like text: only the rating parser sees it
    "deep-text": lambda: _chat("{" * 20_000 + '"rating": 10'),
    # 60 KiB texts on which the rating parser once backtracked for hours (regular expressions) or minutes (json-repair)
    "spaces": lambda: _chat("Rating:" + " " * 60_000 + "x"),
    "line-breaks": lambda: _chat("1: " + "\n" * 30_000),
    "braces": lambda: _chat("".join(("{", " ", "]]", "10")[(7 * i) % 11 % 4] for i in range(30_000))),
    "huge": lambda: _chat("Rating: [[10]] " + "x" * 5_000_000),
}


class Judge(BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, str, str]]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = self.path.split("/")[1]
        Judge.requests.append((mode, body["messages"][0]["content"], self.headers.get("Authorization", "")))
        payload = REPLIES[mode]()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except OSError:
            pass  # the client hung up (a reply over its cap)

    def log_message(self, *args):
        pass


@pytest.fixture()
def judge_port():
    Judge.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


# ------------------------------------------------------------------------------------------------ helpers


def sample(question: str, answer: str = "Paris", prediction: str = "Paris") -> dict:
    doc = {"question": question, "answer": answer, "prompt_sha256": "0" * 64}
    return {"doc_id": 0, "doc": doc, "resps": [[prediction]], "filtered_resps": [prediction], "score": 0.0}


def write_run(home: Path, files: dict[str, list[dict]]) -> Path:
    """A results folder under the sandbox's work folder: ``results/model/samples_<task>_<DATE>.jsonl``."""
    folder = home / "work" / "results" / "model"
    folder.mkdir(parents=True)
    for task, rows in files.items():
        (folder / f"samples_{task}_{DATE}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return home / "work" / "results"


def judge(home: Path, results: Path, port: int, mode: str = "ok", *extra: str, key: str = API_KEY):
    url = f"http://127.0.0.1:{port}/{mode}/v1"
    return run(
        home,
        *("judge", str(results), "--base-url", url, "--model", "judge-model", "--api-key-env", "HOSTILE_KEY"),
        *extra,
        env={"HOSTILE_KEY": key},
    )


def users_files(home: Path) -> dict:
    """Everything of the user's: the sandbox HOME but the work folder the hostile results sit in."""
    return snapshot(home, skip=home / "work")


def judged_scores(path: Path) -> list:
    assert path.is_file() and not path.is_symlink()
    return [json.loads(line)["judge"]["score"] for line in path.read_text().splitlines()]


def cache_lines(results: Path) -> list[dict]:
    return [json.loads(line) for line in (results / CACHE).read_text().splitlines()]


# ------------------------------------------------------------------------------------------------ planted links


@pytest.mark.slow
def test_links_at_every_name_the_judge_ever_wrote_reach_nothing(sandbox, judge_port):
    """Links at the judged files, at the temporary names the judge used to write (``.<name>.tmp``, and
    ``.<name>.<pid>.tmp`` over a pid spray), at the cache, and a link to a folder of the user's with samples in it."""
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?"), sample("q2?")], "needlebench_b": [sample("q3?")]})
    folder = results / "model"
    targets = [home / ".bashrc", home / "notes.txt", home / ".ssh" / "id_rsa"]
    planted = []
    for task in ("needlebench_a", "needlebench_b"):
        judged = f"judged_samples_{task}_{DATE}.jsonl"
        planted += [folder / judged, folder / f".{judged}.tmp"]
        planted += [folder / f".{judged}.{pid}.tmp" for pid in range(1, 4097)]
    planted += [results / f".{CACHE}.tmp"] + [results / f".{CACHE}.{pid}.tmp" for pid in range(1, 4097)]
    for number, link in enumerate(planted):
        link.symlink_to(targets[number % len(targets)])
    (results / CACHE).symlink_to(home / ".bashrc")  # appended through, in the old judge
    private = home / "private_run"
    private.mkdir()
    (private / f"samples_mine_{DATE}.jsonl").write_text(json.dumps(sample("my private question?")) + "\n")
    (results / "linked").symlink_to(private)
    before = users_files(home)

    result = judge(home, results, judge_port)

    assert result.returncode == 0, result.stderr[-2000:]
    assert users_files(home) == before
    assert not list(private.glob("judged_*")) and all("private" not in prompt for _, prompt, _ in Judge.requests)
    assert len(Judge.requests) == 3
    assert judged_scores(folder / f"judged_samples_needlebench_a_{DATE}.jsonl") == [3, 3]
    assert judged_scores(folder / f"judged_samples_needlebench_b_{DATE}.jsonl") == [3]
    assert (results / CACHE).is_file() and not (results / CACHE).is_symlink()
    assert [entry["score"] for entry in cache_lines(results)] == [3, 3, 3]
    assert all(os.path.islink(link) for link in planted if not link.name.startswith("judged_"))
    (warning,) = warnings_of(result)
    assert CACHE in warning and "not a regular file" in warning


def test_the_judge_writes_nothing_by_path_into_the_results_folder():
    """What the tests above plant for is gone from the code: no builtin open, no Path.open/write_*, no rename by
    path, no fixed temporary name (every read and write of the results folder goes through needlebench.safe_fs)."""
    for source in JUDGE_SOURCES:
        for node in ast.walk(ast.parse(source.read_text())):
            where = f"{source.name}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert ".tmp" not in node.value, where
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "open", where
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
                owner = ast.unparse(node.func.value)
                assert name not in ("replace", "rename", "link", "symlink", "mkdir") or owner != "os", where
                assert name not in ("write_text", "write_bytes", "open", "touch", "unlink") or owner in (
                    "folder",
                    "self.folder",
                    "Folder",
                ), where


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "dangling"])
def test_a_cache_that_is_no_file_is_replaced_not_followed(sandbox, judge_port, kind):
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?")]})
    if kind == "fifo":
        os.mkfifo(results / CACHE)
    else:
        (results / CACHE).symlink_to(home / "created-by-the-judge")
    before = users_files(home)
    result = judge(home, results, judge_port)
    assert result.returncode == 0, result.stderr[-2000:]
    assert users_files(home) == before
    assert [entry["score"] for entry in cache_lines(results)] == [3]


# ------------------------------------------------------------------------------------------------ the cache


def _forged_tag(entry: dict) -> str:
    """What a sender can compute: an HMAC keyed by a secret that is not the user's."""
    payload = json.dumps({k: entry[k] for k in ("key", "model", "score", "reply", "endpoint")}, sort_keys=True)
    return hmac.new(b"the sender's own secret", payload.encode(), hashlib.sha256).hexdigest()


@pytest.mark.slow
def test_a_pre_filled_cache_gets_no_verdict_and_every_row_is_asked(sandbox, judge_port):
    from needlebench.evaluation.judge.command import _cache_key

    home = sandbox
    questions = ["q1?", "q2?", "q3?", "q4?"]
    results = write_run(home, {"needlebench_a": [sample(q, prediction="wrong") for q in questions]})
    endpoint = f"http://127.0.0.1:{judge_port}/ok/v1"
    lines = []
    for number, question in enumerate(questions):
        entry = {
            "key": _cache_key("judge-model", question, "Paris", "wrong"),
            "model": "judge-model",
            "score": 10,
            "reply": "Rating: [[10]]",
            "endpoint": endpoint,
        }
        if number == 1:
            entry["tag"] = _forged_tag(entry)
        elif number == 2:
            entry["tag"] = "0" * 64
        elif number == 3:
            entry["tag"] = ["not", "a", "tag"]
        lines.append(json.dumps(entry))
    (results / CACHE).write_text("\n".join(lines) + "\n")
    before = users_files(home)

    result = judge(home, results, judge_port)

    assert result.returncode == 0, result.stderr[-2000:]
    assert users_files(home) == before
    assert sorted(prompt.split("[Question]\n")[1].split("\n")[0] for _, prompt, _ in Judge.requests) == questions
    assert judged_scores(results / "model" / f"judged_samples_needlebench_a_{DATE}.jsonl") == [3, 3, 3, 3]
    (warning,) = warnings_of(result)
    assert "4 of 4 lines" in warning and CACHE in warning
    assert [entry["score"] for entry in cache_lines(results)] == [3, 3, 3, 3]

    # the user's own signed cache is honoured: a rerun asks nothing and warns nothing
    Judge.requests = []
    again = judge(home, results, judge_port)
    assert again.returncode == 0 and Judge.requests == [] and warnings_of(again) == []
    assert "0 requested, 4 from cache" in again.stdout


@pytest.mark.slow
def test_a_tampered_signed_entry_is_asked_again(sandbox, judge_port):
    """An entry of the user's own cache whose score a sender raised no longer verifies."""
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?"), sample("q2?")]})
    assert judge(home, results, judge_port).returncode == 0
    entries = cache_lines(results)
    entries[0]["score"] = 10
    (results / CACHE).write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    Judge.requests = []
    result = judge(home, results, judge_port)
    assert result.returncode == 0 and len(Judge.requests) == 1
    assert judged_scores(results / "model" / f"judged_samples_needlebench_a_{DATE}.jsonl") == [3, 3]
    assert "1 of 2 lines" in warnings_of(result)[0]


# ------------------------------------------------------------------------------------------------ hostile replies


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("deep", "a reply that is not chat-completion JSON"),
        ("deep100k", "a reply over 64 KiB"),
        ("nan", "a reply that is not chat-completion JSON"),
        ("infinity", "a reply that is not chat-completion JSON"),
        ("digits", "a reply that is not chat-completion JSON"),
        ("content-object", "a reply that is not chat-completion JSON"),
        ("content-number", "a reply that is not chat-completion JSON"),
        ("choices-string", "a reply that is not chat-completion JSON"),
        ("not-json", "a reply that is not chat-completion JSON"),
        ("surrogate", "a reply that is not chat-completion JSON"),
        ("huge", "a reply over 64 KiB"),
    ],
)
def test_a_garbage_reply_leaves_the_row_unjudged_and_counted(sandbox, judge_port, mode, reason):
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?"), sample("q2?")]})
    before = users_files(home)
    result = judge(home, results, judge_port, mode, "--retries", "0")
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and users_files(home) == before
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("needlebench judge: ")]
    assert line.startswith(f"needlebench judge: 2 of 2 rows got no verdict ({reason} from http://127.0.0.1:")
    assert not list(results.rglob("judged_*"))
    assert not (results / CACHE).exists() or cache_lines(results) == []


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["deep-text", "spaces", "line-breaks", "braces"])
def test_a_reply_text_built_to_stall_the_parser_is_an_unrated_verdict_in_seconds(sandbox, judge_port, mode):
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?")]})
    started = time.monotonic()
    result = judge(home, results, judge_port, mode, "--retries", "0")
    assert time.monotonic() - started < 30
    assert result.returncode == 0, result.stderr[-2000:]
    assert judged_scores(results / "model" / f"judged_samples_needlebench_a_{DATE}.jsonl") == [None]


@pytest.mark.slow
def test_a_non_ascii_api_key_is_refused_in_one_line(sandbox, judge_port):
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?")]})
    for key in ("sk-clé-secrète", "sk-key\r", "sk key"):
        result = judge(home, results, judge_port, key=key)
        line = refused(result, "API key", "--api-key-env")
        assert key.strip() not in line and Judge.requests == []
    # an ASCII key is sent as it is; a non-ASCII password in the URL goes in Basic authorization (UTF-8)
    assert judge(home, results, judge_port).returncode == 0
    assert Judge.requests[-1][2] == f"Bearer {API_KEY}"
    (results / CACHE).unlink()
    url = f"http://alice:p\u00e4ssw\u00f6rd@127.0.0.1:{judge_port}/ok/v1"
    result = run(home, "judge", str(results), "--base-url", url, "--model", "judge-model", "--api-key-env", "NO_KEY")
    assert result.returncode == 0, result.stderr[-2000:]
    assert Judge.requests[-1][2] == "Basic " + base64.b64encode("alice:p\u00e4ssw\u00f6rd".encode()).decode()


# ------------------------------------------------------------------------------------------------ hostile samples


def _row_with(path: str, raw: str) -> str:
    """A samples line: an honest row with the JSON text `raw` at `path` (``doc.answer``, ``doc_id``)."""
    row = sample("q?")
    marker = "__HOSTILE__"
    target = row
    *parents, last = path.split(".")
    for part in parents:
        target = target[part]
    target[last] = marker
    return json.dumps(row).replace(f'"{marker}"', raw)


HOSTILE_SAMPLES = {
    # name: (line text, words the one error line must hold)
    "deep": ("[" * 100_000 + "]" * 100_000, ["line 2", "nested deeper"]),
    "infinity": (_row_with("doc.answer", "Infinity"), ["line 2", "doc.answer", "Infinity"]),
    "nan": (_row_with("score", "NaN"), ["line 2", "score", "NaN"]),
    "overflow": (_row_with("score", "1e999"), ["line 2", "score", "not a finite number"]),
    "digits": (_row_with("doc_id", "9" * 5000), ["line 2", "doc_id", "5,000-character number"]),
    "row-array": ("[1, 2, 3]", ["line 2", "the row", "a JSON array"]),
    "doc-string": (_row_with("doc", '"a document"'), ["line 2", "doc", "a string"]),
    "doc-null": (_row_with("doc", "null"), ["line 2", "doc", "null"]),
    "question-object": (_row_with("doc.question", '{"x": 1}'), ["line 2", "doc.question", "a JSON object"]),
    "not-json": ("{not json", ["line 2", "not JSON"]),
    "surrogate": (_row_with("doc.answer", '"\\ud800"'), ["line 2", "doc.answer", "lone surrogate"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE_SAMPLES))
def test_a_hostile_samples_line_is_one_line_naming_the_file_and_field(sandbox, judge_port, name):
    home = sandbox
    text, words = HOSTILE_SAMPLES[name]
    results = write_run(home, {"needlebench_a": []})
    samples = results / "model" / f"samples_needlebench_a_{DATE}.jsonl"
    samples.write_text(json.dumps(sample("q1?")) + "\n" + text + "\n")
    before = users_files(home)
    result = judge(home, results, judge_port)
    refused(result, samples.name, *words)
    assert users_files(home) == before and Judge.requests == [] and not list(results.rglob("judged_*"))


@pytest.mark.slow
def test_a_samples_file_that_is_not_utf8_is_one_line(sandbox, judge_port):
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?")]})
    samples = results / "model" / f"samples_needlebench_a_{DATE}.jsonl"
    samples.write_bytes(samples.read_bytes() + b'{"doc": {"question": "\xff\xfe"}}\n')
    refused(judge(home, results, judge_port), samples.name, "line 2", "UTF-8")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["link", "fifo", "folder"])
def test_a_samples_file_that_is_no_file_is_refused_before_reading(sandbox, judge_port, kind):
    """A link to the user's notes (whose lines would be sent to the judge and copied into the results), a FIFO
    (which would hang the reader), a folder."""
    home = sandbox
    (home / "notes.txt").write_text(json.dumps(sample("my private note?")) + "\n")
    results = write_run(home, {"needlebench_a": [sample("q1?")]})
    hostile = results / "model" / f"samples_needlebench_b_{DATE}.jsonl"
    if kind == "link":
        hostile.symlink_to(home / "notes.txt")
    elif kind == "fifo":
        os.mkfifo(hostile)
    else:
        hostile.mkdir()
    before = users_files(home)
    result = judge(home, results, judge_port)
    refused(result, hostile.name, "not a regular file")
    assert users_files(home) == before and Judge.requests == []


@pytest.mark.slow
def test_a_folder_tree_1500_deep_is_one_line(sandbox, judge_port):
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?")]})
    descriptor = os.open(results, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1500):
            os.mkdir("d", dir_fd=descriptor)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = child
    finally:
        os.close(descriptor)
    try:
        result = judge(home, results, judge_port)
        refused(result, "deeper than 32 levels")
        assert Judge.requests == []
    finally:  # shutil.rmtree recurses once per level (CPython Lib/shutil.py): remove the chain from its bottom
        for depth in range(1500, 0, -1):
            os.rmdir(results.joinpath(*["d"] * depth))


@pytest.mark.slow
def test_a_folder_at_the_judged_name_is_refused_before_any_request(sandbox, judge_port):
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?")]})
    (results / "model" / f"judged_samples_needlebench_a_{DATE}.jsonl").mkdir()
    refused(judge(home, results, judge_port), f"judged_samples_needlebench_a_{DATE}.jsonl", "is a folder")
    assert Judge.requests == []


@pytest.mark.slow
def test_a_samples_name_too_long_for_its_judged_name_is_refused_before_any_request(sandbox, judge_port):
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?")]})
    name = "samples_" + "x" * 241 + ".jsonl"  # 255 bytes: judged_<name> cannot exist
    (results / "model" / name).write_text(json.dumps(sample("q2?")) + "\n")
    refused(judge(home, results, judge_port), name, "too long")
    assert Judge.requests == []


@pytest.mark.slow
def test_a_cache_hard_linked_to_a_file_elsewhere_is_replaced_not_appended_to(sandbox, judge_port):
    """A hard link (another local user's doing, where fs.protected_hardlinks is off) is a regular file: the judge
    reads it but writes a new file at the name instead of appending to the shared one."""
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?")]})
    elsewhere = home / "work" / "shared.jsonl"
    elsewhere.write_text("")
    os.link(elsewhere, results / CACHE)
    result = judge(home, results, judge_port)
    assert result.returncode == 0, result.stderr[-2000:]
    assert elsewhere.read_text() == "" and os.stat(results / CACHE).st_nlink == 1
    assert [entry["score"] for entry in cache_lines(results)] == [3]


@pytest.mark.slow
def test_a_cache_line_cut_by_an_interruption_does_not_swallow_the_next_verdict(sandbox, judge_port):
    home = sandbox
    results = write_run(home, {"needlebench_a": [sample("q1?"), sample("q2?")]})
    assert judge(home, results, judge_port).returncode == 0
    first = (results / CACHE).read_text().splitlines()[0]
    (results / CACHE).write_text(first)  # the second verdict was never written, the first lost its line break
    Judge.requests = []
    result = judge(home, results, judge_port)
    assert result.returncode == 0 and len(Judge.requests) == 1 and warnings_of(result) == []
    Judge.requests = []
    assert judge(home, results, judge_port).returncode == 0 and Judge.requests == []
