"""Contexts: exact token length, needles at the sentence boundary nearest the requested depth, no split words."""

from __future__ import annotations

import re

import numpy as np
import pytest

from needlebench.errors import NeedlebenchError
from needlebench.tasks.placement import NeedleRequest, build_context

NEEDLE = {
    "en": "Hidden on Emerald Island is the legendary Stardust Shard.",
    "zh": "翡翠岛上藏着传说中的星尘碎片。",
}


def _sentence_gap_tokens(corpus, context) -> float:
    """Largest gap, in percent of the window, between neighbouring insertion points inside it."""
    inside = corpus.sentence_chars[(corpus.sentence_chars > context.start) & (corpus.sentence_chars < context.end)]
    points = [context.start, *inside.tolist(), context.end]
    tokens = [corpus.approx_token_index(p) for p in points]
    return 100.0 * max(np.diff(tokens)) / context.haystack_tokens


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("target", [400, 1800, 7800])
def test_exact_length_and_depth(language, target, request, cl100k):
    corpus = request.getfixturevalue("english_corpus" if language == "en" else "chinese_corpus")
    needle = NEEDLE[language]
    start = len(corpus.text) // 3
    for depth in (0, 10, 26, 50, 73, 94, 100):
        context = build_context(corpus, target, [NeedleRequest(needle, depth)], start)
        assert cl100k.count(context.text) == target == context.tokens
        assert context.text.count(needle) == 1
        # the recorded actual depth is the share of haystack tokens before the needle
        before = context.text[: context.text.index(needle)]
        assert abs(cl100k.count(before) - context.haystack_tokens * context.actual_depths[0] / 100) <= 3
        # ... and it is the nearest sentence boundary: within half the largest gap between boundaries
        assert abs(context.actual_depths[0] - depth) <= _sentence_gap_tokens(corpus, context) / 2 + 1
        if depth == 0:
            assert context.text.startswith(needle + "\n")
        if depth == 100:
            assert context.text.endswith("\n" + needle)


def test_needles_sit_on_sentence_boundaries_and_words_stay_whole(english_corpus, cl100k):
    corpus = english_corpus
    context = build_context(corpus, 5000, [NeedleRequest(NEEDLE["en"], d) for d in (21, 42, 63)], 123_456)
    for match in re.finditer(re.escape(NEEDLE["en"]), context.text):
        before = context.text[: match.start()]
        assert (
            before.endswith((". ", "! ", "? ", ".\n", "!\n", "?\n", ": ", ";\n", ":\n")) or before[-2:-1] in ".!?”’\"'"
        )
    words = set(re.findall(r"[A-Za-z]+", corpus.text[context.start : context.end]))
    # every word of the context (minus the needle) is a whole word of the corpus window
    for word in re.findall(r"[A-Za-z]+", context.text.replace(NEEDLE["en"], " ")):
        assert word in words
    assert not context.text[-1].isspace()


def test_chinese_context_never_breaks_characters(chinese_corpus):
    context = build_context(chinese_corpus, 3000, [NeedleRequest(NEEDLE["zh"], 50)], 99_999)
    assert "\ufffd" not in context.text


def test_shared_prefix_across_depths(english_corpus):
    contexts = [build_context(english_corpus, 3000, [NeedleRequest(NEEDLE["en"], d)], 77_777) for d in (30, 70)]
    assert contexts[0].start == contexts[1].start
    cut = contexts[0].text.index(NEEDLE["en"])
    assert contexts[1].text[:cut] == contexts[0].text[:cut]


def test_multi_needle_depths_are_ordered(english_corpus, cl100k):
    depths = [0, 10, 21, 31, 42, 52, 63, 73, 84, 94, 100]
    needles = [f"The ruler of star system number {i} is Queen Number {i}." for i in range(len(depths))]
    context = build_context(english_corpus, 30_000, [NeedleRequest(n, d) for n, d in zip(needles, depths)], 10)
    positions = [context.text.index(n) for n in needles]
    assert positions == sorted(positions)
    assert cl100k.count(context.text) == 30_000
    assert all(abs(a - d) < 2 for a, d in zip(context.actual_depths, depths))


def test_needles_larger_than_room_is_an_error(english_corpus):
    with pytest.raises(NeedlebenchError, match="room for 5"):
        build_context(english_corpus, 5, [NeedleRequest(NEEDLE["en"], 50)], 0)


def test_depth_outside_range_is_an_error(english_corpus):
    with pytest.raises(NeedlebenchError, match="outside 0-100"):
        build_context(english_corpus, 1000, [NeedleRequest(NEEDLE["en"], 120)], 0)


def test_cut_points_keep_contractions_and_hyphenated_words_whole(cl100k):
    from needlebench.sources.corpus import Corpus
    from needlebench.sources.tokenized import tokenize_corpus

    text = "He said don't go. A well-known road. 他说：“走吧。”"
    corpus = tokenize_corpus(Corpus("t", "en", (text,), "test", "none"), cl100k)
    allowed = {i for i in range(1, len(corpus.text) + 1) if corpus.is_cut_point(i)}
    for word in ("don't", "well-known"):
        start = text.index(word)
        assert not allowed & set(range(start + 1, start + len(word))), word
    assert text.index("said") + 4 in allowed  # after a whole word
    assert text.index("走") + 1 in allowed  # between Chinese characters
    assert text.index(" go") + 1 not in allowed  # never right after a space
