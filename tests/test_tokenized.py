"""Exact counting of splices without re-tokenising: checked against tiktoken on the rendered text."""

from __future__ import annotations

import numpy as np
import pytest

from needlebench.sources.corpus import Corpus
from needlebench.sources.tokenized import copies_for, tokenize_corpus

LITERALS = [
    " The ruler of the Zorvath star system is Queen Miri.",
    "\nHidden on Emerald Island is the legendary Stardust Shard.\n",
    "翡翠岛上藏着传说中的星尘碎片。",
    "\n",
    "You are an intelligent AI assistant.\nThe document given to you by the user is ",
    "\n\nNow, the question is: What is it?",
    "用户现在给你的文档是",
    " ",
    "...",
    "  \n\n  ",
]


@pytest.mark.slow
@pytest.mark.parametrize("corpus_name", ["english_corpus", "chinese_corpus"])
def test_random_splices_count_exactly(corpus_name, request, cl100k):
    corpus = request.getfixturevalue(corpus_name)
    generator = np.random.default_rng(7)
    for _ in range(800):
        segments = []
        if generator.random() < 0.5:
            segments.append(LITERALS[generator.integers(len(LITERALS))])
        position = int(generator.integers(0, len(corpus.text) - 20_000))
        for _ in range(int(generator.integers(1, 5))):
            length = int(generator.integers(0, 4000))
            segments.append((position, position + length))
            position += length + int(generator.integers(0, 50))
            segments.append(LITERALS[generator.integers(len(LITERALS))])
        expected = cl100k.count(corpus.render(segments))
        assert corpus.count(segments) == expected, segments
        assert corpus.count(segments) == expected  # again, from the memo of glue counts and sync points
        split = int(generator.integers(0, len(segments) + 1))  # resumed from the state after a prefix
        state = corpus.count_state(segments[:split])
        assert corpus.count(segments[split:], state) == expected, (split, segments)
        assert corpus.count(segments[split:], state) == expected  # the state is not consumed
        assert corpus.render_utf8(segments) == corpus.render(segments).encode("utf-8")
        parts = corpus.utf8_parts(segments)
        assert bytes(parts) == corpus.render_utf8(segments) and len(parts) == len(corpus.render_utf8(segments))


def test_hard_boundaries_map_to_token_indices(english_corpus, cl100k):
    corpus = english_corpus
    for i in (1, 100, 5000, len(corpus.hard_chars) // 2, len(corpus.hard_chars) - 2):
        char, token = int(corpus.hard_chars[i]), int(corpus.hard_tokens[i])
        assert cl100k.count(corpus.text[:char]) == token


def test_cycled_corpus_matches_direct_tokenisation(cl100k):
    corpus = Corpus("tiny", "en", ("Alpha beta. Gamma delta!", "Epsilon zeta? Eta."), "test", "none")
    single = tokenize_corpus(corpus, cl100k)
    tripled = tokenize_corpus(corpus, cl100k, copies=3)
    assert tripled.text == corpus.text * 3
    assert list(tripled.tokens) == cl100k.encode(corpus.text * 3)
    assert tripled.num_tokens == 3 * single.num_tokens
    for char, token in zip(tripled.hard_chars, tripled.hard_tokens):
        assert cl100k.count(tripled.text[: int(char)]) == int(token)


def test_copies_for():
    assert copies_for(1000, 800) == 1
    assert copies_for(1000, 1000) == 1
    assert copies_for(1000, 1500) == 3  # a 1,500-token window may start anywhere in the first copy
