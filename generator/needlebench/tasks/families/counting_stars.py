"""Counting-Stars, build half (arXiv 2403.11802): star sentences spread evenly through a haystack, one row per
context length; acquisition asks for every count, reasoning adds a wrong count before each correction."""

from __future__ import annotations

from collections.abc import Mapping

from needlebench.tasks.families.base import LANGUAGES, ConfigSpec, Family, RowGenerator

#: 32 lengths per size (the paper's 128k family, and the 1000k one spaced alike) and the allowed star counts.
COUNTING_STARS_LENGTHS = {
    "128k": tuple(range(4000, 128001, 4000)),
    "1000k": tuple(round(1_000_000 * (i + 1) / 32) for i in range(32)),
}
COUNTING_STARS_TASKS = ("acquisition", "reasoning")
STAR_COUNTS = (32, 64, 128, 256, 512, 1024)
DEFAULT_STARS = 32
#: For M above the paper's 32, a length is in the config only if it holds at least this many tokens per star,
#: so the star sentences stay a minority of the context (a reasoning star sentence is ~40 tokens).
MIN_TOKENS_PER_STAR = {"acquisition": 64, "reasoning": 96}


def counting_stars_lengths(size: str, task: str, stars: int) -> tuple[int, ...]:
    """The paper's 32 lengths of a family; for M > 32 only those with room for the stars."""
    lengths = COUNTING_STARS_LENGTHS[size]
    if stars <= DEFAULT_STARS:
        return lengths
    return tuple(length for length in lengths if length >= stars * MIN_TOKENS_PER_STAR[task])


class CountingStars(Family):
    key = "counting_stars"
    label = "Counting-Stars"
    schemas = {
        "counting_stars": {
            "buffer": "int64",
            "task_variant": "string",  # acquisition, reasoning
            "num_stars": "int64",
            "star_counts": "list<int64>",  # correct counts in star order
            "wrong_counts": "list<int64>",  # reasoning: the first, wrong count of each star
            "needle_boundaries": "list<string>",  # per star, as in the haystack families
            "corpus_cycles": "int64",
            "compat": "string",
        }
    }
    compat = ("counting-stars",)
    cell_repeats = 1
    lengths_per_shard = {"1000k": 8}
    needles_input = {"v1": None}
    question_positions = ("end",)
    question_position_note = "Counting-Stars asks after the context"
    card_text = {
        "v1": (
            "Counting-Stars. Sentences about a little penguin counting stars are spread evenly through the "
            "haystack; acquisition asks for every count in order, reasoning repeats each star with a wrong count "
            "first and a correction. Measures multi-evidence acquisition and reasoning across the whole context."
        )
    }
    card_tags = ("counting-stars",)
    lengths_by_size = COUNTING_STARS_LENGTHS
    tasks = COUNTING_STARS_TASKS
    star_counts = STAR_COUNTS
    #: Configs of each edition (Counting-Stars has no v2).
    _EDITIONS = {"v1": COUNTING_STARS_TASKS}

    def configs(self, edition: str) -> list[ConfigSpec]:
        specs = []
        for task in self._EDITIONS.get(edition, ()):
            for language in LANGUAGES:
                for size in COUNTING_STARS_LENGTHS:
                    for stars in STAR_COUNTS:
                        if not counting_stars_lengths(size, task, stars):
                            continue
                        suffix = "" if stars == DEFAULT_STARS else f"_m{stars}"
                        name = f"{self.key}_{task}_{language}_{size}{suffix}"
                        specs.append(ConfigSpec(name, self.key, language, size, variant=task, stars=stars))
        return specs

    def grid_lengths(self, spec: ConfigSpec) -> tuple[int, ...]:
        return counting_stars_lengths(spec.size, spec.variant, spec.stars)

    def count_rows(self, spec: ConfigSpec) -> int:
        return len(spec.lengths)

    def count_tokens(self, spec: ConfigSpec) -> int:
        return sum(spec.lengths)

    def compat_modes(self, spec: ConfigSpec) -> tuple[str, ...]:
        """The reference's star lists are fixed at M=32: other star counts have no compat mode."""
        return super().compat_modes(spec) if spec.stars == DEFAULT_STARS else ()

    def no_compat_reason(self, spec: ConfigSpec) -> str:
        return (
            f"the reference's star lists are fixed for M={DEFAULT_STARS} and it has M={spec.stars}; "
            "build it without --compat"
        )

    def check_spec(self, spec: ConfigSpec) -> None:
        from needlebench.tasks.counting_stars import check_spec  # deferred: keeps `needlebench list` off numpy

        check_spec(spec)

    def generators(self) -> Mapping[str, RowGenerator]:
        from needlebench.tasks.counting_stars import counting_stars_rows  # deferred: keeps `list` off tiktoken

        return {"v1": counting_stars_rows}


FAMILY = CountingStars()
