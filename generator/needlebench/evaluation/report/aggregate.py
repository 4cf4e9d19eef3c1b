"""The numbers of ``needlebench report``: every mean of every edition, over one sample model (:class:`Sample`).

Two means, each under its own name:

* the **paper mean** (the tables' headline numbers), which each family computes for a config
  (``EvalFamily.paper_mean``): NeedleBench's summariser averages per grid cell, each cell the mean over its repeats
  (:func:`cell_mean`): S-RT per (length, depth), M-RT per length, M-RS per (length, depth, needle count); the
  per-size overall weights the three tasks with the edition's weights
  (:data:`needlebench.evaluation.scoring.overall.OVERALL_WEIGHTS`). ATC and Counting-Stars have their own
  (:mod:`needlebench.evaluation.families.atc`, :mod:`needlebench.evaluation.families.counting_stars`).
* the **lm-eval row mean**: what ``lm_eval`` prints (every row weighted alike), shown beside it in the
  ``scores`` table (:func:`lm_eval_row_mean`).

Every value states its sample count (:class:`Cell`); a value built from part of a config is marked partial and
the row's coverage says what it covers (``TaskRun.coverage``, :func:`coverage_text`). The cell vocabulary lives
with the families (:mod:`needlebench.evaluation.families.cells`), which build their own tables with it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from needlebench.evaluation.families import eval_family
from needlebench.evaluation.families.cells import (
    Cell,
    cell_mean,
    combined_note,
    coverage_text,
    grid_cell,
    lengths_text,
    mean_or_none,
    noted,
    partial_note,
    partial_runs,
    row_mean,
    short_number,
)
from needlebench.evaluation.report.load import Sample, TaskRun
from needlebench.evaluation.scoring.overall import overall_score
from needlebench.tasks.grid import ConfigSpec

__all__ = [
    "Cell",
    "cell_mean",
    "combined_note",
    "coverage_text",
    "grid_cell",
    "headline_metric",
    "lengths_text",
    "lm_eval_row_mean",
    "mean_or_none",
    "noted",
    "paper_mean",
    "partial_note",
    "partial_runs",
    "row_mean",
    "run_coverage",
    "run_of",
    "runs_summary",
    "sample_std",
    "short_number",
    "task_overall",
]


def headline_metric(spec: ConfigSpec) -> str:
    """The per-row metric the tables and heatmaps average for a config (its family's, for its edition)."""
    return eval_family(spec).headline_metric(spec)


# --------------------------------------------------------------------------------------------- grid means


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


def task_overall(edition: str, cells: Mapping[str, Cell]) -> Cell:
    """The per-size overall of an edition from its task cells (task label -> cell), with their sample count; no
    value unless every task has one."""
    values = {task: cell.value for task, cell in cells.items()}
    value = overall_score(edition, values) if None not in values.values() else None  # type: ignore[arg-type]
    return Cell(value, sum(cell.n for cell in cells.values()))


# --------------------------------------------------------------------------------------------- paper means


def paper_mean(spec: ConfigSpec, samples: Sequence[Sample], metric: str) -> tuple[Cell, str]:
    """(the paper mean of ``metric`` over a config's samples, what the scores table calls it)."""
    return eval_family(spec).paper_mean(spec, samples, metric)


def lm_eval_row_mean(run: TaskRun, metric: str) -> Cell:
    """What lm-eval reported for ``metric`` (else its aggregation recomputed from the samples)."""
    if run.judged:  # lm-eval printed the rule-based metric; this is the plain row mean of the judge scores
        return row_mean(run.samples, metric)
    if metric in run.reported:
        return Cell(run.reported[metric], len(run.samples))
    return eval_family(run.spec).lm_eval_mean(run.samples, metric)


# --------------------------------------------------------------------------------------------- coverage


def run_coverage(run: TaskRun) -> tuple[bool, str]:
    """(complete?, text) of what part of its config a task run covers (its family's ``coverage``)."""
    return run.coverage
