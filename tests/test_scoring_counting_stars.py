"""Counting-Stars parsing and the 1 / 0.5 / 0.25 / 0 scoring."""

import pytest

from needlebench.evaluation.scoring import (
    counting_stars_score,
    parse_answer_list,
    parse_counts,
    predicted_counts,
    star_scores,
)
from support import A32, R32


def test_wrong_counts_fixture():
    assert R32[:4] == [16, 116, 43, 70]
    assert not set(R32) & set(A32)


# ----------------------------------------------------------------- the paper's Table 6 bad cases


def test_bad_case_repeat_a_single_number():
    # Output that repeats 15 until generation stops (truncated JSON, no closing brackets).
    pred = '{"little_penguin": [' + "15, " * 60
    assert parse_counts(pred, "en") == [15] * 60
    # Only star #1 (a=15) is found; its wrong count 16 is absent.
    assert counting_stars_score(pred, A32, None, "acquisition", "en") == pytest.approx(1 / 32)
    assert counting_stars_score(pred, A32, R32, "reasoning", "en") == pytest.approx(1 / 32)


TABLE6_INCREASING = [
    5,
    9,
    15,
    19,
    29,
    39,
    45,
    49,
    53,
    59,
    63,
    67,
    71,
    75,
    79,
    83,
    87,
    91,
    95,
    99,
    103,
    107,
    111,
    115,
    119,
    123,
    127,
    131,
    135,
    139,
    143,
    147,
    151,
    155,
    159,
    163,
    167,
    171,
    175,
    179,
    183,
    187,
    191,
    195,
    199,
    203,
    207,
    211,
    215,
    219,
    223,
    227,
    231,
    235,
    239,
    243,
    247,
    251,
    255,
    259,
    263,
    267,
    271,
    275,
    279,
    283,
    287,
    291,
    295,
    299,
    303,
    307,
    311,
    315,
    319,
    323,
    327,
    331,
    335,
    339,
    343,
    347,
    351,
]


def test_bad_case_increasing_array():
    # As printed in Table 6, including the trailing comma.
    pred = '{"little_penguin": [' + ", ".join(map(str, TABLE6_INCREASING)) + ",]}"
    assert parse_counts(pred, "en") == TABLE6_INCREASING
    # Truncated to the first 32 entries (5 ... 147). Stars found: 15, 107, 9, 49, 5, 19, 127, 29 -> 8 of 32.
    assert counting_stars_score(pred, A32, None, "acquisition", "en") == pytest.approx(8 / 32)
    # Reasoning: those 8 stars score 1 (none of their wrong counts is listed); in addition the wrong
    # counts 59 (a=58), 67 (a=66), 53 (a=54), 45 (a=46), 39 (a=38), 75 (a=74) are listed without
    # their correct count -> 6 x 0.25.  Total (8 + 1.5) / 32.
    scores = star_scores(pred, A32, R32, "reasoning", "en")
    assert scores.count(1.0) == 8 and scores.count(0.25) == 6 and scores.count(0.5) == 0
    assert counting_stars_score(pred, A32, R32, "reasoning", "en") == pytest.approx(9.5 / 32)


def test_bad_case_sentences_instead_of_json():
    pred = (
        '"The little penguin counted 15 ★ ", "The little penguin counted 117 ★ ", '
        '"The little penguin counted 42 ★ ", "The little penguin counted 69 ★ ", '
        '"The little penguins counted 58 ★ ", "The little penguin counted 107 ★ ", '
        '"The little penguin counted 9 ★ ", "The little penguin counted 113 ★ ",'
    )
    assert parse_counts(pred, "en") == []
    assert counting_stars_score(pred, A32, None, "acquisition", "en") == 0.0
    assert counting_stars_score(pred, A32, R32, "reasoning", "en") == 0.0
    # Same sentences wrapped in the expected key: strings are not counts either.
    wrapped = '{"little_penguin": [' + pred.rstrip(",") + "]}"
    assert parse_counts(wrapped, "en") == []
    assert counting_stars_score(wrapped, A32, None, "acquisition", "en") == 0.0


# ----------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, language, expected",
    [
        ('{"little_penguin": [15, 117, 42]}', "en", [15, 117, 42]),
        ('```json\n{"little_penguin": [15, 117, 42]}\n```', "en", [15, 117, 42]),
        ('```\n{"little_penguin": [15, 117, 42]}\n```', "en", [15, 117, 42]),
        ('{"little_penguin": [15, 117, 42,],}', "en", [15, 117, 42]),
        ("{'little_penguin': [15, 117, 42]}", "en", [15, 117, 42]),
        ('Sure! Here are the counts:\n{"little_penguin": [15, 117]}\nHope this helps.', "en", [15, 117]),
        ('Counting done. "little_penguin": [15, 117, 42]', "en", [15, 117, 42]),
        ('{"小企鹅":[15,117,42]}', "zh", [15, 117, 42]),
        ('{"小企鹅"：[15，117，42]}', "zh", [15, 117, 42]),  # full-width punctuation
        ('结果如下：```json\n{"小企鹅": [15, 117,]}\n```', "zh", [15, 117]),
        ('{"小企鹅": [15, 117]}', "en", [15, 117]),  # either key in either language
        ('{"little_penguin": [15, 117]}', "zh", [15, 117]),
        ('{"result": {"little_penguin": [3, 5]}}', "en", [3, 5]),
        ('{"little_penguin": [1, true, 2.0, "3", 4, null]}', "en", [1, 2.0, 4]),  # numbers, no booleans
        ('{"little_penguin": "15, 117"}', "en", []),
        ("[15, 117, 42]", "en", []),  # no key
        ('{"other": [15]}', "en", []),
        ("I cannot count the stars.", "en", []),
        ("", "en", []),
    ],
)
def test_parse_counts(text, language, expected):
    assert parse_counts(text, language) == expected


def test_parse_counts_rejects_unknown_language():
    with pytest.raises(ValueError):
        parse_counts("{}", "fr")


# ----------------------------------------------------------------- scoring rules


def test_truncate_to_m_then_dedupe():
    # M = 3: only [1, 1, 1] survive the truncation -> set {1}; 2 and 3 come too late.
    assert star_scores('{"little_penguin": [1, 1, 1, 2, 3]}', [1, 2, 3], None, "acquisition", "en") == [1.0, 0.0, 0.0]
    # Fewer entries than M: nothing is truncated, duplicates collapse, order is irrelevant.
    assert star_scores('{"little_penguin": [3, 3, 1]}', [1, 2, 3], None, "acquisition", "en") == [1.0, 0.0, 1.0]
    # Reasoning: M = 2 keeps [10, 11] -> star 1 has both a and r (0.5); 20 was cut off (0).
    assert star_scores('{"little_penguin": [10, 11, 20]}', [10, 20], [11, 19], "reasoning", "en") == [0.5, 0.0]


def test_truncation_counts_raw_entries_before_filtering():
    # M = 3: the reference keeps the first 3 raw entries ("x", 15, "y"), so 117 and 42 come too late, even
    # though the strings can never match.
    pred = '{"little_penguin": ["x", 15, "y", 117, 42]}'
    assert parse_answer_list(pred, "en") == ["x", 15, "y", 117, 42]
    assert star_scores(pred, [15, 117, 42], None, "acquisition", "en") == [1.0, 0.0, 0.0]
    # Reasoning: a junk entry pushes the correct count of star 2 out of the window; its wrong count stays in.
    assert star_scores('{"little_penguin": [10, null, 19, 20]}', [10, 20, 30], [11, 19, 31], "reasoning", "en") == [
        1.0,
        0.25,
        0.0,
    ]


def test_membership_is_python_equality_without_booleans_or_strings():
    # 15.0 == 15, as in the reference's set membership; "117" is a string and never matches.
    pred = '{"little_penguin": [15.0, "117", 42]}'
    assert star_scores(pred, [15, 117, 42], None, "acquisition", "en") == [1.0, 0.0, 1.0]
    # true == 1 in Python, but a boolean is not a count; 2.5 equals no count.
    assert star_scores('{"little_penguin": [true, 2.5, 3]}', [1, 2, 3], None, "acquisition", "en") == [0.0, 0.0, 1.0]
    assert predicted_counts([True, 1.0, "1", None, [1], 7], 6) == {1, 7}
    assert predicted_counts([1, 2, 3], 2) == {1, 2}


def test_reasoning_one_half_quarter_zero():
    a = [10, 20, 30, 40]
    r = [11, 19, 31, 41]
    pred = '{"little_penguin": [10, 20, 19, 31]}'
    assert star_scores(pred, a, r, "reasoning", "en") == [1.0, 0.5, 0.25, 0.0]
    assert counting_stars_score(pred, a, r, "reasoning", "en") == pytest.approx(1.75 / 4)
    # The acquisition rule ignores wrong counts.
    assert star_scores(pred, a, r, "acquisition", "en") == [1.0, 1.0, 0.0, 0.0]


def test_perfect_answers_and_task_aliases():
    pred = '{"little_penguin": ' + str(A32) + "}"
    assert counting_stars_score(pred, A32, R32, "multi-evidence-retrieval-reasoning", "en") == 1.0
    assert counting_stars_score(pred, A32, None, "multi-evidence-retrieval-searching", "en") == 1.0
    zh_wrong_only = '{"小企鹅": ' + str(R32) + "}"
    assert counting_stars_score(zh_wrong_only, A32, R32, "reasoning", "zh") == pytest.approx(0.25)


def test_argument_errors():
    with pytest.raises(ValueError):
        star_scores("{}", [1], None, "reasoning", "en")
    with pytest.raises(ValueError):
        star_scores("{}", [1, 2], [3], "reasoning", "en")
    with pytest.raises(ValueError):
        star_scores("{}", [1], None, "counting", "en")
    with pytest.raises(ValueError):
        counting_stars_score("{}", [], None, "acquisition", "en")
