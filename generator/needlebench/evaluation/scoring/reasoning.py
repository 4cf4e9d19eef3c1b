"""NeedleBench v1 multi-needle reasoning (M-RS) scoring, scale 0..100.

Two scores are offered:

* :func:`reasoning_reference_score` is the reference evaluator (``NeedleBenchMultiEvaluator`` in
  ``open-compass/opencompass: opencompass/datasets/needlebench/multi.py``) in both languages: the lowercased
  gold answer is split on whitespace into keywords and the score is the share of keywords that are substrings of
  the lowercased raw prediction. Nothing is normalised, so it equals the reference on every prediction,
  including its quirks: English stop-words ("of", "the") give free credit; a Chinese answer has no spaces, so it
  is one keyword and scores all or nothing (a partial substring, reordered words or an answer interrupted by
  zero-width or fullwidth characters score 0; a long ramble containing the answer scores 100).
* :func:`reasoning_strict_score` is an all-or-nothing containment check on normalised text (NFKC,
  lowercase, punctuation, whitespace and format characters such as zero-width spaces removed), the
  deliberate, robust alternative: fullwidth letters and zero-width characters no longer hide an
  answer, and stop-words earn nothing.
"""

from __future__ import annotations

import functools
import unicodedata

import regex

__all__ = [
    "answer_keywords",
    "normalize_for_match",
    "normalize_language",
    "reasoning_reference_score",
    "reasoning_strict_score",
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


def answer_keywords(answer: str, language: str) -> list[str]:
    """The keywords the reference M-RS score looks for: ``answer.lower().split()`` in both languages."""
    normalize_language(language)  # validate
    return answer.lower().split()


def reasoning_reference_score(prediction: str, answer: str, language: str) -> float:
    """Reference M-RS score: ``100 * share of answer keywords found in prediction.lower()``.

    Returns 0.0 when the answer yields no keyword at all (as the reference: 0 per keyword).
    """
    keywords = answer_keywords(answer, language)
    if not keywords:
        return 0.0
    haystack = prediction.lower()
    found = sum(1 for kw in keywords if kw in haystack)
    return found * (100 / len(keywords))  # the reference's arithmetic, so the floats are equal too


#: Whitespace, punctuation, separators and control/format characters (zero-width spaces included).
_NOISE = regex.compile(r"[\s\p{P}\p{Z}\p{C}]+")


def normalize_for_match(text: str) -> str:
    """NFKC, lowercase, and drop every punctuation / whitespace / control or format character."""
    return _NOISE.sub("", unicodedata.normalize("NFKC", text).lower())


#: The gold answers' normalisation, remembered (a run scores many predictions against few answers).
_normalized_answer = functools.lru_cache(maxsize=1024)(normalize_for_match)


def reasoning_strict_score(prediction: str, answer: str, language: str) -> float:
    """100 if the normalised answer is contained in the normalised prediction, else 0.

    Normalisation (both languages): NFKC, lowercase, punctuation and whitespace
    removed.  An answer that normalises to the empty string scores 0.
    """
    normalize_language(language)  # validate
    gold = _normalized_answer(answer)
    if not gold:
        return 0.0
    return 100.0 if gold in normalize_for_match(prediction) else 0.0
