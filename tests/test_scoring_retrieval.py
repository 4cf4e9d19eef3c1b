"""S-RT / M-RT scoring and the overall NeedleBench aggregation."""

import pytest

from needlebench.evaluation.scoring import (
    NEEDLEBENCH_WEIGHTS,
    keyword_hits,
    mean,
    multi_retrieval_recall,
    needlebench_overall,
    single_retrieval_score,
)

NEEDLE = "\nHidden on Emerald Island is the legendary Stardust Shard.\n"
KEYWORD = "Stardust Shard"


def test_keyword_present_scores_100_even_with_extra_text():
    pred = "Blah blah. The legendary item hidden on Emerald Island is the Stardust Shard, I believe."
    assert single_retrieval_score(pred, NEEDLE, KEYWORD) == 100.0


def test_miss_is_point_two_times_levenshtein_similarity_hand_computed():
    # Whitespace removed: prediction "Thebatsat" (9 chars), reference "Thecatsat." (10 chars).
    # Edits: substitute c->b, delete "." => d = 2; similarity = 100 * (1 - 2/10) = 80; miss => 0.2 * 80.
    assert single_retrieval_score("The bat sat", "The cat sat.", "cat") == pytest.approx(16.0)
    # Completely different, same length 3: d = 3 -> similarity 0.
    assert single_retrieval_score("xyz", "abc", "abc") == pytest.approx(0.0)
    # One insertion on a 4-char reference: pred "abcde" (5) vs "abcd" (4): d = 1 -> 100*(1-1/5) = 80 -> 16.
    assert single_retrieval_score("abcde", "abcd", "zzz") == pytest.approx(16.0)


def test_whitespace_ignored_for_distance_but_keyword_checked_on_raw_prediction():
    # Identical after removing whitespace -> similarity 100, but "cat" is not a substring of "c a t".
    assert single_retrieval_score("T h e  c a t\ts a t .", "The cat sat.", "cat") == pytest.approx(20.0)
    # Newlines around the needle don't matter either.
    assert single_retrieval_score("The bat sat", "\nThe cat sat.\n", "cat") == pytest.approx(16.0)


def test_keyword_match_is_case_sensitive():
    pred = "hidden on emerald island is the legendary stardust shard."
    score = single_retrieval_score(pred, NEEDLE, KEYWORD)
    assert score < 20.0
    # 5 case differences (H, E, I, S, S) -> 5 substitutions; the whitespace-free reference
    # "HiddenonEmeraldIslandisthelegendaryStardustShard." has 6+2+7+6+2+3+9+8+6 = 49 characters.
    ref = "".join(NEEDLE.split())
    assert len(ref) == 49
    assert score == pytest.approx(0.2 * 100 * (1 - 5 / 49))


def test_both_empty_is_full_similarity():
    assert single_retrieval_score("", "  \n", "kw") == pytest.approx(20.0)
    assert single_retrieval_score("", "abcd", "kw") == pytest.approx(0.0)


def test_multi_retrieval_recall_and_hits():
    keywords = ["Stardust Shard", "Lion", "blue"]
    pred = "The Stardust Shard; a lion; Blue and blue."
    assert keyword_hits(pred, keywords) == [True, False, True]
    assert multi_retrieval_recall(pred, keywords) == pytest.approx(200 / 3)
    assert multi_retrieval_recall("nothing", keywords) == 0.0
    assert multi_retrieval_recall("Lion blue Stardust Shard", keywords) == 100.0
    with pytest.raises(ValueError):
        multi_retrieval_recall("x", [])


def test_overall_weights_and_mean():
    assert NEEDLEBENCH_WEIGHTS == {"S-RT": 0.4, "M-RT": 0.3, "M-RS": 0.3}
    assert needlebench_overall(100, 50, 0) == pytest.approx(55.0)
    assert needlebench_overall(0, 0, 100) == pytest.approx(30.0)
    # Paper Table 2, Qwen-1.5-4B: S-RT 98.22, M-RT 92.09, M-RS 55.24 -> overall 83.49.
    assert needlebench_overall(98.22, 92.09, 55.24) == pytest.approx(83.49, abs=0.01)
    assert mean([1, 2, 3, 4]) == pytest.approx(2.5)
    assert mean(x for x in (10.0,)) == 10.0
    with pytest.raises(ValueError):
        mean([])
