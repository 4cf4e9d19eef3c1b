"""Sample plans and rows of the haystack tasks: S-RT (single needle), M-RT (multi-needle retrieval) and M-RS
(multi-needle reasoning), default mode.

Each (length, repeat) cell has one seed (release seed, config, length, repeat) which picks the window start
and the cell's needle(s), so every depth of a cell shares the haystack and prompts share a prefix (KV-cache
reuse). Each row also records its own sample seed, derived from (release seed, config, length, depth, repeat)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from needlebench import __version__
from needlebench.errors import NeedlebenchError
from needlebench.seeding import derive_seed
from needlebench.sources.haystacks import stream_tokens_needed, tokenized_for
from needlebench.sources.tokenized import TokenizedCorpus
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.needle_bank import needle_bank
from needlebench.tasks.needle_file import load_needles_file
from needlebench.tasks.needles import RetrievalNeedle
from needlebench.tasks.placement import Context
from needlebench.tasks.settings import HaystackSettings


@dataclass(frozen=True)
class Cell:
    """One (length, repeat) cell of a config: its seed and haystack window."""

    spec: ConfigSpec
    length: int
    repeat: int
    buffer: int
    seed: int


def effective_buffer(spec: ConfigSpec, length: int, settings: HaystackSettings) -> int:
    """The buffer of a cell. A user-given buffer must be smaller than every length. The reference v1 grid has
    one cell where the buffer equals the length (M-RT 4k English at 1,000 tokens, which leaves no haystack):
    unless `settings.halve_full_buffer` is off (compat mode), such a buffer is halved."""
    if settings.buffer is not None:
        if settings.buffer >= length:
            raise NeedlebenchError(
                f"buffer {settings.buffer} is not smaller than length {length} of {spec.name}; "
                f"use a buffer below {min(spec.lengths)}"
            )
        return settings.buffer
    if spec.buffer >= length and settings.halve_full_buffer:
        return length // 2
    return spec.buffer


@cache
def retrieval_needles(path: str | None, language: str) -> tuple[RetrievalNeedle, ...]:
    return load_needles_file(path, language) if path else needle_bank(language)


def tokenized_corpus(spec: ConfigSpec, settings: HaystackSettings) -> TokenizedCorpus:
    """The haystack corpus of a config's language, tokenised and cycled for the config's longest length."""
    return tokenized_for(settings.haystack, spec.language, settings.tokenizer, stream_tokens_needed(max(spec.lengths)))


def corpus_label(corpus: TokenizedCorpus) -> str:
    info = corpus.corpus
    return f"{info.name}@{info.revision}" if info.revision else f"{info.name}@sha256:{info.sha256[:12]}"


def cells_of(spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...]) -> Iterator[Cell]:
    for length in lengths:
        buffer = effective_buffer(spec, length, settings)
        for repeat in range(spec.repeats):
            yield Cell(spec, length, repeat, buffer, derive_seed(settings.release_seed, spec.name, length, repeat))


def base_row(
    cell: Cell,
    settings: HaystackSettings,
    corpus: TokenizedCorpus,
    context: Context,
    before: str,
    after: str,
    utf8: bool = False,
) -> dict:
    prompt, prompt_tokens = context.framed(before, after, utf8)
    return {
        "task": cell.spec.task_label,
        "config": cell.spec.name,
        "language": cell.spec.language,
        "size": cell.spec.size,
        "context_length": cell.length,
        "needle_depths": context.actual_depths,
        "needle_boundaries": list(context.boundaries),
        "prompt": prompt,
        "repeat": cell.repeat,
        "corpus": corpus_label(corpus),
        "tokenizer": settings.tokenizer,
        "prompt_tokens": prompt_tokens,
        "haystack_tokens": context.tokens,
        "version": __version__,
        "buffer": cell.buffer,
        "corpus_cycles": context.cycles,
        "compat": "",
    }
