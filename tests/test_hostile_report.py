"""`needlebench report` on a results folder from someone else, into a folder that may hold the user's files.

Each attack runs the `needlebench report` command (a subprocess) in the sandbox of tests/support/sandbox.py: a fake
HOME with the user's files and the hostile results folder inside it. The sandbox is hashed before and after: the
user's files never change. A hostile value is either refused (exit 2, one line naming the file and the field) or,
where a report must go on, left out and counted in one warning line, never a ``nan`` headline nor a traceback.
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest

from support import single_row, write_samples
from support.sandbox import refused, run, snapshot, warnings_of

pytestmark = pytest.mark.slow

DATE = "2025-01-01T00-00-00.000000"
TASK = "needlebench_single_en_4k"


def results_folder(home: Path, models: dict[str, list[float]], name: str = "results") -> Path:
    """A results folder from someone else: per model an lm-eval output folder with single_en_4k rows scored as
    given (one row per score, at lengths 1000, 2000, ...)."""
    root = home / "work" / name
    for index, (model, scores) in enumerate(models.items()):
        folder = root / f"m{index}"
        rows = [
            {"doc": single_row(context_length=1000 * (1 + i), depth_percent=50.0, prompt=f"{model}-{i}"), "score": v}
            for i, v in enumerate(scores)
        ]
        write_samples(folder, TASK, rows, date=DATE)
        results = {
            "results": {TASK: {"alias": "single_en_4k", "score,none": sum(scores) / len(scores)}},
            "config": {"model": "hf", "model_args": {"pretrained": model}},
        }
        (folder / f"results_{DATE}.json").write_text(json.dumps(results), encoding="utf-8")
    return root


def samples_file(results: Path, index: int = 0) -> Path:
    return results / f"m{index}" / f"samples_{TASK}_{DATE}.jsonl"


def report(home: Path, results: Path, *args: str, out: str = "report"):
    return run(home, "report", str(results), "--out", str(home / "work" / out), *args)


def user_files(home: Path, results: Path) -> dict:
    """Everything under HOME but the results folder (the attacker's) and the report folder."""
    return {key: value for key, value in snapshot(home, skip=results).items() if not key.startswith("work/report")}


def csv_cells(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as handle:
        return [cell for row in csv.reader(handle) for cell in row]


# ------------------------------------------------------------------------------------------- the report folder


def test_an_interrupted_report_never_lets_the_next_replace_a_users_readme(sandbox, monkeypatch):
    """A report stopped before its README leaves a file list that allows only bytes a report wrote: the README the
    user saves there afterwards is refused, never replaced (earlier versions listed every file before writing)."""
    from needlebench.evaluation.report import write_report
    from needlebench.safe_fs import Folder

    results = results_folder(sandbox, {"m": [50.0]})
    out = sandbox / "work" / "report"
    real = Folder.write_bytes

    def stop_at_readme(self, name, data, **kwargs):
        if name == "README.md":
            raise KeyboardInterrupt
        return real(self, name, data, **kwargs)

    monkeypatch.setattr(Folder, "write_bytes", stop_at_readme)
    with pytest.raises(KeyboardInterrupt):
        write_report(results, out, figures=False)
    monkeypatch.undo()
    listed = json.loads((out / ".needlebench-report.json").read_text())["files"]
    assert "README.md" in listed and listed["README.md"]  # the sha256 of the bytes that were about to be written
    (out / "README.md").write_text("# my own notes\n", encoding="utf-8")
    before = snapshot(sandbox)
    refused(report(sandbox, results, "--no-figures"), "README.md", "changed since the report wrote it")
    assert snapshot(sandbox) == before
    # the file list of an earlier version's interrupted report (no sha256) allows nothing either
    (out / ".needlebench-report.json").write_text(
        json.dumps({"tool": "needlebench report", "files": {**listed, "README.md": None}}), encoding="utf-8"
    )
    before = snapshot(sandbox)
    refused(report(sandbox, results, "--no-figures"), "README.md")
    assert snapshot(sandbox) == before
    # once the user moves the README away, the report finishes
    (out / "README.md").unlink()
    assert report(sandbox, results, "--no-figures").returncode == 0
    listed = json.loads((out / ".needlebench-report.json").read_text())["files"]
    assert all(isinstance(digest, str) and len(digest) == 64 for digest in listed.values())


def test_links_planted_in_an_earlier_report_folder_are_replaced_never_written_through(sandbox):
    results = results_folder(sandbox, {"m": [50.0]})
    out = sandbox / "work" / "report"
    assert report(sandbox, results).returncode == 0
    names = json.loads((out / ".needlebench-report.json").read_text())["files"]
    # the temporary names this and earlier versions used, and any name beside them
    for name in (".needlebench-report.json.tmp", "..needlebench-report.json.tmp", ".README.md.tmp"):
        (out / name).symlink_to(sandbox / ".bashrc")
    before = user_files(sandbox, results)
    second = report(sandbox, results)
    assert second.returncode == 0, second.stderr
    assert user_files(sandbox, results) == before
    assert json.loads((out / ".needlebench-report.json").read_text())["files"] == names
    # a link at a file the report writes, listed as the report's: refused (it is not the file the report wrote)
    (out / "scores.md").unlink()
    (out / "scores.md").symlink_to(sandbox / ".bashrc")
    refused(report(sandbox, results), "scores.md")
    assert user_files(sandbox, results) == before and (out / "scores.md").is_symlink()


# ------------------------------------------------------------------------------------------- names from results


def test_two_models_one_file_name_give_two_heatmaps_and_a_long_name_fits(sandbox):
    long = "x" * 300
    results = results_folder(sandbox, {"org/model": [100.0], "org_model": [0.0], long: [50.0]})
    result = report(sandbox, results)
    assert result.returncode == 0, result.stderr
    out = sandbox / "work" / "report"
    heatmaps = sorted(p.name for p in out.glob("heatmap_*.png"))
    assert len(heatmaps) == 3 and len({name.casefold() for name in heatmaps}) == 3, heatmaps
    assert all(len(name.encode()) <= 255 for name in os.listdir(out))
    readme = (out / "README.md").read_text(encoding="utf-8")
    shown = dict(re.findall(r"!\[(.*?) - needlebench_single_en_4k\]\((heatmap_[^)]+)\)", readme))
    assert set(shown) == {"org/model", "org_model", long} and len(set(shown.values())) == 3
    assert shown["org/model"] != shown["org_model"]


def test_model_names_never_become_links_or_break_a_table(sandbox):
    names = {
        "www.evil.example": [10.0],
        "url": [20.0],  # a pretrained URL is taken for a local path (its last part): named with --name
        "mail me@evil.example": [30.0],
        "pipe | and\nnewline": [40.0],
    }
    results = results_folder(sandbox, names)
    result = report(sandbox, results, "--no-figures", "--name", f"{results / 'm1'}=see http://evil.example/x")
    assert result.returncode == 0, result.stderr
    out = sandbox / "work" / "report"
    for page in ("README.md", "scores.md", "needlebench_4k.md"):
        text = (out / page).read_text(encoding="utf-8")
        assert not re.search(r"(?i)www\.evil|(?<!\\)://|(?<!\\)@evil", text), page
        assert "www\\.evil.example" in text and "http\\://evil.example/x" in text and "me\\@evil.example" in text
        for table in re.findall(r"((?:^\|.*\|$\n?)+)", text, flags=re.M):
            widths = {len(re.findall(r"(?<!\\)\|", line)) for line in table.splitlines()}
            assert len(widths) == 1, (page, table)  # every row as wide as its header


def test_terminal_escapes_and_mathtext_from_results_are_inert(sandbox):
    escape, math = "evil\x1b]0;pwned\x07\x1b[31m", r"$\undefinedcommand{x}$"
    results = results_folder(sandbox, {escape: [10.0], math: [20.0]})
    result = report(sandbox, results)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout + result.stderr
    out = sandbox / "work" / "report"
    assert len(list(out.glob("heatmap_*.png"))) == 2 and (out / "compare_models_by_length.png").is_file()
    assert "\x1b" not in (out / "README.md").read_text(encoding="utf-8")
    # an error naming the models (--name that matches none) shows the escape as text
    line = refused(report(sandbox, results, "--no-figures", "--name", "nosuch=X"), "nosuch")
    assert "\x1b" not in line and "\\x1b" in line


# ------------------------------------------------------------------------------------------- hostile values


def test_one_nan_score_is_left_out_and_counted_never_a_nan_headline(sandbox):
    results = results_folder(sandbox, {"m": [100.0, 100.0, 100.0]})
    path = samples_file(results)
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[1] = lines[1].replace('"score": 100.0', '"score": NaN')
    lines[2] = lines[2].replace('"score": 100.0', '"score": ' + "9" * 5000)  # read as an infinite number
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    outcome = json.loads((results / "m0" / f"results_{DATE}.json").read_text())
    outcome["results"][TASK]["score,none"] = float("inf")
    (results / "m0" / f"results_{DATE}.json").write_text(json.dumps(outcome), encoding="utf-8")
    result = report(sandbox, results, "--no-figures")
    assert result.returncode == 0, result.stderr
    warnings = warnings_of(result)
    assert len(warnings) == 1 and "left out 3 value(s)" in warnings[0], warnings
    assert f"samples_{TASK}_{DATE}.jsonl (2: line 2 metric score, ...)" in warnings[0]
    assert f"results_{DATE}.json (1: {TASK} score,none)" in warnings[0]
    out = sandbox / "work" / "report"
    for name in ("scores.csv", "needlebench_4k.csv", "lm_eval_results.csv"):
        if (out / name).exists():
            cells = [cell.lower() for cell in csv_cells(out / name)]
            assert not [cell for cell in cells if cell in ("nan", "inf", "-inf")], name
    scores = {row[3] for row in csv.reader((out / "scores.csv").open(encoding="utf-8")) if row[0] == "m"}
    assert scores == {"100.0"}  # the one finite row's score, never nan


@pytest.mark.parametrize(
    ("where", "damage", "field"),
    [
        ("samples", lambda line: '{"doc": ' + "[" * 5000 + "]" * 5000 + "}", "nested deeper"),
        ("samples", lambda line: line.replace('"depth_percent": 50.0', '"depth_percent": "abc"'), "depth_percent"),
        ("samples", lambda line: line.replace('"depth_percent": 50.0', '"depth_percent": NaN'), "depth_percent"),
        (
            "samples",
            lambda line: line.replace('"context_length": 1000', '"context_length": ' + "7" * 5000),
            "context_length",
        ),
        ("samples", lambda line: line.replace('"score": 50.0', '"score": [["x"]]'), "score"),
        ("samples", lambda line: line.replace('"score": 50.0', '"score": [50.0]'), "score"),
        ("samples", lambda line: line.replace('"language": "en"', '"language": ["en"]'), "language"),
        ("results", lambda text: '{"results": ' + "[" * 5000 + "]" * 5000 + "}", "nested deeper"),
        ("health", lambda text: '{"tasks": ' + "{" * 0 + '{"x": ' * 3000 + "1" + "}" * 3000 + "}", "run-health"),
        ("health", lambda text: '{"tasks": {"t": [1, 2]}}', "tasks.t"),
        ("health", lambda text: '{"tasks": {}, "not_run": {"t": 3}}', "not_run.t"),
    ],
    ids=[
        "deep-samples",
        "string-depth",
        "nan-depth",
        "5000-digit-length",
        "list-metric",
        "number-list-metric",
        "list-language",
        "deep-results",
        "deep-health",
        "health-list",
        "not-run-number",
    ],
)
def test_hostile_values_are_one_line_input_errors(sandbox, where, damage, field):
    results = results_folder(sandbox, {"m": [50.0]})
    folder = results / "m0"
    if where == "samples":
        path = samples_file(results)
        path.write_text(damage(path.read_text(encoding="utf-8").strip()) + "\n", encoding="utf-8")
    elif where == "results":
        path = folder / f"results_{DATE}.json"
        path.write_text(damage(path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        path = folder / f"needlebench_health_{DATE}.json"
        path.write_text(damage(""), encoding="utf-8")
    before = user_files(sandbox, results)
    refused(report(sandbox, results, "--no-figures"), path.name, field)
    assert user_files(sandbox, results) == before and not (sandbox / "work" / "report").exists()


def test_wrong_types_where_lm_eval_keeps_notes_are_skipped(sandbox):
    """lm-eval's own non-numbers (``"N/A"`` standard errors, odd ``n-samples``) leave the report as it is."""
    results = results_folder(sandbox, {"m": [50.0]})
    path = results / "m0" / f"results_{DATE}.json"
    data = json.loads(path.read_text())
    data["results"][TASK].update({"score_stderr,none": "N/A", "other,none": [1, 2], "flag,none": {"a": 1}})
    data["n-samples"] = {TASK: [1, 2, 3]}
    path.write_text(json.dumps(data), encoding="utf-8")
    result = report(sandbox, results, "--no-figures")
    assert result.returncode == 0 and not warnings_of(result), result.stderr


def test_fifo_device_and_links_under_lm_eval_names_are_refused_without_reading(sandbox):
    results = results_folder(sandbox, {"m": [50.0]})
    folder = results / "m0"
    date = "2025-02-02T00-00-00.000000"
    attacks = [
        (f"samples_{TASK}_{date}.jsonl", lambda p: os.mkfifo(p), "FIFO"),
        (f"samples_{TASK}_{date}.jsonl", lambda p: p.symlink_to("/dev/zero"), "symbolic link"),
        (f"results_{date}.json", lambda p: p.symlink_to(sandbox / "notes.txt"), "symbolic link"),
        (f"judged_samples_{TASK}_{DATE}.jsonl", lambda p: os.mkfifo(p), "FIFO"),
        (f"needlebench_health_{DATE}.json", lambda p: p.symlink_to(sandbox / ".ssh" / "id_rsa"), "symbolic link"),
    ]
    for name, plant, kind in attacks:
        make = folder / name
        plant(make)
        before = user_files(sandbox, results)
        refused(report(sandbox, results, "--no-figures"), name, kind)
        assert user_files(sandbox, results) == before and not (sandbox / "work" / "report").exists()
        make.unlink()
    # a link to a folder is not followed at all: its files are not the results folder's
    (results / "linked").symlink_to(sandbox / "mydata")
    assert report(sandbox, results, "--no-figures").returncode == 0


def test_a_1500_level_deep_folder_tree_is_refused_in_one_line(sandbox):
    results = results_folder(sandbox, {"m": [50.0]})
    deep = os.open(results, os.O_RDONLY)
    try:
        for _ in range(1500):  # by descriptors: the whole path is longer than PATH_MAX
            os.mkdir("d", dir_fd=deep)
            inner = os.open("d", os.O_RDONLY, dir_fd=deep)
            os.close(deep)
            deep = inner
    finally:
        os.close(deep)
    try:
        before = user_files(sandbox, results)
        refused(report(sandbox, results, "--no-figures"), "nested more than")
        assert user_files(sandbox, results) == before
    finally:
        flatten(results)


def flatten(results: Path) -> None:
    """Move each level of the deep tree up beside the others (the tmp_path clean-up recurses per level)."""
    current, index = results / "d", 0
    while (current / "d").exists():
        os.rename(current / "d", results / f"x{index}")
        current, index = results / f"x{index}", index + 1


def custom_row(**values) -> dict:
    """An S-RT row of a config no registry knows (an experiment whose manifest is not at hand)."""
    return {**single_row(**values), "config": "mine_en"}


def test_rows_spanning_a_huge_grid_are_refused_not_drawn_for_hours(sandbox):
    """Rows of a config known only from the rows (no manifest at hand) span the lengths x depths they carry: 600
    rows at distinct lengths and depths would be a 360,000-cell heatmap and coverage grid."""
    results = results_folder(sandbox, {"m": [50.0]})
    rows = [{"doc": custom_row(context_length=1000 + i, depth_percent=i / 10), "score": 1.0} for i in range(600)]
    path = write_samples(results / "m0", "needlebench_mine_en", rows, date=DATE)
    (results / "m0" / f"results_{DATE}.json").unlink()
    before = user_files(sandbox, results)
    refused(report(sandbox, results, "--no-figures"), path.name, "mine_en", "360,000 cells")
    assert user_files(sandbox, results) == before
