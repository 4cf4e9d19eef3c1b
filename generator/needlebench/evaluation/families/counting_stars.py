"""Counting-Stars in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from needlebench.evaluation.families.base import EvalFamily


class CountingStars(EvalFamily):
    key = "counting_stars"

    # ------------------------------------------------------------------------------------ lm-eval task

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

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

    # ------------------------------------------------------------------------------------ end report


FAMILY = CountingStars()
