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

import functools
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import json_repair
import numpy as np

from needlebench.evaluation.scoring.reasoning import normalize_language

__all__ = [
    "COUNT_KEY",
    "COUNT_KEYS",
    "answer_json",
    "counting_stars_score",
    "normalize_task",
    "parse_answer_list",
    "parse_counts",
    "predicted_counts",
    "star_scores",
]

#: The key the question of each language asks the counts under (either is accepted in both languages).
COUNT_KEY = {"en": "little_penguin", "zh": "小企鹅"}
#: Keys under which the counts are expected (English and Chinese prompts).
COUNT_KEYS = tuple(COUNT_KEY.values())

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


def answer_json(counts: Sequence[int], language: str) -> str:
    """The answer the question asks for: the counts under the language's key, e.g. ``{"little_penguin": [15, 117]}``."""
    return json.dumps({COUNT_KEY[normalize_language(language)]: [int(count) for count in counts]}, ensure_ascii=False)


# --------------------------------------------------------------------------- parsing

_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON5?|Json)?")
_KEY_RE = re.compile(r"""["'“”‘’]?[ \t]*(little_penguin|小企鹅)[ \t]*["'“”‘’]?[ \t]*:""", re.IGNORECASE)


#: Any spelling of a count key a parse could produce (plain, markdown-escaped, JSON-escaped Chinese).
_ANY_KEY = re.compile(r"little\\?_penguin|小企鹅|\\u5c0f\\u4f01\\u9e45", re.IGNORECASE)


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


#: Deepest bracket nesting handed to json_repair (an answer needs 2; json_repair slows down steeply with depth).
_MAX_DEPTH = 16
_DEPTH_STEP = np.zeros(128, dtype=np.int64)
_DEPTH_STEP[[ord("{"), ord("[")]] = 1
_DEPTH_STEP[[ord("}"), ord("]")]] = -1


def bracket_depths(text: str) -> np.ndarray:
    """The nesting depth of ``{``/``[`` after each character of `text`, counting every bracket (quoted or not)."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    steps = _DEPTH_STEP[np.minimum(codes, 127)] * (codes < 128)
    return np.cumsum(steps, dtype=np.int64)


def _cut_deep_nesting(text: str) -> str:
    """`text` up to where its brackets nest deeper than :data:`_MAX_DEPTH` (json_repair closes what is open)."""
    if text.count("{") + text.count("[") <= _MAX_DEPTH:
        return text
    deep = np.flatnonzero(bracket_depths(text) > _MAX_DEPTH)
    return text[: int(deep[0])] if len(deep) else text


def _repair(text: str):
    """``json_repair.loads`` of `text` cut to :data:`_MAX_DEPTH` nesting, or None.

    Fast path: valid JSON is read by ``json.loads`` and json_repair is not called (json_repair itself starts with
    ``json.loads`` and returns its result for valid JSON, so the result is the same).
    """
    text = _cut_deep_nesting(text)
    try:
        return json.loads(text)
    except (ValueError, TypeError):  # what json_repair catches around its own json.loads
        pass
    except RecursionError:
        return None
    try:
        return json_repair.loads(text, skip_json_loads=True)
    except Exception:  # json_repair is lenient, but never let parsing crash scoring
        return None


#: Parse attempts per answer beyond the whole text: the first and last few ``{`` and key occurrences. Bounds the
#: work on pathological outputs (a 1 MB run of ``{`` would otherwise be parsed a million times).
_MAX_CANDIDATES = 4
#: Longest text handed to json_repair in one attempt (a 1,024-star answer is ~6 kB; longer texts are parsed from
#: their ``{`` and key occurrences, each attempt cut to this length).
_MAX_PARSE_CHARS = 1 << 18


_BRACE = re.compile(r"\{")


def _ends(items: list, count: int) -> list:
    return items if len(items) <= 2 * count else items[:count] + items[-count:]


def _candidates(text: str):
    """Texts to try, best first: the whole text, then ``{...`` suffixes, then key occurrences wrapped in braces
    (at most :data:`_MAX_CANDIDATES` of each from either end of the text)."""
    if len(text) <= _MAX_PARSE_CHARS:
        yield text
    braces = [m.start() for m in _BRACE.finditer(text, 1)]
    for start in _ends(braces, _MAX_CANDIDATES):
        candidate = text[start : start + _MAX_PARSE_CHARS]
        # Cheap pre-check: a parse can only produce a count key the candidate spells (plainly, escaped as in
        # _ANY_KEY, or through other \\u escapes); without one the parse cannot find the counts.
        if _ANY_KEY.search(candidate) or "\\u" in candidate:
            yield candidate
    for m in _ends(list(_KEY_RE.finditer(text)), _MAX_CANDIDATES):
        yield '{"' + m.group(1) + '":' + text[m.end() : m.end() + _MAX_PARSE_CHARS]


def parse_answer_list(prediction: str, language: str) -> list[Any]:
    """The raw list predicted for the little penguin, in output order and untouched; ``[]`` if none parses.

    ``language`` (``"en"``/``"zh"``) is validated; both keys are accepted in either
    language.  A bare list without the key is not accepted (the reference reads
    the key).
    """
    normalize_language(language)
    if not prediction:
        return []
    return list(_parse_cached(prediction))


#: Predictions whose parse is remembered: scoring one output for several metrics or tasks (both Counting-Stars
#: tasks, :func:`parse_counts` for display next to the score) parses it once.
_CACHE_SIZE = 256


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _parse_cached(prediction: str) -> tuple:
    """The parsed answer list of `prediction` as a tuple (independent of the language)."""
    text = unicodedata.normalize("NFKC", prediction)
    text = _FENCE.sub("", text).strip()
    if not text:
        return ()
    if not _ANY_KEY.search(text):
        return ()  # the answer is read from the key: without it nothing can parse (and junk is not parsed at all)
    for candidate in _candidates(text):
        values = _find_counts(_repair(candidate))
        if values is not None:
            return tuple(values)
    return ()


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
    return [reasoning_star_score(a in predicted, r in predicted) for a, r in zip(star_counts, wrong_counts)]


def reasoning_star_score(has_correct: bool, has_wrong: bool) -> float:
    """The paper's reasoning score of one star (Counting-Stars, arXiv:2403.11802 Sec. 3.1): 1 for the correct count
    alone, 0.5 with the unrevised wrong count beside it, 0.25 for the wrong count alone, else 0."""
    if has_correct:
        return 0.5 if has_wrong else 1.0
    return 0.25 if has_wrong else 0.0


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
    scores = star_scores(
        prediction, list(star_counts), None if wrong_counts is None else list(wrong_counts), task, language
    )
    return math.fsum(scores) / len(scores)
