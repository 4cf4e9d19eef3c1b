"""NeedleBench v2 scoring: \\boxed{} extraction and cleaning, binary S-RT, and the v2 aggregations."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from needlebench.evaluation import report
from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.report.aggregate import headline_metric
from needlebench.evaluation.scoring import v2
from needlebench.evaluation.scoring.overall import NEEDLEBENCH_WEIGHTS, OVERALL_WEIGHTS, overall_score
from needlebench.tasks.grid import get_config


@pytest.mark.parametrize(
    "prediction, expected",
    [
        ("So the answer is \\boxed{Ann Lee}.", "Ann Lee"),
        ("\\boxed{Bob Ray} first, then on reflection \\boxed{Ann Lee}", "Ann Lee"),  # the last box counts
        ("\\boxed{\\text{Ann Lee}}", "Ann Lee"),  # \text{} unwrapped
        ("\\boxed{{Ann Lee}}", "Ann Lee"),  # one outer pair of braces dropped
        ("\\boxed{Ann~Lee}", "Ann Lee"),  # tilde (LaTeX non-breaking space) -> space
        ("\\boxed{  Ann   Lee }", "Ann Lee"),  # whitespace collapsed and stripped
        ("\\boxed{'Ann Lee'}", "Ann Lee"),  # quotes removed
        ('\\boxed{"Ann Lee"}', "Ann Lee"),
        ("\\boxed{\\textbf{Ann Lee}}", "textbf{Ann Lee}"),  # only \text{} is unwrapped; backslashes dropped
        ("\\boxed{Ann \\\\ Lee}", "Ann Lee"),
        ("\\boxed{5}", "5"),
        ("所以张三能向上追溯到的最年长的亲人就是\\boxed{李四}", "李四"),
        ("The answer is Ann Lee.", "None"),  # no box
        ("\\boxed{Ann Lee", "None"),  # never closed
        ("\\boxed{}", "None"),  # empty
        ("\\fbox{Ann Lee}", "None"),  # found but not unwrapped, as in the reference
        ("\\boxed{A {nested} name}", "A {nested} name"),
    ],
)
def test_boxed_answer_extraction_and_cleaning(prediction, expected):
    assert v2.boxed_answer(prediction) == expected


def test_clean_boxed_answer_steps():
    assert v2.clean_boxed_answer("") == "None" and v2.clean_boxed_answer("None") == "None"
    assert v2.clean_boxed_answer("\\boxed{Ann}") == "Ann"
    assert v2.clean_boxed_answer("\\[Ann\\]") == "Ann"
    assert v2.extract_boxed("x \\boxed{a}\\boxed{b}") == "b" and v2.extract_boxed("none") is None


def test_exact_match_scores():
    assert v2.boxed_exact_score("thinking... \\boxed{Ann Lee}", "Ann Lee") == 100.0
    assert v2.boxed_exact_score("\\boxed{ann lee}", "Ann Lee") == 0.0  # case matters
    assert v2.boxed_exact_score("\\boxed{Ann Lee Jr}", "Ann Lee") == 0.0  # exact, not substring
    assert v2.boxed_exact_score("Ann Lee", "Ann Lee") == 0.0  # no box, no credit
    assert v2.boxed_exact_score("\\boxed{ 7 }", "7") == 100.0


def test_single_retrieval_v2_is_binary():
    assert v2.single_retrieval_v2_score("The item is the Gold Cup.", "Gold Cup") == 100.0
    assert v2.single_retrieval_v2_score("The item is the gold cup.", "Gold Cup") == 0.0
    assert v2.single_retrieval_v2_score("Hidden on Green Island is the Gold Cu.", "Gold Cup") == 0.0  # no partial


def _sample(config, score, length=1000, depth=0.0, count=None, **extra):
    """A logged sample of ``config`` scoring ``score`` on its family's headline metric."""
    spec = get_config(config)
    doc = {
        "config": config,
        "language": spec.language,
        "context_length": length,
        "depth_percent": depth,
        "num_needles": count,
        **extra,
    }
    return report.Sample(spec, doc, {headline_metric(spec): score})


def _tables(samples):
    """The report's tables of ``samples``, one task run per config, by table name."""
    by_config = defaultdict(list)
    for sample in samples:
        by_config[sample.spec.name].append(sample)
    runs = [
        report.TaskRun("model", f"needlebench_{name}", group[0].spec, Path(name), "2026-01-01", group)
        for name, group in by_config.items()
    ]
    return {table.name: table for table in report.build_tables(report.Results(runs, [], []))}


def _values(table, row=0):
    """Header -> value of a table row's cells."""
    return {name: cell.value for name, cell in zip(table.header, table.rows[row]) if isinstance(cell, report.Cell)}


def test_size_table_means_cells_and_overall_is_the_equal_mean():
    samples = [
        # S-RT: cell (1000, 0) mean 50 and cell (1000, 10) mean 100 in en; zh one cell 0 -> (50 + 100 + 0) / 3
        _sample("v2_single_en_4k", 0.0),
        _sample("v2_single_en_4k", 100.0),
        _sample("v2_single_en_4k", 100.0, depth=10.0),
        _sample("v2_single_zh_4k", 0.0),
        _sample("v2_multi_retrieval_en_4k", 80.0, depth=None),
        _sample("v2_multi_retrieval_en_4k", 40.0, depth=None),
        _sample("v2_multi_reasoning_en_4k", 100.0, count=2),
        _sample("v2_multi_reasoning_en_4k", 0.0, count=3),
        _sample("v2_single_en_8k", 100.0),  # 8k has only S-RT: no overall
        _sample("single_en_4k", 0.0),  # v1 rows are in the v1 table, never in the v2 one
    ]
    tables = _tables(samples)
    table = _values(tables["needlebench_v2_4k"])
    assert {task: table[task] for task in ("S-RT", "M-RT", "M-RS", "Overall")} == {
        "S-RT": pytest.approx(50.0),
        "M-RT": 60.0,
        "M-RS": 50.0,
        "Overall": pytest.approx((50.0 + 60.0 + 50.0) / 3),
    }
    assert table["S-RT EN"] == 75.0 and table["S-RT ZH"] == 0.0
    eight = _values(tables["needlebench_v2_8k"])
    assert eight["S-RT"] == 100.0 and eight["Overall"] is None
    assert _values(tables["needlebench_4k"])["S-RT"] == 0.0
    assert v2.v2_overall(90.0, 60.0, 30.0) == 60.0
    assert OVERALL_WEIGHTS["v1"] == NEEDLEBENCH_WEIGHTS == {"S-RT": 0.4, "M-RT": 0.3, "M-RS": 0.3}
    assert overall_score("v2", {"S-RT": 90.0, "M-RT": 60.0, "M-RS": 30.0}) == 60.0


def test_atc_is_weighted_by_relation_count():
    assert v2.relation_weighted([(2, 100.0), (2, 0.0), (4, 100.0)]) == pytest.approx((50.0 * 2 + 100.0 * 4) / 6)
    with pytest.raises(ValueError):
        v2.relation_weighted([])
    samples = [
        _sample("v2_atc_en", 100.0, count=2, question_type="ELDEST_ANCESTOR"),
        _sample("v2_atc_en", 0.0, count=512, question_type="ELDEST_ANCESTOR"),
        _sample("v2_atc_en", 100.0, count=512, question_type="RELATIONSHIP_DISTANCE"),
        _sample("v2_single_en_4k", 0.0),  # not ATC
    ]
    tables = _tables(samples)
    table = _values(tables["atc_v2"])
    assert table["EN weighted"] == pytest.approx((100.0 * 2 + 50.0 * 512) / 514)
    assert table["EN ELDEST_ANCESTOR"] == pytest.approx(200.0 / 514)
    assert table["EN RELATIONSHIP_DISTANCE"] == 100.0
    by_relations = _values(tables["atc_v2_by_relations"])
    assert by_relations["2"] == 100.0 and by_relations["512"] == 50.0


def test_harness_hooks_and_oracle_for_v2_rows():
    from support import fixture_row

    doc = fixture_row("v2_atc_zh", answer="李四", keywords=["李四"], num_needles=4, question_type="NTH_ANCESTOR")
    oracle = harness.oracle_answer(doc)
    assert oracle == "\\boxed{李四}"
    assert harness.process_atc_v2(doc, [oracle]) == {
        "accuracy": 100.0,
        "weighted": (4, 100.0),
        "accuracy_reference": 100.0,
        "weighted_reference": (4, 100.0),
    }
    assert harness.process_atc_v2(doc, ["李四"])["accuracy"] == 0.0
    assert harness.agg_relation_weighted([(2, 100.0), (4, 0.0)]) == pytest.approx(200.0 / 6)
    mrs = fixture_row("v2_multi_reasoning_en_4k", answer="Ann Lee", keywords=["Ann Lee"])
    assert harness.process_multi_reasoning_v2(mrs, [harness.oracle_answer(mrs)]) == {
        "exact": 100.0,
        "exact_reference": 100.0,
    }
    srt = fixture_row("v2_single_en_4k", needles=["Hidden on Red Island is the Blue Gem."], keywords=["Blue Gem"])
    assert harness.process_single_v2(srt, [harness.oracle_answer(srt)]) == {"score": 100.0, "score_reference": 100.0}
    assert harness.process_single_v2(srt, ["Hidden on Red Island is the Blue Ge."]) == {
        "score": 0.0,
        "score_reference": 0.0,
    }


def test_scored_rows_take_the_headline_metric_of_their_family():
    from support import fixture_row

    assert [headline_metric(get_config(f"v2_{name}")) for name in ("single_en_4k", "multi_retrieval_en_4k")] == [
        "score",
        "recall",
    ]
    assert headline_metric(get_config("v2_multi_reasoning_en_4k")) == "exact"
    assert headline_metric(get_config("multi_reasoning_en_4k")) == "reference"  # v1 keeps its own
    assert headline_metric(get_config("v2_atc_en")) == "accuracy"
    mrt = fixture_row("v2_multi_retrieval_en_4k", depth_percent=None)
    samples = [
        report.Sample(get_config("v2_multi_retrieval_en_4k"), mrt, {"recall": 50.0, "needle_hits": [100.0, 0.0]}),
        report.Sample(get_config("v2_single_en_4k"), fixture_row("v2_single_en_4k"), {"score": 100.0}),
        report.Sample(
            get_config("v2_multi_reasoning_en_4k"),
            fixture_row("v2_multi_reasoning_en_4k", num_needles=2),
            {"exact": 0.0},
        ),
    ]
    table = _values(_tables(samples)["needlebench_v2_4k"])
    assert {task: table[task] for task in ("S-RT", "M-RT", "M-RS", "Overall")} == {
        "S-RT": 100.0,
        "M-RT": 50.0,
        "M-RS": 0.0,
        "Overall": 50.0,
    }
