"""M-RS scoring: the reference keyword score and the strict containment score."""

import pytest
from needlebench.evaluation.scoring import (
    answer_keywords,
    reasoning_reference_score,
    reasoning_strict_score,
)


def test_english_reference_score_partial_credit():
    answer = "Sergei Prokofiev"
    assert reasoning_reference_score("It was SERGEI PROKOFIEV.", answer, "en") == 100.0
    assert reasoning_reference_score("Probably Sergei Rachmaninoff.", answer, "en") == 50.0
    assert reasoning_reference_score("No idea.", answer, "en") == 0.0


def test_english_stop_word_quirk_gives_free_credit():
    # keywords = ["the", "university", "of", "edinburgh"]; "the" and "of" occur in almost any text.
    answer = "The University of Edinburgh"
    pred = "I think it is the capital of France."
    assert reasoning_reference_score(pred, answer, "en") == 50.0
    # Plain substring matching: "of" also matches inside "often", "the" inside "there".
    assert reasoning_reference_score("there often", answer, "en") == 50.0
    assert reasoning_strict_score(pred, answer, "en") == 0.0


def test_chinese_partial_credit_via_jieba():
    answer = "伦敦国王学院"
    assert answer_keywords(answer, "zh") == ["伦敦", "国王", "学院"]
    # 2 of 3 words found (the whitespace split of the reference would give 0 here).
    assert reasoning_reference_score("他在伦敦的一所学院工作", answer, "zh") == pytest.approx(200 / 3)
    assert reasoning_reference_score("伦敦国王学院。", answer, "zh") == 100.0
    assert reasoning_reference_score("不知道", answer, "zh") == 0.0
    assert reasoning_reference_score("他在伦敦的一所学院工作", answer, "en") == 0.0  # reference behaviour
    # Language aliases.
    assert reasoning_reference_score("他在伦敦的一所学院工作", answer, "Chinese") == pytest.approx(200 / 3)


def test_chinese_punctuation_tokens_are_dropped_and_segmentation_is_stable():
    kws = answer_keywords("中华人民共和国，国务院。", "zh")
    assert kws == ["中华人民共和国", "国务院"]
    assert answer_keywords("中华人民共和国，国务院。", "zh") == kws
    assert reasoning_reference_score("国务院", "中华人民共和国，国务院。", "zh") == 50.0


def test_strict_score_normalisation():
    assert reasoning_strict_score("The composer is sergei prokofiev", "Sergei Prokofiev.", "en") == 100.0
    assert reasoning_strict_score("Sergei  Prokofiev!", "sergei prokofiev", "en") == 100.0
    assert reasoning_strict_score("Sergei Rachmaninoff", "Sergei Prokofiev", "en") == 0.0
    assert reasoning_strict_score("答案是：伦敦 国王学院。", "伦敦国王学院", "zh") == 100.0
    assert reasoning_strict_score("伦敦的学院", "伦敦国王学院", "zh") == 0.0
    # NFKC: full-width letters match ASCII.
    assert reasoning_strict_score("ＳＥＲＧＥＩ　ＰＲＯＫＯＦＩＥＶ", "Sergei Prokofiev", "en") == 100.0
    assert reasoning_strict_score("anything", "...", "en") == 0.0


def test_unknown_language_rejected():
    with pytest.raises(ValueError):
        reasoning_reference_score("a", "a", "fr")
    with pytest.raises(ValueError):
        reasoning_strict_score("a", "a", "de")
