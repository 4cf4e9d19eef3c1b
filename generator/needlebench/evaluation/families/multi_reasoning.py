"""M-RS in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from needlebench.evaluation.families.base import EvalFamily


class MultiReasoning(EvalFamily):
    key = "multi_reasoning"

    # ------------------------------------------------------------------------------------ lm-eval task

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

    # ------------------------------------------------------------------------------------ report

    #: v1: the reference's keyword match (``strict``, the whole answer, is listed beside it); v2: the boxed exact
    #: match.
    headline = {"v1": "reference", "v2": "exact"}
    metric_label = {"v1": "M-RS score (0-100)", "v2": "M-RS v2 score (boxed exact match, 0-100)"}
    table = {"v1": "size", "v2": "size"}
    paper_means = {
        "v1": ("grid", "mean over (length, depth, needles) cells"),
        "v2": ("grid", "v2: mean over (length, depth, needles) cells"),
    }
    comparison = {"v1": "length", "v2": "length"}
    haystack = True
    heatmap = True
    coverage_parts = ("lengths", "depths", "needle_counts")
    #: The metrics the scores table lists per edition; ``strict`` has no reference-exact twin, so it is left out
    #: under ``--scoring reference``.
    SCORE_METRICS = {"v1": ("reference", "strict"), "v2": ("exact",)}
    DEFAULT_ONLY = ("strict",)

    def score_metrics(self, spec, scoring: str) -> tuple[str, ...]:
        listed = self.SCORE_METRICS[spec.edition]
        return tuple(metric for metric in listed if scoring == "default" or metric not in self.DEFAULT_ONLY)

    def expected_cells(self, spec) -> set[tuple]:
        return {
            (length, float(depth), n) for length in spec.lengths for depth in spec.depths for n in spec.needle_counts
        }

    def observed_cell(self, doc) -> tuple:
        depth = doc.get("depth_percent")
        return (doc.get("context_length"), None if depth is None else float(depth), doc.get("num_needles"))

    # ------------------------------------------------------------------------------------ end report


FAMILY = MultiReasoning()
