"""``needlebench report`` with NeedleBench v2 results: v2 tables and heatmaps beside v1's, never mixed.

Real lm-eval output from the oracle model (one small v2 config of each family, one v1 config), first 40 rows.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from needlebench.evaluation import report
from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.report import figures as report_figures
from support import build_data
from support.oracle import ORACLE_MODEL, run_oracle

pytestmark = pytest.mark.slow

V2_CONFIGS = ["v2_single_en_4k", "v2_multi_retrieval_zh_4k", "v2_multi_reasoning_en_4k", "v2_atc_zh"]
V1_CONFIGS = ["single_en_4k"]
QUESTION_TYPES = ("ELDEST_ANCESTOR", "NTH_ANCESTOR", "NTH_DESCENDANT", "RELATIONSHIP_DISTANCE")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(V2_CONFIGS + V1_CONFIGS, tmp_path_factory.mktemp("v2rdata") / "needlebench")


def _oracle(data_dir: Path, output: Path, configs: list[str]) -> Path:
    return run_oracle(output, map(harness.task_name, configs), data_dir=data_dir, limit=40)


@pytest.fixture(scope="module")
def v2_output(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _oracle(data_dir, tmp_path_factory.mktemp("v2oracle"), V2_CONFIGS)


@pytest.fixture(scope="module")
def v1_output(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _oracle(data_dir, tmp_path_factory.mktemp("v1oracle"), V1_CONFIGS)


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_oracle_v2_report_gives_full_marks_in_v2_tables_only(v2_output: Path, tmp_path: Path):
    out = tmp_path / "report"
    report.write_report(v2_output, out)
    # no v2 row in any v1 table
    for name in ("needlebench_4k", "atc", "atc_by_needles", "counting_stars"):
        assert not (out / f"{name}.csv").exists(), name
    (row,) = _csv(out / "needlebench_v2_4k.csv")
    assert row["Model"] == ORACLE_MODEL
    for column, n in (("S-RT EN", 40), ("M-RT ZH", 40), ("M-RS EN", 40), ("S-RT", 40), ("M-RT", 40), ("M-RS", 40)):
        assert float(row[column]) == 100.0 and row[f"{column} n"] == str(n), column
    assert row["S-RT ZH"] == "" and row["S-RT ZH n"] == "0"
    assert float(row["Overall"]) == 100.0 and row["Overall n"] == "120"
    assert row["Overall EN"] == "" and row["Overall ZH"] == ""  # each language misses a task
    assert row["Coverage"].startswith("partial: ") and "missing v2_single_zh_4k" in row["Coverage"]
    (atc,) = _csv(out / "atc_v2.csv")
    assert float(atc["ZH weighted"]) == 100.0 and atc["ZH weighted n"] == "40"
    for question_type in QUESTION_TYPES:  # 40 rows = 2 relations x 4 types x 10 repeats
        assert float(atc[f"ZH {question_type}"]) == 100.0 and atc[f"ZH {question_type} n"] == "10"
    (by_relations,) = _csv(out / "atc_v2_by_relations.csv")
    assert by_relations["Language"] == "ZH" and float(by_relations["2"]) == 100.0 and by_relations["2 n"] == "40"
    scores = {r["Task"]: r for r in _csv(out / "scores.csv")}
    assert set(scores) == {harness.task_name(config) for config in V2_CONFIGS}
    for task, line in scores.items():
        assert float(line["Paper mean"]) == 100.0 and float(line["lm-eval row mean"]) == 100.0, task
    assert scores["needlebench_v2_atc_zh"]["How"].startswith("v2: ")
    # heatmaps for the three haystack families, none for ATC
    for config in V2_CONFIGS[:3]:
        assert (out / f"heatmap_{ORACLE_MODEL}_{harness.task_name(config)}.png").is_file(), config
    assert not list(out.glob("heatmap_*atc*"))


def test_v2_table_follows_the_v2_definitions(v2_output: Path, tmp_path: Path):
    """One S-RT row turned wrong: the S-RT cell mean drops by 100 / rows-in-cell / cells; Overall is the plain mean."""
    folder = tmp_path / "edited"
    shutil.copytree(v2_output, folder)
    (path,) = folder.rglob("samples_needlebench_v2_single_en_4k_*.jsonl")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines[0]["score"] = 0.0
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    cells: dict[tuple, int] = {}
    for line in lines:
        key = (line["doc"]["context_length"], line["doc"]["depth_percent"])
        cells[key] = cells.get(key, 0) + 1
    first = (lines[0]["doc"]["context_length"], lines[0]["doc"]["depth_percent"])
    expected = 100.0 - 100.0 / cells[first] / len(cells)
    out = tmp_path / "report"
    report.write_report(folder, out, figures=False)
    (row,) = _csv(out / "needlebench_v2_4k.csv")
    assert float(row["S-RT EN"]) == pytest.approx(expected, abs=1e-6)
    assert float(row["Overall"]) == pytest.approx((expected + 200.0) / 3, abs=1e-6)  # not 0.4/0.3/0.3


def test_mixed_v1_and_v2_run_keeps_them_apart(v1_output: Path, v2_output: Path, tmp_path: Path):
    out = tmp_path / "report"
    report.write_report([v1_output, v2_output], out, figures=False)
    (v1,) = _csv(out / "needlebench_4k.csv")
    assert float(v1["S-RT EN"]) == 100.0 and v1["S-RT EN n"] == "40"
    assert v1["M-RT"] == "" and v1["M-RS"] == "" and v1["Overall"] == ""  # v2 M-RT / M-RS not counted here
    assert "v2_" not in v1["Coverage"]
    (v2,) = _csv(out / "needlebench_v2_4k.csv")
    assert v2["S-RT n"] == "40" and v2["Overall n"] == "120" and float(v2["Overall"]) == 100.0
    assert "v2_" in v2["Coverage"] and " single_" not in v2["Coverage"]
    assert not (out / "atc.csv").exists() and (out / "atc_v2.csv").is_file()
    scores = {r["Task"]: r["How"] for r in _csv(out / "scores.csv")}
    assert scores["needlebench_single_en_4k"] == "mean over (length, depth) cells"
    assert scores["needlebench_v2_single_en_4k"] == "v2: mean over (length, depth) cells"


def test_v2_heatmap_names_model_and_task(v2_output: Path, tmp_path: Path):
    loaded = report.load_results([v2_output])
    heatmaps = [f.heatmaps[0] for f in report_figures.plan_figures(loaded) if f.kind == "heatmap"]
    by_task = {h.task: h for h in heatmaps}
    assert set(by_task) == {harness.task_name(config) for config in V2_CONFIGS[:3]}
    mrs = by_task["needlebench_v2_multi_reasoning_en_4k"]
    assert mrs.title == f"{ORACLE_MODEL} - needlebench_v2_multi_reasoning_en_4k"
    assert mrs.rows == [float(d) for d in range(0, 101, 10)]  # v2 depths 0, 10, ..., 100
    assert "M-RS v2" in mrs.subtitle and "boxed" in mrs.metric_label
    filled = [v for row in mrs.values for v in row if v is not None]
    assert filled and all(v == 100.0 for v in filled)
    assert sum(map(sum, mrs.counts)) == 40
    (figure,) = [f for f in report_figures.plan_figures(loaded) if f.name == mrs.name]
    (png, *_) = report_figures.render(figure, tmp_path)
    with Image.open(png) as image:
        dpi = image.info.get("dpi", (0, 0))[0]
    assert round(dpi) == report_figures.DPI
