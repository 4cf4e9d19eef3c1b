"""M-RS in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from needlebench.evaluation import scoring
from needlebench.evaluation.families.base import EvalFamily
from needlebench.evaluation.families.cells import depths_part, lengths_part, needle_counts_part
from needlebench.evaluation.families.hooks import MEAN, TaskTemplate, prediction, reference_prediction

# --------------------------------------------------------------------------------------------- lm-eval hooks


def process_multi_reasoning(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """M-RS: the reference keyword score and the strict (whole answer contained) score, both 0..100, and the
    keyword score on the reference's text (``reference_reference``)."""
    text = prediction(doc, results)
    answer, language = doc["answer"], doc["language"]
    return {
        "reference": scoring.reasoning_reference_score(text, answer, language),
        "strict": scoring.reasoning_strict_score(text, answer, language),
        "reference_reference": scoring.reasoning_reference_score(reference_prediction(doc, results), answer, language),
    }


def process_multi_reasoning_v2(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """v2 M-RS: 100 when the last ``\\boxed{}`` of the prediction, cleaned, is the eldest name."""
    return {
        "exact": scoring.boxed_exact_score(prediction(doc, results), doc["answer"]),
        "exact_reference": scoring.boxed_exact_score(reference_prediction(doc, results), doc["answer"]),
    }


def oracle_answer(doc: Mapping[str, Any]) -> str:
    """The answer itself: every keyword of it present."""
    return str(doc["answer"])


def oracle_boxed(doc: Mapping[str, Any]) -> str:
    """The answer in the box the v2 scorer reads."""
    return scoring.box(doc["answer"])


TEMPLATE = TaskTemplate(
    "multi_reasoning",
    "M-RS (multi-needle reasoning)",
    process_multi_reasoning,
    (("reference", MEAN), ("strict", MEAN), ("reference_reference", MEAN)),
    256,
    oracle_answer,
)
#: v2 M-RS asks for reasoning ending in ``\\boxed{}``.
TEMPLATE_V2 = TaskTemplate(
    "v2_multi_reasoning",
    "M-RS v2 (multi-needle reasoning)",
    process_multi_reasoning_v2,
    (("exact", MEAN), ("exact_reference", MEAN)),
    1024,
    oracle_boxed,
)


class MultiReasoning(EvalFamily):
    key = "multi_reasoning"

    # ------------------------------------------------------------------------------------ lm-eval task

    edition_templates = {"v1": TEMPLATE, "v2": TEMPLATE_V2}
    group_metrics = {"v1": ("reference", "strict"), "v2": ("exact",)}

    # ------------------------------------------------------------------------------------ report

    #: v1: the reference's keyword match (``strict``, the whole answer, is listed beside it); v2: the boxed exact
    #: match.
    headline = {"v1": "reference", "v2": "exact"}
    metric_label = {"v1": "M-RS score (0-100)", "v2": "M-RS v2 score (boxed exact match, 0-100)"}
    paper_mean_name = {
        "v1": "mean over (length, depth, needles) cells",
        "v2": "v2: mean over (length, depth, needles) cells",
    }
    haystack = True
    heatmap = True
    cells_by_needle_count = True
    #: The metrics the scores table lists per edition; ``strict`` has no reference-exact twin, so it is left out
    #: under ``--scoring reference``.
    SCORE_METRICS = {"v1": ("reference", "strict"), "v2": ("exact",)}
    DEFAULT_ONLY = ("strict",)

    def score_metrics(self, spec, scoring: str) -> tuple[str, ...]:
        listed = self.SCORE_METRICS[spec.edition]
        return tuple(metric for metric in listed if scoring == "default" or metric not in self.DEFAULT_ONLY)

    def coverage_parts(self, spec, seen: set[tuple]) -> list[str]:
        return [lengths_part(spec, seen), depths_part(spec, seen), needle_counts_part(spec, seen)]

    def expected_cells(self, spec) -> set[tuple]:
        return {
            (length, float(depth), n) for length in spec.lengths for depth in spec.depths for n in spec.needle_counts
        }

    def observed_cell(self, doc) -> tuple:
        depth = doc.get("depth_percent")
        return (doc.get("context_length"), None if depth is None else float(depth), doc.get("num_needles"))


FAMILY = MultiReasoning()
