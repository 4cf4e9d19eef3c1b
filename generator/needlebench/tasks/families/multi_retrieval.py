"""M-RT (multi-needle retrieval), build half: one needle per depth of the grid in the same haystack, all asked at
once."""

from __future__ import annotations

from collections.abc import Mapping

from needlebench.tasks.families.base import (
    HAYSTACK_COLUMNS,
    V2_EN_BUFFERS,
    ConfigSpec,
    HaystackFamily,
    RowGenerator,
)


class MultiRetrieval(HaystackFamily):
    key = "multi_retrieval"
    label = "M-RT"
    schemas = {"multi_retrieval": {**HAYSTACK_COLUMNS, "num_needles": "int64"}}
    compat = ("opencompass",)
    cell_repeats = 25
    en_buffers = {"v1": ({"4k": 1000, "8k": 1300, "32k": 3000}, 3000), "v2": V2_EN_BUFFERS}
    needles_input = {"v1": "needles", "v2": "needles"}
    card_text = {
        "v1": (
            "Multi-Needle Retrieval. One needle per depth of the grid is inserted into the same haystack and the "
            "model must answer all their questions at once. Measures retrieving many scattered facts in one pass."
        ),
        "v2": (
            "NeedleBench v2 Multi-Needle Retrieval: one needle per depth (11), all questions answered at once; v2 "
            "grid and frame."
        ),
    }

    def grid_needle_counts(self, spec: ConfigSpec) -> tuple[int, ...]:
        return (len(spec.depths),)

    def generators(self) -> Mapping[str, RowGenerator]:
        from needlebench.tasks.multi_retrieval import multi_retrieval_rows  # deferred: keeps `list` off tiktoken

        return {"v1": multi_retrieval_rows, "v2": multi_retrieval_rows}


FAMILY = MultiRetrieval()
