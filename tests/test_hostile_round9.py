"""The ninth red-team round (nothing broken; what it found ugly): an experiment file whose local path holds a NUL
byte (an internal error) or a NEL (a message naming another path), an experiment file of hundreds of thousands of
inline needles (a minute and a gigabyte before its refusal), and a task folder handed over with Python in it that
lm-eval imports (`eval --include_path`): the run now says so.

Each attack runs the `needlebench` command in the sandbox of tests/support/sandbox.py; the user's files are hashed
before and after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


NOTICE = "needlebench: lm-eval will import the Python of --include_path"


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
    assert "(sub/helpers.py, utils.py)" in line and "needlebench did not write for you" in line, line
