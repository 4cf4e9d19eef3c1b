"""S-RT (single-needle retrieval), build half: one needle per prompt at each depth of the haystack grid."""

from __future__ import annotations

from collections.abc import Mapping

from needlebench.tasks.families.base import (
    HAYSTACK_COLUMNS,
    V2_EN_BUFFERS,
    HaystackFamily,
    RowGenerator,
)


class Single(HaystackFamily):
    key = "single"
    label = "S-RT"
    schemas = {"single": dict(HAYSTACK_COLUMNS)}
    compat = ("opencompass",)
    cell_repeats = 10
    row_per_depth = True
    one_needle_per_prompt = True
    en_buffers = {"v1": ({"4k": 600, "8k": 800, "32k": 3000}, 600), "v2": V2_EN_BUFFERS}
    needles_input = {"v1": "needles", "v2": "needles"}
    card_text = {
        "v1": (
            "Single-Needle Retrieval. One needle sentence is inserted at a given depth of a haystack of a given "
            "length; the question can only be answered from the needle. Measures precise recall of one fact across "
            "context lengths and insertion depths."
        ),
        "v2": (
            "NeedleBench v2 Single-Needle Retrieval: as v1 with the v2 grid and prompt frame and no guide sentence; "
            "scored 100 when the answer keyword is in the answer, else 0."
        ),
    }

    def generators(self) -> Mapping[str, RowGenerator]:
        from needlebench.tasks.single import single_rows  # deferred: `needlebench list` must not load tiktoken

        return {"v1": single_rows, "v2": single_rows}


FAMILY = Single()
