"""M-RS (multi-needle reasoning), default mode: a 2-5 hop chain per prompt, the first needle at the depth, then
every 10%."""

from __future__ import annotations

from collections.abc import Iterator

from needlebench.seeding import derive_seed
from needlebench.sources.haystacks import window_start_hint
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.haystack import base_row, cells_of, tokenized_corpus
from needlebench.tasks.placement import NeedleRequest, build_context
from needlebench.tasks.prompts import frame_parts, guide_sentence
from needlebench.tasks.reasoning_needles import choose_reasoning_set
from needlebench.tasks.settings import HaystackSettings

#: Spacing between consecutive needles of a chain, in percent of the haystack (v1 and v2).
REASONING_NEEDLE_SPACING = 10


def reasoning_depths(first: float, count: int, spacing: float = REASONING_NEEDLE_SPACING) -> list[float]:
    """M-RS placement: the first needle at the depth, each next one `spacing` percent further, clamped."""
    return [min(100.0, first + spacing * i) for i in range(count)]


def reasoning_question(question: str, language: str) -> str:
    """The M-RS question with the guide sentence appended (a space between them in English)."""
    separator = " " if language == "en" and not question.endswith(" ") else ""
    return question + separator + guide_sentence(language)


def multi_reasoning_rows(
    spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...], utf8_prompts: bool = False
) -> Iterator[dict]:
    """M-RS: a 2-5 needle reasoning chain per prompt, first needle at the depth, then every 10%."""
    corpus = tokenized_corpus(spec, settings)
    path = settings.needles
    for cell in cells_of(spec, settings, lengths):
        target = cell.length - cell.buffer
        start = window_start_hint(corpus, target, cell.seed)
        for count in spec.needle_counts:
            chain = choose_reasoning_set(count, spec.language, derive_seed(cell.seed, "chain", count), path)
            question = reasoning_question(chain.question, spec.language)
            before, after = frame_parts(spec.family, spec.language, question, settings.question_position)
            for depth in settings.depths_for(spec.depths):
                depths = reasoning_depths(depth, count)
                requests = [NeedleRequest(text, d) for text, d in zip(chain.needles, depths)]
                context = build_context(corpus, target, requests, start)
                yield {
                    "id": f"{spec.name}-L{cell.length}-d{depth:g}-n{count}-r{cell.repeat}",
                    **base_row(cell, settings, corpus, context, before, after, utf8_prompts),
                    "depth_percent": float(depth),
                    "question": question,
                    "answer": chain.answer,
                    "keywords": [chain.answer],
                    "needles": list(chain.needles),
                    "seed": derive_seed(settings.release_seed, spec.name, cell.length, depth, cell.repeat, count),
                    "requested_depths": depths,
                    "num_needles": count,
                }
