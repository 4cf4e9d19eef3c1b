"""S-RT in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from needlebench.evaluation import scoring
from needlebench.evaluation.families.base import EvalFamily
from needlebench.evaluation.families.cells import depths_part, lengths_part
from needlebench.evaluation.families.hooks import MEAN, TaskTemplate, prediction, reference_prediction

# --------------------------------------------------------------------------------------------- lm-eval hooks


def process_single(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """S-RT: the paper score (Levenshtein similarity to the needle, 100 when the keyword is present)."""
    needle = doc["needles"][0] if doc["needles"] else ""
    keyword = doc["keywords"][0] if doc["keywords"] else ""
    return {
        "score": scoring.single_retrieval_score(prediction(doc, results), needle, keyword),
        "score_reference": scoring.single_retrieval_score(reference_prediction(doc, results), needle, keyword),
    }


def process_single_v2(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """v2 S-RT: 100 when the answer keyword is in the prediction, else 0 (and its reference twin)."""
    keyword = doc["keywords"][0] if doc["keywords"] else ""
    return {
        "score": scoring.single_retrieval_v2_score(prediction(doc, results), keyword),
        "score_reference": scoring.single_retrieval_v2_score(reference_prediction(doc, results), keyword),
    }


def oracle_needle(doc: Mapping[str, Any]) -> str:
    """The needle itself: similar to itself and holding its keyword."""
    return str(doc["needles"][0]).strip()


#: S-RT answers are one sentence (a Chinese needle is 2-3 tokens per character in many tokenizers, and the guide
#: sentence invites a line of reasoning first).
TEMPLATE = TaskTemplate(
    "single",
    "S-RT (single-needle retrieval)",
    process_single,
    (("score", MEAN), ("score_reference", MEAN)),
    256,
    oracle_needle,
)
TEMPLATE_V2 = TaskTemplate(
    "v2_single",
    "S-RT v2 (single-needle retrieval)",
    process_single_v2,
    (("score", MEAN), ("score_reference", MEAN)),
    256,
    oracle_needle,
)


class Single(EvalFamily):
    key = "single"

    # ------------------------------------------------------------------------------------ lm-eval task

    edition_templates = {"v1": TEMPLATE, "v2": TEMPLATE_V2}
    group_metrics = {"v1": ("score",), "v2": ("score",)}

    # ------------------------------------------------------------------------------------ report

    headline = {"v1": "score", "v2": "score"}
    metric_label = {"v1": "S-RT score (0-100)", "v2": "S-RT v2 score (keyword match, 0-100)"}
    paper_mean_name = {"v1": "mean over (length, depth) cells", "v2": "v2: mean over (length, depth) cells"}
    haystack = True
    heatmap = True

    def coverage_parts(self, spec, seen: set[tuple]) -> list[str]:
        return [lengths_part(spec, seen), depths_part(spec, seen)]

    def expected_cells(self, spec) -> set[tuple]:
        return {(length, float(depth), 1) for length in spec.lengths for depth in spec.depths}

    def observed_cell(self, doc) -> tuple:
        depth = doc.get("depth_percent")
        return (doc.get("context_length"), None if depth is None else float(depth), 1)


FAMILY = Single()
