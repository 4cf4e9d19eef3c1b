"""ATC in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from needlebench.evaluation.families.base import EvalFamily


class Atc(EvalFamily):
    key = "atc"

    # ------------------------------------------------------------------------------------ lm-eval task

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

    # ------------------------------------------------------------------------------------ report

    #: v1: the open-ended prompt's score (its CircularEval prompts list :data:`CIRCULAR_METRICS`); v2: the boxed
    #: exact match.
    headline = {"v1": "score", "v2": "accuracy"}
    metric_label = {"v1": "ATC perf_4 (CircularEval, 0-100)"}
    table = {"v1": "circular_eval", "v2": "relation_weighted"}
    comparison = {"v1": "needles"}
    comparison_xlabel = "Needle count"
    coverage_parts = ("needle_list",)
    #: The metrics of a CircularEval config: the whole-item ``perf_4`` and the per-row accuracy.
    CIRCULAR_METRICS = ("perf_4", "acc")
    #: (edition, metric) -> (paper mean key, its name): v1 CircularEval ``perf_4`` per needle count weighted by
    #: needle count (``acc`` has none), the open-ended score per row; v2 weighted by relation count.
    PAPER_MEANS = {
        ("v1", "perf_4"): ("circular", "perf_4 weighted by needle count"),
        ("v1", "acc"): ("none", "(row accuracy, no paper mean)"),
        ("v1", "score"): ("rows", "mean over rows"),
        ("v2", "accuracy"): ("relation_weighted", "v2: mean per relation count, weighted by relation count"),
    }
    #: CircularEval prompt variant -> its category's style (the open-ended and v2 variants have no category).
    CATEGORY_STYLE = {"direct": "Direct", "reasoning": "Reasoning", "extended": "Direct-512"}
    #: The four categories whose plain mean is the paper's ATC-CE-Overall, then the others, in table order.
    OVERALL_CATEGORIES = ("EN-Direct-CE", "EN-Reasoning-CE", "ZH-Direct-CE", "ZH-Reasoning-CE")
    OTHER_CATEGORIES = ("EN-Direct-512-CE", "ZH-Direct-512-CE")
    #: v2 question types, in table order.
    QUESTION_TYPES = ("ELDEST_ANCESTOR", "NTH_ANCESTOR", "NTH_DESCENDANT", "RELATIONSHIP_DISTANCE")

    def category(self, spec) -> str | None:
        """CircularEval category of a config (``EN-Direct-CE``, ``ZH-Reasoning-CE``...), None for an open-ended or
        v2 one."""
        style = self.CATEGORY_STYLE.get(spec.variant)
        return None if style is None else f"{spec.language.upper()}-{style}-CE"

    def paper_mean(self, spec, metric: str) -> tuple[str, str]:
        return self.PAPER_MEANS[(spec.edition, metric)]

    def score_metrics(self, spec, scoring: str) -> tuple[str, ...]:
        return self.CIRCULAR_METRICS if self.category(spec) else (self.headline_metric(spec),)

    def expected_cells(self, spec) -> set[tuple]:
        return {(None, None, n) for n in spec.needle_counts}

    def observed_cell(self, doc) -> tuple:
        return (None, None, doc.get("num_needles"))

    # ------------------------------------------------------------------------------------ end report


FAMILY = Atc()
