"""M-RT (multi-needle retrieval), default mode: one distinct needle at every depth, one question per needle.

v1 splices the guide sentence into the joined question; v2 does not and uses the v2 frame ("answer the final
questions one by one")."""

from __future__ import annotations

from collections.abc import Iterator

from needlebench.errors import NeedlebenchError
from needlebench.seeding import derive_seed
from needlebench.sources.haystacks import window_start_hint
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.haystack import (
    base_row,
    cells_of,
    retrieval_needles,
    tokenized_corpus,
)
from needlebench.tasks.needles import (
    EDITION_QUESTION,
    RetrievalNeedle,
    choose_distinct_needles,
)
from needlebench.tasks.placement import NeedleRequest, build_context
from needlebench.tasks.prompts import frame_parts, multi_retrieval_question
from needlebench.tasks.settings import HaystackSettings


def _distinct_needles(
    bank: tuple[RetrievalNeedle, ...], count: int, seed: int, settings: HaystackSettings, spec: ConfigSpec
) -> tuple[RetrievalNeedle, ...]:
    """`count` needles for one M-RT prompt; too few usable needles in a `--needles` file names the option."""
    try:
        return choose_distinct_needles(bank, count, seed)
    except NeedlebenchError:
        if settings.needles is None:
            raise
        raise NeedlebenchError(
            f"--needles {settings.needles}: {spec.name} needs {count} {spec.language} needles with distinct subjects "
            f"(arg1) and answers (arg2) per prompt, one per depth, but the file's {len(bank)} {spec.language} needles "
            "do not give that many; add needles or pass fewer --depths"
        ) from None


def multi_retrieval_rows(
    spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...], utf8_prompts: bool = False
) -> Iterator[dict]:
    """M-RT: one distinct needle at every depth of the grid, all in one prompt, one question per needle."""
    corpus = tokenized_corpus(spec, settings)
    bank = retrieval_needles(settings.needles, spec.language)
    depths = list(settings.depths_for(spec.depths))
    for cell in cells_of(spec, settings, lengths):
        target = cell.length - cell.buffer
        needles = _distinct_needles(bank, len(depths), derive_seed(cell.seed, "needles"), settings, spec)
        question = multi_retrieval_question(
            [needle.question_only for needle in needles],
            [needle.answer_template for needle in needles],
            spec.language,
        )
        question = EDITION_QUESTION[spec.edition](question, spec.language)
        before, after = frame_parts(spec.family, spec.language, question, settings.question_position, spec.edition)
        requests = [NeedleRequest(needle.text, depth) for needle, depth in zip(needles, depths)]
        context = build_context(corpus, target, requests, window_start_hint(corpus, target, cell.seed))
        yield {
            "id": f"{spec.name}-L{cell.length}-r{cell.repeat}",
            **base_row(cell, settings, corpus, context, before, after, utf8_prompts),
            "depth_percent": None,
            "question": question,
            "answer": "\n".join(needle.text for needle in needles),
            "keywords": [needle.keyword for needle in needles],
            "needles": [needle.text for needle in needles],
            "seed": derive_seed(settings.release_seed, spec.name, cell.length, None, cell.repeat),
            "requested_depths": [float(depth) for depth in depths],
            "num_needles": len(needles),
        }
