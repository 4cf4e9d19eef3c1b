"""Hostile experiment files and build options (issue 28, items 3, 7 and part of 8): bombs, huge values, paths that
must not travel, signals and oversized inputs. Each is refused with one line and exit 2 (SIGTERM: 143), fast, with
nothing written; paths of local inputs never reach a dataset folder or a report."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from needlebench.dataset import build as build_module
from needlebench.dataset.size_guard import DEFAULT_MAX_TOKENS, check_size
from needlebench.errors import NeedlebenchError
from needlebench.tasks.grid import registry

CLI = "from needlebench.cli import main; main()"


def run(*args: str, prelude: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    """The `needlebench` command; `prelude` runs first in the same process (e.g. to fake the free disk)."""
    return subprocess.run(
        [sys.executable, "-c", prelude + CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def error_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("building")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def experiment(**changes) -> dict:
    data = {
        "name": "hostile",
        "kind": "single",
        "language": "en",
        "lengths": [1000],
        "depths": [10, 50],
        "needles": [{"needle": "The vault code is 4711.", "question": "What is the vault code?", "keyword": "4711"}],
    }
    data.update(changes)
    return data


def write(tmp_path: Path, data: dict | str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def refused(tmp_path: Path, data: dict | str, *extra: str) -> str:
    """Build the experiment: exit 2, one line, no output folder; returns the line."""
    out = tmp_path / "out"
    result = run("build", "--experiment", str(write(tmp_path, data)), "--out", str(out), *extra)
    assert result.returncode == 2, result.stderr
    assert not out.exists()
    return error_line(result)


# ------------------------------------------------------------------------------------------ YAML bombs and keys


@pytest.mark.slow
def test_billion_laughs_is_refused_fast(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    bomb = "\n".join(lines) + "\nname: *a9\nkind: single\nlanguage: en\nlengths: [1000]\ndepths: [10]\n"
    start = time.monotonic()
    line = refused(tmp_path, bomb)
    assert time.monotonic() - start < 20
    assert "alias *a0 is not allowed" in line and "line 2" in line and "exp.yaml" in line
    assert "lol" not in line  # the expanded value is never printed


@pytest.mark.slow
def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    text = yaml.safe_dump(experiment(), sort_keys=False) + "lengths: [2000]\n"
    line = refused(tmp_path, text)
    assert "key 'lengths' is given twice" in line and "exp.yaml" in line
    nested = yaml.safe_dump(experiment(), sort_keys=False).replace(
        "keyword: '4711'", "keyword: '4711'\n  keyword: '47'"
    )
    assert "key 'keyword' is given twice" in refused(tmp_path, nested)


@pytest.mark.slow
def test_nan_depths_are_refused(tmp_path: Path) -> None:
    text = yaml.safe_dump(experiment(), sort_keys=False).replace("- 50", "- .nan")
    line = refused(tmp_path, text)
    assert "key depths.1: NaN is not allowed" in line and "<= 100" in line
    text = yaml.safe_dump(experiment(kind="multi_retrieval", diff=10), sort_keys=False).replace(
        "diff: 10", "diff: .nan"
    )
    assert "key diff: NaN is not allowed" in refused(tmp_path, text)


@pytest.mark.slow
def test_a_needle_without_its_keyword_is_refused(tmp_path: Path) -> None:
    needles = [{"needle": "The vault code is 4711.", "question": "What is the code?", "keyword": "9999"}]
    line = refused(tmp_path, experiment(needles=needles))
    assert "key needles.0.keyword: '9999' is not allowed" in line and "occurs in its needle" in line
    answer_only = [{"needle": "The vault code is 4711.", "question": "What is the code?", "answer": "1234"}]
    assert "needles.0.keyword" in refused(tmp_path, experiment(needles=answer_only))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"lengths": [10**12]}, ["key lengths.0: 1000000000000 is not allowed", "<= 2000000"]),
        ({"lengths": {"min": 1000, "max": 10**12, "n": 3}}, ["key lengths.max: 1000000000000", "<= 2000000"]),
        ({"runs": 10**8}, ["key runs: 100000000 is not allowed", "<= 10000"]),
        ({"depths": {"n": 10**8}}, ["key depths.n: 100000000 is not allowed", "<= 1000"]),
    ],
)
def test_huge_values_name_the_allowed_maximum(tmp_path: Path, changes: dict, words: list[str]) -> None:
    start = time.monotonic()
    line = refused(tmp_path, experiment(**changes))
    assert time.monotonic() - start < 20
    for word in words:
        assert word in line, line


@pytest.mark.slow
def test_duplicate_depths_option_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("build", "atc_en", "single_en_4k", "--depths", "50,50", "--out", str(out))
    assert result.returncode == 2 and not out.exists()
    assert "give 50 more than once" in error_line(result)


# ---------------------------------------------------------------------------------------------- the size guard


@pytest.mark.slow
def test_max_tokens_refuses_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run("build", "single_en_4k", "--max-tokens", "1000", "--out", str(out))
    assert result.returncode == 2 and not out.exists()
    line = error_line(result)
    assert "800 rows of about 1,520,000 context tokens" in line and "--max-tokens 1,000" in line
    result = run("build", "single_en_4k", "--max-tokens", "1520000", "--out", str(out))
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_the_estimate_counts_a_depths_override(tmp_path: Path) -> None:
    depths = ",".join(f"{i / 20:g}" for i in range(2001))  # 2,001 depths instead of the grid's 20
    out = tmp_path / "out"
    result = run("build", "single_en_4k", "--depths", depths, "--max-tokens", "100000000", "--out", str(out))
    assert result.returncode == 2 and not out.exists()
    assert "80,040 rows of about 152,076,000 context tokens" in error_line(result)


@pytest.mark.slow
def test_a_huge_experiment_is_refused_by_the_default_limit(tmp_path: Path) -> None:
    huge = experiment(lengths={"min": 1000, "max": 2_000_000, "n": 1000}, depths={"n": 1000}, runs=10_000)
    start = time.monotonic()
    line = refused(tmp_path, huge)
    assert time.monotonic() - start < 30
    assert "10,000,000,000 rows" in line and f"the default --max-tokens {DEFAULT_MAX_TOKENS:,}" in line


@pytest.mark.slow
def test_a_build_beyond_the_free_disk_is_refused(tmp_path: Path) -> None:
    fake = "import shutil; shutil.disk_usage = lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 5000, 5000); "
    out = tmp_path / "out"
    result = run("build", "single_en_4k", "--out", str(out), prelude=fake)
    assert result.returncode == 2 and not out.exists()
    line = error_line(result)
    assert "about 0.9 MB of zstd Parquet, but only 0.0 MB are free on the disk of" in line and str(out) in line


def test_every_builtin_config_passes_the_default_guard(monkeypatch, tmp_path: Path) -> None:
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**13, 0, 50 * 10**9))
    check_size(list(registry().values()), tmp_path / "out", "zstd")  # `needlebench build --all`
    with pytest.raises(NeedlebenchError, match="about 8.8 GB of zstd Parquet, but only 5.0 GB are free"):
        monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**13, 0, 5 * 10**9))
        check_size(list(registry().values()), tmp_path / "out", "zstd")


# -------------------------------------------------------------------------------------- inputs and processes


@pytest.mark.slow
def test_a_2gb_haystack_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with open(big, "wb") as handle:  # sparse: 2 GiB by size, no disk
        handle.truncate(2 * 1024**3)
    out = tmp_path / "out"
    start = time.monotonic()
    result = run("build", "single_en_4k", "--haystack-en", str(big), "--out", str(out))
    assert time.monotonic() - start < 20
    assert result.returncode == 2 and not out.exists()
    line = error_line(result)
    assert "2,147,483,648 bytes" in line and "at most 67,108,864 bytes (64 MiB)" in line
    assert "2,147,483,648 bytes" in refused(tmp_path, experiment(haystack=str(big)))


@pytest.mark.slow
def test_num_proc_is_capped_at_the_cpus(tmp_path: Path) -> None:
    one_cpu = "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
    out = tmp_path / "out"
    result = run("build", "single_en_128k", "--num-proc", "1000", "--out", str(out), prelude=one_cpu)
    assert result.returncode == 0, result.stderr
    assert "needlebench: --num-proc 1000 capped at 1: this machine gives the build 1 CPU" in result.stderr.splitlines()


def test_capped_prefers_the_smaller_limit(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert build_module._capped(1000, 8) == 4 and build_module._capped(1000, 2) == 2
    assert build_module._capped(3, 8) == 3


@pytest.mark.slow
def test_sigterm_cleans_up_like_ctrl_c(tmp_path: Path) -> None:
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, "build", "multi_reasoning_en_200k", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.is_dir() and any(out.glob(".building-*"))):
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 143, stderr
    assert [line for line in stderr.replace("\r", "\n").splitlines() if line.startswith("needlebench")] == [
        "needlebench: terminated, cleaning up"
    ]
    assert not out.exists()  # the staging folder and the folder the build created are gone


# --------------------------------------------------------------------------- local paths never leave the machine


@pytest.mark.slow
def test_an_experiment_haystack_is_recorded_without_its_path(tmp_path: Path) -> None:
    rng = random.Random(1)
    words = ["the", "of", "and", "a", "to", "in", "is", "was", "river", "stone", "garden", "window", "letter"]
    inputs = tmp_path / "private-inputs"
    inputs.mkdir()
    haystack = inputs / "essays.txt"
    text = "\n\n".join(" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(2000))
    haystack.write_text(f"{text}\n\nThis copy is number {os.urandom(8).hex()}.", encoding="utf-8")  # unique hash
    out = tmp_path / "out"
    path = write(tmp_path, experiment(haystack=str(haystack.absolute())))
    result = run("build", "--experiment", str(path), "--out", str(out))
    assert result.returncode == 0, result.stderr
    for file in out.rglob("*"):
        if file.is_file():
            assert b"private-inputs" not in file.read_bytes(), file
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "haystack: the local file essays.txt (" in card
    assert run("verify", str(out)).returncode == 0  # found where it was read
    moved = tmp_path / "moved"
    inputs.rename(moved)
    result = run("verify", str(out))
    assert result.returncode == 2 and "pass --haystack-en PATH" in error_line(result)
    result = run("verify", str(out), "--haystack-en", str(moved / "essays.txt"))
    assert result.returncode == 0, result.stderr


def test_report_sources_are_never_absolute(tmp_path: Path, monkeypatch) -> None:
    from needlebench.evaluation.report import source_label

    monkeypatch.chdir(tmp_path)
    assert source_label(tmp_path / "results" / "run1") == "results/run1"
    outside = Path("/home/alice/secret-project/results/model")
    assert source_label(outside) == "results/model"
    assert not source_label(Path("/")).startswith("/")


# ------------------------------------------------------------------------------------------------- unit level


def test_user_yaml_refuses_aliases_and_repeated_keys_but_reads_plain_yaml() -> None:
    from needlebench.yamlload import UserYamlError, load_user_yaml

    assert load_user_yaml("a: 1\nb: {c: [1, 2], d: x}\n") == {"a": 1, "b": {"c": [1, 2], "d": "x"}}
    with pytest.raises(UserYamlError, match=r"line 2: alias \*x is not allowed"):
        load_user_yaml("a: &x [1, 2]\nb: *x\n")
    with pytest.raises(UserYamlError, match="line 3: key 'c' is given twice"):
        load_user_yaml("b:\n  c: 1\n  c: 2\n")


def test_a_recorded_local_haystack_builds_from_the_recipes_input(tmp_path: Path) -> None:
    from needlebench.dataset.options import BuildOptions
    from needlebench.tasks.experiment import (
        experiment_from_record,
        experiment_spec,
        parse_experiment,
    )

    haystack = tmp_path / "private" / "essays.txt"
    haystack.parent.mkdir()
    haystack.write_text("Some text. " * 200, encoding="utf-8")
    record = parse_experiment(experiment(haystack=str(haystack))).to_record()
    assert record["haystack"]["file"] == "essays.txt" and "private" not in repr(record)
    back = experiment_from_record(record)
    assert back.haystack is None and back.haystack_record == record["haystack"]
    assert back.to_record() == record  # recorded again unchanged (a later build keeps it)
    spec = experiment_spec(back)
    located = str(tmp_path / "elsewhere.txt")
    assert BuildOptions(haystack_en=located).settings_for(spec).haystack == located
