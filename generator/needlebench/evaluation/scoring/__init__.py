"""Pure scoring functions for NeedleBench (0..100) and Counting-Stars (0..1)."""

from needlebench.evaluation.scoring.atc import (
    atc_category_score,
    atc_overall,
    circular_item_correct,
    circular_scores,
    complete_items,
    extract_open_answer,
    extract_option,
    normalize_name,
    open_answer_score,
    option_answer,
    option_letter_for,
)
from needlebench.evaluation.scoring.counting_stars import (
    answer_json,
    counting_stars_score,
    normalize_task,
    parse_answer_list,
    parse_counts,
    predicted_counts,
    star_scores,
)
from needlebench.evaluation.scoring.overall import (
    NEEDLEBENCH_WEIGHTS,
    mean,
    needlebench_overall,
)
from needlebench.evaluation.scoring.reasoning import (
    answer_keywords,
    normalize_language,
    reasoning_reference_score,
    reasoning_strict_score,
)
from needlebench.evaluation.scoring.reference import (
    atc_reference_correct,
    notebook_counting_stars_score,
    notebook_star_scores,
    open_atc_reference_score,
    opencompass_first_option,
    opencompass_parallel_recall,
)
from needlebench.evaluation.scoring.retrieval import (
    keyword_hits,
    levenshtein_similarity,
    multi_retrieval_recall,
    single_retrieval_score,
)
from needlebench.evaluation.scoring.v2 import (
    box,
    boxed_answer,
    boxed_exact_score,
    clean_boxed_answer,
    extract_boxed,
    relation_weighted,
    single_retrieval_v2_score,
    v2_overall,
)

__all__ = [
    # retrieval (S-RT / M-RT)
    "single_retrieval_score",
    "multi_retrieval_recall",
    "keyword_hits",
    "levenshtein_similarity",
    # reasoning (M-RS)
    "reasoning_reference_score",
    "reasoning_strict_score",
    "answer_keywords",
    "normalize_language",
    # ATC
    "extract_option",
    "option_letter_for",
    "option_answer",
    "circular_scores",
    "circular_item_correct",
    "complete_items",
    "atc_category_score",
    "atc_overall",
    "open_answer_score",
    "extract_open_answer",
    "normalize_name",
    # Counting-Stars
    "parse_answer_list",
    "parse_counts",
    "predicted_counts",
    "star_scores",
    "counting_stars_score",
    "normalize_task",
    "answer_json",
    # NeedleBench v2
    "single_retrieval_v2_score",
    "box",
    "boxed_answer",
    "boxed_exact_score",
    "clean_boxed_answer",
    "extract_boxed",
    "relation_weighted",
    "v2_overall",
    # reference-exact twins (the *_reference metrics)
    "opencompass_first_option",
    "opencompass_parallel_recall",
    "atc_reference_correct",
    "open_atc_reference_score",
    "notebook_star_scores",
    "notebook_counting_stars_score",
    # overall
    "NEEDLEBENCH_WEIGHTS",
    "needlebench_overall",
    "mean",
]
