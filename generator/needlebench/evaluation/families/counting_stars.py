"""Counting-Stars in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from needlebench.evaluation import scoring
from needlebench.evaluation.families.base import EvalFamily
from needlebench.evaluation.families.hooks import (
    MEAN,
    TaskTemplate,
    agg_flat_mean,
    prediction,
    reference_prediction,
)

if TYPE_CHECKING:
    from needlebench.tasks.grid import ConfigSpec


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
    table = {"v1": "star_grid"}
    paper_means = {"v1": ("star_grid", "mean over star x length grid")}
    comparison = {"v1": "length"}
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

    def heatmap_rows(self, spec) -> list:
        return list(range(1, int(spec.stars or 0) + 1))

    def count_unit(self, per_needle: bool, judged: bool) -> str:
        return "star answers"

    def heatmap_points(self, spec, sample, per_needle: bool) -> list[tuple]:
        """Star index x length: each star's score of the row."""
        length = int(sample.doc["context_length"])
        return [(index + 1, length, float(v)) for index, v in enumerate(sample.metrics.get("per_star") or [])]


FAMILY = CountingStars()
