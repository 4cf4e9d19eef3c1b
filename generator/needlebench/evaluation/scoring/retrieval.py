"""NeedleBench v1 retrieval scoring (S-RT and M-RT), scale 0..100.

Behaviour follows the reference evaluators of OpenCompass (``open-compass/opencompass``):
``NeedleBenchOriginEvaluator`` in ``opencompass/datasets/needlebench/origin.py`` (S-RT) and
``NeedleBenchParallelEvaluator`` in ``opencompass/datasets/needlebench/parallel.py`` (M-RT):

* S-RT: whitespace is removed from the prediction and from the reference (the
  needle text); the Levenshtein distance ``d`` (unit costs) gives
  ``100 * (1 - d / max(len_pred, len_ref))`` (100 when both are empty).  If the
  answer keyword is a *case-sensitive* substring of the *raw* prediction the
  score is 100, otherwise the similarity score is multiplied by the penalty
  factor ``alpha = 0.2`` (so a miss earns at most 20).
* M-RT: per-needle recall; a needle counts as found when its keyword is a
  case-sensitive substring of the prediction (no normalisation at all).
"""

from __future__ import annotations

import re

from rapidfuzz.distance import Levenshtein

__all__ = [
    "KEYWORD_MISS_PENALTY",
    "keyword_hits",
    "levenshtein_similarity",
    "multi_retrieval_recall",
    "single_retrieval_score",
]

#: Penalty factor alpha applied to the similarity score when the keyword is missing.
KEYWORD_MISS_PENALTY = 0.2

# Python's ``\s`` on str is Unicode-aware, as in the reference implementation.
_WHITESPACE = re.compile(r"\s+")


def _strip_whitespace(text: str) -> str:
    return _WHITESPACE.sub("", text)


def levenshtein_similarity(prediction: str, reference: str) -> float:
    """``100 * (1 - d / max(len))`` on whitespace-free strings; 100 if both are empty."""
    pred = _strip_whitespace(prediction)
    ref = _strip_whitespace(reference)
    longest = max(len(pred), len(ref))
    if longest == 0:
        return 100.0
    distance = Levenshtein.distance(pred, ref)
    return 100.0 * (1.0 - distance / longest)


def single_retrieval_score(prediction: str, needle: str, keyword: str) -> float:
    """Score one S-RT answer (0..100).

    ``needle`` is the reference text (the inserted needle sentence, newlines and
    other whitespace are ignored).  ``keyword`` is the answer keyword (``arg2``
    of ``needles.jsonl``); it is matched case-sensitively against the raw
    prediction, with whitespace intact.  As in the reference, an empty keyword
    is a substring of everything and therefore always scores 100.
    """
    if keyword in prediction:
        return 100.0
    return KEYWORD_MISS_PENALTY * levenshtein_similarity(prediction, needle)


def keyword_hits(prediction: str, keywords: list[str]) -> list[bool]:
    """For each keyword: is it a case-sensitive substring of ``prediction``?"""
    return [keyword in prediction for keyword in keywords]


def multi_retrieval_recall(prediction: str, keywords: list[str]) -> float:
    """M-RT score: ``100 * (keywords found) / (number of keywords)``.

    Raises ``ValueError`` for an empty keyword list (the recall is undefined).
    """
    hits = keyword_hits(prediction, list(keywords))
    if not hits:
        raise ValueError("multi_retrieval_recall needs at least one keyword")
    return 100.0 * sum(hits) / len(hits)
