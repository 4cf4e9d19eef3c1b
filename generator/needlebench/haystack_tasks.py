"""Sample plans and rows of the haystack tasks: S-RT (single needle), M-RT (multi-needle retrieval) and M-RS
(multi-needle reasoning), default mode.

Each (length, repeat) cell has one seed (release seed, config, length, repeat) which picks the window start
and the cell's needle(s), so every depth of a cell shares the haystack and prompts share a prefix (KV-cache
reuse). Each row also records its own sample seed, derived from (release seed, config, length, depth, repeat).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from . import __version__
from .errors import NeedlebenchError
from .grid import REASONING_NEEDLE_SPACING, ConfigSpec
from .haystacks import tokenized_corpus, window_start_hint
from .needles import (
    RetrievalNeedle,
    choose_distinct_needles,
    choose_needle,
    load_needles_file,
    needle_bank,
    splice_guide,
)
from .options import BuildOptions
from .placement import Context, NeedleRequest, build_context
from .prompts import frame_parts, guide_sentence, multi_retrieval_question
from .seeding import derive_seed
from .tokenized import TokenizedCorpus


@dataclass(frozen=True)
class Cell:
    """One (length, repeat) cell of a config: its seed and haystack window."""

    spec: ConfigSpec
    length: int
    repeat: int
    buffer: int
    seed: int


def effective_buffer(spec: ConfigSpec, length: int, options: BuildOptions) -> int:
    """The buffer of a cell. A user-given buffer must be smaller than every length. The reference v1 grid has
    one cell where the buffer equals the length (M-RT 4k English at 1,000 tokens, which leaves no haystack):
    outside compat mode such a buffer is halved."""
    if options.buffer is not None:
        if options.buffer >= length:
            raise NeedlebenchError(
                f"buffer {options.buffer} is not smaller than length {length} of {spec.name}; "
                f"use a buffer below {min(spec.lengths)}"
            )
        return options.buffer
    if spec.buffer >= length and options.compat is None:
        return length // 2
    return spec.buffer


@cache
def _retrieval_needles(path: str | None, language: str) -> tuple[RetrievalNeedle, ...]:
    return load_needles_file(path, language) if path else needle_bank(language)


def corpus_label(corpus: TokenizedCorpus) -> str:
    info = corpus.corpus
    return f"{info.name}@{info.revision}" if info.revision else f"{info.name}@sha256:{info.sha256[:12]}"


def _cells(spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...]) -> Iterator[Cell]:
    for length in lengths:
        buffer = effective_buffer(spec, length, options)
        for repeat in range(spec.repeats):
            yield Cell(spec, length, repeat, buffer, derive_seed(options.release_seed, spec.name, length, repeat))


def _base_row(
    cell: Cell,
    options: BuildOptions,
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
        "tokenizer": options.tokenizer,
        "prompt_tokens": prompt_tokens,
        "haystack_tokens": context.tokens,
        "version": __version__,
        "buffer": cell.buffer,
        "corpus_cycles": context.cycles,
        "compat": "",
    }


def single_rows(
    spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...], utf8_prompts: bool = False
) -> Iterator[dict]:
    """S-RT: one needle per prompt at each depth of the grid."""
    corpus = tokenized_corpus(spec, options)
    bank = _retrieval_needles(options.needles_file(), spec.language)
    for cell in _cells(spec, options, lengths):
        target = cell.length - cell.buffer
        needle = choose_needle(bank, derive_seed(cell.seed, "needle"))
        start = window_start_hint(corpus, target, cell.seed)
        question = splice_guide(needle.question, spec.language)
        before, after = frame_parts("single", spec.language, question, options.question_position)
        for depth in options.depths_for(spec.depths):
            context = build_context(corpus, target, [NeedleRequest(needle.text, depth)], start)
            yield {
                "id": f"{spec.name}-L{cell.length}-d{depth:g}-r{cell.repeat}",
                **_base_row(cell, options, corpus, context, before, after, utf8_prompts),
                "depth_percent": float(depth),
                "question": question,
                "answer": needle.text,
                "keywords": [needle.keyword],
                "needles": [needle.text],
                "seed": derive_seed(options.release_seed, spec.name, cell.length, depth, cell.repeat),
                "requested_depths": [float(depth)],
            }


def _distinct_needles(
    bank: tuple[RetrievalNeedle, ...], count: int, seed: int, options: BuildOptions, spec: ConfigSpec
) -> tuple[RetrievalNeedle, ...]:
    """`count` needles for one M-RT prompt; too few usable needles in a `--needles` file names the option."""
    try:
        return choose_distinct_needles(bank, count, seed)
    except NeedlebenchError:
        if options.needles is None:
            raise
        raise NeedlebenchError(
            f"--needles {options.needles}: {spec.name} needs {count} {spec.language} needles with distinct subjects "
            f"(arg1) and answers (arg2) per prompt, one per depth, but the file's {len(bank)} {spec.language} needles "
            "do not give that many; add needles or pass fewer --depths"
        ) from None


def multi_retrieval_rows(
    spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...], utf8_prompts: bool = False
) -> Iterator[dict]:
    """M-RT: one distinct needle at every depth of the grid, all in one prompt, one question per needle."""
    corpus = tokenized_corpus(spec, options)
    bank = _retrieval_needles(options.needles_file(), spec.language)
    depths = list(options.depths_for(spec.depths))
    for cell in _cells(spec, options, lengths):
        target = cell.length - cell.buffer
        needles = _distinct_needles(bank, len(depths), derive_seed(cell.seed, "needles"), options, spec)
        question = splice_guide(
            multi_retrieval_question(
                [needle.question_only for needle in needles],
                [needle.answer_template for needle in needles],
                spec.language,
            ),
            spec.language,
        )
        before, after = frame_parts("multi_retrieval", spec.language, question, options.question_position)
        requests = [NeedleRequest(needle.text, depth) for needle, depth in zip(needles, depths)]
        context = build_context(corpus, target, requests, window_start_hint(corpus, target, cell.seed))
        yield {
            "id": f"{spec.name}-L{cell.length}-r{cell.repeat}",
            **_base_row(cell, options, corpus, context, before, after, utf8_prompts),
            "depth_percent": None,
            "question": question,
            "answer": "\n".join(needle.text for needle in needles),
            "keywords": [needle.keyword for needle in needles],
            "needles": [needle.text for needle in needles],
            "seed": derive_seed(options.release_seed, spec.name, cell.length, None, cell.repeat),
            "requested_depths": [float(depth) for depth in depths],
            "num_needles": len(needles),
        }


def reasoning_depths(first: float, count: int, spacing: float = REASONING_NEEDLE_SPACING) -> list[float]:
    """M-RS placement: the first needle at the depth, each next one `spacing` percent further, clamped."""
    return [min(100.0, first + spacing * i) for i in range(count)]


def reasoning_question(question: str, language: str) -> str:
    """The M-RS question with the guide sentence appended (a space between them in English)."""
    separator = " " if language == "en" and not question.endswith(" ") else ""
    return question + separator + guide_sentence(language)


def multi_reasoning_rows(
    spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...], utf8_prompts: bool = False
) -> Iterator[dict]:
    """M-RS: a 2-5 needle reasoning chain per prompt, first needle at the depth, then every 10%."""
    from .reasoning_needles import choose_reasoning_set

    corpus = tokenized_corpus(spec, options)
    path = options.reasoning_needles(spec.language)
    for cell in _cells(spec, options, lengths):
        target = cell.length - cell.buffer
        start = window_start_hint(corpus, target, cell.seed)
        for count in spec.needle_counts:
            chain = choose_reasoning_set(count, spec.language, derive_seed(cell.seed, "chain", count), path)
            question = reasoning_question(chain.question, spec.language)
            before, after = frame_parts("multi_reasoning", spec.language, question, options.question_position)
            for depth in options.depths_for(spec.depths):
                depths = reasoning_depths(depth, count)
                requests = [NeedleRequest(text, d) for text, d in zip(chain.needles, depths)]
                context = build_context(corpus, target, requests, start)
                yield {
                    "id": f"{spec.name}-L{cell.length}-d{depth:g}-n{count}-r{cell.repeat}",
                    **_base_row(cell, options, corpus, context, before, after, utf8_prompts),
                    "depth_percent": float(depth),
                    "question": question,
                    "answer": chain.answer,
                    "keywords": [chain.answer],
                    "needles": list(chain.needles),
                    "seed": derive_seed(options.release_seed, spec.name, cell.length, depth, cell.repeat, count),
                    "requested_depths": depths,
                    "num_needles": count,
                }
