"""No traceback reaches a user: an unexpected exception in any command (a bug) prints one line naming the command
and the exception, exits with status 1 and saves the traceback under the cache root; NEEDLEBENCH_DEBUG=1 shows it.

The bug is planted at the front door: the console-script entry point runs in a fresh process after one library
function (or one of lm-eval's) has been replaced by one that raises.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

#: Replaces `target` (module:function) with a function raising a ValueError whose message spans two lines and
#: holds a local secret, then runs `needlebench` with the remaining arguments.
PLANT = """
import importlib, sys
module, name = sys.argv.pop(1).split(":")
def planted(*args, **kwargs):
    secret = "prompt text that must not be printed"
    raise ValueError("row columns differ from the single schema:\\nmissing ['needle_boundaries']")
setattr(importlib.import_module(module), name, planted)
from needlebench.cli import main
main()
"""


def run(target: str, *args: str, cache: Path, debug: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "NEEDLEBENCH_CACHE": str(cache), "COLUMNS": "80"}
    env.pop("NEEDLEBENCH_DEBUG", None)
    if debug:
        env["NEEDLEBENCH_DEBUG"] = "1"
    return subprocess.run(
        [sys.executable, "-c", PLANT, target, *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )


LINE = re.compile(
    r"needlebench: internal error in (?P<command>\w+): ValueError: row columns differ from the single schema: "
    r"missing \['needle_boundaries'\]; full traceback in (?P<path>\S+), please report it\n"
)


def test_a_bug_in_build_is_one_line_and_a_saved_traceback(tmp_path: Path):
    cache = tmp_path / "cache"
    out = tmp_path / "out"
    result = run("needlebench.dataset.build:build_dataset", "build", "single_en_4k", "--out", str(out), cache=cache)
    assert result.returncode == 1
    match = LINE.fullmatch(result.stderr)
    assert match, result.stderr
    assert match["command"] == "build" and "Traceback" not in result.stderr and "secret" not in result.stderr
    saved = Path(match["path"])
    assert saved.parent == cache / "crash" and saved.name.endswith("-build.txt")
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600  # tracebacks name the user's paths: theirs only
    text = saved.read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text and "in build\n    manifest = build_dataset(" in text
    assert "in planted" in text and text.rstrip().endswith("missing ['needle_boundaries']")
    assert not out.exists()

    debug = run(
        "needlebench.dataset.build:build_dataset",
        "build",
        "single_en_4k",
        "--out",
        str(out),
        cache=tmp_path / "cache2",
        debug=True,
    )
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr and "in planted" in debug.stderr
    assert debug.stderr.rstrip().splitlines()[-1].startswith("needlebench: internal error in build: ValueError: ")
    assert not (tmp_path / "cache2" / "crash").exists()
    assert "│" not in debug.stderr and "secret = " not in debug.stderr.split("Traceback", 1)[0]  # no Rich box


@pytest.mark.parametrize(
    ("target", "args"),
    [
        ("needlebench.tasks.grid:match_configs", ["list", "single_*"]),
        ("needlebench.dataset.verify:verify_folder", ["verify", "FOLDER"]),
        ("needlebench.evaluation.report:write_report", ["report", "FOLDER"]),
    ],
)
def test_a_bug_in_other_commands_is_one_line(tmp_path: Path, target: str, args: list[str]):
    args = [str(tmp_path) if arg == "FOLDER" else arg for arg in args]
    result = run(target, *args, cache=tmp_path / "cache")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"needlebench: internal error in {args[0]}: ")
    assert len(list((tmp_path / "cache" / "crash").glob(f"*-{args[0]}.txt"))) == 1


def test_a_bug_inside_lm_eval_during_eval_run_is_one_line(tmp_path: Path):
    """lm-eval raising inside `needlebench eval run` (here: its evaluator) goes the same way."""
    from support import build_data

    data = build_data(["atc_en_open"], tmp_path / "data")
    result = run(
        "lm_eval.evaluator:evaluate",
        "eval",
        "run",
        "--model",
        "needlebench-oracle",
        "--tasks",
        "needlebench_atc_en_open",
        "--subset",
        "2",
        "--metadata",
        json.dumps({"data_dir": str(data)}),
        cache=tmp_path / "cache",
    )
    assert result.returncode == 1
    last = result.stderr.rstrip().splitlines()[-1]
    assert LINE.fullmatch(last + "\n") and "internal error in eval:" in last, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    saved = Path(LINE.fullmatch(last + "\n")["path"])
    assert "lm_eval" in saved.read_text(encoding="utf-8")
