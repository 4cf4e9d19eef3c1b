"""The scorers' fast paths (issue 12: 100k scorings under 10 s) give exactly what the plain slow paths give.

Counting-Stars: ``parse_answer_list`` (``json.loads`` before json_repair, key pre-check on ``{`` suffixes, cache)
against the previous parser kept here as the oracle (json_repair on every candidate, nothing skipped).
ATC: the early exits of ``extract_option`` never skip a pattern that would match, and ``_last_boxed`` equals a
character-by-character brace scan.
"""

from __future__ import annotations

import re
import unicodedata

import json_repair
import numpy as np
import pytest

from needlebench.evaluation.scoring import atc, counting_stars
from needlebench.evaluation.scoring.counting_stars import parse_answer_list
from support.scoring_fuzz import outputs


def _oracle_parse(prediction: str) -> list:
    """The Counting-Stars parser before the fast paths: json_repair on every candidate."""
    if not prediction:
        return []
    text = counting_stars._FENCE.sub("", unicodedata.normalize("NFKC", prediction)).strip()
    if not text or not counting_stars._ANY_KEY.search(text):
        return []
    limit, count = counting_stars._MAX_PARSE_CHARS, counting_stars._MAX_CANDIDATES
    candidates = [text] if len(text) <= limit else []
    braces = [m.start() for m in re.finditer(r"\{", text) if m.start() > 0]
    candidates += [text[start : start + limit] for start in counting_stars._ends(braces, count)]
    for m in counting_stars._ends(list(counting_stars._KEY_RE.finditer(text)), count):
        candidates.append('{"' + m.group(1) + '":' + text[m.end() : m.end() + limit])
    for candidate in candidates:
        try:
            parsed = json_repair.loads(counting_stars._cut_deep_nesting(candidate))
        except Exception:  # as the old parser: a crash in json_repair is no answer
            parsed = None
        values = counting_stars._find_counts(parsed)
        if values is not None:
            return values
    return []


_EXTRA = [
    "Option ",
    "option(",
    "CHOICE ",
    "选项",
    "選項",
    "选",
    "**",
    "**C**",
    "Ａｎｓｗｅｒ：",
    "ANSWER is ",
    "答：",
    "\\boxed{\\text{",
    "}",
    "\n",
    "A ",
    "I ",
    "Ｄ",
    '"\\u006cittle_penguin": [',
    '{"小企鹅": [15, 117',
    "```json\n",
    '{"little_penguin": [15, 117, 42, 69]}',
    "'little_penguin': [42,",
    "{",
    "} {",
]


def _sprinkled(count: int, seed: int) -> list[str]:
    """Fuzz outputs (mostly the key-bearing kinds) with answer words, mentions and keys inserted at random places."""
    rng = np.random.default_rng(seed)
    result = []
    for text in outputs(count, seed=seed, big_every=0):
        for _ in range(int(rng.integers(0, 6))):
            at = int(rng.integers(0, len(text) + 1))
            text = text[:at] + _EXTRA[int(rng.integers(0, len(_EXTRA)))] + text[at:]
        result.append(text)
    return result


@pytest.fixture(scope="module")
def fuzzed():
    return outputs(300, seed=11, big_every=0) + _sprinkled(300, seed=12)


def test_counting_stars_parse_equals_the_slow_oracle(fuzzed):
    cases = fuzzed + [
        '{"little_penguin": [15, 117, 42, 69]}',  # valid JSON: the json.loads fast path
        '```json\n{"小企鹅": [15, 117]}\n```',
        'x {"a": 1} y {"b": {"little_penguin": [3, 4]}}',  # found in a later { suffix
        'x {"a": 1} {"\\u006cittle_penguin": [7]} "little_penguin"',  # a \u-escaped key
        '{"little_penguin": [' * 40 + "5",  # cut to 16 levels
        "[" * 5000 + '"little_penguin": [1, 2]',
    ]
    differ = [text for text in cases if parse_answer_list(text, "en") != _oracle_parse(text)]
    assert not differ, differ[:3]
    assert sum(bool(_oracle_parse(text)) for text in cases) > 100  # the comparison covers real answers


def test_counting_stars_cache_returns_independent_lists():
    text = '{"little_penguin": [15, 117]}'
    first = parse_answer_list(text, "en")
    first.append(99)
    assert parse_answer_list(text, "zh") == [15, 117]
    with pytest.raises(ValueError, match="language"):
        parse_answer_list(text, "fr")  # the language is still checked on a cached prediction


def _oracle_last_boxed(text: str):
    start = text.rfind("\\boxed{")
    while start != -1:
        i = j = start + len("\\boxed{")
        depth = 1
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth == 0:
            return text[i : j - 1]
        start = text.rfind("\\boxed{", 0, start)
    return None


def test_atc_early_exits_never_skip_a_match(fuzzed):
    answer_statements, _bare, _labelled, mentions, _standalone = atc._patterns("ABCD")
    matched = 0
    for prediction in fuzzed:
        text = unicodedata.normalize("NFKC", prediction)
        plain = text.replace("*", "")
        for patterns, kept, searched in [
            (answer_statements, atc._statement_patterns(answer_statements, plain), plain),
            (mentions, atc._mention_patterns(mentions, text), text),
        ]:
            for pattern in patterns:
                assert pattern in kept or pattern.search(searched) is None, (pattern.pattern, text[:80])
                matched += bool(pattern.search(searched))
        assert atc._last_boxed(text) == _oracle_last_boxed(text)
    assert matched > 100  # the patterns do match in this sample


def test_atc_named_option_and_gold_caches_keep_results():
    names = ["Carol Adams", "David House", "Bob Smith", "Alice Brown"]
    assert atc.extract_option("The eldest is Carol Adams.", "ABCD", names=names) == "A"
    assert atc.extract_option("The eldest is Bob Smith.", "ABCD", names=list(reversed(names))) == "B"
    assert atc.open_answer_score("Answer: Ｃarol Adams.", "Carol Adams") == 100.0
    assert atc.open_answer_score("Answer: Carol Adams.", "David House") == 0.0
