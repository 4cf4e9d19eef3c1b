"""ATC: option extraction, CircularEval, category weighting, open-ended scoring."""

import numpy as np
import pytest

from needlebench.evaluation.scoring import (
    atc_category_score,
    atc_overall,
    circular_item_correct,
    circular_scores,
    complete_items,
    extract_option,
    open_answer_score,
    option_letter_for,
)

ROTATIONS = ["ABCD", "BCDA", "CDAB", "DABC"]


@pytest.mark.parametrize(
    "text, expected",
    [
        # direct few-shot style
        ("Answer: C", "C"),
        ("answer: B", "B"),
        ("**Answer:** D", "D"),
        ("Answer:\nA", "A"),
        ("回答: B", "B"),
        ("回答：D", "D"),
        # reasoning few-shot style
        ("The answer is: B", "B"),
        ("The answer is C", "C"),
        ("The correct answer is option (B).", "B"),
        ("所以答案是：C", "C"),
        ("答案是D", "D"),
        ("答案为（A）。", "A"),
        # bare letters
        ("C", "C"),
        ("C.", "C"),
        ("  (B)\n", "B"),
        ("Ｃ", "C"),  # full-width, NFKC
        # letter with its name
        ("C. David House", "C"),
        ("(C) David House", "C"),
        ("A. Jennifer Cooper is the eldest.", "A"),
        # markdown / option mentions
        ("**C**", "C"),
        ("I would pick **B** here.", "B"),
        ("Option C", "C"),
        ("选项B", "B"),
        ("\\boxed{D}", "D"),
        # a lone option letter in a short sentence
        ("It is C.", "C"),
    ],
)
def test_extract_option_forms(text, expected):
    assert extract_option(text) == expected


def test_final_answer_statement_wins_over_letters_in_reasoning():
    text = (
        "Option A names the grandfather of B. A is not the eldest, because A's mother is C.\n"
        "Checking D: D is C's father, so D is the eldest.\nThe answer is: D"
    )
    assert extract_option(text) == "D"
    zh = "A是B的父亲，C是A的妈妈，D是C的爷爷。所以答案是：D"
    assert extract_option(zh) == "D"
    # Several answer statements: the last one wins.
    assert extract_option("Answer: A\nWait, let me re-check.\nThe answer is B") == "B"


@pytest.mark.parametrize(
    "text, expected",
    [
        # "A" followed by a lowercase word is the article, not an answer statement
        ("Answer: A careful reading shows that the eldest is option D.", "D"),
        ("The answer is a bit subtle. The answer is A careful reading away: C", "C"),
        ("所以答案是 A careful reading shows option B.", "B"),
        # an option letter followed by punctuation, a line break or the option's name still counts
        ("Answer: A", "A"),
        ("The answer is A, because Ann is the eldest.", "A"),
        ("Answer: A David House", "A"),
        ("Answer: A\nbecause Ann is the eldest.", "A"),
    ],
)
def test_article_a_is_not_an_answer_statement(text, expected):
    assert extract_option(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "A person is the eldest relative in this family.",
        "I do not know.",
        "The answer is E",  # not an option
        "Both B and C could be right.",  # ambiguous lone letters
        "David House",
        "A",  # only letters from the given options count
    ],
)
def test_extract_option_none(text):
    options = "BCD" if text == "A" else "ABCD"
    assert extract_option(text, options) is None


def test_extract_option_respects_option_set():
    assert extract_option("Answer: E", "ABCDE") == "E"
    assert extract_option("Answer: E") is None


def test_option_letter_for():
    options = ["Jennifer Cooper", "David House", "Li Ming", "Zhang Qiang"]
    assert option_letter_for("Jennifer Cooper", options) == "A"
    assert option_letter_for("Zhang Qiang", options) == "D"
    assert option_letter_for(" Li Ming ", options) == "C"
    with pytest.raises(ValueError):
        option_letter_for("Nobody", options)


def test_complete_items_drops_items_missing_a_rotation():
    rows = [*[("whole", r, True) for r in ROTATIONS], ("cut", "ABCD", True), ("cut", "BCDA", True)]
    assert complete_items(rows) == rows[:4]
    # a repeated rotation does not make up for a missing one
    assert complete_items([("dup", "ABCD", True)] * 4) == []


def test_circular_scores_small_table():
    rows = [
        # item 0: all four rotations right
        *[("0", r, True) for r in ROTATIONS],
        # item 1: ABCD right, one other rotation wrong -> counts 0 in perf_4
        ("1", "ABCD", True),
        ("1", "BCDA", True),
        ("1", "CDAB", False),
        ("1", "DABC", True),
        # item 2: ABCD wrong, others right
        ("2", "ABCD", False),
        ("2", "BCDA", True),
        ("2", "CDAB", True),
        ("2", "DABC", True),
        # item 3: all wrong
        *[("3", r, False) for r in ROTATIONS],
    ]
    assert circular_item_correct(rows) == {"0": True, "1": False, "2": False, "3": False}
    scores = circular_scores(rows)
    assert scores["acc_1"] == pytest.approx(50.0)  # items 0 and 1 right on ABCD
    assert scores["acc"] == pytest.approx(100 * 10 / 16)
    assert scores["perf_4"] == pytest.approx(25.0)
    with pytest.raises(ValueError):
        circular_scores([])


def test_random_guessing_is_suppressed_by_circular_eval():
    rng = np.random.default_rng(12345)
    n_items = 3000
    rows = []
    for item in range(n_items):
        for k, rotation in enumerate(ROTATIONS):
            gold = "ABCD"[(-k) % 4]  # answer "A" of the ABCD row moves with the rotation
            guess = "ABCD"[rng.integers(0, 4)]
            rows.append((f"item{item}", rotation, guess == gold))
    scores = circular_scores(rows)
    assert 20.0 < scores["acc"] < 30.0  # ~25% per row
    assert 20.0 < scores["acc_1"] < 30.0
    assert scores["perf_4"] < 2.0  # ~ (1/4)^4 = 0.39%


def test_atc_category_score_weights_by_needle_count():
    perf = {2: 100.0, 3: 50.0, 4: 0.0, 10: 20.0}
    # (2*100 + 3*50 + 4*0 + 10*20) / (2 + 3 + 4 + 10) = 550 / 19
    assert atc_category_score(perf) == pytest.approx(550 / 19)
    assert atc_category_score(perf) != pytest.approx(sum(perf.values()) / len(perf))
    with pytest.raises(ValueError):
        atc_category_score({})


def test_atc_overall_is_plain_mean():
    cats = {"ZH-Direct-CE": 45.34, "EN-Direct-CE": 56.77, "ZH-Reasoning-CE": 58.15, "EN-Reasoning-CE": 70.16}
    assert atc_overall(cats) == pytest.approx(57.605)  # paper Table 4, Claude-3-Opus: 57.61
    with pytest.raises(ValueError):
        atc_overall({})


@pytest.mark.parametrize(
    "prediction, score",
    [
        ("Wang Gang", 100.0),
        ("'wang  GANG'", 100.0),
        ("The answer is Wang Gang.", 100.0),
        ("Reasoning...\nthe oldest relative Xiao Ming can trace back to in the provided text is Wang Gang.", 100.0),
        ("Let me think.\nSo the final result is \\boxed{\\text{Wang~Gang}}", 100.0),
        ("Step 1 ...\nStep 2 ...\nWang Gang", 100.0),
        ("Wang Gang is mentioned, but the answer is Li Ming.", 0.0),
        ("Wang Gangster", 0.0),
        ("", 0.0),
    ],
)
def test_open_answer_score_en(prediction, score):
    assert open_answer_score(prediction, "Wang Gang") == score


def test_open_answer_score_zh():
    assert open_answer_score("最年长的亲人是王刚。", "王刚") == 100.0
    assert open_answer_score("答案是：“王刚”", "王刚") == 100.0
    assert open_answer_score("答案是：王刚的父亲", "王刚") == 0.0


# ---- classes where the reference extraction (OpenCompass first_option_postprocess) differs ---------------------
# Each case: (answer, the letter the reference picks, the letter picked here). The reference's picks were read off
# its code: its last resort is the first capital A-D anywhere in the text, and it does not normalise fullwidth
# letters. The differences are deliberate and documented in needlebench.evaluation.scoring.atc and the README.
OPTION_NAMES = ["Carol Adams", "David House", "Bob Smith", "Alice Brown"]
REFERENCE_CLASSES = {
    "fullwidth letter": [("Ｂ", "", "B"), ("回答：Ｄ", "", "D"), ("Answer: Ｃ", "A", "C")],
    "letter glued to text or junk": [("ABCD", "A", None), ("xyzD", "D", None), ("Answer: b", "A", None)],
    "name without a letter": [
        ("David House", "D", "B"),
        ("Bob Smith", "B", "C"),
        ("The eldest is Carol Adams.", "C", "A"),
    ],
    "letter followed by text (agrees)": [
        ("A David House is the eldest", "A", "A"),
        ("A is correct", "A", "A"),
        ("B David House", "B", "B"),
        ("A careful reading shows C", "C", "C"),
    ],
    "unicode around a letter (agrees)": [("\u200bC\u200b", "C", "C"), ("🙂 C 🙂", "C", "C")],
}


@pytest.mark.parametrize("name", list(REFERENCE_CLASSES))
def test_reference_difference_classes(name):
    for answer, reference, expected in REFERENCE_CLASSES[name]:
        assert extract_option(answer, "ABCD", names=OPTION_NAMES) == expected, answer
        if "agrees" in name:
            assert expected == reference


def test_name_needs_exactly_one_option():
    assert extract_option("Carol Adams or Bob Smith", "ABCD", names=OPTION_NAMES) is None
    assert extract_option("Someone else entirely", "ABCD", names=OPTION_NAMES) is None
    assert extract_option("The eldest is Carol Adams.", "ABCD") is None  # without names: no answer
