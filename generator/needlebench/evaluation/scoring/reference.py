"""Reference-exact scoring: each family scored as the reference code scores it, for the ``*_reference`` metrics.

The default metrics (the rest of :mod:`needlebench.evaluation.scoring`) differ from the reference on purpose in a
few places (README, "Scoring"); these functions do not, so numbers built from them can be set beside published
ones:

* NeedleBench v1 S-RT, M-RT, M-RS and v2 S-RT, M-RT, M-RS, ATC: the pure scorers already equal OpenCompass's
  evaluators (``opencompass/datasets/needlebench/{origin,parallel,multi}.py``,
  ``opencompass/datasets/needlebench_v2/{origin,atc_elder_only}.py``); only the text they see differs (see
  :func:`needlebench.evaluation.scoring.thinking.reference_text`).
* v1 multiple-choice ATC: :func:`opencompass_first_option`, the answer extraction of OpenCompass's
  ``first_option_postprocess`` (``opencompass/utils/text_postprocessors.py``) with ``options='ABCD'`` as the ATC
  configs pass it (``opencompass/configs/datasets/needlebench/atc/atc_choice*.py``), then CircularEval.
* v1 open-ended ATC: the S-RT evaluator with the eldest name as both reference and keyword
  (``opencompass/datasets/needlebench/atc.py`` stores the gold as ``name*name``).
* Counting-Stars: :func:`notebook_star_scores`, the parse-and-score rule of ``viz.ipynb``
  (``nick7nlp/Counting-Stars``); where the notebook raises, the row scores 0.

None of these raises on any model output.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any

import json_repair

from needlebench.evaluation.scoring.counting_stars import bracket_depths, normalize_task, reasoning_star_score
from needlebench.evaluation.scoring.reasoning import normalize_language
from needlebench.evaluation.scoring.retrieval import keyword_hits, single_retrieval_score

__all__ = [
    "NOTEBOOK_MAX_NESTING",
    "atc_reference_correct",
    "notebook_counting_stars_score",
    "notebook_star_scores",
    "open_atc_reference_score",
    "opencompass_first_option",
    "opencompass_parallel_recall",
]

# --------------------------------------------------------------------------------------------- ATC (v1)


@functools.lru_cache(maxsize=8)
def _first_option_patterns(options: str) -> tuple[re.Pattern[str], ...]:
    """The regular expressions ``first_option_postprocess`` tries, in its order (``cushion=True``).

    ``O`` is the options as one character class, unescaped, as the reference builds it. Two entries of the
    reference list lack the comma between them and so are one pattern ("故选?..." followed by "只有选?项?...").
    """
    o = f"[{options}]"
    sources = [
        rf"答案是?\s*({o})",
        rf"答案是?\s*：\s*({o})",
        rf"答案是?\s*:\s*({o})",
        rf"答案选项应?该?是\s*({o})",
        rf"答案选项应?该?为\s*({o})",
        rf"答案应该?是\s*({o})",
        rf"答案应该?选\s*({o})",
        rf"答案选项为?\s*：\s*({o})",
        rf"答案选项为?\s+\(?\*?\*?({o})\*?\*?\)?",
        rf"答案选项是?\s*:\s*({o})",
        rf"答案为\s*({o})",
        rf"答案选\s*({o})",
        rf"选择?\s*({o})",
        rf"故选?\s*({o})" + rf"只有选?项?\s?({o})\s?是?对",  # the missing comma, kept
        rf"只有选?项?\s?({o})\s?是?错",
        rf"只有选?项?\s?({o})\s?不?正确",
        rf"只有选?项?\s?({o})\s?错误",
        rf"说法不?对选?项?的?是\s?({o})",
        rf"说法不?正确选?项?的?是\s?({o})",
        rf"说法错误选?项?的?是\s?({o})",
        rf"({o})\s?是正确的",
        rf"({o})\s?是正确答案",
        rf"选项\s?({o})\s?正确",
        rf"所以答\s?({o})",
        rf"所以\s?({o}[.。$]?$)",
        rf"所有\s?({o}[.。$]?$)",
        rf"[\s，：:,]({o})[。，,\.]?$",
        rf"[\s，,：:][故即]({o})[。\.]?$",
        rf"[\s，,：:]因此({o})[。\.]?$",
        rf"[是为。]\s?({o})[。\.]?$",
        rf"因此\s?({o})[。\.]?$",
        rf"显然\s?({o})[。\.]?$",
        r"答案是\s?(\S+)(?:。|$)",
        r"答案应该是\s?(\S+)(?:。|$)",
        r"答案为\s?(\S+)(?:。|$)",
        rf"(?i)ANSWER\s*:\s*({o})",
        rf"[Tt]he answer is:?\s+\(?({o})\)?",
        rf"[Tt]he answer is:?\s+\(?\*?\*?({o})\*?\*?\)?",
        rf"[Tt]he answer is option:?\s+\(?({o})\)?",
        rf"[Tt]he correct answer is:?\s+\(?({o})\)?",
        rf"[Tt]he correct answer is option:?\s+\(?({o})\)?",
        rf"[Tt]he correct answer is:?.*?boxed{{({o})}}",
        rf"[Tt]he correct option is:?.*?boxed{{({o})}}",
        rf"[Tt]he correct answer option is:?.*?boxed{{({o})}}",
        rf"[Tt]he answer to the question is:?\s+\(?({o})\)?",
        rf"^选项\s?({o})",
        rf"^({o})\s?选?项",
        rf"(\s|^){o}[\s。，,：:\.$]",
        r"1.\s?(.*?)$",
        rf"1.\s?({o})[.。$]?$",
        # the "cushion": a letter before a colon, then any option letter at all
        rf"({o}):",
        rf"({o})",
    ]
    return tuple(re.compile(source, re.DOTALL) for source in sources)


def opencompass_first_option(text: str, options: str = "ABCD") -> str:
    """The option OpenCompass's ``first_option_postprocess(text, options)`` returns (``""`` for none).

    The patterns are tried in order on the stripped text; the first that matches decides: its first group (or,
    when that group is empty, the whole match) is searched for the options in ``options`` order, and the first
    option found in it is the answer. When the matched text holds no option letter (a whitespace group), the next
    pattern is tried. So the first answer statement wins (``答案是C。不对，重新检查一下，答案是A。`` gives C), a
    fullwidth ``Ｃ`` is not a letter, and the last resort is the first capital option letter anywhere, even inside
    a word.
    """
    text = text.strip()
    for pattern in _first_option_patterns(options):
        match = pattern.search(text)
        if match is None:
            continue
        group = match.group(1)
        found = group if group else match.group(0)
        for letter in options:
            if letter in found:
                return letter
    return ""


def atc_reference_correct(prediction: str, answer_letter: str) -> bool:
    """Is the option ``first_option_postprocess(prediction, 'ABCD')`` picks the row's answer letter?"""
    return opencompass_first_option(prediction, "ABCD") == answer_letter


def open_atc_reference_score(prediction: str, answer: str) -> float:
    """Open-ended ATC as the reference scores it: the S-RT evaluator with the eldest name as needle and keyword
    (100 when the name is in the prediction, else 0.2 x the Levenshtein similarity to the name)."""
    return single_retrieval_score(prediction, answer, answer)


def opencompass_parallel_recall(prediction: str, keywords: Sequence[str], depths: Sequence[float]) -> float:
    """One row's share of M-RT's ``average_score`` as OpenCompass's ``NeedleBenchParallelEvaluator`` computes it
    (``opencompass/datasets/needlebench/parallel.py``): each found keyword adds 100 to the slot of its depth, keyed by
    ``int(depth)``, and the score is the sum over the distinct slots divided by their number. On the papers' grids
    (distinct integer depths) that is the plain recall; on a custom grid whose depths truncate to the same integer
    (``0, 0.4, 0.8``) it divides by fewer slots, and may exceed 100, as the reference does."""
    hits = keyword_hits(prediction, list(keywords))
    if len(depths) != len(hits) or not hits:
        raise ValueError(f"{len(hits)} keyword(s) for {len(depths)} depth(s)")
    slots = {int(depth) for depth in depths}
    return 100.0 * sum(hits) / len(slots)


# --------------------------------------------------------------------------------------------- Counting-Stars

#: The notebook's key of the answer list per language (it reads only its own language's key).
NOTEBOOK_KEYS = {"en": "little_penguin", "zh": "小企鹅"}
#: Outputs nesting brackets deeper than this score 0 without being parsed: Python's default recursion limit is
#: 1000 and both ``json.loads`` and ``json_repair`` need at least one level of it per bracket, so the notebook
#: raises there (and json_repair takes seconds to find out on a megabyte of ``{``).
NOTEBOOK_MAX_NESTING = 1000


#: A JSON string literal (RFC 8259 section 7: a backslash escapes the next character), unterminated at the end too.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)', re.DOTALL)


def _nesting(text: str) -> int:
    """The deepest nesting of ``{``/``[`` in ``text`` as a JSON parser recurses into it: brackets inside string
    literals are characters of the string, not levels (a valid answer with ``"[[[["`` in a field parses)."""
    if text.count("{") + text.count("[") <= NOTEBOOK_MAX_NESTING:
        return 0  # cannot exceed the limit
    unquoted = _JSON_STRING.sub('""', text)
    if unquoted.count("{") + unquoted.count("[") <= NOTEBOOK_MAX_NESTING:
        return 0
    return int(bracket_depths(unquoted).max(initial=0))


def _notebook_answer_list(prediction: str, language: str) -> Any:
    """What ``viz.ipynb`` takes as the prediction (``get_data_EN`` / ``get_data_ZH``); raises where it raises.

    With a code fence: backticks and every ``json`` removed, stripped, ``json_repair.loads``. Without: ``json.loads``
    (English) or ``json_repair.loads`` (Chinese); on failure the notebook indexes the answer string by the key,
    which raises. Then the language's key is read from the result (a list or text in its place raises).
    """
    key = NOTEBOOK_KEYS[language]
    if _nesting(prediction) > NOTEBOOK_MAX_NESTING:
        raise RecursionError("nesting beyond the recursion limit")
    if "```" in prediction:
        parsed = json_repair.loads(prediction.replace("```", "").replace("json", "").strip())
    elif language == "en":
        parsed = json.loads(prediction)
    else:
        parsed = json_repair.loads(prediction)
    return parsed[key]


def _notebook_dedupe(predicted: Any, m: int) -> list[Any]:
    """``reduce_duplicate``: the first ``m`` entries when there are more, then the distinct ones (raises on what
    has no length, cannot be sliced or holds unhashable entries, as the notebook does)."""
    if len(predicted) > m:
        predicted = predicted[:m]
    return list(set(predicted))


def notebook_star_scores(
    prediction: str,
    star_counts: Sequence[int],
    wrong_counts: Sequence[int] | None,
    task: str,
    language: str,
) -> list[float]:
    """Per-star scores of one row as ``viz.ipynb`` computes them; all 0 where the notebook would raise.

    Membership is Python's list membership, so ``True`` counts as 1 and ``15.0`` as 15, a string never matches,
    and nothing is normalised (a fullwidth digit makes the JSON invalid). Reasoning: 1 when the correct count is
    predicted and the wrong one is not, 0.5 when both are, 0.25 when only the wrong one is, else 0. The notebook
    reads the correct and wrong counts from ``a_stars.txt`` / ``r_stars.txt`` (the lists of its 32-star data);
    here they are the row's own ``star_counts`` and ``wrong_counts`` (the same lists for
    ``--compat counting-stars`` rows).
    """
    kind = normalize_task(task)
    lang = normalize_language(language)
    stars = list(star_counts)
    wrong = list(wrong_counts) if wrong_counts is not None else []
    if kind == "reasoning" and len(wrong) != len(stars):
        raise ValueError(f"wrong_counts has {len(wrong)} entries, star_counts has {len(stars)}")
    try:
        pool = _notebook_dedupe(_notebook_answer_list(prediction, lang), len(stars))
    except Exception:  # the notebook stops on any error (its bare except falls through to a raising line)
        return [0.0] * len(stars)
    if kind == "acquisition":
        return [1.0 if count in pool else 0.0 for count in stars]
    return [reasoning_star_score(correct in pool, mistaken in pool) for correct, mistaken in zip(stars, wrong)]


def notebook_counting_stars_score(
    prediction: str,
    star_counts: Sequence[int],
    wrong_counts: Sequence[int] | None,
    task: str,
    language: str,
) -> float:
    """Mean of :func:`notebook_star_scores` for one row (0..1)."""
    if len(star_counts) == 0:
        raise ValueError("star_counts must not be empty")
    scores = notebook_star_scores(prediction, star_counts, wrong_counts, task, language)
    return sum(scores) / len(scores)
