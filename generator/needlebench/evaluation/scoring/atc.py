"""Ancestral Trace Challenge (ATC) scoring.

* :func:`extract_option` pulls the chosen letter out of a multiple-choice answer
  (direct "Answer: X" / "回答: X" few-shot style, chain-of-thought
  "The answer is: X" / "所以答案是：X" style, bare letters, "C. name", ...).
* :func:`circular_scores` implements CircularEval (``open-compass/opencompass:
  opencompass/openicl/icl_evaluator/icl_circular_evaluator.py``):
  ``acc_1`` (ABCD rows only), ``acc`` (all rows) and ``perf_4`` (items whose
  every rotation is answered correctly), all on a 0..100 scale;
  :func:`complete_items` keeps only items that have all four rotations.
* :func:`atc_category_score` weights ``perf_4`` per needle count by the number
  of needles (names), like the reference summarizer; :func:`atc_overall` is the
  plain mean of the categories.
* :func:`open_answer_score` scores the open-ended variant by exact match of the
  normalised name.

Differences from the reference extraction (OpenCompass ``first_option_postprocess``, a cascade
of regexes tried in order whose last resort takes the first capital A-D anywhere in the text),
all deliberate; on every other answer the two pick the same letter:

* **fullwidth letters** (``Ｂ``, ``回答：Ｄ``): read as ``B``/``D`` here (NFKC); the reference does
  not see them and falls through to any capital A-D elsewhere (``Answer: Ｃ`` gives it the ``A``
  of "Answer"). A model that wrote ``Ｃ`` chose C.
* **a letter glued to text or junk** (``ABCD``, ``xyzD``, lowercase ``Answer: b``, emoji or symbol
  noise around letters inside words): no answer here; the reference takes the first capital A-D
  even inside a word, so its credit depends on the spelling of unrelated words.
* **a name without a letter** (``The eldest is Carol Adams.``): the reference takes the first
  capital A-D of the name's initials (C here, whatever option Carol Adams is); with the options'
  names (``names=``, as the lm-eval hook passes them) the name is mapped to its own option, else
  there is no answer.
* **a letter followed by text** agrees: ``A David House`` / ``A is correct`` give ``A`` in both;
  only an ``A`` followed by a lowercase word that is not a verb (``A careful reading shows C``) is
  read as the English article here (the reference also ends on C there via its later patterns).
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

import regex

__all__ = [
    "ANSWER_STATEMENTS",
    "BASE_ROTATION",
    "ROTATIONS",
    "atc_category_score",
    "atc_overall",
    "circular_item_correct",
    "circular_scores",
    "complete_items",
    "extract_open_answer",
    "extract_option",
    "normalize_name",
    "open_answer_score",
    "option_answer",
    "option_letter_for",
]

#: The un-rotated option order; ``acc_1`` is computed on rows with this rotation.
BASE_ROTATION = "ABCD"
#: The four CircularEval rotations of an item.
ROTATIONS = ("ABCD", "BCDA", "CDAB", "DABC")

#: The answer statement of each prompt style and language, as the few-shot answers of the reference prompts write
#: it (``direct``: "Answer: X"; ``reasoning``: the chain-of-thought ending "The answer is: X"), the first tier of
#: :func:`extract_option`.
ANSWER_STATEMENTS = {
    ("direct", "en"): "Answer: {letter}",
    ("direct", "zh"): "回答: {letter}",
    ("reasoning", "en"): "The answer is: {letter}",
    ("reasoning", "zh"): "所以答案是：{letter}",
}


def option_answer(letter: str, style: str, language: str) -> str:
    """The statement choosing ``letter`` in a prompt style (``direct`` / ``reasoning``) and language."""
    return ANSWER_STATEMENTS[(style, language)].format(letter=letter)


# --------------------------------------------------------------------------- option extraction

_OPEN = r"[\(\[（【<]"
_CLOSE = r"[\)\]）】>]"


def _letter(cls: str) -> str:
    # A capital option letter that is not glued to other latin letters/digits.
    return rf"(?<![A-Za-z0-9])({cls})(?![A-Za-z0-9])"


#: After a matched letter: not the English article, i.e. not an "A" followed by a lowercase word
#: ("Answer: A careful reading shows ..."); "A David House" (an option's text) still counts.
_NOT_ARTICLE = r"(?!(?<=A)[ \t]+[a-z])"


def _compile_patterns(letters: str):
    cls = "[" + re.escape(letters) + "]"
    let = _letter(cls)
    stmt_let = let + _NOT_ARTICLE
    answer_statements = [
        # English: "Answer: C", "The answer is: C", "The correct answer is (C)",
        # "Final answer: option C", "the answer would be C".
        re.compile(
            r"(?i:\banswer\b)[ \t]*"
            r"(?:(?i:is|would\s+be|should\s+be|will\s+be|must\s+be)\b)?[ \t]*"
            r"[:：=\-]?\s*"
            r"(?:(?i:option|choice)\b[ \t]*)?[:：]?[ \t]*" + _OPEN + r"?[ \t]*" + stmt_let
        ),
        # Chinese: "回答: C", "回答：C", "答案是C", "所以答案是：C", "答案为（C）", "答案应该是选项C", "答：C".
        re.compile(
            r"(?:答案|回答|答)[ \t]*(?:应该|应当|应|就)?[ \t]*(?:是|为|選|选)?[ \t]*"
            r"(?:选项|選項)?[ \t]*[:：]?[ \t]*" + _OPEN + r"?[ \t]*" + stmt_let
        ),
        # LaTeX: \boxed{C}, \boxed{\text{C}}
        re.compile(r"\\boxed\{[ \t]*(?:\\text(?:bf)?\{)?[ \t]*" + let),
    ]
    # A line holding nothing but an option: "C", "C.", "(C)", "[C]", "C)".
    bare_line = re.compile(
        r"^[ \t]*" + _OPEN + r"?[ \t]*(" + cls + r")[ \t]*" + _CLOSE + r"?[ \t]*[.．。:：、]?[ \t]*$",
        re.MULTILINE,
    )
    # First line starting with an option label followed by its text: "C. David House", "(C) David House", and a
    # bare letter followed by a name or a verb: "A David House", "A is correct" (not "A careful reading").
    labelled_start = re.compile(
        r"^[ \t]*(?:" + _OPEN + r"[ \t]*(" + cls + r")[ \t]*" + _CLOSE + r"|(" + cls + r")[ \t]*[.．。:：、\)）]"
        r"|(" + cls + r")[ \t]+(?=[A-Z]|(?:is|was|would|should|seems|looks|appears)\b))"
    )
    # Weaker mentions: "Option C", "选项C", "choice C", "**C**".
    mentions = [
        re.compile(r"(?i:\b(?:option|choice)\b)[ \t]*" + _OPEN + r"?[ \t]*" + let),
        re.compile(r"(?:选项|選項|选)[ \t]*" + _OPEN + r"?[ \t]*" + let),
        re.compile(r"\*\*[ \t]*" + _OPEN + r"?[ \t]*(" + cls + r")[ \t]*" + _CLOSE + r"?[ \t]*[.:：]?[ \t]*\*\*"),
    ]
    # Any stand-alone capital option letter (last resort, must be unambiguous).
    standalone = re.compile(let)
    return answer_statements, bare_line, labelled_start, mentions, standalone


_PATTERN_CACHE: dict[str, tuple] = {}


def _patterns(letters: str):
    cached = _PATTERN_CACHE.get(letters)
    if cached is None:
        cached = _PATTERN_CACHE[letters] = _compile_patterns(letters)
    return cached


def _last_match(patterns, text: str) -> str | None:
    best_pos, best = -1, None
    for pattern in patterns:
        for m in pattern.finditer(text):
            group = next(g for g in range(1, (m.lastindex or 0) + 1) if m.group(g))
            if m.start(group) > best_pos:
                best_pos, best = m.start(group), m.group(group)
    return best


def _statement_patterns(answer_statements, plain: str) -> list:
    """Early exit: the answer-statement patterns that can match `plain` (each needs its lead word; after NFKC the
    case-insensitive "answer" is plain ASCII, so ``lower()`` finds every spelling the pattern matches)."""
    needed = ("answer" in plain.lower(), "答" in plain, "\\boxed{" in plain)
    return [pattern for pattern, need in zip(answer_statements, needed) if need]


def _mention_patterns(mentions, text: str) -> list:
    """Early exit: the mention patterns that can match `text` ("option"/"choice", 选/選, ``**``)."""
    lowered = text.lower()
    needed = ("option" in lowered or "choice" in lowered, "选" in text or "選" in text, "**" in text)
    return [pattern for pattern, need in zip(mentions, needed) if need]


_WORD_AFTER = re.compile(r"[ \t]+[A-Za-z]")


def extract_option(prediction: str, options: str = "ABCD", names: Sequence[str] | None = None) -> str | None:
    """Return the option letter chosen in ``prediction`` or ``None``.

    Priority (first tier that yields a letter wins):

    1. answer statements - "Answer: X", "The answer is: X", "The answer is X",
       "回答: X", "回答：X", "所以答案是：X", "答案是X", "\\boxed{X}"; when several
       occur the **last** one wins (the final statement of a reasoning text).
       "Answer: A careful reading ..." is not a statement: an "A" followed by a
       lowercase word is the article (as in tier 5);
    2. a line holding only an option ("C", "C.", "(C)", "**C**"); the last such line;
    3. a response starting with a labelled option ("C. David House", "(C) David House");
    4. mentions such as "Option C", "选项C" or a bold "**C**"; the last one;
    5. a single stand-alone capital option letter, if exactly one distinct letter
       occurs. An "A" followed by a word ("A person is ...") is an English
       article and never counts;
    6. with ``names`` (the option texts, in letter order): the one option whose
       name the answer contains ("The eldest is Carol Adams." -> its letter).

    Letters are matched case-sensitively (capitals only), after NFKC
    normalisation (so full-width "Ｃ" works).  Markdown bold markers are ignored
    for tiers 1-3.
    """
    letters = "".join(dict.fromkeys(c for c in options if not c.isspace()))
    if not prediction or not letters:
        return None
    text = unicodedata.normalize("NFKC", prediction)
    plain = text.replace("*", "")
    answer_statements, bare_line, labelled_start, mentions, standalone = _patterns(letters)

    found = _last_match(_statement_patterns(answer_statements, plain), plain)
    if found:
        return found

    lines = bare_line.findall(plain)
    if lines:
        return lines[-1]

    stripped = plain.strip()
    m = labelled_start.match(stripped)
    if m:
        return m.group(1) or m.group(2) or m.group(3)

    found = _last_match(_mention_patterns(mentions, text), text)
    if found:
        return found

    seen = set()
    for m in standalone.finditer(plain):
        letter = m.group(1)
        if letter in ("A", "I") and _WORD_AFTER.match(plain, m.end()):
            continue  # English article / pronoun, not an answer
        seen.add(letter)
    if len(seen) == 1:
        return seen.pop()
    if names:
        return _named_option(text, letters, names)
    return None


def _named_option(text: str, letters: str, names: Sequence[str]) -> str | None:
    """The letter of the one option whose name (NFKC, casefolded) the answer contains, if exactly one does."""
    answer = unicodedata.normalize("NFKC", text).casefold()
    found = {letter for letter, key in zip(letters, _name_keys(tuple(map(str, names)))) if key and key in answer}
    return found.pop() if len(found) == 1 else None


@functools.lru_cache(maxsize=1024)
def _name_keys(names: tuple[str, ...]) -> tuple[str, ...]:
    """The options' names as matched by :func:`_named_option` (NFKC, casefolded, stripped)."""
    return tuple(unicodedata.normalize("NFKC", name).casefold().strip() for name in names)


def option_letter_for(answer_name: str, options: list[str]) -> str:
    """Letter ("A", "B", ...) of the option equal to ``answer_name``.

    An exact match is preferred; otherwise surrounding whitespace is ignored.
    Raises ``ValueError`` if no option matches (or there are more than 26 options).
    """
    options = list(options)
    if len(options) > 26:
        raise ValueError("at most 26 options are supported")
    for i, option in enumerate(options):
        if option == answer_name:
            return chr(ord("A") + i)
    target = answer_name.strip()
    for i, option in enumerate(options):
        if option.strip() == target:
            return chr(ord("A") + i)
    raise ValueError(f"{answer_name!r} is not one of the options {options!r}")


# --------------------------------------------------------------------------- circular evaluation


def circular_item_correct(rows: Iterable[tuple[str, str, bool]]) -> dict[str, bool]:
    """``item_id -> True`` if every row (rotation) of the item is correct.

    An item is only judged on the rows it has; callers that need all four
    rotations should check completeness themselves.
    """
    result: dict[str, bool] = {}
    for item_id, _rotation, correct in rows:
        result[item_id] = result.get(item_id, True) and bool(correct)
    return result


def complete_items(
    rows: Iterable[tuple[str, str, bool]], rotations: int = len(ROTATIONS)
) -> list[tuple[str, str, bool]]:
    """The rows of items that have all ``rotations`` distinct rotations (partial items are dropped).

    ``perf_4`` is only defined on whole items: an item cut short (e.g. by lm-eval's ``--limit``) would count as
    correct when its few rows happen to be right.
    """
    rows = list(rows)
    seen: dict[str, set[str]] = {}
    for item_id, rotation, _correct in rows:
        seen.setdefault(item_id, set()).add(str(rotation).strip().upper())
    return [row for row in rows if len(seen[row[0]]) >= rotations]


def circular_scores(rows: Iterable[tuple[str, str, bool]]) -> dict[str, float]:
    """CircularEval summary of ``(item_id, rotation, correct)`` rows, 0..100.

    * ``acc_1``: % correct among rows whose rotation is ``"ABCD"`` (0.0 if none);
    * ``acc``: % correct among all rows;
    * ``perf_4``: % of items all of whose rows are correct.

    Raises ``ValueError`` when ``rows`` is empty.
    """
    rows = [(item_id, str(rotation).strip().upper(), bool(correct)) for item_id, rotation, correct in rows]
    if not rows:
        raise ValueError("circular_scores needs at least one row")
    base = [correct for _id, rotation, correct in rows if rotation == BASE_ROTATION]
    items = circular_item_correct(rows)
    return {
        "acc_1": 100.0 * sum(base) / len(base) if base else 0.0,
        "acc": 100.0 * sum(correct for _id, _rot, correct in rows) / len(rows),
        "perf_4": 100.0 * sum(items.values()) / len(items),
    }


def atc_category_score(perf_by_needles: Mapping[int, float]) -> float:
    """``sum_n perf(n) * n / sum_n n`` - weighted by the number of needles (names)."""
    if not perf_by_needles:
        raise ValueError("atc_category_score needs at least one needle count")
    total_weight = math.fsum(n for n in perf_by_needles)
    if total_weight <= 0:
        raise ValueError("needle counts must sum to a positive number")
    return math.fsum(perf * n for n, perf in perf_by_needles.items()) / total_weight


def atc_overall(categories: Mapping[str, float]) -> float:
    """Plain mean of the category scores (e.g. ZH/EN x Direct/Reasoning CircularEval)."""
    if not categories:
        raise ValueError("atc_overall needs at least one category")
    return math.fsum(categories.values()) / len(categories)


# --------------------------------------------------------------------------- open-ended ATC

_SPACES = re.compile(r"\s+")
#: A run of whitespace, punctuation, separators or control/format characters (what trims a name's edges).
_EDGE_JUNK = regex.compile(r"[\s\p{P}\p{Z}\p{C}]*")


def normalize_name(text: str) -> str:
    """NFKC, casefold, collapse whitespace, strip quotes/punctuation around the text."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = text.replace("~", " ")
    text = _SPACES.sub(" ", text)
    start = _EDGE_JUNK.match(text).end()
    end = len(text) - _EDGE_JUNK.match(text[::-1]).end()
    return text[start:end] if end > start else ""


_BRACES = re.compile(r"[{}]")


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces), or None."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i = start + len("\\boxed{")
        depth = 1
        for brace in _BRACES.finditer(text, i):
            depth += 1 if brace.group() == "{" else -1
            if depth == 0:
                return text[i : brace.start()]
        start = text.rfind("\\boxed{", 0, start)
    return None


def _clean_latex(text: str) -> str:
    text = re.sub(r"\\text(?:bf|rm|it)?\{([^{}]*)\}", r"\1", text)
    return text.replace("\\", "")


_ANSWER_LEADS = re.compile(
    r"(?i:\banswer\s*(?:is|:)|\b(?:eldest|oldest)\s+relative\b[^\n.]*?\bis\b)"
    r"|答案\s*(?:是|为|:|：)|最年长的亲人\s*(?:是|为)|回答\s*[:：]"
)


_CLAUSE_END = re.compile(r"[,，。;；!?！？]|\.(?=\s|$)")


def extract_open_answer(prediction: str) -> str:
    """The final answer of an open-ended ATC response (not normalised).

    The last ``\\boxed{...}`` content if there is one; otherwise the rest of the
    line after the last "answer is" / "answer:" / "eldest relative ... is" /
    "答案是" / "最年长的亲人是" lead-in; otherwise the last non-empty line.
    """
    text = unicodedata.normalize("NFKC", prediction)
    boxed = _last_boxed(text)
    if boxed is not None:
        return _clean_latex(boxed)
    leads = list(_ANSWER_LEADS.finditer(text))
    if leads:
        rest = text[leads[-1].end() :]
        line = rest.split("\n", 1)[0]
        # Stop at the end of the clause: "..., because", "。", "; ", ". More text".
        line = _CLAUSE_END.split(line, 1)[0]
        if normalize_name(line):
            return line
    for line in reversed(text.splitlines()):
        if line.strip():
            return line
    return ""


_normalized_gold = functools.lru_cache(maxsize=1024)(normalize_name)


def open_answer_score(prediction: str, answer: str) -> float:
    """100 if the normalised gold name equals the normalised extracted final answer
    (or the whole normalised prediction), else 0."""
    gold = _normalized_gold(answer)
    if not gold:
        return 0.0
    final = normalize_name(extract_open_answer(prediction))
    if final == gold:
        return 100.0
    if normalize_name(prediction) == gold:
        return 100.0
    return 0.0
