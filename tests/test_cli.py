"""The console script: one-line errors with exit status 2 and nothing written, and a real build."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_list_shows_rows_and_tokens():
    result = run("list", "single_*_1000k")
    assert result.returncode == 0
    assert "single_en_1000k" in result.stdout and "880" in result.stdout


def test_list_piped_is_plain_one_config_a_line():
    from needlebench.tasks.grid import registry

    result = run("list")
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and [line.split("\t")[0] for line in lines] == list(registry())
    assert all(len(line.split("\t")) == 6 for line in lines) and "…" not in result.stdout


#: Libraries the quick commands never need (each costs 0.05-0.15 s to import).
HEAVY = ("pydantic", "numpy", "pyarrow", "tiktoken", "datasets", "yaml", "jinja2", "huggingface_hub", "torch")


def test_quick_commands_import_no_heavy_library():
    """`list`, `--help` and a command's help import none of HEAVY (typer 0.29 would import pydantic for every
    parameter: the pin in pyproject.toml)."""
    probe = (
        "import contextlib, io, sys\n"
        "from needlebench import interrupts\n"
        "interrupts.exit_now = lambda status=0: None\n"
        "from needlebench.cli import main\n"
        "sys.argv = ['needlebench', *sys.argv[1:]]\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()\n"
        f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))\n"
    )
    for args in (["list"], ["--help"], ["build", "--help"], ["report", "--help"]):
        result = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().splitlines()[-1] == "[]", (args, result.stdout)


def test_build_then_load(tmp_path):
    out = tmp_path / "ds"
    result = run("build", "atc_en", "single_zh_4k", "--out", str(out), "--num-proc", "2")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "needlebench.json").read_text())
    assert set(manifest["configs"]) == {"atc_en", "single_zh_4k"}


def _bad_inputs(tmp_path: Path) -> list[tuple[list[str], str]]:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    malformed = tmp_path / "bad.jsonl"
    malformed.write_text('{"text": "ok"}\n{oops\n')
    needles = tmp_path / "needles.jsonl"
    needles.write_text(json.dumps({"needle": "x", "language": "English"}) + "\n")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("not a dataset")
    return [
        (["build", "single_en_5k"], "unknown config 'single_en_5k'"),
        (["build", "single_fr_4k"], "unknown config 'single_fr_4k'"),
        (["build", "single_en_4k", "--tokenizer", "bogus"], "unknown tokenizer 'bogus'; allowed: cl100k_base or hf:"),
        (["build", "single_en_4k", "--haystack-en", str(empty)], "is empty"),
        (["build", "single_en_4k", "--haystack-en", str(malformed)], "malformed JSON on line 2"),
        (["build", "single_en_4k", "--needles", str(needles)], "retrieval_question"),
        (["build", "single_en_4k", "--depths", "0,50,120"], "between 0 and 100"),
        (["build", "single_en_4k", "--buffer", "1000"], "buffer 1000 is not smaller than length 1000"),
        (["build", "single_en_4k", "--compat", "nope"], "unknown compat mode 'nope'"),
        (["build", "atc_en", "--out", str(foreign)], "not a needlebench dataset"),
        (["build", "atc_en", "--bogus"], "No such option: --bogus"),
        (["build", "atc_en", "--compression", "gzip"], "unknown compression 'gzip'"),
    ]


def test_bad_inputs_give_one_line_and_exit_2(tmp_path):
    for args, message in _bad_inputs(tmp_path):
        out = tmp_path / "out"
        full = args if "--out" in args else [*args, "--out", str(out)]
        result = run(*full)
        assert result.returncode == 2, (args, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("building")]
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)
        assert not out.exists(), args
    assert (tmp_path / "foreign" / "keep.txt").read_text() == "not a dataset"
