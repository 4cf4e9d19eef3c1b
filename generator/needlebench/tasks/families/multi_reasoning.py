"""M-RS (multi-needle reasoning), build half: 2 to 5 related needles placed 10% of the haystack apart.

v1 reads the reasoning needle sets (``multi_needle_reasoning_*.json``); v2 builds kinship chains from the names
list (reference ``opencompass/datasets/needlebench_v2/multi.py``)."""

from __future__ import annotations

from collections.abc import Mapping

from needlebench.tasks.families.base import (
    HAYSTACK_COLUMNS,
    V2_EN_BUFFERS,
    ConfigSpec,
    HaystackFamily,
    RowGenerator,
)

#: Needle counts of the grid (the spacing of a chain's needles is the generator's:
#: :data:`needlebench.tasks.multi_reasoning.REASONING_NEEDLE_SPACING`).
REASONING_NEEDLE_COUNTS = (2, 3, 4, 5)


class MultiReasoning(HaystackFamily):
    key = "multi_reasoning"
    label = "M-RS"
    schemas = {"multi_reasoning": {**HAYSTACK_COLUMNS, "num_needles": "int64"}}
    compat = ("opencompass",)
    cell_repeats = 10
    row_per_depth = True
    row_per_needle_count = True
    chain_needles = True
    en_buffers = {"v1": ({"4k": 600, "8k": 1000, "32k": 3000}, 600), "v2": V2_EN_BUFFERS}
    needles_input = {"v1": "reasoning_needles", "v2": "names"}
    card_text = {
        "v1": (
            "Multi-Needle Reasoning. Two to five related needles (a derivation chain) are placed 10% of the haystack "
            "apart; the question needs all of them. Measures retrieval combined with multi-hop reasoning."
        ),
        "v2": (
            "NeedleBench v2 Multi-Needle Reasoning: a kinship chain of 2 to 5 relation sentences (3 to 6 invented "
            "names) hidden in the haystack, the first at the depth and then every 10%; the model names the eldest "
            "ancestor of the youngest person in \\boxed{} (exact match)."
        ),
    }

    def grid_needle_counts(self, spec: ConfigSpec) -> tuple[int, ...]:
        return REASONING_NEEDLE_COUNTS

    def generators(self) -> Mapping[str, RowGenerator]:
        from needlebench.tasks.multi_reasoning import multi_reasoning_rows  # deferred: keeps `list` off tiktoken
        from needlebench.tasks.multi_reasoning_v2 import multi_reasoning_v2_rows  # deferred: as above

        return {"v1": multi_reasoning_rows, "v2": multi_reasoning_v2_rows}


FAMILY = MultiReasoning()
