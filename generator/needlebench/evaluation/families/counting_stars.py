"""Counting-Stars in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from needlebench.evaluation import scoring
from needlebench.evaluation.families.base import NUMBERS, EvalFamily
from needlebench.evaluation.families.cells import (
    Cell,
    Table,
    combined_note,
    coverage_text,
    entities,
    mean_or_none,
    noted,
    partial_note,
    partial_runs,
)
from needlebench.evaluation.families.hooks import (
    MEAN,
    REFERENCE_SUFFIX,
    TaskTemplate,
    agg_flat_mean,
    prediction,
    reference_prediction,
)
from needlebench.tasks.grid import SIZES

if TYPE_CHECKING:
    from needlebench.tasks.grid import ConfigSpec


# --------------------------------------------------------------------------------------------- report


def star_grid_cell(samples: Iterable[Any]) -> Cell:
    """The notebook's task score: mean over the star x length grid (each cell the mean of its rows; n = rows)."""
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


# --------------------------------------------------------------------------------------------- lm-eval hooks


def _star_lists(doc: Mapping[str, Any]) -> tuple[list[int], list[int] | None]:
    wrong = doc.get("wrong_counts")
    reasoning = scoring.normalize_task(doc["task_variant"]) == "reasoning"
    return list(doc["star_counts"]), (list(wrong) if wrong and reasoning else None)


def counting_stars_star_scores(doc: Mapping[str, Any], text: str) -> list[float]:
    """Per-star scores (0..1, in star order) of a Counting-Stars row."""
    stars, wrong = _star_lists(doc)
    return scoring.star_scores(text, stars, wrong, doc["task_variant"], doc["language"])


def counting_stars_reference_scores(doc: Mapping[str, Any], text: str) -> list[float]:
    """Per-star scores of a Counting-Stars row as ``viz.ipynb`` computes them (0 where it would raise)."""
    stars, wrong = _star_lists(doc)
    return scoring.notebook_star_scores(text, stars, wrong, doc["task_variant"], doc["language"])


def process_counting_stars(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """Counting-Stars: the row score (mean over stars, 0..1) and the per-star scores kept for heatmaps, and
    their reference twins (the notebook's parse-and-score rule)."""
    stars = counting_stars_star_scores(doc, prediction(doc, results))
    reference = counting_stars_reference_scores(doc, reference_prediction(doc, results))
    return {
        "star_score": math.fsum(stars) / len(stars) if stars else 0.0,
        "per_star": stars,
        "star_score_reference": math.fsum(reference) / len(reference) if reference else 0.0,
        "per_star_reference": reference,
    }


def oracle_counts(doc: Mapping[str, Any]) -> str:
    """The JSON object the question asks for, with every true count."""
    return scoring.answer_json(doc["star_counts"], doc["language"])


#: Tokens per star in the JSON answer (a number, a comma, a space) plus slack for the frame.
TOKENS_PER_STAR = 8
STAR_SLACK_TOKENS = 64

#: The base budget is that of 32 stars; each config's budget is scaled by its stars (:meth:`max_gen_toks`).
TEMPLATE = TaskTemplate(
    "counting_stars",
    "Counting-Stars",
    process_counting_stars,
    (
        ("star_score", MEAN),
        ("per_star", agg_flat_mean),
        ("star_score_reference", MEAN),
        ("per_star_reference", agg_flat_mean),
    ),
    TOKENS_PER_STAR * 32 + STAR_SLACK_TOKENS,
    oracle_counts,
)


class CountingStars(EvalFamily):
    key = "counting_stars"

    # ------------------------------------------------------------------------------------ lm-eval task

    edition_templates = {"v1": TEMPLATE}
    group_metrics = {"v1": ("star_score",)}

    def max_gen_toks(self, spec: ConfigSpec) -> int:
        """Budgets scale with the number of stars."""
        return TOKENS_PER_STAR * int(spec.stars or 0) + STAR_SLACK_TOKENS

    # ------------------------------------------------------------------------------------ report

    headline = {"v1": "star_score"}
    metric_label = {"v1": "Counting-Stars star score (0-1)"}
    paper_mean_name = {"v1": "mean over star x length grid"}
    #: The score of each star, in star order.
    value_shapes = {"per_star": NUMBERS}
    explanation = {"v1": "Counting-Stars is the mean over the star x length grid"}
    heatmap = True
    heatmap_row_label = "Star index"
    heatmap_vmax = 1.0
    heatmap_tokens = False
    #: The table's four task columns: (variant, language, header), in the notebook's order; Avg. is their mean.
    TABLE_COLUMNS = (
        ("acquisition", "zh", "Me-Acq ZH"),
        ("acquisition", "en", "Me-Acq EN"),
        ("reasoning", "zh", "Me-Rea ZH"),
        ("reasoning", "en", "Me-Rea EN"),
    )

    def paper_mean(self, spec, samples, metric: str) -> tuple[Cell, str]:
        """The notebook's task score (:func:`star_grid_cell`), whatever the metric."""
        return star_grid_cell(samples), self.paper_mean_name[spec.edition]

    def off_grid(self, spec, record: Mapping[str, Any]) -> str | None:
        """A row scoring more stars than its config has."""
        stars = spec.stars
        for name in ("per_star", "per_star" + REFERENCE_SUFFIX):
            value = record.get(name)
            if stars and isinstance(value, list) and len(value) > stars:
                return f"metric {name} holds {len(value):,} star scores; {spec.name} has {stars} stars"
        return None

    def tables(self, runs, edition: str) -> list[Table]:
        """Models x (size, star count) as rows: the notebook's score of each task (mean over the star x length
        grid) and their mean."""
        columns = self.TABLE_COLUMNS
        rows = []
        keys = sorted(
            {(run.spec.size, int(run.spec.stars or 0)) for run in runs},
            key=lambda k: (SIZES.index(k[0]), k[1]),
        )
        for entity in entities(runs):
            for size, stars in keys:
                mine = [
                    r for r in runs if r.entity == entity and r.spec.size == size and int(r.spec.stars or 0) == stars
                ]
                if not mine:
                    continue
                partial = partial_runs(mine)
                chosen = [[r for r in mine if (r.spec.variant, r.spec.language) == (v, lang)] for v, lang, _ in columns]
                cells = [
                    noted(star_grid_cell(s for r in runs_of for s in r.samples), partial_note(runs_of, partial))
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
                self.key,
                "Counting-Stars (mean over the star x length grid, 0-1)",
                ["Model", "Size", "Stars", *(header for _v, _l, header in columns), "Avg.", "Coverage"],
                rows,
                digits=3,
                note="n = rows (one prompt of a length). Avg. = mean of the four tasks, only when all four are "
                "present.",
            )
        ]

    def heatmap_rows(self, spec) -> list:
        return list(range(1, int(spec.stars or 0) + 1))

    def count_unit(self, per_needle: bool, judged: bool) -> str:
        return "star answers"

    def heatmap_points(self, spec, sample, per_needle: bool) -> list[tuple]:
        """Star index x length: each star's score of the row."""
        length = int(sample.doc["context_length"])
        return [(index + 1, length, float(v)) for index, v in enumerate(sample.metrics.get("per_star") or [])]


FAMILY = CountingStars()
