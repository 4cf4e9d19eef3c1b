"""Counting-Stars scoring (scale 0..1, as in the paper and ``viz.ipynb``).

Parsing (:func:`parse_answer_list`) uses ``json_repair`` so truncated output,
trailing commas, single quotes, code fences and prose around the JSON object
are tolerated.  The answer list is read from the key ``"little_penguin"``
(English prompt) or ``"小企鹅"`` (Chinese prompt); either key is accepted in both
languages.  Entries are kept as parsed, whatever their type.

Per-star scoring (:func:`star_scores`) follows the reference: the raw list is
first truncated to ``M = len(star_counts)`` entries (strings and other junk
take their slots too), then turned into a set, and a count is predicted when it
is a member by Python equality (so ``15.0`` counts as ``15``; strings never
match, and neither do booleans, although ``True == 1`` in Python):

* acquisition: 1 if ``a_i`` is predicted, else 0;
* reasoning: 1 if ``a_i`` is predicted and the wrong count ``r_i`` is not; 0.5
  if both are; 0.25 if only ``r_i`` is; 0 otherwise.

:func:`parse_counts` lists the numeric entries of the whole answer (for display).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import json_repair

from needlebench.evaluation.scoring.reasoning import normalize_language

__all__ = [
    "COUNT_KEYS",
    "normalize_task",
    "parse_answer_list",
    "parse_counts",
    "predicted_counts",
    "star_scores",
    "counting_stars_score",
]

#: Keys under which the counts are expected (English and Chinese prompts).
COUNT_KEYS = ("little_penguin", "小企鹅")

_TASK_ALIASES = {
    "acquisition": "acquisition",
    "searching": "acquisition",
    "multi-evidence-retrieval-searching": "acquisition",
    "multi-evidence acquisition": "acquisition",
    "me-acq": "acquisition",
    "reasoning": "reasoning",
    "multi-evidence-retrieval-reasoning": "reasoning",
    "multi-evidence reasoning": "reasoning",
    "me-rea": "reasoning",
}


def normalize_task(task: str) -> str:
    """Map a task name to ``"acquisition"`` or ``"reasoning"``.

    Accepts the repository names (``multi-evidence-retrieval-searching`` /
    ``-reasoning``), the short names and the paper abbreviations (Me-Acq / Me-Rea).
    """
    key = str(task).strip().lower()
    try:
        return _TASK_ALIASES[key]
    except KeyError:
        raise ValueError(f"unknown Counting-Stars task {task!r}; expected 'acquisition' or 'reasoning'") from None


# --------------------------------------------------------------------------- parsing

_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON5?|Json)?")
_KEY_RE = re.compile(r"""["'“”‘’]?[ \t]*(little_penguin|小企鹅)[ \t]*["'“”‘’]?[ \t]*:""", re.IGNORECASE)


def _is_count_key(key) -> bool:
    return isinstance(key, str) and key.strip().strip("\"'").strip().lower() in COUNT_KEYS


def _find_counts(obj, depth: int = 0):
    """Depth-first search for the first count key whose value is a list."""
    if depth > 20:
        return None
    if isinstance(obj, dict):
        for key, value in obj.items():
            if _is_count_key(key) and isinstance(value, (list, tuple)):
                return list(value)
        for value in obj.values():
            found = _find_counts(value, depth + 1)
            if found is not None:
                return found
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            found = _find_counts(value, depth + 1)
            if found is not None:
                return found
    return None


def _repair(text: str):
    try:
        return json_repair.loads(text)
    except Exception:  # json_repair is lenient, but never let parsing crash scoring
        return None


def _candidates(text: str):
    """Texts to try, best first: the whole text, then each ``{...`` suffix, then each key occurrence wrapped in braces."""
    yield text
    for m in re.finditer(r"\{", text):
        if m.start() > 0:
            yield text[m.start():]
    for m in _KEY_RE.finditer(text):
        yield '{"' + m.group(1) + '":' + text[m.end():]


def parse_answer_list(prediction: str, language: str) -> list[Any]:
    """The raw list predicted for the little penguin, in output order and untouched; ``[]`` if none parses.

    ``language`` (``"en"``/``"zh"``) is validated; both keys are accepted in either
    language.  A bare list without the key is not accepted (the reference reads
    the key).
    """
    normalize_language(language)
    if not prediction:
        return []
    text = unicodedata.normalize("NFKC", prediction)
    text = _FENCE.sub("", text).strip()
    if not text:
        return []
    for candidate in _candidates(text):
        values = _find_counts(_repair(candidate))
        if values is not None:
            return values
    return []


def _is_count(value: Any) -> bool:
    """A number that can equal a star count: ``int`` or ``float``, never ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_counts(prediction: str, language: str) -> list[int | float]:
    """The numeric entries (ints and floats, no booleans) of the predicted list, in output order.

    Duplicates are kept; scoring does not use this list (see :func:`predicted_counts`).
    """
    return [value for value in parse_answer_list(prediction, language) if _is_count(value)]


def predicted_counts(answer: Sequence[Any], m: int) -> set[int | float]:
    """The set scored against the star counts: the first ``m`` raw entries, numbers only (reference order)."""
    return {value for value in list(answer)[:m] if _is_count(value)}


# --------------------------------------------------------------------------- scoring


def star_scores(
    prediction: str,
    star_counts: list[int],
    wrong_counts: list[int] | None,
    task: str,
    language: str,
) -> list[float]:
    """One score per star (per entry of ``star_counts``), each in {0, 0.25, 0.5, 1}.

    The answer list is truncated to ``M = len(star_counts)`` raw entries before the set is built.
    """
    kind = normalize_task(task)
    star_counts = list(star_counts)
    m = len(star_counts)
    predicted = predicted_counts(parse_answer_list(prediction, language), m)
    if kind == "acquisition":
        return [1.0 if a in predicted else 0.0 for a in star_counts]
    if wrong_counts is None:
        raise ValueError("the reasoning task needs wrong_counts")
    wrong_counts = list(wrong_counts)
    if len(wrong_counts) != m:
        raise ValueError(f"wrong_counts has {len(wrong_counts)} entries, star_counts has {m}")
    scores = []
    for a, r in zip(star_counts, wrong_counts):
        has_a, has_r = a in predicted, r in predicted
        if has_a and not has_r:
            scores.append(1.0)
        elif has_a and has_r:
            scores.append(0.5)
        elif has_r:
            scores.append(0.25)
        else:
            scores.append(0.0)
    return scores


def counting_stars_score(
    prediction: str,
    star_counts: Sequence[int],
    wrong_counts: Sequence[int] | None,
    task: str,
    language: str,
) -> float:
    """Mean of :func:`star_scores` for one sample (0..1)."""
    if len(star_counts) == 0:
        raise ValueError("star_counts must not be empty")
    scores = star_scores(prediction, list(star_counts), None if wrong_counts is None else list(wrong_counts), task, language)
    return math.fsum(scores) / len(scores)
