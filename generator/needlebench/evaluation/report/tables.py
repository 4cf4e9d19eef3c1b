"""The tables of ``needlebench report``: per size and edition, each family's own, custom configs, per task.

The NeedleBench haystack families (S-RT, M-RT, M-RS; ``EvalFamily.haystack``) share one size table per edition and
size (:func:`size_table`), parametrised by the edition's weights
(:data:`needlebench.evaluation.scoring.overall.OVERALL_WEIGHTS`) and texts (:data:`SIZE_TABLES`); the other families
build their own from their runs of an edition (``EvalFamily.tables``: ATC's CircularEval and v2 tables,
Counting-Stars'), named after the family's key. Every table title says which scoring it shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from needlebench.evaluation.families import EVAL_FAMILIES, eval_family
from needlebench.evaluation.families.cells import Table, entities
from needlebench.evaluation.report.aggregate import (
    Cell,
    cell_mean,
    combined_note,
    coverage_text,
    headline_metric,
    lengths_text,
    lm_eval_row_mean,
    noted,
    paper_mean,
    partial_note,
    partial_runs,
    runs_summary,
    task_overall,
)
from needlebench.evaluation.report.load import HEALTH, SCORING_LABEL, Results, TaskRun, entity_order
from needlebench.evaluation.scoring.overall import OVERALL_WEIGHTS, overall_formula
from needlebench.tasks.grid import SIZES, registry

__all__ = ["SIZE_TABLES", "Table", "build_tables", "size_table", "size_tables"]


@cache
def _size_table_configs() -> dict[tuple[str, str | None], list[str]]:
    """The built-in configs of the size tables by (edition, size): what a standard model's table row expects."""
    groups: dict[tuple[str, str | None], list[str]] = defaultdict(list)
    for spec in registry().values():
        if eval_family(spec).haystack:
            groups[(spec.edition, spec.size)].append(spec.name)
    return dict(groups)


# --------------------------------------------------------------------------------------------- size tables


@dataclass(frozen=True)
class SizeTable:
    """What an edition's size table is called and says (``{size}``: the size; ``{overall}``: how the overall is
    computed, from the edition's weights)."""

    name: str
    title: str
    note: str


#: The size table of each edition (``ConfigSpec.edition``).
SIZE_TABLES = {
    "v1": SizeTable(
        "needlebench_{size}",
        "NeedleBench {size} (paper mean per grid cell, 0-100; Overall = {overall})",
        "Each cell: paper mean (n = samples); [partial]: built from part of a config, [partial: EN only]: a "
        "both-languages cell from one language. ZH/EN: one language; the third column: both languages.",
    ),
    "v2": SizeTable(
        "needlebench_v2_{size}",
        "NeedleBench v2 {size} (mean per grid cell, 0-100; Overall = {overall})",
        "Each cell: mean over grid cells of the cells' mean row score (n = samples). S-RT is a binary keyword "
        "match, M-RT the share of needles found, M-RS the exact match of the last \\boxed{} answer. ZH/EN: one "
        "language; the third column: both languages. Computed from the rows, not with the reference summariser.",
    ),
}


def size_table(runs: Sequence[TaskRun], edition: str, size: str) -> Table:
    """Models as rows: each task of the edition's overall (S-RT, M-RT, M-RS) per language and both, each the paper
    mean over grid cells, and the overall with the edition's weights, for one size."""
    text = SIZE_TABLES[edition]
    tasks = list(OVERALL_WEIGHTS[edition])
    header = ["Model"]
    for label in (*tasks, "Overall"):
        header += [f"{label} ZH", f"{label} EN", label]
    header.append("Coverage")
    rows = []
    for entity in entities(runs):
        mine = [run for run in runs if run.entity == entity]
        partial = partial_runs(mine)
        parts: dict[str, dict[str, Cell]] = {}
        for task in tasks:
            of_task = [run for run in mine if run.spec.task_label == task]
            metric = headline_metric(of_task[0].spec) if of_task else ""
            parts[task] = {
                language: noted(
                    cell_mean([s for run in chosen for s in run.samples], metric),
                    partial_note(chosen, partial, both=language == "all"),
                )
                for language in ("zh", "en", "all")
                for chosen in [[run for run in of_task if language in ("all", run.spec.language)]]
            }
        row: list[Any] = [entity]
        for task in tasks:
            row += [parts[task]["zh"], parts[task]["en"], parts[task]["all"]]
        for column in ("zh", "en", "all"):
            cells = {task: parts[task][column] for task in tasks}
            row.append(noted(task_overall(edition, cells), combined_note(list(cells.values()))))
        standard = all(run.standard for run in mine)
        row.append(coverage_text(mine, _size_table_configs().get((edition, size), []) if standard else []))
        rows.append(row)
    return Table(
        text.name.format(size=size),
        text.title.format(size=size, overall=overall_formula(edition)),
        header,
        rows,
        note=text.note,
    )


def size_tables(runs: Sequence[TaskRun], edition: str) -> list[Table]:
    """:func:`size_table` of each size with runs, in size order."""
    by_size: dict[str | None, list[TaskRun]] = defaultdict(list)
    for run in runs:
        by_size[run.spec.size].append(run)
    return [size_table(by_size[size], edition, size) for size in SIZES if by_size.get(size)]


# --------------------------------------------------------------------------------------------- every task


def scores_table(results: Results) -> Table:
    """Per task: the paper mean and lm-eval's row mean side by side, with coverage."""
    rows = []
    for run in sorted(results.runs, key=lambda r: (entity_order(results.runs)(r.entity), r.task)):
        family = eval_family(run.spec)
        metrics = (family.headline_metric(run.spec),) if run.judged else family.score_metrics(run.spec, run.scoring)
        for metric in metrics:
            paper, how = paper_mean(run.spec, run.samples, metric)
            rows.append(
                [
                    run.entity,
                    run.task,
                    metric,
                    paper,
                    how,
                    lm_eval_row_mean(run, metric),
                    run.scorer,
                    run.coverage[1],
                ]
            )
    return Table(
        "scores",
        "Per task: the paper mean beside lm-eval's row mean",
        [
            "Model",
            "Task",
            "Metric",
            "Paper mean",
            "How",
            "lm-eval row mean",
            "Scorer",
            "Coverage",
        ],
        rows,
        note="The paper mean is the reference summariser's (every grid cell weighted alike); lm-eval's row mean is "
        "what lm_eval prints (every row weighted alike). They differ when cells hold different numbers of rows. "
        "Scorer: 'rule' is the metric lm-eval logged; 'judge' is the `needlebench judge` rating (1-10) x 10, "
        "unrated samples left out of the means (the row mean is then the plain mean of the judge scores).",
    )


def experiments_table(results: Results) -> Table | None:
    """Custom configs (experiment files, or configs known only from their samples), each under its own name:
    its grid, the scorer, the mean over grid cells and the standard deviation over runs."""
    runs = [run for run in results.runs if run.custom and eval_family(run.spec).haystack]
    if not runs:
        return None
    rows = []
    for run in sorted(runs, key=lambda r: (entity_order(results.runs)(r.entity), r.task)):
        spec = run.spec
        metric = headline_metric(spec)
        mean, std, count = runs_summary(run.samples, metric)
        rows.append(
            [
                run.entity,
                run.label,
                f"{spec.task_label} {spec.language.upper()}",
                (
                    f"{len(spec.lengths)} lengths ({lengths_text(spec.lengths)}) x {len(spec.depths)} depths x "
                    f"{spec.repeats} runs"
                ),
                run.grid_source,
                run.scorer,
                mean,
                std,
                count,
                run.unscored,
                run.coverage[1],
            ]
        )
    return Table(
        "experiments",
        "Custom configs (experiment files): mean over grid cells and standard deviation over runs (0-100)",
        [
            "Model",
            "Config",
            "Task",
            "Grid",
            "Grid from",
            "Scorer",
            "Mean",
            "Std over runs",
            "Runs",
            "Unscored",
            "Coverage",
        ],
        rows,
        note="Mean: every (length, depth) cell weighted alike, each cell the mean of its rows (n = scored samples). "
        "Std over runs: the sample standard deviation (n - 1) of the runs' own means over cells. Grid from: the "
        "experiment recorded in the dataset manifest (the run's data_dir or --data-dir), else the lengths and "
        "depths the rows carry. Unscored: judged samples without a usable rating, left out of the means.",
    )


def lm_eval_table(results: Results) -> Table | None:
    rows = [row for row in results.reported if row[2] not in HEALTH]
    if not rows:
        return None
    return Table(
        "lm_eval_results",
        "lm-eval results as the harness reported them (newest per model and task)",
        ["Model", "Task or group", "Metric", "Value", "Samples"],
        rows,
        digits=3,
    )


def health_table(results: Results) -> Table | None:
    """Per model and task: rows run, rows skipped as too long, outputs that used all of max_gen_toks, and the
    share without a final answer (``needlebench eval`` writes these beside lm-eval's metrics)."""
    health: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    samples: dict[tuple[str, str], Any] = {}
    for model, task, metric, value, count in results.reported:
        if metric in HEALTH:
            health[(model, task)][metric] = value
            samples[(model, task)] = count
    if not health:
        return None

    def shown(key: str, value: Any) -> Any:  # counts as whole numbers, the share in percent (0-100) as scores
        if key == "no_final_answer" and isinstance(value, (int, float)):
            return 100.0 * value
        return int(value) if isinstance(value, float) and value.is_integer() else value

    rows = [
        [model, task, samples[(model, task)], *(shown(key, values.get(key)) for key in HEALTH)]
        for (model, task), values in sorted(health.items())
    ]
    return Table(
        "run_health",
        "Run health (rows skipped as too long, outputs that used all of max_gen_toks, % without a final answer)",
        ["Model", "Task", "Rows", "Skipped (too long)", "Output truncated", "No final answer (%)"],
        rows,
        digits=1,
    )


def build_tables(results: Results) -> list[Table]:
    """All tables with data: per size, each family's own (ATC, Counting-Stars), custom configs, per-task means, run
    health, lm-eval's own numbers."""
    sizes: dict[str, list[TaskRun]] = defaultdict(list)
    own: dict[tuple[int, str], list[TaskRun]] = defaultdict(list)
    order = list(EVAL_FAMILIES.values())
    for run in results.runs:
        family = eval_family(run.spec)
        if family.haystack:
            sizes[run.spec.edition].append(run)
        else:
            own[(order.index(family), run.spec.edition)].append(run)
    tables: list[Table] = []
    for edition in sorted(sizes):
        tables += size_tables(sizes[edition], edition)
    for index, edition in sorted(own):
        tables += order[index].tables(own[(index, edition)], edition)
    experiments = experiments_table(results)
    if experiments:
        tables.append(experiments)
    tables.append(scores_table(results))
    health = health_table(results)
    if health:
        tables.append(health)
    harness = lm_eval_table(results)
    if harness:
        tables.append(harness)
    for table in tables:
        table.title = f"{table.title} [{SCORING_LABEL[results.scoring]}]"
    return tables
