"""ATC in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from needlebench.evaluation import scoring
from needlebench.evaluation.families.base import CIRCULAR, RELATION_PAIR, EvalFamily
from needlebench.evaluation.families.cells import (
    Cell,
    Table,
    combined_note,
    coverage_text,
    entities,
    mean_or_none,
    needle_list_part,
    noted,
    partial_note,
    partial_runs,
    row_mean,
)
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
    value_shapes = {"perf_4": CIRCULAR, "weighted": RELATION_PAIR}
    explanation = {
        "v1": "ATC is CircularEval perf_4 per needle count weighted by needle count",
        "v2": "atc_v2: weighted by relation count",
    }
    comparison_xlabel = "Needle count"
    comparison_note = "ATC: perf_4 against needle count (n = whole items)"
    #: The metrics of a CircularEval config: the whole-item ``perf_4`` and the per-row accuracy.
    CIRCULAR_METRICS = ("perf_4", "acc")
    #: CircularEval prompt variant -> its category's style (the open-ended and v2 variants have no category).
    CATEGORY_STYLE = {"direct": "Direct", "reasoning": "Reasoning", "extended": "Direct-512"}
    #: The four categories whose plain mean is the paper's ATC-CE-Overall, then the others, in table order.
    OVERALL_CATEGORIES = ("EN-Direct-CE", "EN-Reasoning-CE", "ZH-Direct-CE", "ZH-Reasoning-CE")
    OTHER_CATEGORIES = ("EN-Direct-512-CE", "ZH-Direct-512-CE")
    #: v2 question types, in table order.
    QUESTION_TYPES = ("ELDEST_ANCESTOR", "NTH_ANCESTOR", "NTH_DESCENDANT", "RELATIONSHIP_DISTANCE")
    #: Languages of the v2 table, in column order.
    V2_LANGUAGES = ("en", "zh")

    def category(self, spec) -> str | None:
        """CircularEval category of a config (``EN-Direct-CE``, ``ZH-Reasoning-CE``...), None for an open-ended or
        v2 one."""
        style = self.CATEGORY_STYLE.get(spec.variant)
        return None if style is None else f"{spec.language.upper()}-{style}-CE"

    def report_names(self) -> set[str]:
        names = {*self.CIRCULAR_METRICS, *self.OVERALL_CATEGORIES, *self.OTHER_CATEGORIES, *self.QUESTION_TYPES}
        return super().report_names() | names | set(self.CATEGORY_STYLE.values())

    def by_category(self, samples: Iterable[Any]) -> dict[str, dict[int, Cell]]:
        """v1: CircularEval ``perf_4`` per category (``EN-Direct-CE``...) and needle count; samples of a config
        without a category (open-ended) are left out."""
        by_category: dict[str, dict[int, list[tuple[str, str, bool]]]] = defaultdict(lambda: defaultdict(list))
        for sample in samples:
            category = self.category(sample.spec)
            if category is None or "perf_4" not in sample.metrics:
                continue
            item_id, rotation, correct = sample.metrics["perf_4"]
            num = int(sample.doc["num_needles"])
            by_category[category][num].append((str(item_id), str(rotation), bool(correct)))
        return {category: perf_4_by_needles(rows) for category, rows in by_category.items()}

    def _circular_mean(self, spec, samples, metric: str) -> Cell:
        return category_cell(self.by_category(samples).get(self.category(spec), {}))

    def _no_mean(self, spec, samples, metric: str) -> Cell:
        return Cell(None, 0)

    def _rows_mean(self, spec, samples, metric: str) -> Cell:
        return row_mean(samples, metric)

    def _relation_mean(self, spec, samples, metric: str) -> Cell:
        return relation_weighted_cell(samples, metric)

    #: (edition, metric) -> (the paper mean over samples of a config, its name): v1 CircularEval ``perf_4`` per needle
    #: count weighted by needle count (``acc`` has none), the open-ended score per row; v2 weighted by relation count.
    PAPER_MEANS = {
        ("v1", "perf_4"): (_circular_mean, "perf_4 weighted by needle count"),
        ("v1", "acc"): (_no_mean, "(row accuracy, no paper mean)"),
        ("v1", "score"): (_rows_mean, "mean over rows"),
        ("v2", "accuracy"): (_relation_mean, "v2: mean per relation count, weighted by relation count"),
    }

    def paper_mean(self, spec, samples, metric: str) -> tuple[Cell, str]:
        mean, name = self.PAPER_MEANS[(spec.edition, metric)]
        return mean(self, spec, samples, metric), name

    def lm_eval_mean(self, samples, metric: str) -> Cell:
        """``perf_4`` as lm-eval aggregates it (:func:`agg_perf_4`, whole items only; n = rows), else the row mean."""
        if metric != "perf_4":
            return row_mean(samples, metric)
        rows = scoring.complete_items(
            (str(s.metrics[metric][0]), str(s.metrics[metric][1]), bool(s.metrics[metric][2]))
            for s in samples
            if metric in s.metrics
        )
        return Cell(scoring.circular_scores(rows)["perf_4"] if rows else None, len(samples))

    def score_metrics(self, spec, scoring: str) -> tuple[str, ...]:
        return self.CIRCULAR_METRICS if self.category(spec) else (self.headline_metric(spec),)

    def required_fields(self, spec, metrics) -> tuple[str, ...]:
        """The needle (relation) count its means weight by; v2's question type."""
        return {"v1": ("num_needles",) if "perf_4" in metrics else (), "v2": ("num_needles", "question_type")}[
            spec.edition
        ]

    def expected_cells(self, spec) -> set[tuple]:
        return {(None, None, n) for n in spec.needle_counts}

    def observed_cell(self, doc) -> tuple:
        return (None, None, doc.get("num_needles"))

    def coverage_parts(self, spec, seen: set[tuple]) -> list[str]:
        return [needle_list_part(spec, seen)]

    def comparison_series(self, run) -> list[tuple[Any, float, int]]:
        """(needle count, CircularEval perf_4, whole items) of a v1 run (its open-ended variant and v2 have no
        perf_4)."""
        cells = {n: cell for perf in self.by_category(run.samples).values() for n, cell in perf.items()}
        return [(n, cell.value, cell.n) for n, cell in sorted(cells.items()) if cell.value is not None]

    def circular_tables(self, runs, edition: str) -> list[Table]:
        """v1, models as rows: each CircularEval category (perf_4 per needle count weighted by needle count),
        ATC-CE-Overall, the open-ended score per language; and perf_4 per needle count (detail table)."""
        circular = [run for run in runs if self.category(run.spec)]
        main_rows, detail_rows = [], []
        counts = sorted({int(s.doc["num_needles"]) for run in circular for s in run.samples})
        extra = [c for c in self.OTHER_CATEGORIES if any(self.category(r.spec) == c for r in circular)]
        for entity in entities(runs):
            mine = [run for run in runs if run.entity == entity]
            perf = self.by_category([s for run in mine for s in run.samples])
            partial = partial_runs(mine)
            notes = {
                category: partial_note([r for r in mine if self.category(r.spec) == category], partial)
                for category in (*self.OVERALL_CATEGORIES, *self.OTHER_CATEGORIES)
            }
            categories = {
                category: noted(category_cell(perf.get(category, {})), notes[category])
                for category in (*self.OVERALL_CATEGORIES, *extra)
            }
            overall = overall_cell(categories, self.OVERALL_CATEGORIES)
            overall = noted(overall, combined_note(list(categories.values())[: len(self.OVERALL_CATEGORIES)]))
            row: list[Any] = [entity, *categories.values(), overall]
            for language in ("en", "zh"):
                open_runs = [r for r in mine if not self.category(r.spec) and r.spec.language == language]
                opened = [s for r in open_runs for s in r.samples]
                row.append(noted(row_mean(opened, self.headline[edition]), partial_note(open_runs, partial)))
            row.append(coverage_text(mine))
            main_rows.append(row)
            for category, by_needles in sorted(perf.items()):
                detail_rows.append(
                    [entity, category, *[noted(by_needles.get(n, Cell(None, 0)), notes[category]) for n in counts]]
                )
        tables = [
            Table(
                self.key,
                "Ancestral Trace Challenge (CircularEval perf_4 per needle count, weighted by needle count; 0-100)",
                ["Model", *self.OVERALL_CATEGORIES, *extra, "ATC-CE-Overall", "EN-Open", "ZH-Open", "Coverage"],
                main_rows,
                note="n = whole items (4 rotations) for CircularEval, rows for open-ended; [partial]: from part of a "
                "config. ATC-CE-Overall is the plain mean of the four categories.",
            )
        ]
        if detail_rows:
            tables.append(
                Table(
                    f"{self.key}_by_needles",
                    "ATC perf_4 by needle count (0-100)",
                    ["Model", "Category", *map(str, counts)],
                    detail_rows,
                    note="n = whole items; [partial]: from part of a config.",
                )
            )
        return tables

    def relation_tables(self, runs, edition: str) -> list[Table]:
        """v2, models as rows: per language the score weighted by relation count over all question types and per
        question type; and the mean per relation count (detail table)."""
        metric = self.headline[edition]
        languages = [lang for lang in self.V2_LANGUAGES if any(r.spec.language == lang for r in runs)]
        header = ["Model"]
        for lang in languages:
            header += [f"{lang.upper()} weighted", *(f"{lang.upper()} {t}" for t in self.QUESTION_TYPES)]
        header.append("Coverage")
        relation_counts = sorted({int(s.doc["num_needles"]) for run in runs for s in run.samples})
        main_rows, detail_rows = [], []
        for entity in entities(runs):
            mine = [run for run in runs if run.entity == entity]
            scored = [s for run in mine for s in run.samples if metric in s.metrics]
            by_language = {lang: [s for s in scored if s.spec.language == lang] for lang in languages}
            line: list[Any] = [entity]
            for lang in languages:
                line.append(relation_weighted_cell(by_language[lang], metric))
                for question_type in self.QUESTION_TYPES:
                    of_type = [s for s in by_language[lang] if str(s.doc["question_type"]) == question_type]
                    line.append(relation_weighted_cell(of_type, metric))
            line.append(coverage_text(mine))
            main_rows.append(line)
            for lang in languages:
                if not by_language[lang]:
                    continue
                by_relations: dict[int, list[float]] = defaultdict(list)
                for sample in by_language[lang]:
                    by_relations[int(sample.doc["num_needles"])].append(float(sample.metrics[metric]))
                cells = [
                    Cell(mean_or_none(by_relations.get(n, [])), len(by_relations.get(n, []))) for n in relation_counts
                ]
                detail_rows.append([entity, lang.upper(), *cells])
        return [
            Table(
                f"{self.key}_v2",
                "Ancestral Trace Challenge v2 (boxed exact match, mean per relation count weighted by relation "
                "count; 0-100)",
                header,
                main_rows,
                note="n = rows. 'weighted' covers all four question types; each question type is weighted by "
                "relation count on its own rows.",
            ),
            Table(
                f"{self.key}_v2_by_relations",
                "ATC v2 mean score by relation count (0-100)",
                ["Model", "Language", *map(str, relation_counts)],
                detail_rows,
                note="n = rows (all question types).",
            ),
        ]

    #: The tables of each edition: v1 CircularEval, v2 relation-weighted.
    TABLES = {"v1": circular_tables, "v2": relation_tables}

    def tables(self, runs, edition: str) -> list[Table]:
        return self.TABLES[edition](self, runs, edition)


# --------------------------------------------------------------------------------------------- report means


def perf_4_by_needles(rows_by_needles: Mapping[int, list[tuple[str, str, bool]]]) -> dict[int, Cell]:
    """CircularEval ``perf_4`` per needle count over complete items (n = items); counts with none are left out."""
    perf: dict[int, Cell] = {}
    for needles, rows in sorted(rows_by_needles.items()):
        complete = scoring.complete_items(rows)
        if complete:
            items = len({item for item, _r, _c in complete})
            perf[needles] = Cell(scoring.circular_scores(complete)["perf_4"], items)
    return perf


def category_cell(perf: Mapping[int, Cell]) -> Cell:
    """A category's score: ``perf_4`` per needle count weighted by needle count (n = whole items)."""
    if not perf:
        return Cell(None, 0)
    value = scoring.atc_category_score({n: cell.value for n, cell in perf.items()})  # type: ignore[misc]
    return Cell(value, sum(cell.n for cell in perf.values()))


def overall_cell(categories: Mapping[str, Cell], overall_categories: Sequence[str]) -> Cell:
    """ATC-CE-Overall: plain mean of the ``overall_categories``; marked partial when some are missing."""
    present = [c for c in overall_categories if categories.get(c) and categories[c].value is not None]
    if not present:
        return Cell(None, 0)
    value = scoring.atc_overall({c: categories[c].value for c in present})  # type: ignore[misc]
    n = sum(categories[c].n for c in present)
    total = len(overall_categories)
    note = "" if len(present) == total else f"partial: {len(present)} of {total} categories"
    return Cell(value, n, note)


def relation_weighted_cell(samples: Iterable[Any], metric: str) -> Cell:
    """v2: the mean of ``metric`` per relation count, weighted by the count (n = rows)."""
    pairs = [(int(s.doc["num_needles"]), float(s.metrics[metric])) for s in samples if metric in s.metrics]
    return Cell(scoring.relation_weighted(pairs) if pairs else None, len(pairs))


FAMILY = Atc()
