"""NeedleBench v2 scoring and aggregation, scale 0..100 (reference ``opencompass/datasets/needlebench_v2/``).

Per row:

* S-RT: binary, 100 when the answer keyword is a case-sensitive substring of the raw prediction, else 0 (v2
  dropped v1's Levenshtein partial credit).
* M-RT: as v1, the share of needle keywords found (:func:`needlebench.evaluation.scoring.multi_retrieval_recall`).
* M-RS and ATC: the content of the *last* ``\\boxed{...}`` (balanced braces; ``\\fbox`` is found but, as in the
  reference, not unwrapped), one outer pair of braces dropped, then cleaned (:func:`clean_boxed_answer`:
  ``\\text{}``/``\\boxed{}`` unwrapped, backslashes and quotes removed, whitespace collapsed, ``~`` made a space);
  no box gives ``"None"``. The score is 100 when the cleaned answer equals the gold answer (both stripped).

Aggregation (pure functions over scored rows, i.e. mappings with the row columns plus ``score``):

* a task's score at a size is the mean over its cells (a cell is one config, context length, depth and needle
  count, i.e. one reference dataset) of the cell's mean row score; both languages count;
* v2 overall at a size = the plain mean of S-RT, M-RT and M-RS (the reference v2 summarizer's ``mean=True``);
* ATC: per relation count the mean over question types and repeats, then weighted by the relation count
  (``sum(score_n * n) / sum(n)``), per language and question type.

The reference summarizer at its HEAD is not followed: its "S-RT" group reads the M-RT datasets, and its 200k and
1000k v2 length lists are not the v2 configs' lengths; these functions compute every number from the rows.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from needlebench.tasks.grid import SIZES, ConfigSpec, get_config

__all__ = [
    "V2_TASKS",
    "atc_v2_table",
    "boxed_answer",
    "boxed_exact_score",
    "clean_boxed_answer",
    "extract_boxed",
    "last_boxed",
    "relation_weighted",
    "scored_row",
    "single_retrieval_v2_score",
    "v2_overall",
    "v2_size_table",
    "v2_task_table",
]

#: The three tasks of the v2 overall score, in table order.
V2_TASKS = ("S-RT", "M-RT", "M-RS")
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

#: The per-row lm-eval metric of each v2 family that the tables average (see ``evaluation.harness``).
V2_ROW_METRIC = {"single": "score", "multi_retrieval": "recall", "multi_reasoning": "exact", "atc": "accuracy"}


def scored_row(doc: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A v2 row (an lm-eval sample's ``doc``) with its family's headline metric as ``score``, ready for the
    tables below; ``metrics`` are the sample's metric values (e.g. ``{"recall": 90.9, "needle_hits": [...]}``)."""
    spec = get_config(str(doc["config"]))
    if not spec.is_v2:
        raise ValueError(f"config {spec.name!r} is not a NeedleBench v2 config")
    return {**doc, "score": float(metrics[V2_ROW_METRIC[spec.family]])}


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def _spec(row: Mapping[str, Any]) -> ConfigSpec:
    return get_config(str(row["config"]))


def _cell(row: Mapping[str, Any]) -> tuple:
    return (row["config"], row.get("context_length"), row.get("depth_percent"), row.get("num_needles"))


def v2_task_table(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], float]:
    """``{(size, task, language): score}`` of the v2 haystack rows (S-RT, M-RT, M-RS): the mean over cells of
    the cells' mean scores. Rows of other configs are ignored."""
    cells: dict[tuple, list[float]] = defaultdict(list)
    keys: dict[tuple, tuple[str, str, str]] = {}
    for row in rows:
        spec = _spec(row)
        if not spec.is_v2 or spec.family == "atc":
            continue
        cell = _cell(row)
        cells[cell].append(float(row["score"]))
        keys[cell] = (spec.size, spec.task_label, spec.language)
    grouped: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for cell, scores in cells.items():
        grouped[keys[cell]].append(_mean(scores))
    return {key: _mean(values) for key, values in grouped.items()}


def v2_overall(srt: float, mrt: float, mrs: float) -> float:
    """The v2 overall score: the plain mean of S-RT, M-RT and M-RS."""
    return math.fsum((srt, mrt, mrs)) / 3


def v2_size_table(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{size: {"S-RT": .., "M-RT": .., "M-RS": .., "Overall": ..}}``: each task the mean over its cells in
    both languages; ``Overall`` only when all three tasks have rows at that size."""
    cells: dict[tuple, list[float]] = defaultdict(list)
    keys: dict[tuple, tuple[str, str]] = {}
    for row in rows:
        spec = _spec(row)
        if not spec.is_v2 or spec.family == "atc":
            continue
        cell = _cell(row)
        cells[cell].append(float(row["score"]))
        keys[cell] = (spec.size, spec.task_label)
    grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
    for cell, scores in cells.items():
        grouped[keys[cell]].append(_mean(scores))
    table: dict[str, dict[str, float]] = {}
    for size in SIZES:
        tasks = {task: _mean(grouped[(size, task)]) for task in V2_TASKS if (size, task) in grouped}
        if not tasks:
            continue
        if len(tasks) == len(V2_TASKS):
            tasks["Overall"] = v2_overall(*(tasks[task] for task in V2_TASKS))
        table[size] = tasks
    return table


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


def atc_v2_table(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """``{language: {"weighted": .., <question type>: .., "n=<count>": ..}}`` of the v2 ATC rows: the
    relation-weighted score over all question types, per question type, and the plain mean per count."""
    pairs: dict[str, list[tuple[int, float]]] = defaultdict(list)
    by_type: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        spec = _spec(row)
        if not (spec.is_v2 and spec.family == "atc"):
            continue
        pair = (int(row["num_needles"]), float(row["score"]))
        pairs[spec.language].append(pair)
        by_type[(spec.language, str(row["question_type"]))].append(pair)
    table: dict[str, dict[str, float]] = {}
    for language in sorted(pairs):
        entry = {"weighted": relation_weighted(pairs[language])}
        for (lang, question_type), values in sorted(by_type.items()):
            if lang == language:
                entry[question_type] = relation_weighted(values)
        counts: dict[int, list[float]] = defaultdict(list)
        for count, score in pairs[language]:
            counts[count].append(score)
        entry.update({f"n={count}": _mean(values) for count, values in sorted(counts.items())})
        table[language] = entry
    return table
