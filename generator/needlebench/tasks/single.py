"""S-RT (single-needle retrieval), default mode: one needle per prompt at each depth of the grid.

v1 splices the guide sentence into the question and uses the v1 frame; v2 keeps the question as it stands in the
v2 frame (``<Document>...</Document>``)."""

from __future__ import annotations

from collections.abc import Iterator

from needlebench.seeding import derive_seed
from needlebench.sources.haystacks import window_start_hint
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.haystack import (
    base_row,
    cells_of,
    retrieval_needles,
    tokenized_corpus,
)
from needlebench.tasks.needles import EDITION_QUESTION, choose_needle
from needlebench.tasks.placement import NeedleRequest, build_context
from needlebench.tasks.prompts import frame_parts
from needlebench.tasks.settings import HaystackSettings


def single_rows(
    spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...], utf8_prompts: bool = False
) -> Iterator[dict]:
    """S-RT: one needle per prompt at each depth of the grid."""
    corpus = tokenized_corpus(spec, settings)
    bank = retrieval_needles(settings.needles, spec.language)
    for cell in cells_of(spec, settings, lengths):
        target = cell.length - cell.buffer
        needle = choose_needle(bank, derive_seed(cell.seed, "needle"))
        start = window_start_hint(corpus, target, cell.seed)
        question = EDITION_QUESTION[spec.edition](needle.question, spec.language)
        before, after = frame_parts(spec.family, spec.language, question, settings.question_position, spec.edition)
        for depth in settings.depths_for(spec.depths):
            context = build_context(corpus, target, [NeedleRequest(needle.text, depth)], start)
            yield {
                "id": f"{spec.name}-L{cell.length}-d{depth:g}-r{cell.repeat}",
                **base_row(cell, settings, corpus, context, before, after, utf8_prompts),
                "depth_percent": float(depth),
                "question": question,
                "answer": needle.text,
                "keywords": [needle.keyword],
                "needles": [needle.text],
                "seed": derive_seed(settings.release_seed, spec.name, cell.length, depth, cell.repeat),
                "requested_depths": [float(depth)],
            }
