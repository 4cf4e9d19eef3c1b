"""ATC in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from needlebench.evaluation import scoring
from needlebench.evaluation.families.base import EvalFamily
from needlebench.evaluation.families.hooks import MEAN, TaskTemplate, prediction, reference_prediction

# --------------------------------------------------------------------------------------------- lm-eval hooks


def atc_choice_correct(doc: Mapping[str, Any], text: str) -> bool:
    """Is the option letter extracted from ``text`` the row's ``answer_letter``?"""
    letters = "".join(chr(ord("A") + index) for index in range(len(doc["options"]) or 4))
    return scoring.extract_option(text, letters, names=list(doc["options"])) == doc["answer_letter"]


def process_atc(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """Multiple-choice ATC: per-row accuracy (0/100) and the CircularEval tuple ``(item_id, rotation, correct)``;
    the ``_reference`` twins read the option with OpenCompass's ``first_option_postprocess``."""
    item, rotation = str(doc["item_id"]), str(doc["rotation"])
    correct = atc_choice_correct(doc, prediction(doc, results))
    reference = scoring.atc_reference_correct(reference_prediction(doc, results), str(doc["answer_letter"]))
    return {
        "acc": 100.0 if correct else 0.0,
        "perf_4": (item, rotation, correct),
        "acc_reference": 100.0 if reference else 0.0,
        "perf_4_reference": (item, rotation, reference),
    }


def process_atc_open(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """Open-ended ATC: 100 when the extracted final name is the eldest ancestor, else 0; the reference twin is the
    S-RT evaluator with the name as needle and keyword."""
    return {
        "score": scoring.open_answer_score(prediction(doc, results), doc["answer"]),
        "score_reference": scoring.open_atc_reference_score(reference_prediction(doc, results), str(doc["answer"])),
    }


def process_atc_v2(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """v2 ATC: boxed exact match (0/100) and the ``(relations, score)`` pair of the relation-weighted score."""
    relations = int(doc["num_needles"])
    score = scoring.boxed_exact_score(prediction(doc, results), doc["answer"])
    reference = scoring.boxed_exact_score(reference_prediction(doc, results), doc["answer"])
    return {
        "accuracy": score,
        "weighted": (relations, score),
        "accuracy_reference": reference,
        "weighted_reference": (relations, reference),
    }


def agg_perf_4(items: Iterable[Sequence[Any]]) -> float:
    """CircularEval ``perf_4`` (0..100): share of items whose 4 rotations are all answered correctly.

    Only items with all 4 rotations count (``--limit`` can cut the last item short); 0.0 when there is none.
    """
    rows = scoring.complete_items((str(item[0]), str(item[1]), bool(item[2])) for item in items)
    if not rows:
        return 0.0
    return scoring.circular_scores(rows)["perf_4"]


def agg_relation_weighted(items: Iterable[Sequence[Any]]) -> float:
    """v2 ATC (0..100): the mean score per relation count, weighted by the count; 0.0 without items."""
    pairs = [(int(item[0]), float(item[1])) for item in items]
    return scoring.relation_weighted(pairs) if pairs else 0.0


def oracle_option(doc: Mapping[str, Any]) -> str:
    """The statement choosing the row's letter, in the row's prompt style (direct or chain-of-thought)."""
    return scoring.option_answer(str(doc["answer_letter"]), doc.get("prompt_style") or "direct", doc["language"])


def oracle_name(doc: Mapping[str, Any]) -> str:
    """The eldest ancestor's name itself (open-ended ATC)."""
    return str(doc["answer"])


def oracle_boxed(doc: Mapping[str, Any]) -> str:
    """The answer in the box the v2 scorer reads."""
    return scoring.box(doc["answer"])


TEMPLATE = TaskTemplate(
    "atc",
    "ATC (ancestral trace challenge, multiple choice, CircularEval)",
    process_atc,
    (("acc", MEAN), ("perf_4", agg_perf_4), ("acc_reference", MEAN), ("perf_4_reference", agg_perf_4)),
    128,
    oracle_option,
)
TEMPLATE_OPEN = TaskTemplate(
    "atc_open",
    "ATC (open-ended)",
    process_atc_open,
    (("score", MEAN), ("score_reference", MEAN)),
    512,
    oracle_name,
)
#: v2 ATC asks for reasoning ending in ``\\boxed{}``; its chains run up to 512 relations.
TEMPLATE_V2 = TaskTemplate(
    "v2_atc",
    "ATC v2 (ancestral trace challenge, four question types)",
    process_atc_v2,
    (
        ("accuracy", MEAN),
        ("weighted", agg_relation_weighted),
        ("accuracy_reference", MEAN),
        ("weighted_reference", agg_relation_weighted),
    ),
    2048,
    oracle_boxed,
)


class Atc(EvalFamily):
    key = "atc"

    # ------------------------------------------------------------------------------------ lm-eval task

    edition_templates = {"v1": TEMPLATE, "v2": TEMPLATE_V2}
    variant_templates = {("v1", "open"): TEMPLATE_OPEN}
    #: The chain-of-thought prompts reason before the answer.
    variant_budgets = {("v1", "reasoning"): 1024}
    group_metrics = {"v1": ("acc", "perf_4", "score"), "v2": ("accuracy", "weighted")}

    # ------------------------------------------------------------------------------------ report

    #: v1: the open-ended prompt's score (its CircularEval prompts list :data:`CIRCULAR_METRICS`); v2: the boxed
    #: exact match.
    headline = {"v1": "score", "v2": "accuracy"}
    metric_label = {"v1": "ATC perf_4 (CircularEval, 0-100)"}
    table = {"v1": "circular_eval", "v2": "relation_weighted"}
    comparison = {"v1": "needles"}
    comparison_xlabel = "Needle count"
    coverage_parts = ("needle_list",)
    #: The metrics of a CircularEval config: the whole-item ``perf_4`` and the per-row accuracy.
    CIRCULAR_METRICS = ("perf_4", "acc")
    #: (edition, metric) -> (paper mean key, its name): v1 CircularEval ``perf_4`` per needle count weighted by
    #: needle count (``acc`` has none), the open-ended score per row; v2 weighted by relation count.
    PAPER_MEANS = {
        ("v1", "perf_4"): ("circular", "perf_4 weighted by needle count"),
        ("v1", "acc"): ("none", "(row accuracy, no paper mean)"),
        ("v1", "score"): ("rows", "mean over rows"),
        ("v2", "accuracy"): ("relation_weighted", "v2: mean per relation count, weighted by relation count"),
    }
    #: CircularEval prompt variant -> its category's style (the open-ended and v2 variants have no category).
    CATEGORY_STYLE = {"direct": "Direct", "reasoning": "Reasoning", "extended": "Direct-512"}
    #: The four categories whose plain mean is the paper's ATC-CE-Overall, then the others, in table order.
    OVERALL_CATEGORIES = ("EN-Direct-CE", "EN-Reasoning-CE", "ZH-Direct-CE", "ZH-Reasoning-CE")
    OTHER_CATEGORIES = ("EN-Direct-512-CE", "ZH-Direct-512-CE")
    #: v2 question types, in table order.
    QUESTION_TYPES = ("ELDEST_ANCESTOR", "NTH_ANCESTOR", "NTH_DESCENDANT", "RELATIONSHIP_DISTANCE")

    def category(self, spec) -> str | None:
        """CircularEval category of a config (``EN-Direct-CE``, ``ZH-Reasoning-CE``...), None for an open-ended or
        v2 one."""
        style = self.CATEGORY_STYLE.get(spec.variant)
        return None if style is None else f"{spec.language.upper()}-{style}-CE"

    def paper_mean(self, spec, metric: str) -> tuple[str, str]:
        return self.PAPER_MEANS[(spec.edition, metric)]

    def score_metrics(self, spec, scoring: str) -> tuple[str, ...]:
        return self.CIRCULAR_METRICS if self.category(spec) else (self.headline_metric(spec),)

    def expected_cells(self, spec) -> set[tuple]:
        return {(None, None, n) for n in spec.needle_counts}

    def observed_cell(self, doc) -> tuple:
        return (None, None, doc.get("num_needles"))


FAMILY = Atc()
