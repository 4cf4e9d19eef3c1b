"""`needlebench report` on a results folder from someone else, round 4: doc values that weight or split the means
(a needle count of 10**12, a length off the config's grid), reported numbers and run-health counts no run can
have, a samples file another process keeps appending to, and a ``matplotlibrc`` in the folder the report runs in.

Each attack runs the `needlebench` command (a subprocess) in the sandbox of tests/support/sandbox.py; the user's
files (the sandbox HOME but the hostile results folder and the report folder) are hashed before and after.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from support import atc_rows, write_samples
from support.sandbox import refused, run, warnings_of
from test_hostile_report import DATE, TASK, report, results_folder, samples_file
from test_hostile_report2 import user_files

ATC_TASK = "needlebench_atc_en"


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_rows(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def table(out: Path, name: str) -> list[dict[str, str]]:
    with (out / f"{name}.csv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def atc_folder(home: Path) -> Path:
    """atc_en results: a right item of 2 needles, a wrong one of 3 (EN-Direct-CE 100*2/5 = 40 by needle count)."""
    records = []
    for item, needles, correct in (("en-2", 2, True), ("en-3", 3, False)):
        for row in atc_rows("atc_en", item_id=item, num_needles=needles):
            records.append({"doc": row, "acc": 100.0 * correct, "perf_4": [row["item_id"], row["rotation"], correct]})
    folder = home / "work" / "results" / "m0"
    write_samples(folder, ATC_TASK, records, date=DATE)
    results = {"results": {ATC_TASK: {"acc,none": 50.0}}, "config": {"model": "hf", "model_args": {"pretrained": "m"}}}
    (folder / f"results_{DATE}.json").write_text(json.dumps(results), encoding="utf-8")
    return home / "work" / "results"


def en_direct(out: Path) -> str:
    (row,) = table(out, "atc")
    return row["EN-Direct-CE"]


# ------------------------------------------------------------------------------------------- needle counts


@pytest.mark.slow
@pytest.mark.parametrize("needles", [10**12, -2, -3, 0])
def test_a_needle_count_no_row_can_have_is_one_line_naming_the_file_line_and_field(sandbox, needles):
    """One ATC item's needle count weights EN-Direct-CE and ATC-CE-Overall: 10**12 made them 100.00 instead of
    40.00; -2 or -3 was an internal error (ValueError, exit 1)."""
    results = atc_folder(sandbox)
    assert report(sandbox, results, "--no-figures").returncode == 0
    assert float(en_direct(sandbox / "work" / "report")) == pytest.approx(40.0)
    path = samples_file_of(results)
    rows = rows_of(path)
    for row in rows[4:]:  # the four rotations of the wrong item
        row["doc"]["num_needles"] = needles
    write_rows(path, rows)
    before = user_files(sandbox, results)
    refused(report(sandbox, results, "--no-figures", out="again"), f"{path.name}:5:", "num_needles", "1 to")
    assert user_files(sandbox, results) == before and not (sandbox / "work" / "again").exists()


def samples_file_of(results: Path) -> Path:
    return results / "m0" / f"samples_{ATC_TASK}_{DATE}.jsonl"


@pytest.mark.slow
def test_an_atc_item_at_a_needle_count_off_the_grid_is_left_out_and_counted(sandbox):
    """20 needles is a count no atc_en row has (2-19): the item is left out (one warning line), never weighted."""
    results = atc_folder(sandbox)
    path = samples_file_of(results)
    rows = rows_of(path)
    for row in rows[4:]:
        row["doc"]["num_needles"] = 20
    write_rows(path, rows)
    result = report(sandbox, results, "--no-figures")
    assert result.returncode == 0, result.stderr[-2000:]
    (warning,) = warnings_of(result)
    assert "left out 4 row(s)" in warning and "line 5" in warning and "num_needles 20" in warning, warning
    assert float(en_direct(sandbox / "work" / "report")) == pytest.approx(100.0)  # the one item on the grid


@pytest.mark.slow
@pytest.mark.parametrize("verdict", [2, 0.5, "yes", None])
def test_a_circular_verdict_that_is_neither_right_nor_wrong_is_left_out_and_counted(sandbox, verdict):
    """CircularEval's ``[item_id, rotation, correct]`` with ``correct`` 2 counted silently as wrong; now that
    rotation is left out (one warning line), so its item is not whole and only the other item is scored."""
    results = atc_folder(sandbox)
    path = samples_file_of(results)
    rows = rows_of(path)
    rows[4]["perf_4"][2] = verdict  # the first rotation of the wrong item
    write_rows(path, rows)
    result = report(sandbox, results, "--no-figures")
    assert result.returncode == 0, result.stderr[-2000:]
    (warning,) = warnings_of(result)
    assert "left out 1 value(s)" in warning and "line 5 metric perf_4" in warning, warning
    assert float(en_direct(sandbox / "work" / "report")) == pytest.approx(100.0)  # the one whole item


# ------------------------------------------------------------------------------------------- lengths off the grid


@pytest.mark.slow
def test_a_row_at_a_length_off_the_configs_grid_is_left_out_and_counted_not_a_cell_of_its_own(sandbox):
    """A single_en_4k row at length 5000 (the grid is 1k-4k) moved the paper mean while the coverage still counted
    the config's cells; it is left out and counted, and the paper mean is the one of the rows on the grid."""
    results = results_folder(sandbox, {"m": [100.0, 0.0]})
    out = sandbox / "work" / "report"
    assert report(sandbox, results, "--no-figures").returncode == 0
    honest = table(out, "scores")
    path = samples_file(results)
    rows = rows_of(path)
    extra = json.loads(json.dumps(rows[0]))
    extra["doc_id"], extra["doc"]["id"], extra["doc"]["context_length"] = 2, "x", 5000
    write_rows(path, [*rows, extra])
    before = user_files(sandbox, results)
    result = report(sandbox, results, "--no-figures")
    assert result.returncode == 0, result.stderr[-2000:]
    (warning,) = warnings_of(result)
    assert "left out 1 row(s)" in warning and "line 3" in warning and "context_length 5000" in warning, warning
    assert table(out, "scores") == honest  # paper mean, row mean, n and coverage as without the row
    assert user_files(sandbox, results) == before
    # a row of another language is no cell of single_en_4k either
    extra["doc"]["context_length"], extra["doc"]["language"] = 1000, "zh"
    write_rows(path, [*rows, extra])
    result = report(sandbox, results, "--no-figures")
    assert result.returncode == 0 and "language 'zh'" in warnings_of(result)[0], result.stderr[-2000:]
    assert table(out, "scores") == honest
    extra["doc"]["language"] = "en"
    # a length no row of any dataset has is a one-line error naming the file, the line and the field
    extra["doc"]["context_length"] = 10**14
    write_rows(path, [*rows, extra])
    refused(report(sandbox, results, "--no-figures"), f"{path.name}:3:", "context_length")


# ------------------------------------------------------------------------------------------- reported numbers


@pytest.mark.slow
def test_reported_metrics_and_health_counts_no_run_can_have_are_left_out_and_counted(sandbox):
    results = results_folder(sandbox, {"m": [80.0, 80.0]})
    folder = results / "m0"
    data = json.loads((folder / f"results_{DATE}.json").read_text())
    data["results"][TASK]["score,none"] = 1e14
    data["results"][TASK]["score_reference,none"] = -3.0
    data["n-samples"] = {TASK: {"original": 2, "effective": 2}}
    (folder / f"results_{DATE}.json").write_text(json.dumps(data), encoding="utf-8")
    health = {"tasks": {TASK: {"skipped_too_long": -5, "output_truncated": 1e14, "no_final_answer": 0.5}}}
    (folder / f"needlebench_health_{DATE}.json").write_text(json.dumps(health), encoding="utf-8")
    result = report(sandbox, results, "--no-figures")
    assert result.returncode == 0, result.stderr[-2000:]
    (warning,) = warnings_of(result)
    assert "left out 4 value(s)" in warning, warning
    out = sandbox / "work" / "report"
    (scores,) = table(out, "scores")
    assert float(scores["lm-eval row mean"]) == 80.0  # recomputed from the samples, never 1e14
    shown = (
        {row["Metric"] for row in table(out, "lm_eval_results")} if (out / "lm_eval_results.csv").exists() else set()
    )
    assert not any(metric.startswith("score") for metric in shown), shown
    assert "1e+14" not in (out / "scores.md").read_text() and "100000000000000" not in (out / "scores.md").read_text()
    (health_row,) = table(out, "run_health")
    assert health_row["Skipped (too long)"] == "" and health_row["Output truncated"] == ""
    assert float(health_row["No final answer (%)"]) == 50.0
    # a count of more rows than the task has is no count either; one within them is shown
    health["tasks"][TASK] = {"skipped_too_long": 3, "output_truncated": 2}
    (folder / f"needlebench_health_{DATE}.json").write_text(json.dumps(health), encoding="utf-8")
    assert report(sandbox, results, "--no-figures").returncode == 0
    (health_row,) = table(out, "run_health")
    assert health_row["Skipped (too long)"] == "" and health_row["Output truncated"] == "2"


# ------------------------------------------------------------------------------------------- a growing samples file


def test_a_samples_file_another_process_appends_to_is_read_up_to_its_size_at_open(tmp_path, monkeypatch):
    """The report read on for as long as a writer appended (blank lines are skipped: it never finished); here the
    writer appends a row and a megabyte of blank lines once the first line is read: none of it is read."""
    from needlebench.evaluation.report import load

    results = results_folder(tmp_path, {"m": [100.0, 0.0]})
    path = samples_file(results)
    extra = rows_of(path)[0]
    extra["doc_id"], extra["doc"]["id"], extra["doc"]["context_length"] = 2, "x", 3000
    real = load.read_lines

    def appending(handle, where, digest=None):
        for number, raw in enumerate(real(handle, where, digest)):
            if number == 0:
                with path.open("a", encoding="utf-8") as writer:
                    writer.write(json.dumps(extra) + "\n" + "\n" * (1 << 20))
            yield raw

    monkeypatch.setattr(load, "read_lines", appending)
    assert [sample.doc["context_length"] for sample in load.read_samples(path)] == [1000, 2000]


def test_samples_files_past_the_line_cap_are_one_line(tmp_path, monkeypatch):
    from needlebench.errors import NeedlebenchError
    from needlebench.evaluation.report import load

    path = write_samples(tmp_path, TASK, [{"doc": {"config": "x"}, "score": 1.0}] * 1, date=DATE)
    path.write_text(path.read_text() + "\n" * 10)
    monkeypatch.setattr(load, "MAX_SAMPLES_LINES", 5)
    with pytest.raises(NeedlebenchError, match=r"jsonl:6: more than 5 lines"):
        load.read_samples(path)


# ------------------------------------------------------------------------------------------- matplotlibrc


def corner_pixel(png: Path) -> tuple:
    from PIL import Image

    with Image.open(png) as image:
        return image.convert("RGB").getpixel((2, 2))


@pytest.mark.slow
def test_a_matplotlibrc_in_the_folder_the_report_runs_in_never_styles_the_figures(sandbox):
    """`needlebench report .` inside a results folder: matplotlib read its ./matplotlibrc (here a red figure with a
    black plot area and white text: titles, labels and ticks invisible). A FIFO of that name hung the import."""
    results = results_folder(sandbox, {"m": [100.0, 0.0]})
    style = "figure.facecolor: red\naxes.facecolor: black\ntext.color: white\nxtick.color: white\nytick.color: white\n"
    (results / "matplotlibrc").write_text(style, encoding="utf-8")
    env = {"MATPLOTLIBRC": str(results / "matplotlibrc")}
    result = run(sandbox, "report", ".", "--out", str(sandbox / "work" / "report"), cwd=results, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    (png,) = sorted((sandbox / "work" / "report").glob("heatmap_*.png"))
    assert corner_pixel(png) == (255, 255, 255)  # matplotlib's default white figure, not the sender's red
    (results / "matplotlibrc").unlink()
    os.mkfifo(results / "matplotlibrc")
    result = run(sandbox, "report", ".", "--out", str(sandbox / "work" / "other"), cwd=results)
    assert result.returncode == 0, result.stderr[-2000:]
    (other,) = sorted((sandbox / "work" / "other").glob("heatmap_*.png"))
    assert other.read_bytes() == png.read_bytes()
