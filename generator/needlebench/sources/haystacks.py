"""Per-process cache of loaded and tokenised haystack corpora, and the window start of each cell."""

from __future__ import annotations

import re
from functools import cache

from needlebench.seeding import rng
from needlebench.sources.corpus import Corpus, load_corpus
from needlebench.sources.tokenized import TokenizedCorpus, copies_for, tokenize_corpus
from needlebench.sources.tokenizer import counting_note, get_tokenizer
from needlebench.terminal import notice, warn, working


@cache
def corpus_for(spec: str | None, language: str) -> Corpus:
    corpus = load_corpus(spec, language)
    if spec not in (None, "default"):
        problem = script_mismatch(corpus)
        if problem:
            warn(problem)
    return corpus


def tokenized_for(spec: str | None, language: str, tokenizer_spec: str, max_window: int) -> TokenizedCorpus:
    """The corpus tokenised once per process, cycled when a window of `max_window` tokens needs it."""
    base = _tokenized(spec, language, tokenizer_spec, 1)
    copies = copies_for(base.num_tokens, max_window)
    if copies > 1:
        _warn_cycled(base, language, max_window, copies)
    return base if copies == 1 else _tokenized(spec, language, tokenizer_spec, copies)


_cycled_warned: set[tuple] = set()


def _warn_cycled(base: TokenizedCorpus, language: str, max_window: int, copies: int) -> None:
    name = base.corpus.name
    # once per haystack, whatever the windows: the cause is its length (tokenized_for runs for every shard, and
    # configs of other lengths need other copy counts; a build tokenises its longest config first, so the one line
    # names the longest window)
    key = (base.corpus.sha256, language)
    if key in _cycled_warned:
        return
    _cycled_warned.add(key)
    warn(
        f"the {language} haystack {name} has {base.num_tokens:,} tokens, fewer than the {max_window:,} its longest "
        f"window needs: it is repeated ({copies} copies), so long prompts hold the same text more than once"
    )


@cache
def _tokenized(spec: str | None, language: str, tokenizer_spec: str, copies: int) -> TokenizedCorpus:
    corpus = corpus_for(spec, language)
    tokenizer = get_tokenizer(tokenizer_spec)
    if not tokenizer.splices and tokenizer_spec not in _fallback_noted:
        _fallback_noted.add(tokenizer_spec)
        notice(counting_note(tokenizer_spec))
    with working(f"tokenising the {language} haystack {corpus.name} (cached for later runs)"):
        return tokenize_corpus(corpus, tokenizer, copies)


_fallback_noted: set[str] = set()


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")


def script_mismatch(corpus: Corpus, sample_chars: int = 200_000) -> str | None:
    """A warning when a haystack's script does not match its language (Chinese text given as the English haystack,
    Latin text as the Chinese one), judged on the first `sample_chars` characters; None when it matches."""
    sample = corpus.text[:sample_chars]
    cjk, latin = len(_CJK.findall(sample)), len(_LATIN.findall(sample))
    words = cjk + latin / 5  # a CJK character carries about what a Latin word of five letters does
    if words == 0:
        return None
    share = cjk / words
    if corpus.language == "en" and share > 0.5:
        return (
            f"the English haystack {corpus.name} looks like Chinese text (mostly CJK characters); "
            "did you mean --haystack-zh? (building on)"
        )
    if corpus.language == "zh" and share < 0.5:
        return (
            f"the Chinese haystack {corpus.name} looks like Latin-script text (mostly Latin letters); "
            "did you mean --haystack-en? (building on)"
        )
    return None
    if corpus.language == "en" and cjk > latin:
        return (
            f"the English haystack {corpus.name} looks like Chinese text ({cjk / (cjk + latin):.0%} of its letters are "
            "CJK); did you mean --haystack-zh? (building on)"
        )
    if corpus.language == "zh" and latin > cjk:
        return (
            f"the Chinese haystack {corpus.name} looks like Latin-script text ({latin / (cjk + latin):.0%} of its "
            "letters are Latin); did you mean --haystack-en? (building on)"
        )
    return None


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
