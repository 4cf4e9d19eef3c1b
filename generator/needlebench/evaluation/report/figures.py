"""Figures of ``needlebench report``: heatmaps, per-model panels and the model comparison (matplotlib, Agg).

* one heatmap per model and task: depth x length (S-RT, M-RT per needle, M-RS) or star index x length
  (Counting-Stars), over the config's whole grid, so a length or depth without samples is drawn as an empty,
  hatched grey cell with no number; every other cell shows its sample count (``annotate="counts"``, the
  default), its value, both, or nothing; the title names the model and the task, the colorbar the metric; tick
  labels are rounded as far as they stay distinct (``18k``, ``7``);
* when a custom config's cells hold several runs (the rows' ``repeat``: an experiment's ``runs``), a second
  heatmap of the standard deviation over runs (each run's mean in the cell; sample standard deviation, n - 1),
  its cells annotated with the number of runs, as Inspect NIAH reports mean and std heatmaps over runs;
* custom configs (experiment files) are titled by their own names and drawn over their own lengths and depths;
  judged results (``needlebench judge``) are drawn with the judge's rating x 10, each row at its depth;
* one figure comparing models: each config's series (``EvalFamily.comparison_series``: the paper score against
  context length, or what the family draws instead), one line per model, a panel per config.

200 dpi PNG (and PDF on request); the colour map is viridis (monotonic in lightness, so it reads in grayscale
and for red-green colour blindness), the lines use the Okabe-Ito palette with distinct markers and dashes.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.families import eval_family
from needlebench.evaluation.report.aggregate import mean_or_none, run_of, sample_std, short_number
from needlebench.evaluation.report.load import SCORING_LABEL, Results, Sample, TaskRun, entity_order, is_observed
from needlebench.evaluation.report.safety import default_style, plain_figure_text, unique_stem
from needlebench.safe_fs import Folder

DPI = 200
COLORMAP = "viridis"
EMPTY_COLOUR = "#d9d9d9"
EMPTY_HATCH = "////"
#: Okabe-Ito colours (distinguishable with colour-vision deficiencies), then markers and dashes per line.
LINE_COLOURS = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#000000",
)
LINE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINE_STYLES = ("-", "--", "-.", ":")
ANNOTATE_CHOICES = ("counts", "values", "both", "none")
#: Above this many cells a heatmap states counts in its subtitle instead of in every cell.
MAX_ANNOTATED_CELLS = 400

JUDGE_LABEL = "judge score (rating 1-10 x 10)"
#: Colour scale top of a std heatmap: the largest sample standard deviation of values in [0, 100] is 70.7.
STD_VMAX = 75.0
#: How the subtitle of a heatmap names the config's edition (after its task label), and its mean.
EDITION_SUFFIX = {"v1": "", "v2": " v2"}
HEATMAP_MEAN_NAME = {"v1": "paper mean", "v2": "mean per cell"}


def metric_label(spec: Any) -> str:
    """The colorbar / axis label of a config's heatmap or length plot."""
    return eval_family(spec).metric_label[spec.edition]


@dataclass
class Heatmap:
    """A grid of mean scores and sample counts: ``values[row][column]`` (None where no sample fell)."""

    name: str
    model: str
    task: str
    subtitle: str
    row_label: str
    column_label: str
    metric_label: str
    rows: list[Any]
    columns: list[Any]
    values: list[list[float | None]]
    counts: list[list[int]]
    vmax: float
    #: What the figure title calls the task (a custom config's own name); the task name when empty.
    label: str = ""
    #: "mean" (cell means, counts = samples) or "std" (standard deviation over runs, counts = runs).
    statistic: str = "mean"
    #: What a cell's count counts ("rows", "needles", "star answers", "runs").
    count_unit: str = "rows"

    @property
    def title(self) -> str:
        title = f"{self.model} - {self.label or self.task}"
        return title + (" (std over runs)" if self.statistic == "std" else "")


@dataclass
class Lines:
    """Score against length, one line per model: ``series[panel][model] = [(length, value, n)]``."""

    panels: dict[str, dict[str, list[tuple[int, float, int]]]]
    ylabels: dict[str, str]
    #: x-axis label per panel (context length unless given).
    xlabels: dict[str, str] = field(default_factory=dict)
    #: ``default`` or ``reference`` (stated in the title).
    scoring: str = "default"
    #: What the title says of particular panels (``EvalFamily.comparison_note``), in order.
    notes: list[str] = field(default_factory=list)


@dataclass
class Figure:
    name: str
    title: str
    kind: str  # "heatmap" or "lines"
    heatmaps: list[Heatmap] = field(default_factory=list)
    lines: Lines | None = None
    annotate: str = "counts"


# --------------------------------------------------------------------------------------------- data


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text).strip("_") or "model"


def heatmap_points(spec: Any, samples: Iterable[Sample]) -> list[tuple[Any, Any, float]]:
    """(row, column, value) points of a config's heatmap: depth x length, or star index x length."""
    return [(row, column, value) for row, column, value, _run in run_points(spec, samples)]


def _per_needle(spec: Any) -> bool:
    """Are M-RT rows drawn per needle (at each needle's grid depth)? Not for a config known only from its rows:
    their requested depths may be placement depths (start/end buffers), so each row goes at its own depth."""
    return not is_observed(spec)


def run_points(spec: Any, samples: Iterable[Sample]) -> list[tuple[Any, Any, float, Any]]:
    """(row, column, value, run) points: depth x length, or star index x length (the family's
    ``heatmap_points``); judged samples (and M-RT rows of a config known only from its rows) are one point at the
    row's depth."""
    family = eval_family(spec)
    per_needle = _per_needle(spec)
    return [
        (row, column, value, run_of(sample))
        for sample in samples
        for row, column, value in family.heatmap_points(spec, sample, per_needle)
    ]


def _grid(run: TaskRun, cells: Iterable[tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """Rows and columns of a heatmap: the config's own lengths and depths (or star indices), plus any seen."""
    spec = run.spec
    cells = list(cells)
    rows = sorted(set(eval_family(spec).heatmap_rows(spec)) | {row for row, _ in cells})
    columns = sorted(set(spec.lengths) | {column for _, column in cells})
    return rows, columns


def _tokens_of(run: TaskRun) -> str:
    tokenizers = sorted({str(s.doc.get("tokenizer")) for s in run.samples if s.doc.get("tokenizer")})
    return tokenizers[0] if len(tokenizers) == 1 else "cl100k"


def _what(run: TaskRun) -> str:
    """The subtitle's description of the config: the paper grid, or a custom config's own grid (the title
    already names the config)."""
    spec = run.spec
    if run.custom:
        return (
            f"custom {spec.task_label} {spec.language.upper()}, {len(spec.lengths)} lengths x "
            f"{len(spec.depths)} depths x {spec.repeats} runs"
        )
    return f"{spec.task_label}{EDITION_SUFFIX[spec.edition]} {spec.language.upper()} {spec.size}"


def _scorer_note(run: TaskRun) -> str:
    """The subtitle's end: which scoring (default or reference) and, for judged runs, the judge."""
    return f"; {SCORING_LABEL[run.scoring]}" + (f"; scorer: {run.scorer}" if run.judged else "")


def _paper_value(run: TaskRun, samples: Sequence[Sample]) -> Any:
    """The paper mean of the headline metric over ``samples`` of a run (a :class:`Cell`)."""
    spec = run.spec
    family = eval_family(spec)
    return family.paper_mean(spec, samples, family.headline_metric(spec))[0]


def build_heatmap(run: TaskRun) -> Heatmap | None:
    """The heatmap of one task run over its config's whole grid, or None for a family without one (ATC)."""
    spec = run.spec
    family = eval_family(spec)
    if not family.heatmap:
        return None
    cells: dict[tuple[Any, Any], list[float]] = defaultdict(list)
    for row, column, value, _run in run_points(spec, run.samples):
        cells[(row, column)].append(value)
    rows, columns = _grid(run, cells)
    values = [[mean_or_none(cells.get((r, c), [])) for c in columns] for r in rows]
    counts = [[len(cells.get((r, c), [])) for c in columns] for r in rows]
    paper = _paper_value(run, run.samples)
    score = "-" if paper.value is None else f"{paper.value:.3g}"
    mean_name = "mean per cell" if run.custom else HEATMAP_MEAN_NAME[spec.edition]
    return Heatmap(
        name=f"heatmap_{_safe(run.model)}_{_safe(run.task)}",
        model=run.model,
        task=run.task,
        subtitle=f"{_what(run)}, {mean_name} {score} (n={len(run.samples)} rows){_scorer_note(run)}",
        row_label=family.heatmap_row_label,
        column_label="Context length" + (f" ({_tokens_of(run)} tokens)" if family.heatmap_tokens else ""),
        metric_label=JUDGE_LABEL if run.judged else metric_label(spec),
        rows=rows,
        columns=columns,
        values=values,
        counts=counts,
        vmax=family.heatmap_vmax,
        label=run.label,
        count_unit=family.count_unit(_per_needle(spec), run.judged),
    )


def build_std_heatmap(run: TaskRun) -> Heatmap | None:
    """The standard deviation over runs per (depth, length) cell (each run's mean in the cell; sample standard
    deviation, n - 1), cells annotated with their number of runs; None unless some cell holds two runs or more."""
    spec = run.spec
    if not eval_family(spec).haystack:
        return None
    by_run: dict[tuple[Any, Any], dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row, column, value, key in run_points(spec, run.samples):
        by_run[(row, column)][key].append(value)
    if not any(len(runs) >= 2 for runs in by_run.values()):
        return None
    rows, columns = _grid(run, by_run)

    def std(cell: tuple[Any, Any]) -> float | None:
        runs = by_run.get(cell, {})
        return sample_std([mean_or_none(values) for values in runs.values()])  # type: ignore[misc]

    values = [[std((r, c)) for c in columns] for r in rows]
    counts = [[len(by_run.get((r, c), {})) for c in columns] for r in rows]
    deviations = [v for line in values for v in line if v is not None]
    mean_std = "-" if not deviations else f"{mean_or_none(deviations):.3g}"
    return Heatmap(
        name=f"heatmap_std_{_safe(run.model)}_{_safe(run.task)}",
        model=run.model,
        task=run.task,
        subtitle=f"{_what(run)}, standard deviation over runs (sample, n-1) of each run's cell mean; mean std "
        f"{mean_std}{_scorer_note(run)}",
        row_label="Depth (%)",
        column_label=f"Context length ({_tokens_of(run)} tokens)",
        metric_label="std over runs of " + (JUDGE_LABEL if run.judged else metric_label(spec)),
        rows=rows,
        columns=columns,
        values=values,
        counts=counts,
        vmax=STD_VMAX,
        label=run.label,
        statistic="std",
        count_unit="runs",
    )


def plan_figures(results: Results, annotate: str = "counts") -> list[Figure]:
    """Every figure of a report (nothing is drawn yet)."""
    if annotate not in ANNOTATE_CHOICES:
        raise NeedlebenchError(f"--annotate {annotate!r} is not one of {', '.join(ANNOTATE_CHOICES)}")
    figures: list[Figure] = []
    # two models whose names differ only in characters a file name cannot hold ("a/b", "a_b") get two files
    taken = {"compare_models_by_length"}
    order = entity_order(results.runs)
    for run in sorted(results.runs, key=lambda r: (order(r.entity), r.task)):
        heatmap = build_heatmap(run)
        if heatmap is None:
            continue
        heatmap.name = unique_stem(heatmap.name, taken)
        figures.append(Figure(heatmap.name, heatmap.title, "heatmap", [heatmap], annotate=annotate))
        deviation = build_std_heatmap(run) if run.custom else None  # experiments' runs (Inspect NIAH's std)
        if deviation is not None:
            deviation.name = unique_stem(deviation.name, taken)
            figures.append(Figure(deviation.name, deviation.title, "heatmap", [deviation], annotate=annotate))
    panels: dict[str, dict[str, list[tuple[int, float, int]]]] = defaultdict(dict)
    ylabels: dict[str, str] = {}
    xlabels: dict[str, str] = {}
    notes: list[str] = []
    for run in results.runs:
        family = eval_family(run.spec)
        series = family.comparison_series(run)
        if series:
            label = run.model if run.standard else run.entity
            panels[run.spec.name][label] = series
            ylabels[run.spec.name] = JUDGE_LABEL if run.judged else metric_label(run.spec)
            if family.comparison_xlabel:
                xlabels[run.spec.name] = family.comparison_xlabel
            if family.comparison_note and family.comparison_note not in notes:
                notes.append(family.comparison_note)
    if panels:
        ordered = dict(sorted(panels.items()))
        figures.append(
            Figure(
                "compare_models_by_length",
                "Models compared: score against context length",
                "lines",
                lines=Lines(ordered, ylabels, xlabels, results.scoring, notes),
            )
        )
    return figures


# --------------------------------------------------------------------------------------------- drawing


def _new_figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    figure = MplFigure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _draw_heatmap(figure: Any, axes: Any, heatmap: Heatmap, annotate: str, title: str, width: float) -> None:
    import numpy as np

    data = np.array(
        [[np.nan if v is None else v for v in row] for row in heatmap.values],
        dtype=float,
    )
    axes.set_facecolor(EMPTY_COLOUR)
    axes.patch.set_hatch(EMPTY_HATCH)
    axes.patch.set_edgecolor("#9a9a9a")
    nrows, ncols = data.shape
    image = axes.pcolormesh(
        np.arange(ncols + 1) - 0.5,
        np.arange(nrows + 1) - 0.5,
        np.ma.masked_invalid(data),
        cmap=COLORMAP,
        vmin=0.0,
        vmax=heatmap.vmax,
    )
    axes.set_xlim(-0.5, ncols - 0.5)
    axes.set_ylim(nrows - 0.5, -0.5)  # first row at the top
    axes.set_xticks(range(ncols), tick_labels(heatmap.columns), rotation=45, ha="right", fontsize=7)
    step = max(1, nrows // 32)
    axes.set_yticks(range(0, nrows, step), tick_labels(heatmap.rows)[::step], fontsize=7)
    axes.set_xlabel(plain_figure_text(heatmap.column_label), fontsize=8)
    axes.set_ylabel(plain_figure_text(heatmap.row_label), fontsize=8)
    counts = [c for row in heatmap.counts for c in row if c]
    subtitle = heatmap.subtitle
    if any(v is None for row in heatmap.values for v in row):
        subtitle += "; hatched grey = " + ("fewer than 2 runs" if heatmap.statistic == "std" else "no samples")
    if annotate != "none" and nrows * ncols <= MAX_ANNOTATED_CELLS:
        size = max(3.5, min(7.0, 150.0 / max(nrows, ncols, 1)))
        for r in range(nrows):
            for c in range(ncols):
                text = cell_text(heatmap, r, c, annotate)
                if text:
                    value = heatmap.values[r][c]
                    colour = "black" if value is not None and value > 0.6 * heatmap.vmax else "white"
                    label = axes.text(c, r, text, ha="center", va="center", fontsize=size, color=colour)
                    label.set_in_layout(False)  # inside the cells: keeps the layout pass fast
        statistic = "std" if heatmap.statistic == "std" else "mean"
        subtitle += {
            "counts": f"; numbers = {heatmap.count_unit} per cell",
            "values": f"; numbers = cell {statistic}s",
            "both": f"; numbers = cell {statistic}, n = {heatmap.count_unit} per cell",
        }.get(annotate, "")
    elif counts:
        spread = str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
        subtitle += f"; {heatmap.count_unit} per cell: {spread}"
    wrapped = textwrap.fill(subtitle, width=max(40, int(13 * width)))
    axes.set_title(plain_figure_text(f"{title}\n{wrapped}"), fontsize=8)
    bar = figure.colorbar(image, ax=axes, shrink=0.9)
    bar.set_label(plain_figure_text(heatmap.metric_label), fontsize=8)
    bar.ax.tick_params(labelsize=7)


def cell_text(heatmap: Heatmap, r: int, c: int, annotate: str) -> str:
    """The number drawn in a cell: its count, value or both; nothing in an empty (hatched) cell."""
    n, value = heatmap.counts[r][c], heatmap.values[r][c]
    if value is None or annotate == "none":
        return ""
    shown = f"{value:.0f}" if heatmap.vmax > 1 else f"{value:.2f}"
    return {"counts": str(n), "values": shown, "both": f"{shown}\nn={n}"}[annotate]


def tick_labels(values: Sequence[Any]) -> list[str]:
    """Axis labels of lengths or depths, rounded as far as they stay distinct: 17857 -> ``18k``, 7.142857 -> ``7``
    (``1.3k``, ``7.1`` when whole thousands or percents would merge two ticks)."""
    for decimals in range(4):
        labels = [_rounded(value, decimals) for value in values]
        if len(set(labels)) == len(set(values)):
            return labels
    return [short_number(value) for value in values]


def _rounded(value: Any, decimals: int) -> str:
    number = float(value)
    if abs(number) >= 1000:
        return f"{round(number / 1000, decimals):g}k"
    return f"{round(number, decimals):g}"


def _draw_lines(figure: Any, lines: Lines) -> None:
    names = list(lines.panels)
    ncols = min(3, len(names))
    nrows = math.ceil(len(names) / ncols)
    models = sorted({model for series in lines.panels.values() for model in series}, key=str.lower)
    style = {
        model: (
            LINE_COLOURS[i % len(LINE_COLOURS)],
            LINE_MARKERS[i % len(LINE_MARKERS)],
            LINE_STYLES[i % len(LINE_STYLES)],
        )
        for i, model in enumerate(models)
    }
    for index, name in enumerate(names):
        axes = figure.add_subplot(nrows, ncols, index + 1)
        for model, series in sorted(lines.panels[name].items(), key=lambda item: item[0].lower()):
            colour, marker, dash = style[model]
            xs = [length for length, _v, _n in series]
            ys = [value for _l, value, _n in series]
            n = sum(count for _l, _v, count in series)
            axes.plot(
                xs,
                ys,
                color=colour,
                marker=marker,
                linestyle=dash,
                linewidth=1.5,
                markersize=4,
                label=plain_figure_text(f"{model} (n={n})"),
            )
        axes.set_title(plain_figure_text(name), fontsize=9)
        axes.set_xlabel(plain_figure_text(lines.xlabels.get(name, "Context length (tokens)")), fontsize=8)
        axes.set_ylabel(plain_figure_text(lines.ylabels[name]), fontsize=8)
        top = 1.05 if lines.ylabels[name].endswith("(0-1)") else 105
        axes.set_ylim(-0.05 * top, top)
        if name in lines.xlabels:  # needle counts: whole numbers
            _needle_count_axis(axes, sorted({x for series in lines.panels[name].values() for x, _v, _n in series}))
        else:
            axes.xaxis.set_major_formatter(_k_formatter())
        axes.tick_params(labelsize=7)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=6, loc="best")
    text = "Models compared: paper score against context length, one line per model (n = rows)"
    for note in lines.notes:
        text += f"; {note}"
    text += f"; {SCORING_LABEL[lines.scoring]}"
    figure.suptitle(plain_figure_text(textwrap.fill(text, width=max(40, int(12 * figure.get_figwidth())))), fontsize=10)


def _k_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _pos: short_number(round(value)) if value >= 0 else "")


#: Up to this many needle counts, each gets its own tick (more: matplotlib picks whole numbers among them).
MAX_COUNT_TICKS = 12


def _needle_count_axis(axes: Any, counts: Sequence[int]) -> None:
    """An x-axis of needle counts: a tick at each count drawn (whole numbers even for a single count, where
    ``MaxNLocator(integer=True)`` finds fewer than its two integers in the view and falls back to fractions), and
    half a count of room either side."""
    from matplotlib.ticker import MaxNLocator

    if not counts:
        return
    if len(counts) <= MAX_COUNT_TICKS:
        axes.set_xticks(list(counts))
    else:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    low, high = counts[0], counts[-1]
    pad = max(0.5, 0.05 * (high - low))
    axes.set_xlim(low - pad, high + pad)


def draw(figure_spec: Figure) -> Any:
    """The matplotlib figure (Agg canvas, no pyplot) of a planned figure."""
    if figure_spec.kind == "heatmap":
        heatmap = figure_spec.heatmaps[0]
        width = min(11.0, max(5.5, 2.6 + 0.42 * len(heatmap.columns)))
        height = min(9.0, max(4.0, 1.8 + 0.26 * len(heatmap.rows)))
        figure = _new_figure(width, height)
        axes = figure.add_subplot(1, 1, 1)
        _draw_heatmap(figure, axes, heatmap, figure_spec.annotate, heatmap.title, width)
    else:
        assert figure_spec.lines is not None
        count = len(figure_spec.lines.panels)
        ncols = min(3, count)
        nrows = math.ceil(count / ncols)
        figure = _new_figure(4.8 * ncols, 3.6 * nrows + 0.4)
        _draw_lines(figure, figure_spec.lines)
    return figure


def render_bytes(figure_spec: Figure, pdf: bool = False) -> dict[str, bytes]:
    """A figure drawn as ``{"<name>.png": bytes}`` at 200 dpi (and ``<name>.pdf`` when asked), nothing written: the
    report folder writes them (:class:`needlebench.evaluation.report.write.ReportFolder`). Drawn with matplotlib's
    defaults, whatever matplotlibrc the current folder holds (:func:`.safety.default_style`)."""
    drawn = {}
    with default_style():
        figure = draw(figure_spec)
        for ext, options in (("png", {"dpi": DPI, "pil_kwargs": {"compress_level": 2}}), ("pdf", {})):
            if ext == "pdf" and not pdf:
                continue
            buffer = io.BytesIO()
            figure.savefig(buffer, format=ext, **options)
            drawn[f"{figure_spec.name}.{ext}"] = buffer.getvalue()
    return drawn


def render(figure_spec: Figure, out_dir: Path, pdf: bool = False) -> list[Path]:
    """Draw a figure to ``<name>.png`` at 200 dpi (and ``<name>.pdf`` when asked) in the folder ``out_dir``, through
    safe_fs (atomic, never through a link); return the paths."""
    paths = []
    with Folder.open(out_dir, create=True) as folder:
        for name, data in render_bytes(figure_spec, pdf=pdf).items():
            folder.write_bytes(name, data)
            paths.append(Path(out_dir) / name)
    return paths
