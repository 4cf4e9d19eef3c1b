"""M-RT in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from needlebench.evaluation import scoring
from needlebench.evaluation.families.base import NUMBERS, EvalFamily
from needlebench.evaluation.families.hooks import (
    MEAN,
    REFERENCE_SUFFIX,
    TaskTemplate,
    agg_flat_mean,
    prediction,
    reference_prediction,
)

# --------------------------------------------------------------------------------------------- lm-eval hooks


def _hits(text: str, keywords: list[str]) -> list[float]:
    return [100.0 if hit else 0.0 for hit in scoring.keyword_hits(text, keywords)]


def process_multi_retrieval(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """M-RT: needle recall (0..100) and the per-needle hits (100/0, in the order of ``keywords``), and their
    reference twins (the recall as OpenCompass averages it: per distinct integer depth of the row's requested
    depths, :func:`~needlebench.evaluation.scoring.opencompass_parallel_recall`; rows without them, plain recall)."""
    keywords = list(doc["keywords"])
    text, reference = prediction(doc, results), reference_prediction(doc, results)
    depths = doc.get("requested_depths")
    if depths is not None and len(depths) == len(keywords):
        recall_reference = scoring.opencompass_parallel_recall(reference, keywords, depths)
    else:
        recall_reference = scoring.multi_retrieval_recall(reference, keywords)
    return {
        "recall": scoring.multi_retrieval_recall(text, keywords),
        "needle_hits": _hits(text, keywords),
        f"recall{REFERENCE_SUFFIX}": recall_reference,
        f"needle_hits{REFERENCE_SUFFIX}": _hits(reference, keywords),
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

    # ------------------------------------------------------------------------------------ report

    headline = {"v1": "recall", "v2": "recall"}
    metric_label = {"v1": "M-RT needle hit rate (%)", "v2": "M-RT needle hit rate (%)"}
    paper_mean_name = {"v1": "mean over lengths", "v2": "v2: mean over lengths"}
    #: Per-needle hits, one number per needle of the row.
    value_shapes = {"needle_hits": NUMBERS}
    #: OpenCompass's recall divides the hits by the distinct integer depths, so a custom grid whose depths collide
    #: gives up to 100 x the row's needles (:func:`~needlebench.evaluation.scoring.opencompass_parallel_recall`).
    per_needle_ceiling = ("recall_reference",)
    haystack = True
    heatmap = True

    def count_unit(self, per_needle: bool, judged: bool) -> str:
        return "needles" if per_needle and not judged else "rows"

    def heatmap_points(self, spec, sample, per_needle: bool) -> list[tuple]:
        """A row is drawn per needle, each hit at the needle's grid depth; a judged row (one rating for all its
        needles) without a depth of its own is drawn at each needle's depth; rows of a config known only from its
        rows (``per_needle`` false), and judged rows with a depth, at the row's depth."""
        doc, metrics = sample.doc, sample.metrics
        length = int(doc["context_length"])
        metric = self.headline_metric(spec)
        if sample.judged and doc.get("depth_percent") is None:
            if metric not in metrics:
                return []  # unrated
            depths = self.needle_depths(spec, doc, len(doc.get("needles") or []))
            return [(depth, length, float(metrics[metric])) for depth in depths]
        if sample.judged or not per_needle:
            return super().heatmap_points(spec, sample, per_needle)
        hits = metrics.get("needle_hits") or []
        return [(depth, length, float(hit)) for depth, hit in zip(self.needle_depths(spec, doc, len(hits)), hits)]

    @staticmethod
    def needle_depths(spec, doc, count: int) -> list[float]:
        """The grid depth of each needle of an M-RT row: an experiment's depth + diff per further needle (the
        requested depths are placement depths once start/end buffers apply), else the requested depths."""
        experiment = getattr(spec, "experiment", None)
        if experiment is not None and doc.get("depth_percent") is not None:
            return [min(100.0, float(doc["depth_percent"]) + experiment.diff * i) for i in range(count)]
        return [float(d) for d in (doc.get("requested_depths") or doc.get("needle_depths") or [])]


FAMILY = MultiRetrieval()
