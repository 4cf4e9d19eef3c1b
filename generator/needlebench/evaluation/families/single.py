"""S-RT in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from needlebench.evaluation.families.base import EvalFamily


class Single(EvalFamily):
    key = "single"

    # ------------------------------------------------------------------------------------ lm-eval task

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

    # ------------------------------------------------------------------------------------ report

    headline = {"v1": "score", "v2": "score"}
    metric_label = {"v1": "S-RT score (0-100)", "v2": "S-RT v2 score (keyword match, 0-100)"}
    table = {"v1": "size", "v2": "size"}
    paper_means = {
        "v1": ("grid", "mean over (length, depth) cells"),
        "v2": ("grid", "v2: mean over (length, depth) cells"),
    }
    comparison = {"v1": "length", "v2": "length"}
    haystack = True
    heatmap = True
    coverage_parts = ("lengths", "depths")

    def expected_cells(self, spec) -> set[tuple]:
        return {(length, float(depth), 1) for length in spec.lengths for depth in spec.depths}

    def observed_cell(self, doc) -> tuple:
        depth = doc.get("depth_percent")
        return (doc.get("context_length"), None if depth is None else float(depth), 1)

    # ------------------------------------------------------------------------------------ end report


FAMILY = Single()
