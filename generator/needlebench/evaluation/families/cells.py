"""What a family's report half speaks, below the report: a value with its sample count (:class:`Cell`), a table
(:class:`Table`), the grid and row means, cell notes, coverage texts and the order of models in a table.

The family modules build their own tables and means with these (:meth:`EvalFamily.tables`,
:meth:`EvalFamily.paper_mean`); :mod:`needlebench.evaluation.report` renders them (Markdown, CSV, HTML) and builds the
tables shared by several families. A family reads the report's samples and runs through the attributes named in
:class:`SampleLike` and :class:`RunLike`, never by importing the report.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class SampleLike(Protocol):
    """What a family reads of a logged sample (``report.load.Sample``)."""

    spec: Any
    doc: dict[str, Any]
    metrics: dict[str, Any]
    judged: bool


class RunLike(Protocol):
    """What a family reads of a task run (``report.load.TaskRun``): its config, task name and samples, the model row
    it is shown in, and what part of its config it covers (``(complete?, text)``, :meth:`EvalFamily.coverage`)."""

    spec: Any
    task: str
    samples: list[Any]
    entity: str
    standard: bool
    coverage: tuple[bool, str]


@dataclass
class Cell:
    """A table value with the number of samples behind it (and a note such as ``partial``)."""

    value: float | None
    n: int
    note: str = ""


@dataclass
class Table:
    """A table to write as ``<name>.md``, ``<name>.csv`` and in the HTML page."""

    name: str
    title: str
    header: list[str]
    rows: list[list[Any]]
    digits: int = 2
    note: str = ""


def mean_or_none(values: Iterable[float]) -> float | None:
    """The mean of ``values`` (exactly rounded sum), None when there is none."""
    items = [float(value) for value in values]
    return math.fsum(items) / len(items) if items else None


# --------------------------------------------------------------------------------------------- means


def grid_cell(sample: SampleLike) -> tuple[Any, ...]:
    """The summariser's cell of a sample: (language, length, depth, needle count); a column a family does not
    vary is the same (or absent) in all its rows."""
    doc = sample.doc
    return (
        doc.get("language"),
        doc.get("context_length"),
        doc.get("depth_percent"),
        doc.get("num_needles"),
    )


def cell_mean(samples: Iterable[SampleLike], metric: str, cell: Callable[[Any], Any] = grid_cell) -> Cell:
    """Mean over grid cells of the per-cell mean of ``metric`` (the reference summariser's naive mean)."""
    cells: dict[Any, list[float]] = defaultdict(list)
    for sample in samples:
        if metric in sample.metrics:
            cells[cell(sample)].append(float(sample.metrics[metric]))
    n = sum(len(values) for values in cells.values())
    return Cell(mean_or_none(mean_or_none(values) for values in cells.values()), n)  # type: ignore[misc]


def row_mean(samples: Iterable[SampleLike], metric: str) -> Cell:
    """lm-eval's aggregation: the plain mean over rows."""
    values = [
        float(s.metrics[metric]) for s in samples if metric in s.metrics and not isinstance(s.metrics[metric], list)
    ]
    return Cell(mean_or_none(values), len(values))


# --------------------------------------------------------------------------------------------- notes


def entity_order(runs: Sequence[RunLike]) -> Callable[[str], tuple[Any, ...]]:
    """Sort key of table rows: the project's tasks first, then custom ones, each by name (case-insensitive)."""
    standard = {run.entity: run.standard for run in runs}
    return lambda entity: (not standard.get(entity, True), entity.lower())


def entities(runs: Sequence[RunLike]) -> list[str]:
    """The table rows (models, or a model and a custom task) of ``runs``, in :func:`entity_order`."""
    return sorted({run.entity for run in runs}, key=entity_order(runs))


def partial_runs(runs: Iterable[RunLike]) -> list[RunLike]:
    """The runs that cover part of their config (``run.coverage``)."""
    return [run for run in runs if not run.coverage[0]]


def partial_note(runs: Sequence[RunLike], partial: Sequence[RunLike], both: bool = False) -> str:
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


# --------------------------------------------------------------------------------------------- coverage


def coverage_text(runs: Sequence[RunLike], expected_configs: Sequence[str] = ()) -> str:
    """``full`` or ``partial: ...`` for a table row built from ``runs``."""
    notes = [(run.task, *run.coverage) for run in runs]
    present = {run.spec.name for run in runs}
    missing = [config for config in expected_configs if config not in present]
    partial = [f"{task} {text.removeprefix('partial ')}" for task, complete, text in notes if not complete]
    if not partial and not missing:
        return "full"
    parts = partial + ([f"missing {', '.join(missing)}"] if missing else [])
    return "partial: " + "; ".join(parts)


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


#: A grid cell as coverage counts it: (length, depth, needle count), None for what a family does not vary.
GridCell = tuple[Any, ...]


def lengths_part(spec: Any, seen: set[GridCell]) -> str:
    """Which of a config's lengths the cells seen cover."""
    lengths = {length for length, _d, _n in seen if length in spec.lengths}
    if len(lengths) == len(spec.lengths):
        return f"all {len(lengths)} lengths"
    return f"lengths {lengths_text(lengths)} of {lengths_text(spec.lengths)}"


def depths_part(spec: Any, seen: set[GridCell]) -> str:
    """How many of a config's depths the cells seen cover."""
    depths = {depth for _l, depth, _n in seen if depth is not None}
    return f"{len(depths & {float(d) for d in spec.depths})}/{len(spec.depths)} depths"


def needle_counts_part(spec: Any, seen: set[GridCell]) -> str:
    """How many of a config's needle counts the cells seen cover."""
    needles = {n for _l, _d, n in seen} & set(spec.needle_counts)
    return f"{len(needles)}/{len(spec.needle_counts)} needle counts"


def needle_list_part(spec: Any, seen: set[GridCell]) -> str:
    """The needle counts the cells seen hold, listed (up to 6) or counted."""
    counts = sorted({n for _l, _d, n in seen if n is not None})
    return f"needle counts {', '.join(map(str, counts))}" if len(counts) <= 6 else f"{len(counts)} needle counts"
