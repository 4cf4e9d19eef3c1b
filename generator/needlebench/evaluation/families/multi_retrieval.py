"""M-RT in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from needlebench.evaluation.families.base import EvalFamily


class MultiRetrieval(EvalFamily):
    key = "multi_retrieval"

    # ------------------------------------------------------------------------------------ lm-eval task

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

    # ------------------------------------------------------------------------------------ report

    headline = {"v1": "recall", "v2": "recall"}
    metric_label = {"v1": "M-RT needle hit rate (%)", "v2": "M-RT needle hit rate (%)"}
    table = {"v1": "size", "v2": "size"}
    paper_means = {"v1": ("grid", "mean over lengths"), "v2": ("grid", "v2: mean over lengths")}
    comparison = {"v1": "length", "v2": "length"}
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

    # ------------------------------------------------------------------------------------ end report


FAMILY = MultiRetrieval()
