"""The numbers of ``needlebench report``: every mean of every edition, over one sample model (:class:`Sample`).

Two means, each under its own name:

* the **paper mean** (the tables' headline numbers): NeedleBench's summariser averages per grid cell, each cell
  the mean over its repeats (:func:`cell_mean`): S-RT per (length, depth), M-RT per length, M-RS per (length,
  depth, needle count); the per-size overall weights the three tasks with the edition's weights
  (:data:`needlebench.evaluation.scoring.overall.OVERALL_WEIGHTS`). v1 ATC is CircularEval ``perf_4`` per needle
  count (whole items only), weighted by needle count per category, ATC-CE-Overall the plain mean of the four
  categories; v2 ATC the mean per relation count weighted by relation count. Counting-Stars is the mean over the
  star x length grid (``viz.ipynb``). A family names its paper mean per edition (``EvalFamily.paper_mean``); the
  functions are in :data:`PAPER_MEANS`.
* the **lm-eval row mean**: what ``lm_eval`` prints (every row weighted alike), shown beside it in the
  ``scores`` table (:func:`lm_eval_row_mean`).

Every value states its sample count (:class:`Cell`); a value built from part of a config is marked partial and
the row's coverage says what it covers (:func:`run_coverage`, :func:`coverage_text`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from needlebench.evaluation import scoring
from needlebench.evaluation.families import eval_family
from needlebench.evaluation.report.load import Sample, TaskRun
from needlebench.evaluation.scoring.overall import overall_score
from needlebench.tasks.grid import ConfigSpec


@dataclass
class Cell:
    """A table value with the number of samples behind it (and a note such as ``partial``)."""

    value: float | None
    n: int
    note: str = ""


def mean_or_none(values: Iterable[float]) -> float | None:
    """The mean of ``values`` (exactly rounded sum), None when there is none."""
    items = [float(value) for value in values]
    return math.fsum(items) / len(items) if items else None


def headline_metric(spec: ConfigSpec) -> str:
    """The per-row metric the tables and heatmaps average for a config (its family's, for its edition)."""
    return eval_family(spec.family).headline_metric(spec)


# --------------------------------------------------------------------------------------------- grid means


def grid_cell(sample: Sample) -> tuple[Any, ...]:
    """The summariser's cell of a sample: (language, length, depth, needle count); a column a family does not
    vary is the same (or absent) in all its rows."""
    doc = sample.doc
    return (
        doc.get("language"),
        doc.get("context_length"),
        doc.get("depth_percent"),
        doc.get("num_needles"),
    )


def cell_mean(samples: Iterable[Sample], metric: str, cell: Callable[[Sample], Any] = grid_cell) -> Cell:
    """Mean over grid cells of the per-cell mean of ``metric`` (the reference summariser's naive mean)."""
    cells: dict[Any, list[float]] = defaultdict(list)
    for sample in samples:
        if metric in sample.metrics:
            cells[cell(sample)].append(float(sample.metrics[metric]))
    n = sum(len(values) for values in cells.values())
    return Cell(mean_or_none(mean_or_none(values) for values in cells.values()), n)  # type: ignore[misc]


def sample_std(values: Sequence[float]) -> float | None:
    """The sample standard deviation (n - 1 in the denominator) of two or more values, else None."""
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1))


def run_of(sample: Sample) -> Any:
    """The run (repeat) a sample belongs to: the row's ``repeat``; a row without one is a run of its own."""
    repeat = sample.doc.get("repeat")
    return repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else ("row", id(sample))


def runs_summary(samples: Sequence[Sample], metric: str) -> tuple[Cell, float | None, int]:
    """(mean over grid cells, standard deviation over runs, number of runs): each run's score is its own mean
    over grid cells; the deviation is the sample standard deviation of those (None with fewer than two runs)."""
    by_run: dict[Any, list[Sample]] = defaultdict(list)
    for sample in samples:
        if metric in sample.metrics:
            by_run[run_of(sample)].append(sample)
    means = [cell_mean(group, metric).value for group in by_run.values()]
    return cell_mean(samples, metric), sample_std([m for m in means if m is not None]), len(by_run)


def row_mean(samples: Iterable[Sample], metric: str) -> Cell:
    """lm-eval's aggregation: the plain mean over rows."""
    values = [
        float(s.metrics[metric]) for s in samples if metric in s.metrics and not isinstance(s.metrics[metric], list)
    ]
    return Cell(mean_or_none(values), len(values))


def task_overall(edition: str, cells: Mapping[str, Cell]) -> Cell:
    """The per-size overall of an edition from its task cells (task label -> cell), with their sample count; no
    value unless every task has one."""
    values = {task: cell.value for task, cell in cells.items()}
    value = overall_score(edition, values) if None not in values.values() else None  # type: ignore[arg-type]
    return Cell(value, sum(cell.n for cell in cells.values()))


# --------------------------------------------------------------------------------------------- ATC means


def perf_4_by_needles(
    rows_by_needles: Mapping[int, list[tuple[str, str, bool]]],
) -> dict[int, Cell]:
    """CircularEval ``perf_4`` per needle count over complete items (n = items); counts with none are left out."""
    perf: dict[int, Cell] = {}
    for needles, rows in sorted(rows_by_needles.items()):
        complete = scoring.complete_items(rows)
        if complete:
            items = len({item for item, _r, _c in complete})
            perf[needles] = Cell(scoring.circular_scores(complete)["perf_4"], items)
    return perf


def atc_by_category(samples: Iterable[Sample]) -> dict[str, dict[int, Cell]]:
    """v1 ATC: CircularEval ``perf_4`` per category (``EN-Direct-CE``...) and needle count; samples of a config
    without a category (open-ended) are left out."""
    by_category: dict[str, dict[int, list[tuple[str, str, bool]]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        category = eval_family(sample.spec.family).category(sample.spec)
        if category is None or "perf_4" not in sample.metrics:
            continue
        item_id, rotation, correct = sample.metrics["perf_4"]
        num = int(sample.doc["num_needles"])
        by_category[category][num].append((str(item_id), str(rotation), bool(correct)))
    return {category: perf_4_by_needles(rows) for category, rows in by_category.items()}


def atc_category_cell(perf: Mapping[int, Cell]) -> Cell:
    """A category's score: ``perf_4`` per needle count weighted by needle count (n = whole items)."""
    if not perf:
        return Cell(None, 0)
    value = scoring.atc_category_score({n: cell.value for n, cell in perf.items()})  # type: ignore[misc]
    return Cell(value, sum(cell.n for cell in perf.values()))


def atc_overall_cell(categories: Mapping[str, Cell], overall_categories: Sequence[str]) -> Cell:
    """ATC-CE-Overall: plain mean of the ``overall_categories``; marked partial when some are missing."""
    present = [c for c in overall_categories if categories.get(c) and categories[c].value is not None]
    if not present:
        return Cell(None, 0)
    value = scoring.atc_overall({c: categories[c].value for c in present})  # type: ignore[misc]
    n = sum(categories[c].n for c in present)
    total = len(overall_categories)
    note = "" if len(present) == total else f"partial: {len(present)} of {total} categories"
    return Cell(value, n, note)


def relation_weighted_cell(samples: Iterable[Sample], metric: str) -> Cell:
    """v2 ATC: the mean of ``metric`` per relation count, weighted by the count (n = rows)."""
    pairs = [(int(s.doc["num_needles"]), float(s.metrics[metric])) for s in samples if metric in s.metrics]
    return Cell(scoring.relation_weighted(pairs) if pairs else None, len(pairs))


# --------------------------------------------------------------------------------------------- Counting-Stars


def counting_stars_cell(samples: Iterable[Sample]) -> Cell:
    """The notebook's task score: mean over the star x length grid (each cell the mean of its rows)."""
    cells: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    rows = 0
    for sample in samples:
        values = sample.metrics.get("per_star")
        if not isinstance(values, list):
            continue
        rows += 1
        for index, value in enumerate(values):
            cells[(sample.doc.get("context_length"), index)].append(float(value))
    return Cell(mean_or_none(mean_or_none(v) for v in cells.values()), rows)  # type: ignore[misc]


# --------------------------------------------------------------------------------------------- paper means


def _circular_mean(spec: ConfigSpec, samples: Sequence[Sample], metric: str) -> Cell:
    return atc_category_cell(atc_by_category(samples).get(eval_family(spec.family).category(spec), {}))


#: How a paper mean is computed, by the key a family names per edition (``EvalFamily.paper_mean``): a function of
#: (config, its samples, metric).
PAPER_MEANS: dict[str, Callable[[ConfigSpec, Sequence[Sample], str], Cell]] = {
    "grid": lambda _spec, samples, metric: cell_mean(samples, metric),
    "circular": _circular_mean,
    "relation_weighted": lambda _spec, samples, metric: relation_weighted_cell(samples, metric),
    "star_grid": lambda _spec, samples, _metric: counting_stars_cell(samples),
    "rows": lambda _spec, samples, metric: row_mean(samples, metric),
    "none": lambda _spec, _samples, _metric: Cell(None, 0),
}


def paper_mean(spec: ConfigSpec, samples: Sequence[Sample], metric: str) -> tuple[Cell, str]:
    """(the paper mean of ``metric`` over a config's samples, what the scores table calls it)."""
    key, name = eval_family(spec.family).paper_mean(spec, metric)
    return PAPER_MEANS[key](spec, samples, metric), name


def lm_eval_row_mean(run: TaskRun, metric: str) -> Cell:
    """What lm-eval reported for ``metric`` (else its aggregation recomputed from the samples)."""
    if run.judged:  # lm-eval printed the rule-based metric; this is the plain row mean of the judge scores
        return row_mean(run.samples, metric)
    if metric in run.reported:
        return Cell(run.reported[metric], len(run.samples))
    if metric == "perf_4":
        rows = scoring.complete_items(
            (
                str(s.metrics["perf_4"][0]),
                str(s.metrics["perf_4"][1]),
                bool(s.metrics["perf_4"][2]),
            )
            for s in run.samples
            if "perf_4" in s.metrics
        )
        return Cell(scoring.circular_scores(rows)["perf_4"] if rows else None, len(run.samples))
    return row_mean(run.samples, metric)


# --------------------------------------------------------------------------------------------- coverage


def lengths_text(lengths: Iterable[int]) -> str:
    """Context lengths as a coverage text shows them: ``1k, 2k`` or ``1k-32k (8)``."""
    values = sorted(length for length in lengths if length)
    if not values:
        return "-"
    shown = [short_number(value) for value in values]
    return ", ".join(shown) if len(shown) <= 4 else f"{shown[0]}-{shown[-1]} ({len(shown)})"


def short_number(value: Any) -> str:
    """``16000`` -> ``16k``; numbers below 1000 as they are."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value >= 1000:
        return f"{value / 1000:g}k"
    return str(value)


def _lengths_part(spec: ConfigSpec, seen: set[tuple[Any, ...]]) -> str:
    lengths = {length for length, _d, _n in seen if length in spec.lengths}
    if len(lengths) == len(spec.lengths):
        return f"all {len(lengths)} lengths"
    return f"lengths {lengths_text(lengths)} of {lengths_text(spec.lengths)}"


def _depths_part(spec: ConfigSpec, seen: set[tuple[Any, ...]]) -> str:
    depths = {depth for _l, depth, _n in seen if depth is not None}
    return f"{len(depths & {float(d) for d in spec.depths})}/{len(spec.depths)} depths"


def _needle_counts_part(spec: ConfigSpec, seen: set[tuple[Any, ...]]) -> str:
    needles = {n for _l, _d, n in seen} & set(spec.needle_counts)
    return f"{len(needles)}/{len(spec.needle_counts)} needle counts"


def _needle_list_part(spec: ConfigSpec, seen: set[tuple[Any, ...]]) -> str:
    counts = sorted({n for _l, _d, n in seen if n is not None})
    return f"needle counts {', '.join(map(str, counts))}" if len(counts) <= 6 else f"{len(counts)} needle counts"


#: What a partial run's coverage text says beside rows and cells, by the keys a family lists
#: (``EvalFamily.coverage_parts``): a function of (config, the cells seen).
COVERAGE_PARTS: dict[str, Callable[[ConfigSpec, set[tuple[Any, ...]]], str]] = {
    "lengths": _lengths_part,
    "depths": _depths_part,
    "needle_counts": _needle_counts_part,
    "needle_list": _needle_list_part,
}


def run_coverage(run: TaskRun) -> tuple[bool, str]:
    """(complete?, text) of what part of its config a task run covers."""
    spec = run.spec
    family = eval_family(spec.family)
    expected = family.expected_cells(spec)
    seen = {family.observed_cell(sample.doc) for sample in run.samples}
    cells = len(seen & expected)
    rows = len(run.samples)
    complete = cells >= len(expected) and rows >= spec.num_rows
    if complete:
        return True, f"full ({rows} rows)"
    parts = [f"{rows}/{spec.num_rows} rows", f"{cells}/{len(expected)} cells"]
    parts += [COVERAGE_PARTS[part](spec, seen) for part in family.coverage_parts]
    return False, f"partial ({', '.join(parts)})"


def partial_runs(runs: Iterable[TaskRun]) -> list[TaskRun]:
    """The runs that cover part of their config (:func:`run_coverage`)."""
    return [run for run in runs if not run_coverage(run)[0]]


def partial_note(runs: Sequence[TaskRun], partial: Sequence[TaskRun], both: bool = False) -> str:
    """The note of a table cell built from ``runs`` (``partial`` lists the partial ones): ``partial`` when one of
    them covers part of its config; ``partial: EN only`` when a both-languages cell holds one language."""
    languages = sorted({run.spec.language for run in runs if run.samples})
    if both and len(languages) == 1:
        return f"partial: {languages[0].upper()} only"
    return "partial" if any(run in partial for run in runs) else ""


def combined_note(cells: Sequence[Cell]) -> str:
    """The note of a cell computed from ``cells``: the most specific of their notes. Cells of one language each,
    but not the same one ("EN only" beside "ZH only"), make a ``partial`` cell (both languages are in it)."""
    notes = {cell.note for cell in cells if cell.note}
    only = {note for note in notes if note.endswith(" only")}
    if len(only) > 1:
        notes = (notes - only) | {"partial"}
    ordered = sorted(notes, key=lambda note: (len(note), note))  # never the order of a set (it varies by process)
    return ordered[-1] if ordered else ""


def noted(cell: Cell, note: str) -> Cell:
    """``cell`` with ``note`` when it holds a value; an empty cell has neither a count nor a note."""
    if cell.value is None:
        return Cell(None, 0)
    return Cell(cell.value, cell.n, cell.note or note)


def coverage_text(runs: Sequence[TaskRun], expected_configs: Sequence[str] = ()) -> str:
    """``full`` or ``partial: ...`` for a table row built from ``runs``."""
    notes = [(run.task, *run_coverage(run)) for run in runs]
    present = {run.spec.name for run in runs}
    missing = [config for config in expected_configs if config not in present]
    partial = [f"{task} {text.removeprefix('partial ')}" for task, complete, text in notes if not complete]
    if not partial and not missing:
        return "full"
    parts = partial + ([f"missing {', '.join(missing)}"] if missing else [])
    return "partial: " + "; ".join(parts)
