"""`needlebench report` on a custom experiment: its own grid and name, mean and std over runs, judge scores.

An Inspect-style experiment (3 lengths x 7 depths x 3 runs) is built, exported with `needlebench tasks` and run
through lm-eval with the oracle; the report must bin it by the experiment's own lengths and depths (found through
the data_dir the run recorded, through --data-dir, or from the rows alone), and the mean / standard-deviation
heatmaps and tables must match numbers computed here from chosen per-row scores and judge ratings.
"""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

import pytest
import yaml
from PIL import Image

from needlebench.dataset.experiment import build_experiment
from needlebench.evaluation import report
from needlebench.evaluation.harness.task_export import write_task_folder
from needlebench.evaluation.report import figures as report_figures
from support.oracle import ORACLE_MODEL, run_oracle
from test_experiment_tasks import INSPECT_STYLE

NAME = INSPECT_STYLE["name"]
TASK = f"needlebench_{NAME}"
LENGTHS = [1000, 2000, 3000]
DEPTHS = [0.0, 16.667, 33.333, 50.0, 66.667, 83.333, 100.0]


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory) -> tuple[Path, Path]:
    """(dataset folder, lm-eval output folder) of the oracle on the Inspect-style experiment."""
    base = tmp_path_factory.mktemp("report_exp")
    spec_file = base / f"{NAME}.yaml"
    spec_file.write_text(yaml.safe_dump(INSPECT_STYLE), encoding="utf-8")
    data = base / "data"
    build_experiment(spec_file, data, progress=False)
    tasks = base / "tasks"
    write_task_folder(data, tasks)
    return data, run_oracle(base / "oracle", [TASK], include_path=tasks)


def _records(output: Path) -> list[dict]:
    (path,) = output.rglob(f"samples_{TASK}_*.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _value(text: str) -> float:
    return float(text)


def _cell_index(doc: dict) -> tuple[int, int]:
    return DEPTHS.index(round(doc["depth_percent"], 3)), LENGTHS.index(doc["context_length"])


def _chosen_score(doc: dict) -> float:
    """A known, uneven score per row: differs by run, depth and length."""
    d, j = _cell_index(doc)
    return [0.0, 25.0, 50.0, 100.0][(doc["repeat"] * 3 + d * 2 + j) % 4]


def _chosen_rating(doc: dict) -> int | None:
    d, j = _cell_index(doc)
    if (d, j, doc["repeat"]) in ((0, 0, 0), (3, 1, 2)):
        return None  # the judge answered nonsense
    return 1 + (doc["repeat"] * 5 + d + j * 2) % 10


def _write(folder: Path, name: str, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _write_judged(samples: Path, records: list[dict]) -> Path:
    """``judged_<samples name>`` beside `samples` with its tag, as `needlebench judge` writes them (the report reads
    only a judged file whose tag verifies)."""
    import hashlib

    from needlebench.evaluation.judge.files import TAG_SUFFIX, judged_tag

    judged = _write(samples.parent, "judged_" + samples.name, records)
    digests = [hashlib.sha256(path.read_bytes()).digest() for path in (samples, judged)]
    tag = judged_tag(samples.name, *digests)
    judged.with_name(judged.name + TAG_SUFFIX).write_text(json.dumps({"samples": samples.name, "tag": tag}) + "\n")
    return judged


def _expected(records: list[dict], value) -> tuple[dict, dict, float, float]:
    """Per cell: mean over rows and sample std over runs; overall: mean of cell means, std of run means."""
    cells: dict[tuple[int, int], dict[int, float]] = {}
    for record in records:
        v = value(record["doc"])
        if v is not None:
            cells.setdefault(_cell_index(record["doc"]), {})[record["doc"]["repeat"]] = v
    means = {cell: statistics.mean(runs.values()) for cell, runs in cells.items()}
    stds = {cell: statistics.stdev(runs.values()) if len(runs) > 1 else None for cell, runs in cells.items()}
    run_means = []
    for run in range(3):
        per_cell = [runs[run] for runs in cells.values() if run in runs]
        run_means.append(statistics.mean(per_cell))
    return means, stds, statistics.mean(means.values()), statistics.stdev(run_means)


@pytest.mark.slow
def test_oracle_run_is_reported_on_the_experiments_own_grid(oracle_run, tmp_path):
    data, output = oracle_run
    out = tmp_path / "report"
    written = report.write_report(output, out)
    (row,) = _csv(out / "experiments.csv")
    assert row["Config"] == NAME and row["Grid from"] == f"experiment ({report.source_label(data)})"
    assert str(data.resolve()) not in (out / "experiments.csv").read_text(encoding="utf-8")  # never a machine path
    assert row["Grid"] == "3 lengths (1k, 2k, 3k) x 7 depths x 3 runs"
    assert _value(row["Mean"]) == 100.0 and row["Mean n"] == "63" and _value(row["Std over runs"]) == 0.0
    assert row["Scorer"] == "rule (lm-eval metric)" and row["Coverage"] == "full (63 rows)"
    (run,) = report.load_results([output]).runs
    heatmap = report_figures.build_heatmap(run)
    assert heatmap.rows == DEPTHS and heatmap.columns == LENGTHS  # 7 depths x 3 lengths, nothing else
    assert heatmap.counts == [[3, 3, 3]] * 7 and heatmap.values == [[100.0] * 3] * 7
    assert heatmap.title == f"{ORACLE_MODEL} - {NAME}"
    deviation = report_figures.build_std_heatmap(run)
    assert deviation.values == [[0.0] * 3] * 7 and deviation.counts == [[3, 3, 3]] * 7
    names = {path.name for path in written}
    assert {f"heatmap_{ORACLE_MODEL}_{TASK}.png", f"heatmap_std_{ORACLE_MODEL}_{TASK}.png"} <= names
    for name in names:
        if name.endswith(".png"):
            with Image.open(out / name) as image:
                assert image.format == "PNG" and image.size[0] > 800
    page = (out / "README.md").read_text(encoding="utf-8")
    assert f"| {NAME} |" in page and "Scorer: the rule-based metrics" in page
    # the title names the config once; the subtitle does not repeat it, nor what the numbers count
    figure = report_figures.draw(report_figures.Figure(heatmap.name, heatmap.title, "heatmap", [heatmap]))
    title = figure.axes[0].get_title()
    assert title.count(NAME) == 1 and title.count("per cell") == 2  # "mean per cell", "numbers = rows per cell"
    assert "cell counts" not in title
    # depth ticks of a 7-point linear grid read as whole percents, not 16.667
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["0", "17", "33", "50", "67", "83", "100"]
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["1k", "2k", "3k"]


def test_tick_labels_are_rounded_while_they_stay_distinct():
    lengths = [10000 + round(i * 110000 / 14) for i in range(15)]  # Inspect NIAH: 10000, 17857, 25714, ...
    depths = [100 * i / 14 for i in range(15)]  # 0, 7.142857, ...
    assert report_figures.tick_labels(lengths)[:3] == ["10k", "18k", "26k"]
    assert report_figures.tick_labels(depths)[:3] == ["0", "7", "14"]
    # whole thousands would merge 1000 and 1286: one decimal keeps them apart
    assert report_figures.tick_labels([1000, 1286, 1571, 3000]) == ["1k", "1.3k", "1.6k", "3k"]
    assert report_figures.tick_labels([0.0, 0.4, 0.6]) == ["0", "0.4", "0.6"]


@pytest.mark.slow
def test_mean_and_std_heatmaps_match_known_scores_with_or_without_the_manifest(oracle_run, tmp_path):
    data, output = oracle_run
    records = _records(output)
    for record in records:
        record["score"] = _chosen_score(record["doc"])
    means, stds, overall, run_std = _expected(records, _chosen_score)
    assert len(set(means.values())) > 1 and any(s and s > 0 for s in stds.values())
    samples = _write(tmp_path / "results" / "m", f"samples_{TASK}_2026-01-01T00-00-00.000000.jsonl", records)
    # no results JSON beside it: the grid comes from the rows alone, or from --data-dir
    for data_dirs, source in (((), "observed in samples"), ((data,), f"experiment ({report.source_label(data)})")):
        (run,) = report.load_results([samples.parent], data_dirs=data_dirs).runs
        assert run.grid_source == source and run.label == NAME
        heatmap = report_figures.build_heatmap(run)
        deviation = report_figures.build_std_heatmap(run)
        assert heatmap.rows == DEPTHS and heatmap.columns == LENGTHS
        for (d, j), mean in means.items():
            assert heatmap.values[d][j] == pytest.approx(mean) and heatmap.counts[d][j] == 3
            assert deviation.values[d][j] == pytest.approx(stds[(d, j)]) and deviation.counts[d][j] == 3
        cell, std, runs = report.runs_summary(run.samples, "score")
        assert cell.value == pytest.approx(overall) and std == pytest.approx(run_std) and runs == 3
    out = tmp_path / "report"
    report.write_report(samples.parent, out, figures=False)
    (row,) = _csv(out / "experiments.csv")
    assert row["Config"] == NAME and row["Grid from"] == "observed in samples"
    assert _value(row["Mean"]) == pytest.approx(overall, abs=1e-6)
    assert _value(row["Std over runs"]) == pytest.approx(run_std, abs=1e-6)


@pytest.mark.slow
def test_judged_samples_replace_the_scores_and_unrated_ones_are_counted(oracle_run, tmp_path):
    _data, output = oracle_run
    folder = tmp_path / "results"
    shutil.copytree(output, folder)
    (samples,) = folder.rglob(f"samples_{TASK}_*.jsonl")
    judged = []
    for record in _records(output):
        rating = _chosen_rating(record["doc"])
        judged.append({**record, "judge": {"score": rating, "model": "tiny-judge", "reply": f"Rating: [[{rating}]]"}})
    _write_judged(samples, judged)

    def rating_x10(doc):
        rating = _chosen_rating(doc)
        return None if rating is None else 10.0 * rating

    means, stds, overall, run_std = _expected(judged, rating_x10)
    out = tmp_path / "report"
    report.write_report(folder, out)
    (row,) = _csv(out / "experiments.csv")
    assert row["Scorer"] == "judge tiny-judge (1-10 rating x 10); 2 unscored" and row["Unscored"] == "2"
    assert _value(row["Mean"]) == pytest.approx(overall, abs=1e-6) and row["Mean n"] == "61"
    assert _value(row["Std over runs"]) == pytest.approx(run_std, abs=1e-6)
    assert overall != pytest.approx(100.0)  # the oracle's rule score was 100 everywhere
    (score,) = _csv(out / "scores.csv")
    assert score["Scorer"].startswith("judge tiny-judge") and _value(score["Paper mean"]) == pytest.approx(
        overall, abs=1e-6
    )
    (run,) = report.load_results([folder]).runs
    heatmap = report_figures.build_heatmap(run)
    assert heatmap.counts[0][0] == 2 and heatmap.counts[3][1] == 2  # the unrated rows are left out
    for (d, j), mean in means.items():
        assert heatmap.values[d][j] == pytest.approx(mean)
    assert heatmap.metric_label == report_figures.JUDGE_LABEL
    deviation = report_figures.build_std_heatmap(run)
    assert deviation.values[1][1] == pytest.approx(stds[(1, 1)]) and deviation.counts[0][0] == 2
    assert "judge scores from judged_samples" in (out / "README.md").read_text(encoding="utf-8")


def test_multi_retrieval_needles_are_binned_at_their_grid_depths_despite_buffers():
    from needlebench.tasks.experiment import (
        experiment_spec,
        parse_experiment,
        placement_depth,
    )

    experiment = parse_experiment(
        {
            "name": "facts_buffered",
            "kind": "multi_retrieval",
            "language": "en",
            "diff": 30,
            "needles": [{"needle": f"Fact {i}.", "question": f"Fact {i}?", "keyword": str(i)} for i in range(3)],
            "lengths": [1200],
            "depths": [40],
            "start_buffer": 100,
            "end_buffer": 100,
        }
    )
    spec = experiment_spec(experiment)
    requested = [placement_depth(d, 1200, experiment) for d in (40, 70, 100)]
    assert requested[0] != 40  # the buffers move the needles: the requested depths are not the grid's
    doc = {
        "config": spec.name,
        "task": "M-RT",
        "language": "en",
        "context_length": 1200,
        "depth_percent": 40.0,
        "requested_depths": requested,
        "repeat": 0,
        "needles": ["a", "b", "c"],
    }
    metrics = {"recall": 200 / 3, "needle_hits": [100.0, 0.0, 100.0]}
    points = report_figures.run_points(spec, [report.Sample(spec, doc, metrics)])
    assert [(row, value) for row, _c, value, _r in points] == [(40.0, 100.0), (70.0, 0.0), (100.0, 100.0)]
    observed = report.observed_spec(spec.name, "multi_retrieval", [doc])  # no manifest: the row at its own depth
    points = report_figures.run_points(observed, [report.Sample(observed, doc, metrics)])
    assert [(row, value) for row, _c, value, _r in points] == [(40.0, pytest.approx(200 / 3))]


@pytest.mark.slow
def test_cli_data_dir_that_is_not_a_dataset_is_a_one_line_error(oracle_run, tmp_path, monkeypatch, capsys):
    from needlebench import cli

    _data, output = oracle_run
    monkeypatch.setattr(
        "sys.argv",
        ["needlebench", "report", str(output), "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "nowhere")],
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "nowhere" in err[0] and "does not exist" in err[0]
    assert not (tmp_path / "out").exists()


def test_judged_paper_rows_use_the_judge_and_rule_rows_stay(tmp_path):
    """A built-in config judged: the paper table and heatmap use rating x 10; an unjudged task keeps its rule."""
    from support import multi_retrieval_row, single_row, write_samples

    folder = tmp_path / "results"
    mrt = write_samples(
        folder,
        "needlebench_multi_retrieval_en_4k",
        [
            {
                "doc": multi_retrieval_row("multi_retrieval_en_4k", context_length=1000),
                "recall": 50.0,
                "needle_hits": [100.0, 0.0],
            }
        ],
    )
    write_samples(folder, "needlebench_single_en_4k", [{"doc": single_row(prompt="p"), "score": 40.0}])
    record = json.loads(mrt.read_text(encoding="utf-8"))
    _write_judged(mrt, [{**record, "judge": {"score": 7, "model": "j", "reply": "[[7]]"}}])
    runs = {run.task: run for run in report.load_results([folder]).runs}
    judged, rule = runs["needlebench_multi_retrieval_en_4k"], runs["needlebench_single_en_4k"]
    assert judged.judged and not rule.judged and rule.scorer == "rule (lm-eval metric)"
    heatmap = report_figures.build_heatmap(judged)
    assert [values[0] for values in heatmap.values if values[0] is not None] == [70.0] * 3  # each needle's depth
    report.write_report(folder, tmp_path / "out", figures=False)
    (row,) = _csv(tmp_path / "out" / "needlebench_4k.csv")
    assert _value(row["M-RT EN"]) == 70.0 and _value(row["S-RT EN"]) == 40.0
