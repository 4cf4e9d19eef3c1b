"""Every scorer on 10,000 generated outputs (random unicode, 1 MB strings, JSON fragments, nested brackets):
no exception and every score in range. (Speed: scripts/bench_scoring.py.)"""

from __future__ import annotations

import math

import pytest

from support.scoring_fuzz import outputs, scorers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def generated():
    return outputs(10_000)


@pytest.mark.parametrize("name", [name for name, _, _ in scorers()])
def test_scorer_total_and_in_range(name, generated):
    function, bounds = next((f, b) for n, f, b in scorers() if n == name)
    assert sum(len(text) >= 1 << 20 for text in generated) >= 4
    for text in generated:
        value = function(text)
        if bounds == "ABCD":
            assert value is None or value in "ABCD"
        else:
            assert isinstance(value, float) and not math.isnan(value) and bounds[0] <= value <= bounds[1], text[:80]
