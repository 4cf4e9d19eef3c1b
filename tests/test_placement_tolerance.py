"""Every needle within 1 point (at least 3 tokens) of its requested depth on any haystack, on the best boundary
kind available there, checked with an independent cl100k count of the rendered text."""

from __future__ import annotations

import re

import pytest

from needlebench.sources.corpus import Corpus
from needlebench.sources.tokenized import tokenize_corpus
from needlebench.tasks.boundaries import KINDS, is_wrapped_break
from needlebench.tasks.placement import NeedleRequest, build_context

NEEDLE = {
    "en": "Hidden on Emerald Island is the legendary Stardust Shard.",
    "zh": "翡翠岛上藏着传说中的星尘碎片。",
}
DEPTHS = (0, 5, 10, 15, 21, 26, 31, 36, 42, 47, 52, 57, 63, 68, 73, 78, 84, 89, 94, 100)
TARGETS = (1000, 4000, 32000)


def haystack_without_needles(text: str, needles: list[str]) -> tuple[str, list[int]]:
    """The haystack text (needles and their joining character removed) and the char offset, in it, of each
    needle (in order of appearance)."""
    out, offsets, cursor = [], [], 0
    pattern = "|".join(re.escape(n) for n in sorted(set(needles), key=len, reverse=True))
    length = 0
    for match in re.finditer(pattern, text):
        piece = text[cursor : match.start()]
        stop = match.end()
        if match.start() == 0:
            stop += 1  # opening needle + "\n"
        elif piece and piece[-1] in " \n\t":
            piece = piece[:-1]  # joined with a copy of the whitespace after it (closing needle: "\n" + needle)
        out.append(piece)
        length += len(piece)
        offsets.append(length)
        cursor = stop
    out.append(text[cursor:])
    return "".join(out), offsets


def check_context(context, requests, cl100k):
    text = context.text
    haystack, offsets = haystack_without_needles(text, [r.text for r in requests])
    assert haystack == context.corpus.text[context.start : context.end]
    total = cl100k.count(haystack)
    assert total == context.haystack_tokens
    assert cl100k.count(text) == context.tokens
    tolerance = max(total / 100, 3)
    order = sorted(
        range(len(requests)),
        key=lambda i: (
            context.positions[i] if context.positions[i] >= 0 else (-1 if context.positions[i] == -1 else 10**12),
            i,
        ),
    )
    for rank, i in enumerate(order):
        before = cl100k.count(haystack[: offsets[rank]])
        assert abs(before - total * requests[i].depth / 100) <= tolerance, (requests[i].depth, before, total)
        assert context.boundaries[i] in KINDS
        # never glued to a word: whitespace, start/end or a non-Latin character on each side
        at = text.index(requests[i].text) if len(requests) == 1 else None
        if at is not None and 0 < at:
            left = text[at - 1]
            assert not re.match(r"[A-Za-z0-9]", left), text[at - 20 : at + 5]
    return haystack


def _corpus(cl100k, text, language="en", copies=1):
    return tokenize_corpus(Corpus("t", language, (text,), "test", "none"), cl100k, copies)


@pytest.fixture(scope="module")
def wrapped_corpus(cl100k, english_corpus):
    import textwrap

    paragraphs = english_corpus.corpus.documents[:40]
    text = "\n\n".join(textwrap.fill(p, 72) for p in paragraphs)
    return _corpus(cl100k, text)


@pytest.fixture(scope="module")
def flat_corpus(cl100k, english_corpus):
    words = re.findall(r"[A-Za-z]+", english_corpus.text[:1_500_000])
    return _corpus(cl100k, " ".join(words))


@pytest.fixture(scope="module")
def chinese_no_stop_corpus(cl100k, chinese_corpus):
    return _corpus(cl100k, chinese_corpus.text.replace("。", ""), "zh")


CORPORA = ["english_corpus", "chinese_corpus", "wrapped_corpus", "flat_corpus", "chinese_no_stop_corpus"]


@pytest.mark.parametrize("name", CORPORA)
@pytest.mark.parametrize("target", TARGETS)
def test_every_depth_within_tolerance(name, target, request, cl100k):
    corpus = request.getfixturevalue(name)
    needle = NEEDLE["zh" if name.startswith("chinese") else "en"]
    kinds = set()
    depths = DEPTHS if target < 32000 else DEPTHS[::3] + (100,)
    for depth in depths:
        requests = [NeedleRequest(needle, depth)]
        context = build_context(corpus, target, requests, len(corpus.text) // 5)
        check_context(context, requests, cl100k)
        kinds.add(context.boundaries[0])
    if name == "flat_corpus":
        assert kinds <= {"word", "paragraph"}  # no punctuation or line breaks: word boundaries only
    if name in ("english_corpus", "chinese_corpus"):
        assert "sentence" in kinds


@pytest.mark.parametrize("name", CORPORA)
def test_multi_needles_within_tolerance(name, request, cl100k):
    corpus = request.getfixturevalue(name)
    language = "zh" if name.startswith("chinese") else "en"
    depths = [0, 10, 21, 31, 42, 52, 63, 73, 84, 94, 100]
    needles = [f"{NEEDLE[language][:-1]} {i}{NEEDLE[language][-1]}" for i in range(len(depths))]
    requests = [NeedleRequest(n, d) for n, d in zip(needles, depths)]
    context = build_context(corpus, 4000, requests, 1234)
    check_context(context, requests, cl100k)


def test_hard_wrapped_line_breaks_are_word_boundaries(wrapped_corpus, cl100k):
    text = wrapped_corpus.text
    breaks = [m.start() for m in re.finditer(r"(?<=\S)\n(?=\S)", text)]
    assert breaks and all(is_wrapped_break(text, b) for b in breaks[:200] if text[b - 1] not in ".!?;:")
    # a needle never lands inside a sentence at a line break as a "line" boundary
    for depth in (15, 33, 68):
        requests = [NeedleRequest(NEEDLE["en"], depth)]
        context = build_context(wrapped_corpus, 1000, requests, 5000)
        assert context.boundaries[0] != "line"


def test_intentional_line_breaks_rank_as_line(cl100k):
    # a list: lines of varying length, each short enough for the next line's first word to have fitted
    text = "\n".join(f"Item {i} of the list" + " and more" * (i % 5) for i in range(3000))
    corpus = _corpus(cl100k, text)
    requests = [NeedleRequest(NEEDLE["en"], 50)]
    context = build_context(corpus, 1000, requests, 100)
    check_context(context, requests, cl100k)
    assert context.boundaries == ["line"]


def test_distinct_positions(english_corpus, cl100k):
    stars = [f"The little penguin counted {i} ★" for i in range(64)]
    requests = [NeedleRequest(s, 100 * (i + 1) / 64) for i, s in enumerate(stars)]
    context = build_context(english_corpus, 8000, requests, 999, distinct=True)
    inner = [p for p in context.positions if p >= 0]
    assert inner == sorted(set(inner))
    check_context(context, requests, cl100k)
