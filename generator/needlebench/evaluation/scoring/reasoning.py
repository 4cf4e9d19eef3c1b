"""NeedleBench v1 multi-needle reasoning (M-RS) scoring, scale 0..100.

Two scores are offered:

* :func:`reasoning_reference_score` reproduces the reference evaluator
  (fact sheet section 5): the lowercased gold answer is split into keywords and
  the score is the share of keywords that are substrings of the lowercased
  prediction.  English splits on whitespace exactly like the reference (so
  stop-words such as "of" or "the" give free credit - a known quirk).  For
  Chinese the reference would treat a space-less answer as one keyword
  (all-or-nothing); here the answer is segmented into words with jieba so
  Chinese answers get partial credit as well.
* :func:`reasoning_strict_score` is an all-or-nothing containment check on
  normalised text (NFKC, lowercase, punctuation and whitespace removed).
"""

from __future__ import annotations

import logging
import threading
import unicodedata

__all__ = [
    "normalize_language",
    "answer_keywords",
    "reasoning_reference_score",
    "reasoning_strict_score",
    "normalize_for_match",
]

_LANGUAGE_ALIASES = {
    "en": "en",
    "eng": "en",
    "english": "en",
    "zh": "zh",
    "cn": "zh",
    "zh-cn": "zh",
    "zh_cn": "zh",
    "chinese": "zh",
}


def normalize_language(language: str) -> str:
    """Map a language name (``"en"``, ``"English"``, ``"zh"``, ``"Chinese"``, ``"cn"`` ...) to ``"en"``/``"zh"``."""
    key = str(language).strip().lower()
    try:
        return _LANGUAGE_ALIASES[key]
    except KeyError:
        raise ValueError(f"unknown language {language!r}; expected 'en' or 'zh'") from None


# --------------------------------------------------------------------------- jieba

_JIEBA_LOCK = threading.Lock()
_JIEBA_TOKENIZER = None


def _jieba_tokenizer():
    """A private jieba tokenizer with the default dictionary.

    A dedicated ``jieba.Tokenizer`` (rather than the global one) keeps the
    segmentation independent of words other code may add with
    ``jieba.add_word``; with a fixed dictionary the segmentation (including the
    HMM step, a Viterbi decode) is deterministic.
    """
    global _JIEBA_TOKENIZER
    if _JIEBA_TOKENIZER is None:
        with _JIEBA_LOCK:
            if _JIEBA_TOKENIZER is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                tokenizer = jieba.Tokenizer()
                tokenizer.initialize()
                _JIEBA_TOKENIZER = tokenizer
    return _JIEBA_TOKENIZER


def _is_punct_or_space(char: str) -> bool:
    return char.isspace() or unicodedata.category(char)[0] in ("P", "Z", "C")


def _is_noise_token(token: str) -> bool:
    """True for tokens made only of whitespace / punctuation / control characters."""
    return all(_is_punct_or_space(c) for c in token)


def answer_keywords(answer: str, language: str) -> list[str]:
    """The keywords the reference M-RS score looks for (lowercased).

    ``en``: ``answer.lower().split()`` exactly as the reference.
    ``zh``: jieba word segmentation of the lowercased answer, dropping tokens
    that consist only of whitespace or punctuation.
    """
    lang = normalize_language(language)
    lowered = answer.lower()
    if lang == "en":
        return lowered.split()
    tokens = _jieba_tokenizer().lcut(lowered, HMM=True)
    return [tok for tok in tokens if tok and not _is_noise_token(tok)]


def reasoning_reference_score(prediction: str, answer: str, language: str) -> float:
    """Reference M-RS score: ``100 * share of answer keywords found in prediction.lower()``.

    Returns 0.0 when the answer yields no keyword at all (the reference would
    divide by zero).
    """
    keywords = answer_keywords(answer, language)
    if not keywords:
        return 0.0
    haystack = prediction.lower()
    found = sum(1 for kw in keywords if kw in haystack)
    return 100.0 * found / len(keywords)


def normalize_for_match(text: str) -> str:
    """NFKC, lowercase, and drop every punctuation / whitespace character."""
    text = unicodedata.normalize("NFKC", text).lower()
    return "".join(c for c in text if not _is_punct_or_space(c))


def reasoning_strict_score(prediction: str, answer: str, language: str) -> float:
    """100 if the normalised answer is contained in the normalised prediction, else 0.

    Normalisation (both languages): NFKC, lowercase, punctuation and whitespace
    removed.  An answer that normalises to the empty string scores 0.
    """
    normalize_language(language)  # validate
    gold = normalize_for_match(answer)
    if not gold:
        return 0.0
    return 100.0 if gold in normalize_for_match(prediction) else 0.0
