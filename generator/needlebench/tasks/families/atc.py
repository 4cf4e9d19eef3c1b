"""ATC (Ancestral Trace Challenge), build half: kinship chains with no filler text, so no lengths or depths.

v1 (the paper's): multiple choice with the four option rotations, or open answers; v2 (reference
``opencompass/datasets/needlebench_v2/atc.py``): 0-shot, four question types, answered in ``\\boxed{}``."""

from __future__ import annotations

from collections.abc import Mapping

from needlebench.tasks.families.base import EDITION_PREFIX, LANGUAGES, ConfigSpec, Family, RowGenerator

#: Needle counts (number of names in the chain) of the paper's configs and of the extended (``_512``) ones.
ATC_NEEDLE_COUNTS = tuple(range(2, 20))
ATC_EXTENDED_NEEDLE_COUNTS = tuple(2**k for k in range(1, 10))  # 2 .. 512
ATC_ROTATIONS = ("ABCD", "BCDA", "CDAB", "DABC")
#: v2: relation counts (a chain of n relations has n+1 names) and the four question types, in the reference's
#: order (its seeds are ``(repeat + 1) + 10000 * type index``).
V2_ATC_RELATION_COUNTS = tuple(2**k for k in range(1, 10))  # 2 .. 512
V2_ATC_QUESTION_TYPES = ("ELDEST_ANCESTOR", "NTH_ANCESTOR", "NTH_DESCENDANT", "RELATIONSHIP_DISTANCE")

#: Each variant: config-name suffix, needle counts, rows per item (rotations, or question types in v2).
VARIANTS = {
    "direct": ("", ATC_NEEDLE_COUNTS, len(ATC_ROTATIONS)),
    "reasoning": ("_reasoning", ATC_NEEDLE_COUNTS, len(ATC_ROTATIONS)),
    "extended": ("_512", ATC_EXTENDED_NEEDLE_COUNTS, len(ATC_ROTATIONS)),
    "open": ("_open", ATC_NEEDLE_COUNTS, 1),
    "v2": ("", V2_ATC_RELATION_COUNTS, len(V2_ATC_QUESTION_TYPES)),
}
VARIANTS_BY_EDITION = {"v1": ("direct", "reasoning", "extended", "open"), "v2": ("v2",)}

#: Context tokens of each split (its ``haystack_tokens`` column summed: the needle chains, cl100k) as the default
#: build (release seed) writes them: ATC rows are generated, not cut to a length, so this is measured, not derived
#: from a grid; ``tests/test_cli_output.py`` rebuilds them and checks.
ATC_HAYSTACK_TOKENS = {
    "atc_en": 124_548,
    "atc_en_reasoning": 123_088,
    "atc_en_512": 727_720,
    "atc_en_open": 31_045,
    "atc_zh": 180_068,
    "atc_zh_reasoning": 180_240,
    "atc_zh_512": 1_070_980,
    "atc_zh_open": 44_724,
    "v2_atc_en": 927_463,
    "v2_atc_zh": 1_297_521,
}


class Atc(Family):
    key = "atc"
    label = "ATC"
    schemas = {
        "atc": {
            "num_needles": "int64",
            "item_id": "string",
            "rotation": "string",
            "options": "list<string>",
            "answer_letter": "string",
            "prompt_style": "string",  # direct, reasoning, open
            "compat": "string",
        },
        # NeedleBench v2 ATC: no options (0-shot, answer in \boxed{}), four question types
        "atc_v2": {
            "num_needles": "int64",  # relation sentences; the chain has num_needles + 1 names
            "question_type": "string",  # ELDEST_ANCESTOR, NTH_ANCESTOR, NTH_DESCENDANT, RELATIONSHIP_DISTANCE
            "generations": "int64",  # generations between the chain's ends (parents 1, grandparents 2)
            "compat": "string",
        },
    }
    schema_by_edition = {"v1": "atc", "v2": "atc_v2"}
    compat = ("opencompass",)
    cell_repeats = 10
    reads_haystack = False
    needles_input = {"v1": "names", "v2": "names"}
    rotations = ATC_ROTATIONS
    question_types = V2_ATC_QUESTION_TYPES
    card_text = {
        "v1": (
            "Ancestral Trace Challenge. A chain of kinship statements between names (2 to 19 names, i.e. 1 to 18 "
            "relations; up to 512 names in the extended variant) with no filler text; the model must trace the "
            "eldest ancestor (multiple choice with rotated options, or open answer). Measures reasoning over dense "
            "context where nothing can be skipped."
        ),
        "v2": (
            "NeedleBench v2 Ancestral Trace Challenge: kinship chains of 2 to 512 relations with no filler text, "
            "0-shot, four question types (eldest ancestor, n-th ancestor, n-th descendant, relationship distance), "
            "answered in \\boxed{} (exact match); scores are weighted by the number of relations."
        ),
    }

    def configs(self, edition: str) -> list[ConfigSpec]:
        return [
            ConfigSpec(
                f"{EDITION_PREFIX[edition]}{self.key}_{language}{VARIANTS[variant][0]}",
                self.key,
                language,
                variant=variant,
                edition=edition,
            )
            for language in LANGUAGES
            for variant in VARIANTS_BY_EDITION[edition]
        ]

    def grid_needle_counts(self, spec: ConfigSpec) -> tuple[int, ...]:
        return VARIANTS[spec.variant][1]

    def count_rows(self, spec: ConfigSpec) -> int:
        return len(spec.needle_counts) * spec.repeats * VARIANTS[spec.variant][2]

    def count_tokens(self, spec: ConfigSpec) -> int:
        return ATC_HAYSTACK_TOKENS.get(spec.name, 0)

    def generators(self) -> Mapping[str, RowGenerator]:
        from needlebench.tasks.atc import atc_rows  # deferred: `needlebench list` must not load numpy and tiktoken
        from needlebench.tasks.atc_v2 import atc_v2_rows  # deferred: as above

        return {"v1": atc_rows, "v2": atc_v2_rows}


FAMILY = Atc()
