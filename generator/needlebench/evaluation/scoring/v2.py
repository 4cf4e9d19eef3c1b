"""NeedleBench v2 scoring and aggregation, scale 0..100 (reference ``opencompass/datasets/needlebench_v2/``).

Per row:

* S-RT: binary, 100 when the answer keyword is a case-sensitive substring of the raw prediction, else 0 (v2
  dropped v1's Levenshtein partial credit).
* M-RT: as v1, the share of needle keywords found (:func:`needlebench.evaluation.scoring.multi_retrieval_recall`).
* M-RS and ATC: the content of the *last* ``\\boxed{...}`` (balanced braces; ``\\fbox`` is found but, as in the
  reference, not unwrapped), one outer pair of braces dropped, then cleaned (:func:`clean_boxed_answer`:
  ``\\text{}``/``\\boxed{}`` unwrapped, backslashes and quotes removed, whitespace collapsed, ``~`` made a space);
  no box gives ``"None"``. The score is 100 when the cleaned answer equals the gold answer (both stripped).

Aggregation: :func:`relation_weighted` (ATC: per relation count the mean score, weighted by the relation count) and
:func:`v2_overall` (the plain mean of S-RT, M-RT and M-RS, the reference v2 summarizer's ``mean=True``); the report
computes the v2 means beside the v1 ones, over the same samples (:mod:`needlebench.evaluation.report.aggregate`).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable

from needlebench.evaluation.scoring.overall import overall_score

__all__ = [
    "boxed_answer",
    "boxed_exact_score",
    "clean_boxed_answer",
    "extract_boxed",
    "last_boxed",
    "relation_weighted",
    "single_retrieval_v2_score",
    "v2_overall",
]

#: What the reference returns when a prediction has no box.
NO_ANSWER = "None"

_BOX = "\\boxed"
_FBOX = "\\fbox"
_DOUBLE_BRACES = re.compile(r"^\{(.*)\}$")


def single_retrieval_v2_score(prediction: str, keyword: str) -> float:
    """v2 S-RT: 100 if ``keyword`` is a case-sensitive substring of the raw prediction, else 0."""
    return 100.0 if keyword in prediction else 0.0


def last_boxed(text: str) -> str | None:
    """The last ``\\boxed{...}`` (or, without any, the last ``\\fbox{...}``) of ``text`` up to its balanced closing
    brace, or None when there is none or it never closes."""
    start = text.rfind(_BOX)
    if start < 0:
        start = text.rfind(_FBOX)
        if start < 0:
            return None
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start : index + 1]
    return None


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` with one outer pair of braces dropped (``\\boxed{{x}}`` -> ``x``);
    None when there is no box (a last ``\\fbox`` is not unwrapped, as in the reference)."""
    boxed = last_boxed(text)
    prefix = _BOX + "{"
    if boxed is None or not boxed.startswith(prefix) or not boxed.endswith("}"):
        return None
    content = boxed[len(prefix) : -1]
    match = _DOUBLE_BRACES.match(content)
    return match.group(1) if match else content


def clean_boxed_answer(text: str) -> str:
    """The reference's cleaning of a boxed answer (``clean_atc_answer``), step by step."""
    if not text or text == NO_ANSWER:
        return NO_ANSWER
    text = re.sub(r"\\text\{([^}]+)\}", r"\1", text)
    text = re.sub(r"\\boxed\{([^}]+)\}", r"\1", text)
    text = re.sub(r"\\[\[\]]", "", text)
    text = text.replace("\\\\", "").replace("\\", "")
    text = re.sub(r"\s+", " ", text).strip()
    text = text.replace('"', "").replace("'", "")
    return text.replace("~", " ")


def box(answer: str) -> str:
    """``answer`` in the form :func:`extract_boxed` reads: ``\\boxed{answer}``."""
    return f"{_BOX}{{{answer}}}"


def boxed_answer(prediction: str) -> str:
    """The cleaned content of the prediction's last box, or ``"None"``."""
    content = extract_boxed(prediction)
    return clean_boxed_answer(content) if content else NO_ANSWER


def boxed_exact_score(prediction: str, answer: str) -> float:
    """v2 M-RS / ATC: 100 when the boxed, cleaned answer equals the gold answer (both stripped), else 0."""
    return 100.0 if boxed_answer(prediction).strip() == str(answer).strip() else 0.0


# --------------------------------------------------------------------------------------------- aggregation


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def relation_weighted(scores: Iterable[tuple[int, float]]) -> float:
    """``(relation count, score)`` pairs -> the mean score per count, weighted by the count:
    ``sum(mean_n * n) / sum(n)``. Raises ``ValueError`` when there is no pair."""
    by_count: dict[int, list[float]] = defaultdict(list)
    for count, score in scores:
        by_count[int(count)].append(float(score))
    if not by_count:
        raise ValueError("relation_weighted needs at least one (relation count, score) pair")
    total = sum(by_count)
    return math.fsum(_mean(values) * count for count, values in by_count.items()) / total


def v2_overall(srt: float, mrt: float, mrs: float) -> float:
    """The v2 overall score: the plain mean of S-RT, M-RT and M-RS (:data:`~.overall.OVERALL_WEIGHTS`)."""
    return overall_score("v2", {"S-RT": srt, "M-RT": mrt, "M-RS": mrs})
