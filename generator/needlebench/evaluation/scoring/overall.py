"""The per-size overall NeedleBench score of each edition (0..100), from its three task scores.

* v1: ``0.4 S-RT + 0.3 M-RT + 0.3 M-RS``, OpenCompass's ``weighted_average`` (the NeedleBench summarizer,
  ``open-compass/opencompass: opencompass/configs/summarizers/needlebench.py`` as of commit ``835bf75a``; the
  NeedleBench paper, arXiv 2407.11963).
* v2: the plain mean of the three (the v2 summarizer's ``mean=True``, same file since commit ``12462107``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

__all__ = ["NEEDLEBENCH_WEIGHTS", "OVERALL_WEIGHTS", "mean", "needlebench_overall", "overall_formula", "overall_score"]

#: Edition (``ConfigSpec.edition``) -> task label -> weight of that task in the per-size overall score, in table
#: order. The weights of each edition are defined here and nowhere else.
OVERALL_WEIGHTS: dict[str, dict[str, float]] = {
    "v1": {"S-RT": 0.4, "M-RT": 0.3, "M-RS": 0.3},
    "v2": {"S-RT": 1, "M-RT": 1, "M-RS": 1},
}
#: The v1 weights (they sum to 1).
NEEDLEBENCH_WEIGHTS = OVERALL_WEIGHTS["v1"]


def overall_score(edition: str, scores: Mapping[str, float]) -> float:
    """The weighted average of the task ``scores`` (task label -> score) with ``edition``'s weights."""
    weights = OVERALL_WEIGHTS[edition]
    return math.fsum(weight * scores[task] for task, weight in weights.items()) / sum(weights.values())


def overall_formula(edition: str) -> str:
    """How ``edition``'s overall is computed, as tables state it: ``0.4 S-RT + 0.3 M-RT + 0.3 M-RS`` or, with equal
    weights, ``mean of S-RT, M-RT and M-RS``."""
    weights = OVERALL_WEIGHTS[edition]
    tasks = list(weights)
    if len(set(weights.values())) == 1:
        return f"mean of {', '.join(tasks[:-1])} and {tasks[-1]}"
    return " + ".join(f"{weight:g} {task}" for task, weight in weights.items())


def needlebench_overall(srt: float, mrt: float, mrs: float) -> float:
    """The v1 overall: ``0.4 * S-RT + 0.3 * M-RT + 0.3 * M-RS`` (:data:`OVERALL_WEIGHTS`)."""
    return overall_score("v1", {"S-RT": srt, "M-RT": mrt, "M-RS": mrs})


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean; raises ``ValueError`` for an empty input."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean of an empty sequence")
    return math.fsum(values) / len(values)
