"""`needlebench report` and `needlebench judge` on a results folder from someone else: planted judged files, names
with terminal escapes or bytes that are not UTF-8, huge lines, huge model names.

Each attack runs the `needlebench` command (a subprocess) in the sandbox of tests/support/sandbox.py; the user's
files (the sandbox HOME but the hostile results folder and the report folder) are hashed before and after.
"""

from __future__ import annotations

import csv
import json
import os
import re
import time
from pathlib import Path

import pytest

from support.sandbox import refused, run, snapshot, warnings_of
from test_hostile_judge import judge, judge_port  # noqa: F401 (the fake judge server, a fixture)
from test_hostile_report import DATE, TASK, report, results_folder, samples_file
from test_hostile_report import user_files as _user_files

pytestmark = pytest.mark.slow

TABLE = "needlebench_4k.csv"
#: What no CSV or HTML file written from data may carry: controls, bidi overrides, lone surrogates.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def user_files(home: Path, results: Path) -> dict:
    """The user's files (but the results and report folders), without the font cache matplotlib makes in HOME."""
    found = _user_files(home, results)
    return {key: value for key, value in found.items() if key != ".cache" and not key.startswith(".cache/matplotlib")}


def scores(out: Path) -> dict[str, str]:
    """Model -> S-RT EN score of the needlebench_4k table."""
    with (out / TABLE).open(encoding="utf-8", newline="") as handle:
        return {row["Model"]: row["S-RT EN"] for row in csv.DictReader(handle)}


def judged_of(results: Path) -> tuple[Path, Path]:
    samples = samples_file(results)
    judged = samples.with_name("judged_" + samples.name)
    return judged, judged.with_name(judged.name + ".tag")


def plant_tens(results: Path) -> None:
    """A judged file from the sender: every row rated 10 (shown as 100)."""
    judged, _tag = judged_of(results)
    rows = [json.loads(line) for line in samples_file(results).read_text().splitlines()]
    judged.write_text("".join(json.dumps({**row, "judge": {"score": 10, "model": "m"}}) + "\n" for row in rows))


# ------------------------------------------------------------------------------------------- planted judged files


def test_a_planted_judged_file_is_ignored_and_counted_and_the_users_own_is_used(sandbox, judge_port):  # noqa: F811
    results = results_folder(sandbox, {"m": [50.0, 50.0]})
    out = sandbox / "work" / "report"
    plant_tens(results)
    before = user_files(sandbox, results)
    planted = report(sandbox, results, "--no-figures")
    assert planted.returncode == 0, planted.stderr[-2000:]
    (warning,) = warnings_of(planted)
    assert "1 judged_samples_*.jsonl" in warning and "not written by this user's needlebench judge" in warning
    assert scores(out) == {"m": "50.0"}  # the samples' own scores, not the sender's 10s
    assert (
        "1 judged_samples_*.jsonl ignored: not written by this user's needlebench judge"
        in (out / "README.md").read_text()
    )
    assert user_files(sandbox, results) == before

    # the user's own judge run: its file is tagged and read (rating 3 of the fake judge, shown x 10)
    assert judge(sandbox, results, judge_port).returncode == 0
    judged, tag = judged_of(results)
    assert tag.is_file() and [json.loads(line)["judge"]["score"] for line in judged.read_text().splitlines()] == [3, 3]
    honest = report(sandbox, results, "--no-figures")
    assert honest.returncode == 0 and warnings_of(honest) == [] and scores(out) == {"m": "30.0"}

    # the sender's rows under the user's tag, a forged tag, the tag of another samples file: all ignored
    original = judged.read_bytes()
    plant_tens(results)
    assert scores_after(sandbox, results) == "50.0"
    judged.write_bytes(original)
    tag.write_text(json.dumps({"tag": "0" * 64}) + "\n")
    assert scores_after(sandbox, results) == "50.0"
    samples_file(results).write_text(samples_file(results).read_text().replace('"score": 50.0', '"score": 60.0'))
    assert judge(sandbox, results, judge_port).returncode == 0  # re-tag for the changed samples file
    assert scores_after(sandbox, results, warned=False) == "30.0"
    samples_file(results).write_text(samples_file(results).read_text().replace('"score": 60.0', '"score": 50.0'))
    assert scores_after(sandbox, results) == "50.0"  # a judged file of other samples bytes is not this one's
    assert user_files(sandbox, results) == before


def scores_after(home: Path, results: Path, warned: bool = True) -> str:
    result = report(home, results, "--no-figures")
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(warnings_of(result)) == warned
    return scores(home / "work" / "report")["m"]


def test_a_judged_file_given_alone_is_read_only_when_its_tag_verifies(sandbox):
    results = results_folder(sandbox, {"m": [50.0]})
    plant_tens(results)
    judged, _tag = judged_of(results)
    result = run(sandbox, "report", str(judged), "--out", str(sandbox / "work" / "report"), "--no-figures")
    assert result.returncode == 0 and len(warnings_of(result)) == 1
    assert scores(sandbox / "work" / "report") == {"m0": "50.0"}  # named after its folder (no results file given)
    samples_file(results).unlink()
    result = run(sandbox, "report", str(judged), "--out", str(sandbox / "work" / "other"), "--no-figures")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
    assert "not written by this user's needlebench judge" in result.stderr


def test_a_judge_run_that_cannot_judge_every_row_removes_the_stale_judged_file(sandbox, judge_port):  # noqa: F811
    results = results_folder(sandbox, {"m": [50.0]})
    plant_tens(results)
    judged, tag = judged_of(results)
    tag.write_text(json.dumps({"tag": "0" * 64}) + "\n")
    before = user_files(sandbox, results)
    # "huge": every reply is over the size cap, so the row gets no verdict
    result = judge(sandbox, results, judge_port, "huge", "--retries", "0")
    assert result.returncode == 1 and "1 of 1 rows got no verdict" in result.stderr, result.stderr[-2000:]
    assert not judged.exists() and not tag.exists()
    assert user_files(sandbox, results) == before


# ------------------------------------------------------------------------------------------- names from the data


def test_escapes_and_bidi_overrides_in_model_and_task_names_reach_no_csv_or_html(sandbox):
    evil_model = "\x1b]8;;http://x\x07ev\u202eil\x1b[31m"
    results = results_folder(sandbox, {evil_model: [50.0]})
    samples = samples_file(results)
    samples.rename(samples.with_name(f"samples_{TASK}\x1b[2J\u2066x_{DATE}.jsonl"))
    before = user_files(sandbox, results)
    result = report(sandbox, results)
    assert result.returncode == 0, result.stderr[-2000:]
    out = sandbox / "work" / "report"
    kept = (".csv", ".html")
    written = {path.name: path.read_text(encoding="utf-8") for path in out.iterdir() if path.suffix in kept}
    assert "report.html" in written and "scores.csv" in written
    assert {name for name, text in written.items() if UNSAFE.search(text)} == set()
    assert "ev\ufffdil" in written["scores.csv"] and "ev\ufffdil" in written["report.html"]
    assert user_files(sandbox, results) == before


def test_a_samples_name_that_is_not_utf8_is_reported(sandbox):
    results = results_folder(sandbox, {"m": [50.0]})
    samples = samples_file(results)
    os.rename(samples, os.fsencode(samples.parent) + f"/samples_x\xff_{DATE}.jsonl".encode("latin-1"))
    before = user_files(sandbox, results)
    result = report(sandbox, results)
    assert result.returncode == 0, result.stderr[-2000:]
    out = sandbox / "work" / "report"
    assert "x\ufffd" in (out / "scores.csv").read_text(encoding="utf-8")
    assert "x\ufffd" in (out / "report.html").read_text(encoding="utf-8")
    assert user_files(sandbox, results) == before


def test_a_huge_model_name_is_cut_the_same_everywhere_and_the_report_is_quick(sandbox):
    name = "a" * 200_000
    results = results_folder(sandbox, {name: [50.0], "b": [40.0]})
    start = time.monotonic()
    result = report(sandbox, results)
    assert result.returncode == 0, result.stderr[-2000:]
    assert time.monotonic() - start < 30  # 58 s before names were cut
    out = sandbox / "work" / "report"
    (cut,) = [model for model in scores(out) if model != "b"]
    assert len(cut) == 300 and cut.startswith("a" * 200) and re.search(r"-[0-9a-f]{12}$", cut)
    with (out / "scores.csv").open(encoding="utf-8", newline="") as handle:
        assert {row["Model"] for row in csv.DictReader(handle)} == {cut, "b"}
    assert all(len(path.name) < 255 for path in out.iterdir())


# ------------------------------------------------------------------------------------------- huge files


def huge_line(path: Path, size: int = (256 << 20) + (1 << 20)) -> None:
    """`path` ending in one line longer than the 256 MiB cap (sparse: no disk, and never read whole)."""
    with path.open("ab") as handle:
        handle.truncate(handle.seek(0, os.SEEK_END) + size)


def test_a_line_over_the_cap_is_one_line_error_in_report_and_judge(sandbox, judge_port):  # noqa: F811
    results = results_folder(sandbox, {"m": [50.0]})
    huge_line(samples_file(results))
    before = snapshot(sandbox, skip=results)
    for result in (report(sandbox, results, "--no-figures"), judge(sandbox, results, judge_port)):
        assert result.returncode == 2, result.stderr[-2000:]
        (line,) = result.stderr.strip().splitlines()
        assert samples_file(results).name in line and "longer than 256 MiB" in line and "line 2" in line
    assert snapshot(sandbox, skip=results) == before


# ------------------------------------------------------------------------------------------- repeated rows


def test_a_row_repeated_in_a_samples_file_is_one_line_naming_both_lines(sandbox):
    """A samples file whose row appears twice would count it twice in every mean, n and coverage: refused."""
    results = results_folder(sandbox, {"m": [100.0, 0.0]})
    samples = samples_file(results)
    lines = samples.read_text().splitlines()
    samples.write_text("\n".join([*lines, lines[0], lines[0]]) + "\n")
    before = user_files(sandbox, results)
    result = report(sandbox, results, "--no-figures")
    refused(result, f"{samples.name}:3:", "first at line 1")
    assert user_files(sandbox, results) == before
    samples.write_text("\n".join(lines) + "\n")
    assert scores_after(sandbox, results, warned=False) == "50.0"  # each row once: the mean of 100 and 0
