"""Report tables and heatmaps from lm-eval style samples files (hand-made rows with known scores)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from needlebench.errors import NeedlebenchError
from needlebench.evaluation import harness, report
from PIL import Image
from support import (
    atc_rows,
    counting_stars_row,
    fixture_row,
    multi_reasoning_row,
    multi_retrieval_row,
    single_row,
    write_samples,
)


def _haystack_records() -> dict[str, list[dict]]:
    """S-RT / M-RT / M-RS 4k samples with chosen scores per language."""
    records: dict[str, list[dict]] = {}
    srt = {"en": 80.0, "zh": 60.0}
    for language, value in srt.items():
        config = f"single_{language}_4k"
        rows = []
        for length in (1000, 2000):
            for depth in (0.0, 50.0):
                doc = single_row(
                    config, context_length=length, depth_percent=depth, prompt=f"{config}-{length}-{depth}"
                )
                rows.append({"doc": doc, "score": value})
        records[config] = rows
    for language, hits in {"en": [100.0, 100.0, 0.0], "zh": [100.0, 0.0, 0.0]}.items():
        config = f"multi_retrieval_{language}_4k"
        doc = multi_retrieval_row(config, context_length=1000)
        records[config] = [{"doc": doc, "recall": sum(hits) / 3, "needle_hits": hits}]
    for language, value in {"en": 50.0, "zh": 30.0}.items():
        config = f"multi_reasoning_{language}_4k"
        doc = multi_reasoning_row(config, context_length=1000, depth_percent=10.0)
        records[config] = [{"doc": doc, "reference": value, "strict": 0.0}]
    return records


def _atc_records() -> dict[str, list[dict]]:
    records: dict[str, list[dict]] = {"atc_en": []}
    for n, correct_rotations in ((2, 4), (4, 3)):  # n=2: all four rotations right; n=4: one wrong
        for index, row in enumerate(atc_rows("atc_en", item_id=f"en-{n}", num_needles=n)):
            correct = index < correct_rotations
            records["atc_en"].append(
                {"doc": row, "acc": 100.0 if correct else 0.0, "perf_4": [row["item_id"], row["rotation"], correct]}
            )
    open_row = fixture_row("atc_en_open", answer="Ann", prompt_style="open", context_length=0)
    records["atc_en_open"] = [{"doc": open_row, "score": 100.0}]
    return records


def _stars_records() -> dict[str, list[dict]]:
    records = {}
    for config, values in (
        ("counting_stars_acquisition_en_128k", [1.0, 1.0, 0.0, 0.0]),
        ("counting_stars_reasoning_zh_128k", [0.25, 0.25, 0.25, 0.25]),
    ):
        rows = []
        for length in (4000, 8000):
            doc = counting_stars_row(config, context_length=length)
            rows.append({"doc": doc, "star_score": sum(values) / 4, "per_star": values})
        records[config] = rows
    return records


@pytest.fixture()
def results_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "results" / "my-model"
    for group in (_haystack_records(), _atc_records(), _stars_records()):
        for config, rows in group.items():
            write_samples(folder, harness.task_name(config), rows)
    results = {
        "results": {
            "needlebench_single_en_4k": {"alias": "single_en_4k", "score,none": 80.0, "score_stderr,none": 1.0}
        },
        "n-samples": {"needlebench_single_en_4k": {"original": 4, "effective": 4}},
    }
    (folder / "results_2025-01-01T00-00-00.000000.json").write_text(json.dumps(results), encoding="utf-8")
    return tmp_path / "results"


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_tables_follow_the_paper_formulas(results_dir: Path, tmp_path: Path):
    out = tmp_path / "report"
    written = report.write_report(results_dir, out)
    assert all(path.exists() for path in written)
    rows = {row["Task"]: row for row in _csv(out / "needlebench.csv")}
    assert float(rows["S-RT"]["English"]) == 80.0 and float(rows["S-RT"]["Chinese"]) == 60.0
    assert float(rows["S-RT"]["Overall"]) == 70.0
    assert float(rows["M-RT"]["English"]) == pytest.approx(200 / 3, abs=1e-4)
    assert float(rows["M-RS"]["Overall"]) == 40.0
    overall = rows["Overall (0.4 S-RT + 0.3 M-RT + 0.3 M-RS)"]
    assert float(overall["English"]) == pytest.approx(0.4 * 80 + 0.3 * 200 / 3 + 0.3 * 50, abs=1e-4)

    atc = {row["Category"]: row for row in _csv(out / "atc.csv")}
    # perf_4: n=2 -> 100, n=4 -> 0; weighted by needle count: 100*2 / (2+4)
    assert float(atc["EN-Direct-CE"]["Score"]) == pytest.approx(100 * 2 / 6, abs=1e-4)
    assert float(atc["EN-Direct-CE"]["Row accuracy"]) == pytest.approx(100 * 7 / 8)
    # one of the paper's four categories: the mean is labelled partial, never the paper's ATC-CE-Overall
    assert "ATC-CE-Overall" not in atc
    assert float(atc["ATC-CE-Overall (partial: 1 of 4 categories)"]["Score"]) == pytest.approx(100 * 2 / 6, abs=1e-4)
    assert float(atc["EN-Open"]["Score"]) == 100.0

    stars = _csv(out / "counting_stars.csv")
    assert len(stars) == 1 and stars[0]["Size"] == "128k" and stars[0]["Stars"] == "32"
    assert float(stars[0]["Me-Acq EN"]) == 0.5 and float(stars[0]["Me-Rea ZH"]) == 0.25
    assert stars[0]["Avg."] == ""  # two of the four tasks are missing

    harness_rows = _csv(out / "lm_eval_results.csv")
    assert harness_rows == [
        {"Task or group": "needlebench_single_en_4k", "Metric": "score", "Value": "80.0", "Samples": "4"}
    ]
    assert "| S-RT |" in (out / "needlebench.md").read_text(encoding="utf-8")


def _atc_item(config: str, item_id: str, needles: int, correct: bool, rotations: int = 4) -> list[dict]:
    """Samples of one ATC item (its first ``rotations`` rotations), every row right or every row wrong."""
    rows = atc_rows(config, item_id=item_id, num_needles=needles)[:rotations]
    return [
        {"doc": row, "acc": 100.0 if correct else 0.0, "perf_4": [row["item_id"], row["rotation"], correct]}
        for row in rows
    ]


def test_atc_overall_needs_all_four_categories_and_whole_items(tmp_path: Path):
    folder = tmp_path / "results" / "model"
    for config in ("atc_en", "atc_zh", "atc_en_reasoning", "atc_zh_reasoning"):
        records = _atc_item(config, f"{config}-2", 2, True) + _atc_item(config, f"{config}-4", 4, False)
        if config == "atc_en":  # an item cut short by --limit: two right rotations, no perf_4 verdict
            records += _atc_item(config, "cut", 10, True, rotations=2)
        write_samples(folder, harness.task_name(config), records)
    report.write_report(tmp_path / "results", tmp_path / "out")
    atc = {row["Category"]: row for row in _csv(tmp_path / "out" / "atc.csv")}
    expected = 100 * 2 / 6  # perf_4: n=2 -> 100, n=4 -> 0, weighted by needle count; the cut n=10 item is dropped
    for category in ("EN-Direct-CE", "ZH-Direct-CE", "EN-Reasoning-CE", "ZH-Reasoning-CE"):
        assert float(atc[category]["Score"]) == pytest.approx(expected, abs=1e-4), category
    assert atc["EN-Direct-CE"]["Needle counts"] == "2, 4"
    assert float(atc["ATC-CE-Overall"]["Score"]) == pytest.approx(expected, abs=1e-4)
    assert not any("partial" in category for category in atc)


def test_heatmaps_are_pngs_with_expected_grids(results_dir: Path, tmp_path: Path):
    out = tmp_path / "report"
    written = report.write_report(results_dir, out)
    pngs = sorted(path.name for path in written if path.suffix == ".png")
    assert "heatmap_single_en_4k.png" in pngs
    assert "heatmap_multi_retrieval_zh_4k.png" in pngs
    assert "heatmap_counting_stars_acquisition_en_128k.png" in pngs
    assert not any(name.startswith("heatmap_atc") for name in pngs)
    for name in pngs:
        with Image.open(out / name) as image:
            image.verify()
            assert image.format == "PNG"
    run = report.load_runs(results_dir)[0]
    maps = {heatmap.name: heatmap for heatmap in report.build_heatmaps(run)}
    stars = maps["heatmap_counting_stars_acquisition_en_128k"]
    assert stars.rows == [1, 2, 3, 4] and stars.columns == [4000, 8000]
    assert stars.values[0] == [1.0, 1.0] and stars.values[3] == [0.0, 0.0]
    mrt = maps["heatmap_multi_retrieval_en_4k"]
    assert mrt.rows == [0.0, 50.0, 100.0] and [row[0] for row in mrt.values] == [100.0, 100.0, 0.0]
    srt = maps["heatmap_single_en_4k"]
    assert srt.rows == [0.0, 50.0] and srt.columns == [1000, 2000]


def test_newest_samples_file_wins(tmp_path: Path):
    folder = tmp_path / "run"
    doc = single_row(prompt="p")
    write_samples(folder, "needlebench_single_en_4k", [{"doc": doc, "score": 10.0}], date="2025-01-01T00-00-00.000000")
    write_samples(folder, "needlebench_single_en_4k", [{"doc": doc, "score": 90.0}], date="2025-02-01T00-00-00.000000")
    run = report.load_runs(tmp_path)[0]
    assert [sample.metrics["score"] for sample in run.samples] == [90.0]


def test_several_model_folders_get_their_own_reports(tmp_path: Path):
    for model in ("model-a", "model-b"):
        write_samples(
            tmp_path / "results" / model, "needlebench_single_en_4k", [{"doc": single_row(prompt="p"), "score": 50.0}]
        )
    written = report.write_report(tmp_path / "results", tmp_path / "out")
    assert (tmp_path / "out" / "model-a" / "needlebench.csv") in written
    assert (tmp_path / "out" / "model-b" / "README.md") in written


def test_missing_or_empty_results_are_user_errors(tmp_path: Path):
    with pytest.raises(NeedlebenchError, match="does not exist"):
        report.write_report(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NeedlebenchError, match="--log_samples"):
        report.write_report(tmp_path / "empty", tmp_path / "out")
