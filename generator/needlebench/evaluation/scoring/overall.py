"""Aggregation helpers for NeedleBench v1 scores (0..100)."""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["NEEDLEBENCH_WEIGHTS", "needlebench_overall", "mean"]

#: Weights of the v1 per-size overall score (fact sheet section 7); they sum to 1.
NEEDLEBENCH_WEIGHTS = {"S-RT": 0.4, "M-RT": 0.3, "M-RS": 0.3}


def needlebench_overall(srt: float, mrt: float, mrs: float) -> float:
    """``0.4 * S-RT + 0.3 * M-RT + 0.3 * M-RS`` (weighted average, weights sum to 1)."""
    w = NEEDLEBENCH_WEIGHTS
    total = w["S-RT"] + w["M-RT"] + w["M-RS"]
    return math.fsum((w["S-RT"] * srt, w["M-RT"] * mrt, w["M-RS"] * mrs)) / total


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean; raises ``ValueError`` for an empty input."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean of an empty sequence")
    return math.fsum(values) / len(values)
