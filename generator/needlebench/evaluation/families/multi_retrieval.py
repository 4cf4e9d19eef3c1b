"""M-RT in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from needlebench.evaluation import scoring
from needlebench.evaluation.families.base import EvalFamily
from needlebench.evaluation.families.hooks import (
    MEAN,
    REFERENCE_SUFFIX,
    TaskTemplate,
    agg_flat_mean,
    prediction,
    reference_prediction,
)

# --------------------------------------------------------------------------------------------- lm-eval hooks


def _retrieval_metrics(text: str, keywords: list[str], suffix: str = "") -> dict[str, Any]:
    hits = [100.0 if hit else 0.0 for hit in scoring.keyword_hits(text, keywords)]
    return {f"recall{suffix}": scoring.multi_retrieval_recall(text, keywords), f"needle_hits{suffix}": hits}


def process_multi_retrieval(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """M-RT: needle recall (0..100) and the per-needle hits (100/0, in the order of ``keywords``), and their
    reference twins."""
    keywords = list(doc["keywords"])
    return {
        **_retrieval_metrics(prediction(results), keywords),
        **_retrieval_metrics(reference_prediction(results), keywords, REFERENCE_SUFFIX),
    }


def oracle_needles(doc: Mapping[str, Any]) -> str:
    """Every needle, one per line: each keyword present."""
    return "\n".join(str(needle).strip() for needle in doc["needles"])


#: M-RT answers 11-20 short answers; v2 M-RT uses the same template (hook, metrics and budget).
TEMPLATE = TaskTemplate(
    "multi_retrieval",
    "M-RT (multi-needle retrieval)",
    process_multi_retrieval,
    (
        ("recall", MEAN),
        ("needle_hits", agg_flat_mean),
        ("recall_reference", MEAN),
        ("needle_hits_reference", agg_flat_mean),
    ),
    512,
    oracle_needles,
)


class MultiRetrieval(EvalFamily):
    key = "multi_retrieval"

    # ------------------------------------------------------------------------------------ lm-eval task

    edition_templates = {"v1": TEMPLATE, "v2": TEMPLATE}
    group_metrics = {"v1": ("recall",), "v2": ("recall",)}

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

    # ------------------------------------------------------------------------------------ report

    # ------------------------------------------------------------------------------------ end report


FAMILY = MultiRetrieval()
