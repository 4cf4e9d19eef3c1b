"""Per-process cache of loaded and tokenised haystack corpora, and the window start of each cell."""

from __future__ import annotations

from functools import cache

from needlebench.seeding import rng
from needlebench.sources.corpus import Corpus, load_corpus
from needlebench.sources.tokenized import TokenizedCorpus, copies_for, tokenize_corpus
from needlebench.sources.tokenizer import get_tokenizer


@cache
def corpus_for(spec: str | None, language: str) -> Corpus:
    return load_corpus(spec, language)


def tokenized_for(spec: str | None, language: str, tokenizer_spec: str, max_window: int) -> TokenizedCorpus:
    """The corpus tokenised once per process, cycled when a window of `max_window` tokens needs it."""
    base = _tokenized(spec, language, tokenizer_spec, 1)
    copies = copies_for(base.num_tokens, max_window)
    return base if copies == 1 else _tokenized(spec, language, tokenizer_spec, copies)


@cache
def _tokenized(spec: str | None, language: str, tokenizer_spec: str, copies: int) -> TokenizedCorpus:
    return tokenize_corpus(corpus_for(spec, language), get_tokenizer(tokenizer_spec), copies)


#: Tokens kept free after a window, so snapping to sentence starts never runs off the stream.
WINDOW_SLACK = 4096


def stream_tokens_needed(window_tokens: int) -> int:
    """The `max_window` to tokenise a corpus with, for windows of up to `window_tokens` tokens."""
    return window_tokens + WINDOW_SLACK


def window_start_hint(corpus: TokenizedCorpus, window_tokens: int, *seed_parts: object) -> int:
    """A char position in the first copy of the corpus where the cell's window starts (before snapping to a
    sentence start), uniform over the positions that keep the window inside one copy when it fits."""
    per_copy = corpus.tokens_per_copy
    room = per_copy - window_tokens - WINDOW_SLACK
    span = room if room > 0 else per_copy
    offset = int(rng(*seed_parts, "window").integers(0, max(1, span)))
    return corpus.char_at_token(offset)
