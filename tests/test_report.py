"""Report tables and heatmaps from lm-eval style samples files (hand-made rows with known scores)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from needlebench.errors import NeedlebenchError
from needlebench.evaluation import report
from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.report import figures as report_figures
from support import (
    atc_rows,
    counting_stars_row,
    fixture_row,
    multi_reasoning_row,
    multi_retrieval_row,
    single_row,
    write_samples,
)


def _rendered(path: Path) -> str:
    """A Markdown file as a reader sees it: CommonMark's backslash escapes of brackets, bars and backslashes
    undone (the report escapes them so that names from the input cannot form links or break a table)."""
    return re.sub(r"\\([\\\[\]|])", r"\1", path.read_text(encoding="utf-8"))


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
                    config,
                    context_length=length,
                    depth_percent=depth,
                    prompt=f"{config}-{length}-{depth}",
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
    for n, correct_rotations in (
        (2, 4),
        (4, 3),
    ):  # n=2: all four rotations right; n=4: one wrong
        for index, row in enumerate(atc_rows("atc_en", item_id=f"en-{n}", num_needles=n)):
            correct = index < correct_rotations
            records["atc_en"].append(
                {
                    "doc": row,
                    "acc": 100.0 if correct else 0.0,
                    "perf_4": [row["item_id"], row["rotation"], correct],
                }
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
            "needlebench_single_en_4k": {
                "alias": "single_en_4k",
                "score,none": 80.0,
                "score_stderr,none": 1.0,
            }
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
    written = report.write_report(results_dir, out, figures=False)
    assert all(path.exists() for path in written)
    (row,) = _csv(out / "needlebench_4k.csv")
    assert row["Model"] == "my-model"
    assert float(row["S-RT EN"]) == 80.0 and float(row["S-RT ZH"]) == 60.0 and float(row["S-RT"]) == 70.0
    assert row["S-RT EN n"] == "4" and row["S-RT n"] == "8"
    assert float(row["M-RT EN"]) == pytest.approx(200 / 3, abs=1e-4)
    assert float(row["M-RS"]) == 40.0
    assert float(row["Overall EN"]) == pytest.approx(0.4 * 80 + 0.3 * 200 / 3 + 0.3 * 50, abs=1e-4)
    assert row["Coverage"].startswith(
        "partial: needlebench_multi_reasoning_en_4k (1/3200 rows, 1/320 cells, lengths 1k of"
    )
    assert (
        "needlebench_single_en_4k (4/800 rows, 2/80 cells, lengths 1k, 2k of 1k, 2k, 3k, 4k, 1/20 depths)"
        in row["Coverage"]
    )

    (atc,) = _csv(out / "atc.csv")
    # perf_4: n=2 -> 100, n=4 -> 0; weighted by needle count: 100*2 / (2+4)
    assert float(atc["EN-Direct-CE"]) == pytest.approx(100 * 2 / 6, abs=1e-4) and atc["EN-Direct-CE n"] == "2"
    # one of the paper's four categories: the mean is labelled partial, never the paper's ATC-CE-Overall
    assert atc["ATC-CE-Overall note"] == "partial: 1 of 4 categories"
    assert float(atc["ATC-CE-Overall"]) == pytest.approx(100 * 2 / 6, abs=1e-4)
    assert float(atc["EN-Open"]) == 100.0 and atc["ZH-Open"] == "" and atc["ZH-Open n"] == "0"

    (stars,) = _csv(out / "counting_stars.csv")
    assert stars["Size"] == "128k" and stars["Stars"] == "32"
    assert float(stars["Me-Acq EN"]) == 0.5 and float(stars["Me-Rea ZH"]) == 0.25
    assert stars["Avg."] == ""  # two of the four tasks are missing

    scores = {(r["Task"], r["Metric"]): r for r in _csv(out / "scores.csv")}
    srt = scores[("needlebench_single_en_4k", "score")]
    assert float(srt["Paper mean"]) == 80.0 and float(srt["lm-eval row mean"]) == 80.0
    acc = scores[("needlebench_atc_en", "acc")]
    assert acc["Paper mean"] == "" and float(acc["lm-eval row mean"]) == pytest.approx(100 * 7 / 8)
    harness_rows = _csv(out / "lm_eval_results.csv")
    assert harness_rows == [
        {
            "Model": "my-model",
            "Task or group": "needlebench_single_en_4k",
            "Metric": "score",
            "Value": "80.0",
            "Samples": "4",
        }
    ]
    # every cell built from part of a config says so; empty cells carry no count
    assert "| my-model | 60.00 (n=4) [partial] | 80.00 (n=4) [partial] | 70.00 (n=8) [partial] |" in _rendered(
        out / "needlebench_4k.md"
    )


def test_paper_mean_and_row_mean_differ_when_cells_are_uneven(tmp_path: Path):
    """Two rows in one cell, one in another: the paper weights cells alike, lm-eval rows alike."""
    folder = tmp_path / "results"
    records = [
        {
            "doc": single_row(context_length=1000, depth_percent=0.0, prompt="a"),
            "score": 100.0,
        },
        {
            "doc": single_row(context_length=1000, depth_percent=0.0, prompt="b", repeat=1),
            "score": 100.0,
        },
        {
            "doc": single_row(context_length=2000, depth_percent=0.0, prompt="c"),
            "score": 0.0,
        },
    ]
    write_samples(folder, "needlebench_single_en_4k", records)
    report.write_report(folder, tmp_path / "out", figures=False)
    (row,) = _csv(tmp_path / "out" / "scores.csv")
    assert float(row["Paper mean"]) == 50.0
    assert float(row["lm-eval row mean"]) == pytest.approx(200 / 3)


def _atc_item(config: str, item_id: str, needles: int, correct: bool, rotations: int = 4) -> list[dict]:
    """Samples of one ATC item (its first ``rotations`` rotations), every row right or every row wrong."""
    rows = atc_rows(config, item_id=item_id, num_needles=needles)[:rotations]
    return [
        {
            "doc": row,
            "acc": 100.0 if correct else 0.0,
            "perf_4": [row["item_id"], row["rotation"], correct],
        }
        for row in rows
    ]


def test_atc_overall_needs_all_four_categories_and_whole_items(tmp_path: Path):
    folder = tmp_path / "results" / "model"
    for config in ("atc_en", "atc_zh", "atc_en_reasoning", "atc_zh_reasoning"):
        records = _atc_item(config, f"{config}-2", 2, True) + _atc_item(config, f"{config}-4", 4, False)
        if config == "atc_en":  # an item cut short by --limit: two right rotations, no perf_4 verdict
            records += _atc_item(config, "cut", 10, True, rotations=2)
        write_samples(folder, harness.task_name(config), records)
    report.write_report(tmp_path / "results", tmp_path / "out", figures=False)
    (atc,) = _csv(tmp_path / "out" / "atc.csv")
    expected = 100 * 2 / 6  # perf_4: n=2 -> 100, n=4 -> 0, weighted by needle count; the cut n=10 item is dropped
    for category in (
        "EN-Direct-CE",
        "ZH-Direct-CE",
        "EN-Reasoning-CE",
        "ZH-Reasoning-CE",
    ):
        assert float(atc[category]) == pytest.approx(expected, abs=1e-4), category
        assert atc[f"{category} n"] == "2"  # two whole items
    assert float(atc["ATC-CE-Overall"]) == pytest.approx(expected, abs=1e-4)
    # all four categories are present (no "of 4 categories"), each from part of its config
    assert atc["ATC-CE-Overall note"] == "partial" and atc["EN-Direct-CE note"] == "partial"
    by_needles = {row["Category"]: row for row in _csv(tmp_path / "out" / "atc_by_needles.csv")}
    assert float(by_needles["EN-Direct-CE"]["2"]) == 100.0 and float(by_needles["EN-Direct-CE"]["4"]) == 0.0
    assert by_needles["EN-Direct-CE"]["10"] == "" and by_needles["EN-Direct-CE"]["10 n"] == "0"
    assert by_needles["EN-Direct-CE"]["2 note"] == "partial" and by_needles["EN-Direct-CE"].get("10 note", "") == ""


@pytest.mark.slow
def test_heatmaps_are_pngs_with_expected_grids(results_dir: Path, tmp_path: Path):
    out = tmp_path / "report"
    written = report.write_report(results_dir, out)
    pngs = sorted(path.name for path in written if path.suffix == ".png")
    assert "heatmap_my-model_needlebench_single_en_4k.png" in pngs
    assert "heatmap_my-model_needlebench_multi_retrieval_zh_4k.png" in pngs
    assert "heatmap_my-model_needlebench_counting_stars_acquisition_en_128k.png" in pngs
    # one figure per purpose: no per-model figure repeating the per-task heatmaps; ATC is a comparison panel
    assert not any(name.startswith("model_") for name in pngs) and "compare_models_by_length.png" in pngs
    assert not any("atc" in name for name in pngs)
    for name in pngs:
        with Image.open(out / name) as image:
            image.verify()
            assert image.format == "PNG"
    results = report.load_results([results_dir])
    maps = {run.task: report_figures.build_heatmap(run) for run in results.runs}
    stars = maps["needlebench_counting_stars_acquisition_en_128k"]
    assert stars.rows == list(range(1, 33)) and stars.columns == list(range(4000, 128001, 4000))
    assert stars.values[0][:2] == [1.0, 1.0] and stars.values[3][:2] == [0.0, 0.0]
    assert stars.values[4][0] is None and stars.counts[4][0] == 0  # star 5 was never asked: an empty cell
    assert stars.values[0][2] is None  # length 12000 has no sample
    mrt = maps["needlebench_multi_retrieval_en_4k"]
    depth = {row: index for index, row in enumerate(mrt.rows)}
    assert [mrt.values[depth[d]][0] for d in (0.0, 50.0, 100.0)] == [100.0, 100.0, 0.0]
    srt = maps["needlebench_single_en_4k"]
    # the config's whole grid (20 depths) plus the fixture's off-grid depth 50
    assert srt.columns == [1000, 2000, 3000, 4000] and len(srt.rows) == 21 and 50.0 in srt.rows
    assert srt.values[0] == [80.0, 80.0, None, None] and srt.counts[0] == [1, 1, 0, 0]
    assert srt.values[1] == [None] * 4  # depth 5: no sample at any length
    html_page = (out / "report.html").read_text(encoding="utf-8")
    assert html_page.count("data:image/png;base64,") == len(pngs)
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html_page)
    assert len(set(images)) == len(images)  # no figure twice
    lines = next(f for f in report_figures.plan_figures(results) if f.kind == "lines").lines
    assert "atc_en" in lines.panels and lines.xlabels["atc_en"] == "Needle count"
    assert "needlebench_4k" in html_page and "<table>" in html_page


def test_heatmap_png_is_200_dpi_with_a_labelled_colorbar(results_dir: Path, tmp_path: Path):
    results = report.load_results([results_dir])
    run = next(run for run in results.runs if run.task == "needlebench_single_en_4k")
    heatmap = report_figures.build_heatmap(run)
    figure_spec = report_figures.Figure(heatmap.name, heatmap.title, "heatmap", [heatmap])
    figure = report_figures.draw(figure_spec)
    main, colorbar = figure.axes
    assert colorbar.get_ylabel() == "S-RT score (0-100)"
    assert main.get_title().startswith("my-model - needlebench_single_en_4k\n")
    assert main.get_xlabel().startswith("Context length") and main.get_ylabel() == "Depth (%)"
    # per-cell counts; an empty cell is hatched grey with no number (a "0" would read as a score)
    empty = [(r, c) for r, row in enumerate(heatmap.values) for c, v in enumerate(row) if v is None]
    full = [(r, c) for r, row in enumerate(heatmap.values) for c, v in enumerate(row) if v is not None]
    assert empty and full
    drawn = {(round(text.get_position()[1]), round(text.get_position()[0])): text.get_text() for text in main.texts}
    assert not set(empty) & set(drawn) and "0" not in drawn.values()
    assert {drawn[cell] for cell in full} == {str(heatmap.counts[r][c]) for r, c in full}
    (mesh,) = main.collections
    assert all(mesh.get_array().mask[r, c] for r, c in empty)  # not coloured: the hatched background shows
    assert main.patch.get_hatch() == report_figures.EMPTY_HATCH
    assert "hatched grey = no samples" in main.get_title()
    assert [mesh.get_cmap().name for mesh in main.collections] == ["viridis"]
    paths = report_figures.render(figure_spec, tmp_path, pdf=True)
    assert [path.suffix for path in paths] == [".png", ".pdf"]
    assert paths[1].read_bytes().startswith(b"%PDF")
    with Image.open(paths[0]) as image:
        assert image.info["dpi"] == pytest.approx((200, 200), abs=0.1)
        width, height = figure.get_size_inches()
        assert image.size == (round(width * 200), round(height * 200))


def _results_json(folder: Path, date: str, tasks: dict[str, float], pretrained: str | None = None) -> Path:
    config = (
        {"model": "hf", "model_args": f"pretrained={pretrained},dtype=float32"} if pretrained else {"model": "dummy"}
    )
    data = {
        "results": {task: {"alias": task, "score,none": value} for task, value in tasks.items()},
        "n-samples": {task: {"original": 800, "effective": 1} for task in tasks},
        "config": config,
    }
    path = folder / f"results_{date}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_two_results_files_of_one_model_keep_both_tasks(tmp_path: Path):
    folder = tmp_path / "out" / "models__SmolLM2"
    first, second = "2025-01-01T00-00-00.000000", "2025-02-01T00-00-00.000000"
    write_samples(
        folder,
        "needlebench_single_en_4k",
        [{"doc": single_row(prompt="a"), "score": 40.0}],
        date=first,
    )
    _results_json(
        folder,
        first,
        {"needlebench_single_en_4k": 40.0},
        pretrained="/models/SmolLM2-135M",
    )
    write_samples(
        folder,
        "needlebench_single_zh_4k",
        [{"doc": single_row("single_zh_4k", prompt="b"), "score": 20.0}],
        date=second,
    )
    _results_json(
        folder,
        second,
        {"needlebench_single_zh_4k": 20.0},
        pretrained="/models/SmolLM2-135M",
    )
    report.write_report([tmp_path / "out"], tmp_path / "report", figures=False)
    (row,) = _csv(tmp_path / "report" / "needlebench_4k.csv")
    assert row["Model"] == "SmolLM2-135M"  # the last part of --model_args pretrained
    assert float(row["S-RT EN"]) == 40.0 and float(row["S-RT ZH"]) == 20.0
    reported = {(r["Model"], r["Task or group"]) for r in _csv(tmp_path / "report" / "lm_eval_results.csv")}
    assert reported == {
        ("SmolLM2-135M", "needlebench_single_en_4k"),
        ("SmolLM2-135M", "needlebench_single_zh_4k"),
    }


def test_newest_file_wins_per_model_and_task(tmp_path: Path, capsys):
    folder = tmp_path / "run"
    doc = single_row(prompt="p")
    old, new = "2025-01-01T00-00-00.000000", "2025-02-01T00-00-00.000000"
    write_samples(folder, "needlebench_single_en_4k", [{"doc": doc, "score": 10.0}], date=old)
    write_samples(folder, "needlebench_single_en_4k", [{"doc": doc, "score": 90.0}], date=new)
    (run,) = report.load_results([tmp_path]).runs
    assert [sample.metrics["score"] for sample in run.samples] == [90.0]
    # which file won is said in one line, naming it; a date later than now (anyone who can write the folder picks
    # the date in a file name) is pointed out
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and "1 model/task pair(s) have several samples files" in line
    assert f"samples_needlebench_single_en_4k_{new}.jsonl" in line and "over 1 other(s)" in line
    assert "later than now" not in line
    future = "2099-01-01T00-00-00.000000"
    write_samples(folder, "needlebench_single_en_4k", [{"doc": doc, "score": 0.0}], date=future)
    report.load_results([tmp_path])
    line = capsys.readouterr().err
    assert f"samples_needlebench_single_en_4k_{future}.jsonl" in line and "over 2 other(s)" in line
    assert "1 of them dated later than now" in line


def test_models_side_by_side_named_by_pretrained_or_override(tmp_path: Path):
    for folder, pretrained, value in (
        ("a", "/m/llama-3-8b/", 10.0),
        ("b", "HuggingFaceTB/SmolLM2-135M", 30.0),
    ):
        path = tmp_path / "results" / folder
        write_samples(
            path,
            "needlebench_single_en_4k",
            [{"doc": single_row(prompt="p"), "score": value}],
        )
        _results_json(
            path,
            "2025-01-01T00-00-00.000000",
            {"needlebench_single_en_4k": value},
            pretrained=pretrained,
        )
    report.write_report(
        [tmp_path / "results" / "a", tmp_path / "results" / "b"],
        tmp_path / "out",
        figures=False,
    )
    rows = {row["Model"]: float(row["S-RT EN"]) for row in _csv(tmp_path / "out" / "needlebench_4k.csv")}
    assert rows == {"llama-3-8b": 10.0, "HuggingFaceTB/SmolLM2-135M": 30.0}
    names = report.parse_names([f"{tmp_path / 'results' / 'a'}=Llama 3 8B"])
    report.write_report([tmp_path / "results"], tmp_path / "out2", names=names, figures=False)
    rows = {row["Model"] for row in _csv(tmp_path / "out2" / "needlebench_4k.csv")}
    assert rows == {"Llama 3 8B", "HuggingFaceTB/SmolLM2-135M"}
    with pytest.raises(NeedlebenchError, match="PATH=NAME"):
        report.parse_names(["no-equals-sign"])


def test_custom_task_and_standard_task_on_one_config_stay_apart(tmp_path: Path):
    folder = tmp_path / "results"
    write_samples(
        folder,
        "needlebench_single_en_4k",
        [{"doc": single_row(prompt="p"), "score": 100.0}],
    )
    write_samples(folder, "my_single_en_4k", [{"doc": single_row(prompt="p"), "score": 0.0}])
    written = report.write_report(folder, tmp_path / "out")
    rows = {row["Model"]: row for row in _csv(tmp_path / "out" / "needlebench_4k.csv")}
    assert set(rows) == {"results", "results (my_single_en_4k)"}
    assert float(rows["results"]["S-RT EN"]) == 100.0
    assert float(rows["results (my_single_en_4k)"]["S-RT EN"]) == 0.0
    names = {path.name for path in written}
    assert {
        "heatmap_results_needlebench_single_en_4k.png",
        "heatmap_results_my_single_en_4k.png",
    } <= names


def test_malformed_inputs_are_one_line_errors_naming_file_and_line(tmp_path: Path):
    folder = tmp_path / "results"
    path = write_samples(
        folder,
        "needlebench_single_en_4k",
        [{"doc": single_row(prompt="p"), "score": 1.0}],
    )
    with path.open("a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    with pytest.raises(NeedlebenchError, match=rf"{path.name}:2: not a JSON line"):
        report.write_report(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written
    path.unlink()
    write_samples(
        folder,
        "needlebench_single_en_4k",
        [{"doc": single_row(prompt="p"), "score": "high"}],
    )
    with pytest.raises(NeedlebenchError, match=r":1: metric score is 'high'"):
        report.write_report(folder, tmp_path / "out")
    write_samples(
        folder,
        "needlebench_single_en_4k",
        [{"doc": single_row(prompt="p"), "score": 1.0}],
    )
    bad = folder / "results_2025-01-01T00-00-00.000000.json"
    bad.write_text('{\n  "results": {\n    "x": 1,\n  }\n}\n', encoding="utf-8")
    with pytest.raises(NeedlebenchError, match=rf"{bad.name}:4: not valid JSON"):
        report.write_report(folder, tmp_path / "out")


def test_cli_report_error_is_one_line_with_status_2(tmp_path: Path, monkeypatch, capsys):
    from needlebench import cli

    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "results_2025-01-01T00-00-00.000000.json").write_text("[1, 2", encoding="utf-8")
    write_samples(
        folder,
        "needlebench_single_en_4k",
        [{"doc": single_row(prompt="p"), "score": 1.0}],
    )
    monkeypatch.setattr(
        "sys.argv",
        ["needlebench", "report", str(folder), "--out", str(tmp_path / "out")],
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "results_2025-01-01T00-00-00.000000.json:1: not valid JSON" in err[0]


def test_missing_or_empty_results_are_user_errors(tmp_path: Path):
    with pytest.raises(NeedlebenchError, match="does not exist"):
        report.write_report(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NeedlebenchError, match="--log_samples"):
        report.write_report(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(NeedlebenchError, match="--annotate"):
        write_samples(
            tmp_path / "one",
            "needlebench_single_en_4k",
            [{"doc": single_row(prompt="p"), "score": 1.0}],
        )
        report.write_report(tmp_path / "one", tmp_path / "out", annotate="everything")


def test_one_language_run_marks_cells_and_reports_health_in_percent(tmp_path: Path):
    """single_en_4k alone: the both-languages S-RT cell is marked EN only, empty cells carry no count, and the
    share without a final answer is a percent beside the 0-100 scores."""
    folder = tmp_path / "results"
    date = "2025-01-01T00-00-00.000000"
    records = [
        {"doc": single_row(context_length=length, depth_percent=0.0, prompt=str(length)), "score": 100.0}
        for length in (1000, 2000, 3000, 4000)
    ]
    write_samples(folder, "needlebench_single_en_4k", records, date=date)
    path = _results_json(folder, date, {"needlebench_single_en_4k": 100.0})
    data = json.loads(path.read_text(encoding="utf-8"))
    data["results"]["needlebench_single_en_4k"].update(
        {"no_final_answer,none": 0.25, "skipped_too_long,none": 0, "output_truncated,none": 1}
    )
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out"
    report.write_report(folder, out, figures=False)
    table = _rendered(out / "needlebench_4k.md")
    row = next(line for line in table.splitlines() if line.startswith("| dummy "))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    header = [cell.strip() for cell in table.splitlines()[4].strip("|").split("|")]
    by_column = dict(zip(header, cells, strict=True))
    assert by_column["S-RT EN"] == "100.00 (n=4) [partial]"
    assert by_column["S-RT"] == "100.00 (n=4) [partial: EN only]"
    assert by_column["S-RT ZH"] == by_column["Overall EN"] == by_column["Overall"] == "–"
    assert not re.search(r"–\s*\(n=", "".join(path.read_text(encoding="utf-8") for path in out.glob("*.md")))
    health = (out / "run_health.md").read_text(encoding="utf-8")
    assert "No final answer (%)" in health and "| dummy | needlebench_single_en_4k | 1 | 0 | 1 | 25.0 |" in health


def test_reference_scoring_recomputes_old_samples_and_prefers_logged_twins(tmp_path: Path):
    """Samples logged before the *_reference metrics existed are rescored from their outputs; samples that carry
    them use the logged values; the default scoring ignores both; every table title says which scoring."""
    old = tmp_path / "results" / "old"
    records = []
    for row in atc_rows("atc_zh", item_id="zh-2", num_needles=2):
        wrong = "B" if row["answer_letter"] != "B" else "C"
        # the example: right first, then changed to a wrong letter (default: the last statement)
        output = f"答案是{row['answer_letter']}。不对，重新检查一下，答案是{wrong}。"
        metrics = harness.process_atc(row, [output])
        assert metrics["acc"] == 0.0 and metrics["acc_reference"] == 100.0
        records.append({"doc": row, "resp": output, "acc": 0.0, "perf_4": list(metrics["perf_4"])})
    write_samples(old, harness.task_name("atc_zh"), records)
    stars = counting_stars_row()
    prose = 'Sure! {"little_penguin": [15, 117, 42, 69]}'
    write_samples(old, harness.task_name(stars["config"]), [{"doc": stars, "resp": prose, "star_score": 1.0,
                                                             "per_star": [1.0] * 4}])  # fmt: skip
    logged = tmp_path / "results" / "logged"
    row = single_row("single_en_4k", context_length=1000, depth_percent=0.0)
    write_samples(logged, harness.task_name("single_en_4k"), [{"doc": row, "resp": "", "score": 40.0,
                                                               "score_reference": 70.0}])  # fmt: skip

    report.write_report(tmp_path / "results", tmp_path / "default", figures=False)
    report.write_report(tmp_path / "results", tmp_path / "reference", figures=False, scoring="reference")
    for scoring, atc_value, star_value, srt_value in (("default", 0.0, 1.0, 40.0), ("reference", 100.0, 0.0, 70.0)):
        out = tmp_path / scoring
        (atc,) = _csv(out / "atc.csv")
        assert float(atc["ZH-Direct-CE"]) == atc_value
        (star_row,) = _csv(out / "counting_stars.csv")
        assert float(star_row["Me-Acq EN"]) == star_value
        (srt,) = _csv(out / "needlebench_4k.csv")
        assert float(srt["S-RT EN"]) == srt_value
        for table in out.glob("*.md"):
            if table.name != "README.md":
                assert f"[scoring: {scoring} (" in table.read_text(encoding="utf-8").splitlines()[0], table.name
        assert f"scoring: {scoring} (" in (out / "README.md").read_text(encoding="utf-8")
    # figure subtitles (heatmaps) and the length plot's title say it too
    loaded = report.apply_scoring(report.load_results([tmp_path / "results"]), "reference")
    figures = report_figures.plan_figures(loaded)
    heatmaps = [heatmap for figure in figures for heatmap in figure.heatmaps]
    assert heatmaps and all("scoring: reference (" in heatmap.subtitle for heatmap in heatmaps)
    (lines,) = [figure.lines for figure in figures if figure.lines is not None]
    assert lines.scoring == "reference"
    with pytest.raises(NeedlebenchError, match="--scoring 'strict' is not allowed; allowed: default, reference"):
        report.write_report(tmp_path / "results", tmp_path / "bad", scoring="strict")
    assert not (tmp_path / "bad").exists()
    # an old sample whose doc lacks what the reference rule reads: one line naming the row, nothing written
    broken = single_row("single_en_4k", context_length=1000, depth_percent=0.0)
    del broken["keywords"]
    write_samples(tmp_path / "broken" / "m", harness.task_name("single_en_4k"), [{"doc": broken, "score": 10.0}])
    with pytest.raises(NeedlebenchError, match=r"cannot score row .* of single_en_4k by the reference rules"):
        report.write_report(tmp_path / "broken", tmp_path / "bad", scoring="reference")
    assert not (tmp_path / "bad").exists()


def test_health_from_its_own_file_and_from_lean_samples(tmp_path: Path):
    """Run health in ``needlebench_health_<date>.json`` beside the results (lm-eval's file untouched), a task
    not run because none of its rows fit, and lean samples (no prompt, its hash instead): the same tables as
    the inline form above."""
    folder = tmp_path / "results"
    date = "2025-01-01T00-00-00.000000"
    records = [
        {
            "doc": {**single_row(context_length=length, depth_percent=0.0), "prompt_sha256": "0" * 64},
            "score": 100.0,
        }
        for length in (1000, 2000, 3000, 4000)
    ]
    for record in records:
        record["doc"].pop("prompt", None)
    write_samples(folder, "needlebench_single_en_4k", records, date=date)
    path = _results_json(folder, date, {"needlebench_single_en_4k": 100.0})
    health = {
        "results_file": path.name,
        "tasks": {
            "needlebench_single_en_4k": {"no_final_answer": 0.25, "skipped_too_long": 0, "output_truncated": 1},
            "needlebench_single_en_8k": {"skipped_too_long": 3},
        },
        "not_run": {"needlebench_single_en_8k": {"original": 3, "effective": 0}},
    }
    report.health_path(path).write_text(json.dumps(health), encoding="utf-8")
    out = tmp_path / "out"
    report.write_report(folder, out, figures=False)
    table = (out / "run_health.md").read_text(encoding="utf-8")
    assert "| dummy | needlebench_single_en_4k | 1 | 0 | 1 | 25.0 |" in table
    assert re.search(r"\| dummy \| needlebench_single_en_8k \| 0 \| 3 \|", table), table
    assert "100.00 (n=4) [partial]" in _rendered(out / "needlebench_4k.md")
    report.health_path(path).write_text("{", encoding="utf-8")
    with pytest.raises(NeedlebenchError, match="not a readable run-health file"):
        report.write_report(folder, tmp_path / "bad", figures=False)


def test_a_cell_of_en_only_and_zh_only_cells_is_partial_in_every_process():
    """The overall of a table whose tasks ran in one language each, not the same one: 'partial', never 'EN only' or
    'ZH only' by the order of a set (which varies from process to process)."""
    from types import SimpleNamespace

    from needlebench.evaluation.report import combined_note

    cells = [SimpleNamespace(note=note) for note in ("partial: EN only", "partial: ZH only", "", "partial")]
    assert combined_note(cells) == "partial"
    assert combined_note(cells[::-1]) == "partial"
    assert (
        combined_note([SimpleNamespace(note="partial: ZH only"), SimpleNamespace(note="partial")]) == "partial: ZH only"
    )


def test_every_config_asks_its_family_for_its_report_pieces():
    """Each built-in config's family answers what the report asks of it: a headline metric, a paper mean (a cell
    and its name) of every metric the scores table lists under both scorings, its coverage; a haystack family's
    edition has a size table (its three tasks are the overall's), every other family builds its own tables."""
    from needlebench.evaluation.families import eval_family
    from needlebench.evaluation.families.base import EvalFamily
    from needlebench.evaluation.report.aggregate import Cell
    from needlebench.evaluation.report.tables import SIZE_TABLES
    from needlebench.evaluation.scoring.overall import OVERALL_WEIGHTS
    from needlebench.tasks.grid import registry

    haystack_labels = set()
    for spec in registry().values():
        family = eval_family(spec)
        assert family.headline_metric(spec)
        for scoring in report.SCORING_CHOICES:
            for metric in family.score_metrics(spec, scoring):
                cell, name = family.paper_mean(spec, [], metric)
                assert isinstance(cell, Cell) and cell.n == 0 and name, (spec.name, metric)
        run = report.TaskRun("m", f"needlebench_{spec.name}", spec, Path("x"), "d")
        assert run.coverage == (False, run.coverage[1]) and run.coverage[1].startswith("partial (0/"), spec.name
        if family.haystack:
            haystack_labels.add(spec.task_label)
            assert spec.edition in SIZE_TABLES
        else:
            assert type(family).tables is not EvalFamily.tables, spec.name
    assert all(set(weights) == haystack_labels for weights in OVERALL_WEIGHTS.values())
    assert set(SIZE_TABLES) == set(OVERALL_WEIGHTS)
