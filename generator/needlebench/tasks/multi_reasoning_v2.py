"""NeedleBench v2 M-RS, default mode: a kinship chain hidden in the haystack ("ATC in a haystack").

For each (length, repeat) cell and needle count n (2-5) a chain of n relation sentences over n + 1 names is drawn
(:func:`needlebench.tasks.kinship.kinship_chain`); its sentences, shuffled, are the needles: the first at the
depth, each next one 10% of the haystack further (clamped at the end), on sentence boundaries as every default
placement. The question asks for the eldest relative the youngest person can trace back to, followed by the
reference's three examples and notes, which ask for the answer in ``\\boxed{}``; the answer is the eldest name.

Names are leak-free: the built-in names (or ``--names``) minus those shown in the prompt's examples, and a name
found in the cell's haystack window is redrawn, so the chain is the only mention of its people.
"""

from __future__ import annotations

from collections.abc import Iterator

from needlebench.seeding import derive_seed
from needlebench.sources.haystacks import window_start_hint
from needlebench.sources.tokenized import TokenizedCorpus
from needlebench.tasks.atc_v2 import v2_names_pool
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.haystack import base_row, cells_of, tokenized_corpus
from needlebench.tasks.kinship import kinship_chain
from needlebench.tasks.multi_reasoning import reasoning_depths
from needlebench.tasks.placement import (
    NeedleRequest,
    build_context,
    sentence_start_at_or_after,
)
from needlebench.tasks.prompts import frame_parts, v2_reasoning_question
from needlebench.tasks.settings import HaystackSettings

#: Extra tokens of haystack searched for leaked names beyond the window's estimated end.
_LEAK_MARGIN_TOKENS = 512


def window_text(corpus: TokenizedCorpus, start_hint: int, tokens: int) -> str:
    """The corpus text a window of about ``tokens`` tokens starting at ``start_hint`` can cover (with margin)."""
    start = sentence_start_at_or_after(corpus, start_hint)
    end_token = min(corpus.num_tokens, corpus.approx_token_index(start) + tokens + _LEAK_MARGIN_TOKENS)
    return corpus.text[max(0, start_hint - 1) : corpus.char_at_token(end_token)]


def multi_reasoning_v2_rows(
    spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...], utf8_prompts: bool = False
) -> Iterator[dict]:
    """v2 M-RS rows: for each cell, needle count and depth, a kinship chain in the haystack window (prompts are
    always text: `utf8_prompts` is accepted for the generators' common signature)."""
    corpus = tokenized_corpus(spec, settings)
    pool = v2_names_pool(settings.needles, spec.language)
    for cell in cells_of(spec, settings, lengths):
        target = cell.length - cell.buffer
        start = window_start_hint(corpus, target, cell.seed)
        window = window_text(corpus, start, target)
        for count in spec.needle_counts:
            chain = kinship_chain(
                count, spec.language, derive_seed(cell.seed, "kinship", count), pool, leaks=window.__contains__
            )
            question = v2_reasoning_question(spec.language, chain.youngest)
            before, after = frame_parts(
                spec.family,
                spec.language,
                question,
                settings.question_position,
                "v2",
                last_person=chain.youngest,
            )
            needles = chain.fragments
            for depth in settings.depths_for(spec.depths):
                depths = reasoning_depths(depth, count)
                requests = [NeedleRequest(text, d) for text, d in zip(needles, depths)]
                context = build_context(corpus, target, requests, start)
                yield {
                    "id": f"{spec.name}-L{cell.length}-d{depth:g}-n{count}-r{cell.repeat}",
                    **base_row(cell, settings, corpus, context, before, after),
                    "depth_percent": float(depth),
                    "question": question,
                    "answer": chain.eldest,
                    "keywords": [chain.eldest],
                    "needles": list(needles),
                    "seed": derive_seed(settings.release_seed, spec.name, cell.length, depth, cell.repeat, count),
                    "requested_depths": depths,
                    "num_needles": count,
                }
