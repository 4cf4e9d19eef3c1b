"""The ninth and tenth red-team rounds. Ninth (nothing broken; what it found ugly): an experiment file whose local
path holds a NUL byte (an internal error) or a NEL (a message naming another path), an experiment file of hundreds
of thousands of inline needles (a minute and a gigabyte before its refusal), and a task folder handed over with
Python in it that lm-eval imports (`eval --include_path`): the run now says so. Tenth: that notice missed Python in
``__pycache__``, in folders deeper than it looked or behind links, and YAML files that read the user's files; a
FIFO named ``*.yaml`` hung the run; a planted ``.pyc`` would run instead of a signed ``utils.py``; a server's
``/v1/models`` reply (not JSON, deep, endless, dripping, a window of 10**300) was an internal error or a hang; an
unsigned chunk file was parsed whole before its tag was checked, and a signed record of another run was taken.

Each attack runs the `needlebench` command in the sandbox of tests/support/sandbox.py; the user's files are hashed
before and after."""

from __future__ import annotations

import json
import os
import py_compile
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from needlebench.evaluation.runner.guard import _ask_server, server_max_model_len
from support import build_data
from support.sandbox import refused, run, snapshot

pytestmark = pytest.mark.slow

EXPERIMENT = """name: round9
kind: single
language: en
haystack: {haystack}
needles:
  - needle: "The secret code of the lighthouse is 4471."
    question: "What is the secret code of the lighthouse?"
    keyword: "4471"
lengths: [300]
depths: [0, 50]
runs: 1
length_buffer: 50
"""


def _experiment(folder: Path, haystack: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "hay.txt").write_text("The quick brown fox jumps over the lazy dog. " * 400, encoding="utf-8")
    path = folder / "exp.yaml"
    path.write_text(EXPERIMENT.format(haystack=json.dumps(haystack)), encoding="utf-8")
    return path


def test_a_nul_byte_in_an_experiment_path_is_one_line(sandbox):
    path = _experiment(sandbox / "work" / "exp", "hay.txt\u0000x")
    before = snapshot(sandbox)
    refused(run(sandbox, "build", "--experiment", str(path), "--out", "out"), "key haystack", "NUL byte")
    assert snapshot(sandbox) == before


def test_a_line_separator_in_an_experiment_path_is_named_as_it_is(sandbox):
    """NEL (U+0085) is whitespace to ``str.split``: the message used to fold it away and name ``hay.txt``, a file
    that exists. The message keeps it, escaped."""
    path = _experiment(sandbox / "work" / "exp", "hay.txt\u0085")
    line = refused(run(sandbox, "build", "--experiment", str(path), "--out", "out"))
    assert "hay.txt\\x85" in line, line


def test_hundreds_of_thousands_of_inline_needles_are_refused_before_they_are_built(sandbox):
    needle = '  - {needle: "a 1", question: q, keyword: "1"}\n'
    text = EXPERIMENT.split("needles:")[0].format(haystack='"hay.txt"') + "needles:\n" + needle * 330_000
    folder = sandbox / "work" / "big"
    folder.mkdir(parents=True)
    (folder / "exp.yaml").write_text(text, encoding="utf-8")
    refused(run(sandbox, "build", "--experiment", str(folder / "exp.yaml"), "--out", "out"), "more than 400,000 values")


NOTICE = "needlebench: --include_path"
NOTICE_10 = NOTICE


def test_a_task_folder_with_python_needlebench_did_not_write_for_you_is_said_before_the_run(sandbox, tmp_path):
    """lm-eval imports a task folder's ``utils.py`` (``!function``): a folder from `needlebench tasks` run by this user
    is signed and runs quietly; the same folder with one line added to its ``utils.py`` (or a folder someone else
    made) gets one line naming the file before it runs."""
    data = build_data(["atc_en"], tmp_path / "ds")
    tasks = sandbox / "work" / "tasks"
    assert run(sandbox, "tasks", str(data), "--out", str(tasks)).returncode == 0
    common = ["eval", "run", "--model", "needlebench-oracle", "--include_path", str(tasks)]
    common += ["--tasks", "needlebench_atc_en", "--subset", "4"]
    quiet = run(sandbox, *common)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert NOTICE not in quiet.stderr
    utils = tasks / "utils.py"
    utils.write_text("# the sender's line\n" + utils.read_text(encoding="utf-8"), encoding="utf-8")
    (tasks / "sub").mkdir()
    (tasks / "sub" / "helpers.py").write_text("X = 1\n", encoding="utf-8")
    told = run(sandbox, *common)
    assert told.returncode == 0, told.stderr[-2000:]
    (line,) = [line for line in told.stderr.splitlines() if line.startswith(NOTICE)]
    assert "(sub/helpers.py, utils.py)" in line, line
    assert "needlebench did not write for you" in line, line


# --- round 10 ------------------------------------------------------------------------------------------------------

EVIL_TASK = """task: evil
dataset_path: json
dataset_kwargs: {data_files: {test: DATA}}
test_split: test
output_type: generate_until
doc_to_text: FUNCTION
doc_to_target: "a"
metric_list: [{metric: exact_match}]
"""


EVIL_RUN = ("eval", "run", "--model", "needlebench-oracle", "--tasks", "evil", "--include_path")


def _evil_folder(root: Path, home: Path, function: str, module: str, data: str = "rows.jsonl") -> Path:
    tasks = root / "tasks"
    target = tasks / module
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"open({str(home / 'PWNED')!r}, 'w').write('x')\ndef f(doc):\n    return 'hi'\n")
    (tasks / "rows.jsonl").write_text('{"q": 1}\n')
    (tasks / "evil.yaml").write_text(EVIL_TASK.replace("FUNCTION", function).replace("DATA", data))
    return tasks


@pytest.mark.parametrize(
    ("function", "module"),
    [("!function __pycache__.x.f", "__pycache__/x.py"), ("!function a.b.c.d.e.f.g.z.f", "a/b/c/d/e/f/g/z.py")],
)
def test_python_anywhere_in_a_handed_task_folder_is_named_before_it_runs(sandbox, function, module):
    tasks = _evil_folder(sandbox / "work" / "r10", sandbox, function, module)
    result = run(
        sandbox, "eval", "run", "--model", "needlebench-oracle", "--tasks", "evil", "--include_path", str(tasks)
    )
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(NOTICE_10)]
    assert module in line and "evil.yaml" in line, line


def test_a_yaml_only_task_folder_that_reads_the_users_files_is_named(sandbox):
    tasks = _evil_folder(sandbox / "work" / "r10", sandbox, '"{{q}}"', "unused.py", data=str(sandbox / "notes.txt"))
    (tasks / "unused.py").unlink()
    result = run(
        sandbox, "eval", "run", "--model", "needlebench-oracle", "--tasks", "evil", "--include_path", str(tasks)
    )
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(NOTICE_10)]
    assert "evil.yaml" in line and "reads the files its task YAMLs name" in line, line


def test_a_fifo_named_as_a_task_file_is_one_line_not_a_hang(sandbox):
    tasks = sandbox / "work" / "r10" / "tasks"
    tasks.mkdir(parents=True)
    os.mkfifo(tasks / "a.yaml")
    before = snapshot(sandbox, skip=tasks)  # the snapshot would wait on the FIFO too
    args = ("eval", "run", "--model", "needlebench-oracle", "--tasks", "needlebench_atc_en", "--include_path")
    refused(run(sandbox, *args, str(tasks)), "a.yaml is not a regular file")
    assert snapshot(sandbox, skip=tasks) == before


def test_a_planted_pyc_never_runs_instead_of_a_signed_utils_py(sandbox, tmp_path):
    """A ``.pyc`` whose header matches ``utils.py`` (size and time, both the sender's to set) is what Python would
    load from ``__pycache__``; needlebench keeps bytecode in the user's cache (``sys.pycache_prefix``)."""
    data = build_data(["atc_en"], tmp_path / "ds")
    tasks = sandbox / "work" / "tasks"
    assert run(sandbox, "tasks", str(data), "--out", str(tasks)).returncode == 0
    utils = tasks / "utils.py"
    source = utils.read_bytes()
    evil = f"open({str(sandbox / 'PWNED')!r}, 'w').write('x')\n".encode()
    evil = (evil + b"#" * (len(source) - len(evil) - 1) + b"\n") + source  # runs, then defines what the YAML needs
    evil_path = tmp_path / "utils.py"
    evil_path.write_bytes(evil)
    stamp = os.stat(utils)
    # where Python looks without a pycache prefix; not cache_from_source in this process, which an earlier in-process
    # run (private_bytecode) may have pointed at the same private cache the command below uses
    pyc = tasks / "__pycache__" / f"utils.{sys.implementation.cache_tag}.pyc"
    py_compile.compile(str(evil_path), cfile=str(pyc), doraise=True)
    # the header must name utils.py's own size and time, as a sender would write it
    header = bytearray(pyc.read_bytes())
    header[8:12] = int(stamp.st_mtime).to_bytes(4, "little")
    header[12:16] = (len(source) & 0xFFFFFFFF).to_bytes(4, "little")
    pyc.write_bytes(bytes(header))
    args = ["eval", "run", "--model", "needlebench-oracle", "--include_path", str(tasks), "--tasks"]
    result = run(sandbox, *args, "needlebench_atc_en", "--subset", "4")
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (sandbox / "PWNED").exists()


class _Models:
    """A server whose ``GET /v1/models`` answers with `body` (bytes), or drips it."""

    def __init__(self, body: bytes, drip: bool = False) -> None:
        outer = self
        self.body, self.drip = body, drip

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args):
                pass

            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(100_000 if outer.drip else len(outer.body)))
                self.end_headers()
                try:
                    if outer.drip:
                        for _ in range(60):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(1)
                    else:
                        self.wfile.write(outer.body)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(
    "body",
    [b"[1,2,3]", b'"hello"', b'{"data": 5}', b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     b'{"data": [{"max_model_len": ' + b"9" * 300 + b"}]}", b'{"data": [{"max_model_len": true}]}', b" " * (3 << 20)],
    ids=["list", "string", "number", "deep", "huge-window", "bool-window", "endless"],
)  # fmt: skip
def test_a_hostile_models_reply_is_no_window_never_an_internal_error(body):
    server = _Models(body)
    try:
        assert server_max_model_len(f"{server.root}/v1/completions") is None
    finally:
        server.close()


def test_a_dripping_models_reply_is_given_up_after_the_timeout():
    server = _Models(b"", drip=True)
    try:
        started = time.monotonic()
        assert _ask_server(server.root, timeout=3) is None
        assert time.monotonic() - started < 10
    finally:
        server.close()


def test_a_data_parallel_size_written_as_a_float_is_refused_like_lm_eval_reads_it(sandbox):
    args = ("eval", "run", "--model", "vllm", "--model_args", "pretrained=/no/model,data_parallel_size=2.0")
    refused(run(sandbox, *args, "--tasks", "needlebench_atc_en"), "data_parallel_size=2 loads")
