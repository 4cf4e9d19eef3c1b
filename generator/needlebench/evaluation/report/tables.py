"""The tables of ``needlebench report``: per size and edition, ATC, Counting-Stars, custom configs, per task.

A family names the table builder that shows it per edition (``EvalFamily.table``, a key of :data:`TABLE_BUILDERS`);
a family's tables are named after its key, the size tables after the size. The NeedleBench haystack families (S-RT,
M-RT, M-RS) share one size table builder (:func:`size_table`), parametrised by the edition's weights
(:data:`needlebench.evaluation.scoring.overall.OVERALL_WEIGHTS`) and texts (:data:`SIZE_TABLES`). Every table title
says which scoring it shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from needlebench.evaluation.families import eval_family
from needlebench.evaluation.report.aggregate import (
    Cell,
    atc_by_category,
    atc_category_cell,
    atc_overall_cell,
    cell_mean,
    combined_note,
    counting_stars_cell,
    coverage_text,
    headline_metric,
    lengths_text,
    lm_eval_row_mean,
    mean_or_none,
    noted,
    paper_mean,
    partial_note,
    partial_runs,
    relation_weighted_cell,
    row_mean,
    run_coverage,
    runs_summary,
    task_overall,
)
from needlebench.evaluation.report.load import HEALTH, SCORING_LABEL, Results, TaskRun, entity_order
from needlebench.evaluation.scoring.overall import OVERALL_WEIGHTS, overall_formula
from needlebench.tasks.grid import SIZES, registry

#: Language columns of the tables: (language, header).
LANGUAGE_COLUMNS = (("zh", "ZH"), ("en", "EN"))


@dataclass
class Table:
    """A table to write as ``<name>.md``, ``<name>.csv`` and in the HTML page."""

    name: str
    title: str
    header: list[str]
    rows: list[list[Any]]
    digits: int = 2
    note: str = ""


def _entities(runs: Sequence[TaskRun]) -> list[str]:
    return sorted({run.entity for run in runs}, key=entity_order(runs))


@cache
def _builtin_configs() -> dict[tuple[str | None, str, str | None], list[str]]:
    """The built-in config names by (table, edition, size): what a standard model's table row expects."""
    groups: dict[tuple[str | None, str, str | None], list[str]] = defaultdict(list)
    for spec in registry().values():
        groups[(eval_family(spec.family).table.get(spec.edition), spec.edition, spec.size)].append(spec.name)
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
    for entity in _entities(runs):
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
        row.append(coverage_text(mine, _builtin_configs().get(("size", edition, size), []) if standard else []))
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


# --------------------------------------------------------------------------------------------- ATC


def atc_tables(runs: Sequence[TaskRun], edition: str) -> list[Table]:
    """v1 ATC, models as rows: each CircularEval category (perf_4 per needle count weighted by needle count),
    ATC-CE-Overall, the open-ended score per language; and perf_4 per needle count (detail table)."""
    family = eval_family(runs[0].spec.family)
    circular = [run for run in runs if family.category(run.spec)]
    main_rows, detail_rows = [], []
    counts = sorted({int(s.doc["num_needles"]) for run in circular for s in run.samples})
    extra = [c for c in family.OTHER_CATEGORIES if any(family.category(r.spec) == c for r in circular)]
    for entity in _entities(runs):
        mine = [run for run in runs if run.entity == entity]
        perf = atc_by_category([s for run in mine for s in run.samples])
        partial = partial_runs(mine)
        notes = {
            category: partial_note([r for r in mine if family.category(r.spec) == category], partial)
            for category in (*family.OVERALL_CATEGORIES, *family.OTHER_CATEGORIES)
        }
        categories = {
            category: noted(atc_category_cell(perf.get(category, {})), notes[category])
            for category in (*family.OVERALL_CATEGORIES, *extra)
        }
        overall = atc_overall_cell(categories, family.OVERALL_CATEGORIES)
        overall = noted(overall, combined_note(list(categories.values())[: len(family.OVERALL_CATEGORIES)]))
        row: list[Any] = [entity, *categories.values(), overall]
        for language in ("en", "zh"):
            open_runs = [r for r in mine if not family.category(r.spec) and r.spec.language == language]
            opened = [s for r in open_runs for s in r.samples]
            row.append(noted(row_mean(opened, family.headline[edition]), partial_note(open_runs, partial)))
        row.append(coverage_text(mine))
        main_rows.append(row)
        for category, by_needles in sorted(perf.items()):
            detail_rows.append(
                [entity, category, *[noted(by_needles.get(n, Cell(None, 0)), notes[category]) for n in counts]]
            )
    tables = [
        Table(
            family.key,
            "Ancestral Trace Challenge (CircularEval perf_4 per needle count, weighted by needle count; 0-100)",
            ["Model", *family.OVERALL_CATEGORIES, *extra, "ATC-CE-Overall", "EN-Open", "ZH-Open", "Coverage"],
            main_rows,
            note="n = whole items (4 rotations) for CircularEval, rows for open-ended; [partial]: from part of a "
            "config. ATC-CE-Overall is the plain mean of the four categories.",
        )
    ]
    if detail_rows:
        tables.append(
            Table(
                f"{family.key}_by_needles",
                "ATC perf_4 by needle count (0-100)",
                ["Model", "Category", *map(str, counts)],
                detail_rows,
                note="n = whole items; [partial]: from part of a config.",
            )
        )
    return tables


def atc_v2_tables(runs: Sequence[TaskRun], edition: str) -> list[Table]:
    """v2 ATC, models as rows: per language the score weighted by relation count over all question types and per
    question type; and the mean per relation count (detail table)."""
    family = eval_family(runs[0].spec.family)
    metric = family.headline[edition]
    languages = [lang for lang, _ in LANGUAGE_COLUMNS[::-1] if any(r.spec.language == lang for r in runs)]
    header = ["Model"]
    for lang in languages:
        header += [f"{lang.upper()} weighted", *(f"{lang.upper()} {t}" for t in family.QUESTION_TYPES)]
    header.append("Coverage")
    relation_counts = sorted({int(s.doc["num_needles"]) for run in runs for s in run.samples})
    main_rows, detail_rows = [], []
    for entity in _entities(runs):
        mine = [run for run in runs if run.entity == entity]
        scored = [s for run in mine for s in run.samples if metric in s.metrics]
        by_language = {lang: [s for s in scored if s.spec.language == lang] for lang in languages}
        line: list[Any] = [entity]
        for lang in languages:
            line.append(relation_weighted_cell(by_language[lang], metric))
            for question_type in family.QUESTION_TYPES:
                of_type = [s for s in by_language[lang] if str(s.doc["question_type"]) == question_type]
                line.append(relation_weighted_cell(of_type, metric))
        line.append(coverage_text(mine))
        main_rows.append(line)
        for lang in languages:
            if not by_language[lang]:
                continue
            by_relations: dict[int, list[float]] = defaultdict(list)
            for sample in by_language[lang]:
                by_relations[int(sample.doc["num_needles"])].append(float(sample.metrics[metric]))
            cells = [Cell(mean_or_none(by_relations.get(n, [])), len(by_relations.get(n, []))) for n in relation_counts]
            detail_rows.append([entity, lang.upper(), *cells])
    return [
        Table(
            f"{family.key}_v2",
            "Ancestral Trace Challenge v2 (boxed exact match, mean per relation count weighted by relation count; "
            "0-100)",
            header,
            main_rows,
            note="n = rows. 'weighted' covers all four question types; each question type is weighted by relation "
            "count on its own rows.",
        ),
        Table(
            f"{family.key}_v2_by_relations",
            "ATC v2 mean score by relation count (0-100)",
            ["Model", "Language", *map(str, relation_counts)],
            detail_rows,
            note="n = rows (all question types).",
        ),
    ]


# --------------------------------------------------------------------------------------------- Counting-Stars


def counting_stars_tables(runs: Sequence[TaskRun], edition: str) -> list[Table]:
    """Models x (size, star count) as rows: the notebook's score of each task (mean over the star x length grid)
    and their mean."""
    family = eval_family(runs[0].spec.family)
    columns = family.TABLE_COLUMNS
    rows = []
    keys = sorted(
        {(run.spec.size, int(run.spec.stars or 0)) for run in runs},
        key=lambda k: (SIZES.index(k[0]), k[1]),
    )
    for entity in _entities(runs):
        for size, stars in keys:
            mine = [r for r in runs if r.entity == entity and r.spec.size == size and int(r.spec.stars or 0) == stars]
            if not mine:
                continue
            partial = partial_runs(mine)
            chosen = [[r for r in mine if (r.spec.variant, r.spec.language) == (v, lang)] for v, lang, _ in columns]
            cells = [
                noted(counting_stars_cell(s for r in runs_of for s in r.samples), partial_note(runs_of, partial))
                for runs_of in chosen
            ]
            present = [c.value for c in cells if c.value is not None]
            average = noted(
                Cell(mean_or_none(present) if len(present) == len(columns) else None, sum(c.n for c in cells)),
                combined_note(cells),
            )
            rows.append([entity, size, stars, *cells, average, coverage_text(mine)])
    return [
        Table(
            family.key,
            "Counting-Stars (mean over the star x length grid, 0-1)",
            ["Model", "Size", "Stars", *(header for _v, _l, header in columns), "Avg.", "Coverage"],
            rows,
            digits=3,
            note="n = rows (one prompt of a length). Avg. = mean of the four tasks, only when all four are present.",
        )
    ]


#: The table builders a family can name per edition (``EvalFamily.table``), in the order their tables are listed:
#: each gets the runs of the families naming it for one edition, and that edition.
TABLE_BUILDERS: dict[str, Callable[[Sequence[TaskRun], str], list[Table]]] = {
    "size": size_tables,
    "circular_eval": atc_tables,
    "relation_weighted": atc_v2_tables,
    "star_grid": counting_stars_tables,
}


# --------------------------------------------------------------------------------------------- every task


def scores_table(results: Results) -> Table:
    """Per task: the paper mean and lm-eval's row mean side by side, with coverage."""
    rows = []
    for run in sorted(results.runs, key=lambda r: (entity_order(results.runs)(r.entity), r.task)):
        family = eval_family(run.spec.family)
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
                    run_coverage(run)[1],
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
    runs = [run for run in results.runs if run.custom and eval_family(run.spec.family).haystack]
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
                run_coverage(run)[1],
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
    """All tables with data: per size, ATC, Counting-Stars, custom configs, per-task means, run health, lm-eval's
    own numbers."""
    groups: dict[tuple[str, str], list[TaskRun]] = defaultdict(list)
    for run in results.runs:
        name = eval_family(run.spec.family).table.get(run.spec.edition)
        if name:
            groups[(name, run.spec.edition)].append(run)
    order = list(TABLE_BUILDERS)
    tables: list[Table] = []
    for name, edition in sorted(groups, key=lambda key: (order.index(key[0]), key[1])):
        tables += TABLE_BUILDERS[name](groups[(name, edition)], edition)
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
