"""The few build settings a haystack family needs (S-RT, M-RT, M-RS, Counting-Stars).

A family never sees the whole build recipe (:class:`needlebench.dataset.options.BuildOptions`): the dataset stage
hands it these settings for one config, with every input already resolved to what the family reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from needlebench.seeding import RELEASE_SEED


@dataclass(frozen=True)
class HaystackSettings:
    """How to plan and render the rows of one haystack config.

    `haystack` is the config language's haystack (a path, ``hub:...``, ``opencompass[@REV]``, or None for the
    embedded default); `needles` the family's needle file (retrieval ``needles.jsonl`` or reasoning
    ``multi_needle_reasoning_*.json``; None for the built-in needles); `depths` overrides the config's grid;
    `buffer` overrides its length buffer; `halve_full_buffer` halves a grid buffer that is not below its length
    (the default mode's fix of the reference's M-RT 4k English cell; compat mode keeps it)."""

    release_seed: int = RELEASE_SEED
    haystack: str | None = None
    needles: str | None = None
    tokenizer: str = "cl100k_base"
    question_position: str = "end"
    buffer: int | None = None
    depths: tuple[float, ...] | None = None
    halve_full_buffer: bool = True

    def depths_for(self, spec_depths: tuple[int, ...]) -> tuple[float, ...]:
        """The depth grid to use: the override, or the config's own."""
        return self.depths if self.depths is not None else tuple(float(d) for d in spec_depths)
