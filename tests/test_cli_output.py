"""Output people can read: list, help, typos, any locale, progress (issue 10)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from needlebench import cli
from needlebench.dataset import build
from needlebench.dataset.build import BuildOptions, build_dataset
from needlebench.tasks.grid import registry


def run(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


# ----------------------------------------------------------------------------------------------- list


@pytest.mark.slow
def test_list_piped_is_plain_one_config_a_line() -> None:
    result = run("list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == list(registry())  # every name, whole, in order
    assert all(len(line.split("\t")) == 6 for line in lines)
    assert "…" not in result.stdout and "─" not in result.stdout
    assert "counting_stars_acquisition_en_1000k\tCounting-Stars\ten\t1000k\t32\t" in result.stdout


@pytest.mark.slow
def test_list_shows_the_tokens_of_atc_as_a_build_writes_them(tmp_path: Path) -> None:
    """Every config has a token count (ATC too, no "-"), and ATC's is what a default build records."""
    result = run("list", "atc_*", "v2_atc_*")
    assert result.returncode == 0, result.stderr
    listed = {line.split("\t")[0]: line.split("\t")[5] for line in result.stdout.splitlines()}
    assert len(listed) == 10 and "-" not in listed.values()
    assert [line for line in run("list").stdout.splitlines() if line.split("\t")[5] == "-"] == []
    build_dataset(sorted(listed), tmp_path / "atc", BuildOptions(), progress=False)
    manifest = json.loads((tmp_path / "atc" / "needlebench.json").read_text(encoding="utf-8"))
    built = {name: f"{entry['haystack_tokens']:,}" for name, entry in manifest["configs"].items()}
    assert built == listed


@pytest.mark.parametrize("width", [60, 80, 200])
def test_list_on_a_terminal_never_cuts_a_name(width: int, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=screen, force_terminal=True, width=width, color_system=None))
    cli.list_configs(None)
    text = screen.getvalue() + capsys.readouterr().out
    assert "…" not in text
    names = {line.split()[0] for line in text.splitlines() if line.strip()}
    assert set(registry()) <= names
    assert all(len(line) <= width for line in screen.getvalue().splitlines())


# ----------------------------------------------------------------------------------------------- help


@pytest.mark.slow
def test_help_is_whole_at_80_columns() -> None:
    result = run("build", "--help", env={"COLUMNS": "80"})
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "hub:ORG/NAME[@REV][:CONFIG][:SPLIT][:COLUMN] or opencompass[@REV]." in text
    assert "--corpus <str> opencompass[@REV]: the paper's original inputs from the Hub." in text
    assert "<bool>" not in text and "…" not in text
    assert "--overwrite / --no-overwrite" in text
    top = run("--help", env={"COLUMNS": "80"})
    commands = top.stdout.split("Commands:")[1]
    assert "..." not in commands and "…" not in commands  # no short help cut
    assert "Run lm-eval with needlebench's models; arguments pass through." in top.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines() + top.stdout.splitlines())


@pytest.mark.slow
def test_no_arguments_prints_help_without_an_empty_error() -> None:
    result = run()
    assert result.returncode == 2
    assert result.stderr.startswith("Usage: needlebench [OPTIONS] COMMAND [ARGS]...")
    assert "error" not in result.stderr
    assert "verify" in result.stderr


# ----------------------------------------------------------------------------------------------- typos


@pytest.mark.slow
def test_typo_gets_did_you_mean_and_glob_says_glob(tmp_path: Path) -> None:
    result = run("build", "singel_en_4k", "--out", str(tmp_path / "x"))
    assert result.returncode == 2
    assert "unknown config 'singel_en_4k'; did you mean single_en_4k?" in result.stderr
    result = run("build", "single_*_5k", "--out", str(tmp_path / "x"))
    assert result.returncode == 2
    assert result.stderr.startswith("needlebench: error: glob 'single_*_5k' matches no config")
    result = run("list", "atc_fr*")
    assert result.returncode == 2 and "glob 'atc_fr*' matches no config" in result.stderr
    result = run("build", "zzz", "--out", str(tmp_path / "x"))
    assert "unknown config 'zzz'; run" in result.stderr  # nothing close: no suggestion
    assert not (tmp_path / "x").exists()


# ----------------------------------------------------------------------------------------------- locale


@pytest.mark.slow
def test_ascii_locale_build_and_verify_print_cleanly(tmp_path: Path) -> None:
    env = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    out = os.fsencode(tmp_path) + "/dätä".encode()  # a non-ASCII folder name, undecodable in the C locale
    result = subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", "build", "atc_en", "--out", out],
        capture_output=True,
        timeout=300,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"Error" not in result.stderr and b"wrote" in result.stdout
    folder = Path(os.fsdecode(out))
    manifest = json.loads((folder / "needlebench.json").read_text(encoding="utf-8"))
    assert manifest["configs"]["atc_en"]["rows"] == 720
    result = subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", "verify", out],
        capture_output=True,
        timeout=300,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"all configs match" in result.stdout
    result = run("build", "sïngle_en_4k", env=env)  # a message holding a character the locale cannot encode
    assert result.returncode == 2 and "Error" not in result.stderr and "did you mean single_en_4k?" in result.stderr


# ----------------------------------------------------------------------------------------------- progress


def test_progress_counts_rows_inside_a_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    updates: list[int] = []

    class Bar:
        n = 0

        def __init__(self, *args, **kwargs) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            pass

        def update(self, count: int) -> None:
            updates.append(count)

    monkeypatch.setattr(build, "tqdm", Bar)
    build_dataset(["atc_en"], tmp_path / "ds", BuildOptions(), progress=True)
    assert updates == [1] * 720  # one shard, counted row by row (not once at its end)
