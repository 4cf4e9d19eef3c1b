"""``needlebench report``: the papers' tables and heatmaps from lm-eval output.

Input is an lm-eval ``--output_path`` folder run with ``--log_samples``: ``results_<date>.json`` and
``samples_<task>_<date>.jsonl`` files (in a sub-folder per model). Every logged sample carries its dataset row
(``doc``) and the metrics of ``process_results``, so scores are re-aggregated here exactly as the papers do:

* NeedleBench, per size: S-RT, M-RT and M-RS for Chinese, English and both (each the mean over the
  (length, depth[, needle count]) cells of the grid, each cell the mean over its repeats), and the overall score
  ``0.4 S-RT + 0.3 M-RT + 0.3 M-RS``;
* ATC: CircularEval ``perf_4`` per needle count (items with all 4 rotations only), per category (language x
  prompt style) weighted by the needle count, and ATC-CE-Overall, the plain mean of the 4 categories (labelled
  partial when some are missing); open-ended ATC as a mean score;
* Counting-Stars: the mean over the star x length grid per task and language, and their average.

Tables are written as Markdown and CSV; heatmaps (PNG, matplotlib's Agg canvas) show depth x length per
NeedleBench config and star index x length per Counting-Stars config.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation import scoring
from needlebench.tasks.grid import SIZES, ConfigSpec, registry

SAMPLES_FILE_RE = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")
_RESULTS_RE = re.compile(r"^results_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.json$")

LANGUAGE_COLUMNS = (("zh", "Chinese"), ("en", "English"))
#: Metric of each NeedleBench task used by the tables and heatmaps.
HEADLINE_METRIC = {"single": "score", "multi_retrieval": "recall", "multi_reasoning": "reference"}
#: Colours of the reference heatmaps (red = 0, yellow, green = full marks).
HEATMAP_COLOURS = ("#F0496E", "#EBB839", "#0CD79F")


@dataclass
class Sample:
    """One logged lm-eval sample: its dataset row and its metrics."""

    spec: ConfigSpec
    doc: dict[str, Any]
    metrics: dict[str, Any]
    response: str = ""


@dataclass
class Run:
    """The samples and results JSON of one lm-eval output folder (one model)."""

    folder: Path
    samples: list[Sample] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)

    def of_family(self, family: str) -> list[Sample]:
        return [sample for sample in self.samples if sample.spec.family == family]


@dataclass
class Table:
    """A table to write as ``<name>.md`` and ``<name>.csv``."""

    name: str
    title: str
    header: list[str]
    rows: list[list[Any]]
    digits: int = 2


# --------------------------------------------------------------------------------------------- loading


def _latest_by_key(paths: Iterable[Path], pattern: re.Pattern[str], key: Callable[[re.Match[str]], str]) -> list[Path]:
    """Of files matching ``pattern``, the newest (by the date in the name) for each key."""
    newest: dict[str, tuple[str, Path]] = {}
    for path in paths:
        match = pattern.match(path.name)
        if not match:
            continue
        name, date = key(match), match.group("date")
        if name not in newest or date > newest[name][0]:
            newest[name] = (date, path)
    return [path for _date, path in sorted(newest.values(), key=lambda item: item[1].name)]


def _response_text(record: Mapping[str, Any]) -> str:
    """The filtered model output of a logged sample (lm-eval nests it in lists)."""
    value: Any = record.get("filtered_resps") or record.get("resps") or ""
    while isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, str) else ""


def read_samples(path: Path) -> list[Sample]:
    """The samples of one ``samples_*.jsonl`` file (rows of unknown configs are skipped)."""
    configs = registry()
    samples = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise NeedlebenchError(
                    f"{path}:{number} is not a JSON line; pass an lm-eval --output_path folder"
                ) from None
            doc = record.get("doc") or {}
            spec = configs.get(str(doc.get("config")))
            if spec is None:
                continue
            metrics = {name: record[name] for name in record.get("metrics", []) if name in record}
            samples.append(Sample(spec, doc, metrics, _response_text(record)))
    return samples


def load_runs(results_dir: Path) -> list[Run]:
    """Every folder under ``results_dir`` holding ``samples_*.jsonl`` files, newest file per task."""
    if not results_dir.is_dir():
        raise NeedlebenchError(f"results folder {str(results_dir)!r} does not exist; pass lm-eval's --output_path")
    folders = sorted({path.parent for path in results_dir.rglob("samples_*.jsonl")})
    if not folders:
        raise NeedlebenchError(
            f"no samples_*.jsonl under {str(results_dir)!r}; run lm-eval with --log_samples and --output_path"
        )
    runs = []
    for folder in folders:
        run = Run(folder)
        for path in _latest_by_key(folder.glob("samples_*.jsonl"), SAMPLES_FILE_RE, lambda m: m.group("task")):
            run.samples.extend(read_samples(path))
        for path in _latest_by_key(folder.glob("results_*.json"), _RESULTS_RE, lambda m: "results"):
            run.results = json.loads(path.read_text(encoding="utf-8"))
        if run.samples:
            runs.append(run)
    if not runs:
        raise NeedlebenchError(f"the samples under {str(results_dir)!r} hold no needlebench_* task rows")
    return runs


# --------------------------------------------------------------------------------------------- aggregation


def _mean(values: Iterable[float]) -> float | None:
    items = [float(value) for value in values]
    return math.fsum(items) / len(items) if items else None


def cell_mean(samples: Iterable[Sample], metric: str, cell: Callable[[Sample], Any]) -> float | None:
    """Mean over grid cells of the per-cell mean of ``metric`` (the reference's naive mean over datasets)."""
    cells: dict[Any, list[float]] = defaultdict(list)
    for sample in samples:
        if metric in sample.metrics:
            cells[cell(sample)].append(float(sample.metrics[metric]))
    return _mean(_mean(values) for values in cells.values())


def _grid_cell(sample: Sample) -> tuple[Any, ...]:
    doc = sample.doc
    return (doc.get("language"), doc.get("context_length"), doc.get("depth_percent"), doc.get("num_needles"))


def needlebench_scores(samples: Sequence[Sample], size: str) -> dict[str, dict[str, float | None]]:
    """``{task label: {"zh", "en", "all": score}}`` for S-RT, M-RT, M-RS (reference and strict) of one size."""
    table: dict[str, dict[str, float | None]] = {}
    for family, metric in (*HEADLINE_METRIC.items(), ("multi_reasoning", "strict")):
        label = scoring_label(family, metric)
        chosen = [s for s in samples if s.spec.family == family and s.spec.size == size]
        table[label] = {
            "zh": cell_mean([s for s in chosen if s.spec.language == "zh"], metric, _grid_cell),
            "en": cell_mean([s for s in chosen if s.spec.language == "en"], metric, _grid_cell),
            "all": cell_mean(chosen, metric, _grid_cell),
        }
    overall: dict[str, float | None] = {}
    for column in ("zh", "en", "all"):
        parts = [table[scoring_label(f, m)][column] for f, m in HEADLINE_METRIC.items()]
        overall[column] = scoring.needlebench_overall(*parts) if all(p is not None for p in parts) else None
    table["Overall (0.4 S-RT + 0.3 M-RT + 0.3 M-RS)"] = overall
    return table


def scoring_label(family: str, metric: str) -> str:
    """Row label of a NeedleBench task score."""
    labels = {"single": "S-RT", "multi_retrieval": "M-RT", "multi_reasoning": "M-RS"}
    return labels[family] + (" (strict)" if metric == "strict" else "")


def atc_category(spec: ConfigSpec) -> str:
    """CircularEval category of an ATC config, e.g. ``EN-Direct-CE`` or ``ZH-Reasoning-CE``."""
    style = {"direct": "Direct", "reasoning": "Reasoning", "extended": "Direct-512"}[spec.variant]
    return f"{spec.language.upper()}-{style}-CE"


def atc_tables(samples: Sequence[Sample]) -> tuple[list[list[Any]], list[list[Any]]]:
    """(category rows, per-needle-count rows) of the multiple-choice ATC; open-ended rows are appended."""
    by_category: dict[str, dict[int, list[tuple[str, str, bool]]]] = defaultdict(lambda: defaultdict(list))
    acc: dict[str, list[float]] = defaultdict(list)
    open_scores: dict[str, list[float]] = defaultdict(list)
    for sample in samples:
        if sample.spec.variant == "open":
            if "score" in sample.metrics:
                open_scores[f"{sample.spec.language.upper()}-Open"].append(float(sample.metrics["score"]))
            continue
        if "perf_4" not in sample.metrics:
            continue
        item_id, rotation, correct = sample.metrics["perf_4"]
        category = atc_category(sample.spec)
        by_category[category][int(sample.doc["num_needles"])].append((str(item_id), str(rotation), bool(correct)))
        if "acc" in sample.metrics:
            acc[category].append(float(sample.metrics["acc"]))
    category_rows: list[list[Any]] = []
    detail_rows: list[list[Any]] = []
    weighted: dict[str, float] = {}
    for category in sorted(by_category):
        perf = perf_4_by_needles(by_category[category])
        if not perf:
            continue  # no item with all four rotations (e.g. a --limit run)
        weighted[category] = scoring.atc_category_score(perf)
        category_rows.append([category, weighted[category], _mean(acc[category]), ", ".join(map(str, perf))])
        detail_rows += [[category, n, value] for n, value in perf.items()]
    overall = atc_overall_row(weighted)
    if overall:
        category_rows.append(overall)
    for label, values in sorted(open_scores.items()):
        category_rows.append([label, _mean(values), None, "open-ended (exact name)"])
    return category_rows, detail_rows


#: The four categories whose plain mean is the paper's ATC-CE-Overall.
ATC_OVERALL_CATEGORIES = ("EN-Direct-CE", "EN-Reasoning-CE", "ZH-Direct-CE", "ZH-Reasoning-CE")


def perf_4_by_needles(rows_by_needles: Mapping[int, list[tuple[str, str, bool]]]) -> dict[int, float]:
    """CircularEval ``perf_4`` per needle count over complete items (all 4 rotations); counts with none are left out."""
    perf: dict[int, float] = {}
    for needles, rows in sorted(rows_by_needles.items()):
        complete = scoring.complete_items(rows)
        if complete:
            perf[needles] = scoring.circular_scores(complete)["perf_4"]
    return perf


def atc_overall_row(weighted: Mapping[str, float]) -> list[Any] | None:
    """The ATC-CE-Overall row (plain mean of the 4 categories) when all 4 are present.

    With only some of them the mean is labelled partial, so it is never mistaken for the paper's score; None
    when there is none.
    """
    present = [category for category in ATC_OVERALL_CATEGORIES if category in weighted]
    if not present:
        return None
    value = scoring.atc_overall({category: weighted[category] for category in present})
    if len(present) == len(ATC_OVERALL_CATEGORIES):
        return ["ATC-CE-Overall", value, None, ", ".join(present)]
    label = f"ATC-CE-Overall (partial: {len(present)} of {len(ATC_OVERALL_CATEGORIES)} categories)"
    return [label, value, None, ", ".join(present)]


def counting_stars_rows(samples: Sequence[Sample]) -> list[list[Any]]:
    """Per (size, stars): Me-Acq ZH/EN, Me-Rea ZH/EN (mean over the star x length grid) and their average."""
    grids: dict[tuple[str, int], dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        values = sample.metrics.get("per_star")
        if not isinstance(values, list):
            continue
        key = (str(sample.spec.size), int(sample.spec.stars or 0))
        grids[key][(sample.spec.variant, sample.spec.language)].extend(float(v) for v in values)
    rows = []
    order = (("acquisition", "zh"), ("acquisition", "en"), ("reasoning", "zh"), ("reasoning", "en"))
    for (size, stars), grid in sorted(grids.items(), key=lambda item: (SIZES.index(item[0][0]), item[0][1])):
        cells = [_mean(grid[key]) if key in grid else None for key in order]
        present = [cell for cell in cells if cell is not None]
        average = _mean(present) if len(present) == len(order) else None
        rows.append([size, stars, *cells, average])
    return rows


# --------------------------------------------------------------------------------------------- tables


def build_tables(run: Run) -> list[Table]:
    """All tables of a run (only those with data)."""
    tables: list[Table] = []
    haystack = [s for s in run.samples if s.spec.family in HEADLINE_METRIC]
    rows: list[list[Any]] = []
    for size in SIZES:
        if not any(s.spec.size == size for s in haystack):
            continue
        for label, values in needlebench_scores(haystack, size).items():
            rows.append([size, label, values["zh"], values["en"], values["all"]])
    if rows:
        tables.append(
            Table(
                "needlebench", "NeedleBench (v1 scores, 0-100)", ["Size", "Task", "Chinese", "English", "Overall"], rows
            )
        )
    atc = run.of_family("atc")
    if atc:
        category_rows, detail_rows = atc_tables(atc)
        tables.append(
            Table(
                "atc",
                "Ancestral Trace Challenge (CircularEval perf_4 weighted by needle count, 0-100)",
                ["Category", "Score", "Row accuracy", "Needle counts"],
                category_rows,
            )
        )
        if detail_rows:
            tables.append(
                Table("atc_by_needles", "ATC perf_4 by needle count", ["Category", "Needles", "perf_4"], detail_rows)
            )
    stars = counting_stars_rows(run.of_family("counting_stars"))
    if stars:
        tables.append(
            Table(
                "counting_stars",
                "Counting-Stars (mean over stars x lengths, 0-1)",
                ["Size", "Stars", "Me-Acq ZH", "Me-Acq EN", "Me-Rea ZH", "Me-Rea EN", "Avg."],
                stars,
                digits=3,
            )
        )
    harness_rows = lm_eval_rows(run.results)
    if harness_rows:
        tables.append(
            Table(
                "lm_eval_results",
                "lm-eval results (as reported by the harness)",
                ["Task or group", "Metric", "Value", "Samples"],
                harness_rows,
                digits=3,
            )
        )
    return tables


def lm_eval_rows(results: Mapping[str, Any]) -> list[list[Any]]:
    """Task and group metrics of an lm-eval results JSON (filter suffixes dropped, stderr skipped)."""
    rows = []
    samples = results.get("n-samples", {})
    for name, metrics in sorted({**results.get("results", {})}.items()):
        for key, value in metrics.items():
            if "," not in key or "_stderr" in key or not isinstance(value, (int, float)):
                continue
            count = samples.get(name, {}).get("effective")
            rows.append([name, key.split(",")[0], float(value), count])
    return rows


def _format(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def write_table(table: Table, out_dir: Path) -> list[Path]:
    """Write a table as Markdown and CSV; return the two paths."""
    md = out_dir / f"{table.name}.md"
    lines = [f"# {table.title}", "", "| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header)]
    for row in table.rows:
        lines.append("| " + " | ".join(_format(cell, table.digits) for cell in row) + " |")
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = out_dir / f"{table.name}.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(table.header)
        for row in table.rows:
            writer.writerow(
                ["" if cell is None else (round(cell, 6) if isinstance(cell, float) else cell) for cell in row]
            )
    return [md, path]


# --------------------------------------------------------------------------------------------- heatmaps


@dataclass
class Heatmap:
    """A grid of mean scores: ``values[row][column]`` (None where no sample fell)."""

    name: str
    title: str
    row_label: str
    column_label: str
    rows: list[Any]
    columns: list[Any]
    values: list[list[float | None]]
    vmax: float


def _grid(points: Iterable[tuple[Any, Any, float]]) -> tuple[list[Any], list[Any], list[list[float | None]]]:
    cells: dict[tuple[Any, Any], list[float]] = defaultdict(list)
    for row, column, value in points:
        cells[(row, column)].append(value)
    rows = sorted({row for row, _ in cells})
    columns = sorted({column for _, column in cells})
    values = [[_mean(cells[(row, column)]) if (row, column) in cells else None for column in columns] for row in rows]
    return rows, columns, values


def heatmap_points(spec: ConfigSpec, samples: Iterable[Sample]) -> list[tuple[Any, Any, float]]:
    """(row, column, value) points of a config's heatmap: depth x length, or star index x length."""
    points: list[tuple[Any, Any, float]] = []
    for sample in samples:
        doc, metrics = sample.doc, sample.metrics
        length = int(doc["context_length"])
        if spec.family == "counting_stars":
            points += [(index + 1, length, float(v)) for index, v in enumerate(metrics.get("per_star") or [])]
        elif spec.family == "multi_retrieval":
            depths = doc.get("requested_depths") or doc.get("needle_depths") or []
            hits = metrics.get("needle_hits") or []
            points += [(float(d), length, float(hit)) for d, hit in zip(depths, hits, strict=False)]
        elif spec.family in HEADLINE_METRIC and doc.get("depth_percent") is not None:
            metric = HEADLINE_METRIC[spec.family]
            if metric in metrics:
                points.append((float(doc["depth_percent"]), length, float(metrics[metric])))
    return points


def build_heatmaps(run: Run) -> list[Heatmap]:
    """One heatmap per NeedleBench (S-RT, M-RT, M-RS) and Counting-Stars config present in the run."""
    by_config: dict[str, list[Sample]] = defaultdict(list)
    for sample in run.samples:
        by_config[sample.spec.name].append(sample)
    maps = []
    for name, samples in by_config.items():
        spec = samples[0].spec
        if spec.family not in HEADLINE_METRIC and spec.family != "counting_stars":
            continue
        points = heatmap_points(spec, samples)
        if not points:
            continue
        rows, columns, values = _grid(points)
        stars = spec.family == "counting_stars"
        maps.append(
            Heatmap(
                name=f"heatmap_{name}",
                title=f"{spec.task_label} {spec.language.upper()} {spec.size}"
                + (f" ({spec.variant}, {spec.stars} stars)" if stars else ""),
                row_label="Star index" if stars else "Depth (%)",
                column_label="Context length" if stars else "Context length (cl100k tokens)",
                rows=rows,
                columns=columns,
                values=values,
                vmax=1.0 if stars else 100.0,
            )
        )
    return maps


def _tick_label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value >= 1000:
        return f"{value / 1000:g}k"
    return str(value)


def draw_heatmap(heatmap: Heatmap, path: Path) -> Path:
    """Render a heatmap to PNG with matplotlib's Agg canvas (no pyplot, no global backend)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LinearSegmentedColormap
    from matplotlib.figure import Figure

    data = np.array([[np.nan if v is None else v for v in row] for row in heatmap.values], dtype=float)
    width = max(5.0, 1.0 + 0.45 * len(heatmap.columns))
    height = max(3.5, 1.2 + 0.28 * len(heatmap.rows))
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    cmap = LinearSegmentedColormap.from_list("needlebench", list(HEATMAP_COLOURS)).with_extremes(bad="#dddddd")
    image = axes.imshow(
        np.ma.masked_invalid(data), aspect="auto", cmap=cmap, vmin=0.0, vmax=heatmap.vmax, origin="upper"
    )
    axes.set_xticks(range(len(heatmap.columns)), [_tick_label(c) for c in heatmap.columns], rotation=45, ha="right")
    step = max(1, len(heatmap.rows) // 24)
    axes.set_yticks(range(0, len(heatmap.rows), step), [_tick_label(r) for r in heatmap.rows[::step]])
    axes.set_xlabel(heatmap.column_label)
    axes.set_ylabel(heatmap.row_label)
    mean = np.nanmean(data) if np.isfinite(data).any() else float("nan")
    axes.set_title(f"{heatmap.title} - mean {mean:.3g}")
    figure.colorbar(image, ax=axes)
    figure.tight_layout()
    figure.savefig(path, format="png")
    return path


# --------------------------------------------------------------------------------------------- entry point


def write_run(run: Run, out_dir: Path) -> list[Path]:
    """Tables (Markdown + CSV), heatmaps (PNG) and an index ``README.md`` of one run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    tables = build_tables(run)
    for table in tables:
        written += write_table(table, out_dir)
    heatmaps = build_heatmaps(run)
    for heatmap in heatmaps:
        written.append(draw_heatmap(heatmap, out_dir / f"{heatmap.name}.png"))
    index = out_dir / "README.md"
    lines = [f"# NeedleBench report: {run.folder.name}", "", f"Source: `{run.folder}` ({len(run.samples)} samples)", ""]
    for table in tables:
        lines += [(out_dir / f"{table.name}.md").read_text(encoding="utf-8"), ""]
    if heatmaps:
        lines += ["# Heatmaps", ""] + [f"![{h.title}]({h.name}.png)" for h in heatmaps]
    index.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [*written, index]


def write_report(results_dir: Path, out_dir: Path) -> list[Path]:
    """Write the tables and heatmaps of every run under ``results_dir`` to ``out_dir``; return the files.

    With several runs (model folders), each gets the same relative sub-folder under ``out_dir``.
    """
    results_dir, out_dir = Path(results_dir), Path(out_dir)
    runs = load_runs(results_dir)
    if len(runs) == 1:
        return write_run(runs[0], out_dir)
    written: list[Path] = []
    for run in runs:
        written += write_run(run, out_dir / run.folder.relative_to(results_dir))
    return written
