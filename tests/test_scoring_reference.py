"""The ``*_reference`` metrics: for every class of deliberate difference between the default scoring and the
reference code, an output whose reference score is the reference rule's, computed by hand from that rule
(OpenCompass ``first_option_postprocess``, ``extract_non_reasoning_content``, the NeedleBench evaluators, the
Counting-Stars ``viz.ipynb`` parse-and-score), beside the default score; and property tests that the reference
scorers and hooks never raise."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import json_repair
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.scoring import (
    extract_option,
    notebook_counting_stars_score,
    notebook_star_scores,
    opencompass_first_option,
    star_scores,
    thinking,
)
from needlebench.evaluation.scoring.reference import NOTEBOOK_KEYS
from needlebench.evaluation.scoring.thinking import reference_text
from support import fixture_row
from support.scoring_fuzz import outputs

NEEDLE = "The secret password of the Pellanlin Order is Brelvane Chalice."
KEYWORD = "Brelvane Chalice"
NAMES = ["Dana White", "Carol Adams", "Bob Smith", "Alice Brown"]  # Carol Adams is option B


def _srt_row() -> dict:
    return fixture_row("single_en_4k", needles=[NEEDLE], keywords=[KEYWORD], answer=KEYWORD)


def _atc_row(answer_letter: str = "A", language: str = "zh") -> dict:
    return fixture_row(
        f"atc_{language}",
        options=NAMES,
        answer=NAMES["ABCD".index(answer_letter)],
        answer_letter=answer_letter,
        item_id="0",
        rotation="ABCD",
        prompt_style="direct",
        context_length=0,
    )


# --------------------------------------------------------------------------------------------- <think>


def test_unclosed_think_block_issue_example():
    """The issue's example: the keyword inside a block never closed. The reference (raw text, or OpenCompass's
    extract_non_reasoning_content, which keeps an unclosed block) finds the keyword: 100."""
    output = f"<think>I recall that {NEEDLE} so the answer"
    row = _srt_row()
    thinking.set_policy(row["config"], thinking.ThinkPolicy(unclosed="empty"))
    assert harness.process_single(row, [output]) == {"score": 0.0, "score_reference": 100.0}
    thinking.set_policy(row["config"], thinking.ThinkPolicy(unclosed="keep"))
    assert harness.process_single(row, [output]) == {"score": 100.0, "score_reference": 100.0}


def test_closed_think_block_is_removed_for_both():
    # extract_non_reasoning_content removes <think>...</think>: the keyword named only while thinking earns nothing
    output = f"<think>Is it {KEYWORD}?</think>\nI do not know."
    assert reference_text(output) == "I do not know."
    result = harness.process_single(_srt_row(), [output])
    assert result["score"] == result["score_reference"] < 20.0


def test_v2_boxed_answer_inside_an_unclosed_block():
    row = fixture_row("v2_multi_reasoning_en_4k", answer="Carol Adams")
    output = "<think>so the eldest is \\boxed{Carol Adams}"
    thinking.set_policy(row["config"], thinking.ThinkPolicy(unclosed="empty"))
    assert harness.process_multi_reasoning_v2(row, [output]) == {"exact": 0.0, "exact_reference": 100.0}


# --------------------------------------------------------------------------------------------- ATC


@pytest.mark.parametrize(
    ("output", "default", "reference"),
    [
        # several answer statements: the last one here; the reference's first pattern (答案是?\s*([ABCD])) matches
        # the first statement
        ("答案是C。不对，重新检查一下，答案是A。", "A", "C"),
        # ... in English the reference's end-anchored pattern ([\s，：:,]([ABCD])[。，,\.]?$) comes first: both D
        ("The answer is B. Wait, checking again: the answer is D.", "D", "D"),
        ("Answer: B. On reflection the answer is D, since B is younger.", "D", "B"),
        # a name without a letter: its option here; the reference's last resort, the first capital A-D: the C of
        # "Carol"
        ("The eldest is Carol Adams.", "B", "C"),
        # a fullwidth letter: read as C here; invisible to the reference, whose cushion takes the A of "Answer"
        ("Answer: Ｃ", "C", "A"),
        # letters glued to words or lowercase: no answer here; the reference takes the first capital A-D anywhere
        ("xyzD", None, "D"),
        ("Answer: b", None, "A"),
        ("ABCD", None, "A"),
        # the usual forms agree
        ("Answer: B", "B", "B"),
        ("回答: D", "D", "D"),
        ("所以答案是：C", "C", "C"),
        ("The answer is: A", "A", "A"),
    ],
)
def test_atc_option_default_and_reference(output: str, default: str | None, reference: str):
    assert extract_option(output, "ABCD", names=NAMES) == default
    assert opencompass_first_option(output, "ABCD") == reference


def test_atc_hook_reports_both_and_circular_eval_of_the_reference():
    rows = [
        _atc_row(letter) | {"rotation": rotation} for letter, rotation in zip("ACDB", ("ABCD", "BCDA", "CDAB", "DABC"))
    ]
    # the issue's example for the row whose answer is C: wrong here (A), right in the reference (C)
    example = "答案是C。不对，重新检查一下，答案是A。"
    result = harness.process_atc(rows[1], [example])
    assert result["acc"] == 0.0 and result["acc_reference"] == 100.0
    assert result["perf_4"] == ("0", "BCDA", False) and result["perf_4_reference"] == ("0", "BCDA", True)
    answers = ["回答: A", example, "回答: D", "回答: B"]
    metrics = [harness.process_atc(row, [answer]) for row, answer in zip(rows, answers)]
    assert harness.agg_perf_4([m["perf_4"] for m in metrics]) == 0.0
    assert harness.agg_perf_4([m["perf_4_reference"] for m in metrics]) == 100.0


def test_open_atc_reference_is_the_srt_evaluator():
    row = fixture_row("atc_en_open", answer="Carol Adams", prompt_style="open", context_length=0)
    # keyword present anywhere: 100 in the reference, while the default reads the final answer (Bob Smith)
    result = harness.process_atc_open(row, ["Not Carol Adams; the eldest relative is Bob Smith."])
    assert result == {"score": 0.0, "score_reference": 100.0}


# --------------------------------------------------------------------------------------------- Counting-Stars

STARS = [15, 117, 42, 1]
WRONG = [16, 116, 43, 2]


def _stars(output: str, language: str = "en", task: str = "acquisition") -> tuple[list[float], list[float]]:
    wrong = WRONG if task == "reasoning" else None
    return (
        star_scores(output, STARS, wrong, task, language),
        notebook_star_scores(output, STARS, wrong, task, language),
    )


@pytest.mark.parametrize(
    ("output", "language", "default", "reference"),
    [
        # the notebook (EN, no code fence) runs json.loads and, when that fails, indexes the answer string: it raises
        ('Here you go: {"little_penguin": [15, 117]}', "en", [1, 1, 0, 0], [0, 0, 0, 0]),  # prose around the JSON
        ('{"little_penguin": [15, 117,]}', "en", [1, 1, 0, 0], [0, 0, 0, 0]),  # trailing comma
        ("{'little_penguin': [15, 117]}", "en", [1, 1, 0, 0], [0, 0, 0, 0]),  # single quotes
        ('{"小企鹅": [15, 117]}', "en", [1, 1, 0, 0], [0, 0, 0, 0]),  # the other language's key: KeyError
        ('{"answer": {"little_penguin": [15, 117]}}', "en", [1, 1, 0, 0], [0, 0, 0, 0]),  # nested: KeyError
        ('{"little_penguin": [１５, 117]}', "en", [1, 1, 0, 0], [0, 0, 0, 0]),  # fullwidth digits: invalid JSON
        ('{"little_penguin": [[15], 117]}', "en", [0, 1, 0, 0], [0, 0, 0, 0]),  # a list entry: set() raises
        # booleans: True == 1 in the notebook's list membership, ignored here
        ('{"little_penguin": [15, true]}', "en", [1, 0, 0, 0], [1, 0, 0, 1]),
        # json_repair (fenced EN, every ZH answer) repairs what json.loads cannot: the two agree
        ('```json\n{"little_penguin": [15, 117,]}\n```', "en", [1, 1, 0, 0], [1, 1, 0, 0]),
        ('好的：{"小企鹅": [15, 117,]}', "zh", [1, 1, 0, 0], [1, 1, 0, 0]),
        ('{"little_penguin": [15, 117, 42, 1]}', "en", [1, 1, 1, 1], [1, 1, 1, 1]),
        # the ZH notebook reads only its own key
        ('{"little_penguin": [15]}', "zh", [1, 0, 0, 0], [0, 0, 0, 0]),
        # a string in place of the list: the notebook makes a set of its characters, no count matches
        ('{"little_penguin": "15, 117"}', "en", [0, 0, 0, 0], [0, 0, 0, 0]),
    ],
)
def test_counting_stars_default_and_reference(output: str, language: str, default: list, reference: list):
    assert _stars(output, language) == ([float(v) for v in default], [float(v) for v in reference])


def test_counting_stars_reference_truncates_then_dedupes_and_scores_reasoning():
    # more than M entries: the first M (4) are kept, so the 5th (42) does not count
    assert _stars('{"little_penguin": [15, 15, 117, 16, 42]}')[1] == [1.0, 1.0, 0.0, 0.0]
    # reasoning: 1 correct only, 0.5 both, 0.25 wrong only, 0 neither
    answer = json.dumps({"little_penguin": [15, 117, 116, 43]})
    assert _stars(answer, task="reasoning")[1] == [1.0, 0.5, 0.25, 0.0]
    assert notebook_counting_stars_score(answer, STARS, WRONG, "reasoning", "en") == pytest.approx(1.75 / 4)


def test_counting_stars_hook_reports_both():
    row = fixture_row("counting_stars_acquisition_en_128k", star_counts=STARS, wrong_counts=[], language="en")
    result = harness.process_counting_stars(row, ['Sure! {"little_penguin": [15, 117, 42, 1]}'])
    assert result["per_star"] == [1.0] * 4 and result["star_score"] == 1.0
    assert result["per_star_reference"] == [0.0] * 4 and result["star_score_reference"] == 0.0


def test_counting_stars_reference_deep_nesting_scores_zero_quickly():
    deep = '{"little_penguin": ' + "[" * 5000 + "15" + "]" * 5000 + "}"
    assert _stars(deep)[1] == [0.0] * 4 and _stars(deep, "zh")[1] == [0.0] * 4


# --------------------------------------------------------------------------------------------- never raises

#: Fragments the generated outputs are made of: answer statements, think markers, JSON pieces, both keys.
FRAGMENTS = [
    "<think>", "</think>", "答案是", "回答: ", "Answer: ", "The answer is ", "the correct answer is ", "\\boxed{", "}",
    "{", "[", "]", ",", ":", '"little_penguin"', '"小企鹅"', "'", '"', "```json", "```", "true", "null", "15", "１５",
    "117", "A", "B", "C", "D", "Ｃ", "1.", " ", "\n", "所以", "选", KEYWORD, "Carol Adams", "json", "\u200b",
]  # fmt: skip
TEXTS = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=5)), max_size=30).map("".join),
)


def _hook_rows() -> list[tuple[str, dict]]:
    return [
        ("process_single", _srt_row()),
        ("process_multi_retrieval", fixture_row("multi_retrieval_en_4k", keywords=[KEYWORD, "伦敦", "15"])),
        ("process_multi_reasoning", fixture_row("multi_reasoning_zh_4k", answer="伦敦国王学院", language="zh")),
        ("process_atc", _atc_row("B", "en")),
        ("process_atc_open", fixture_row("atc_en_open", answer="Carol Adams", prompt_style="open")),
        ("process_counting_stars", fixture_row("counting_stars_acquisition_zh_128k", star_counts=STARS, language="zh")),
        (
            "process_counting_stars",
            fixture_row(
                "counting_stars_reasoning_en_128k",
                star_counts=STARS,
                wrong_counts=WRONG,
                task_variant="reasoning",
                language="en",
            ),
        ),
        ("process_single_v2", fixture_row("v2_single_en_4k", keywords=[KEYWORD])),
        ("process_multi_reasoning_v2", fixture_row("v2_multi_reasoning_en_4k", answer="Carol Adams")),
        ("process_atc_v2", fixture_row("v2_atc_en", answer="Carol Adams", num_needles=4)),
    ]


def _check_reference_metrics(metrics: dict) -> None:
    twins = {name: value for name, value in metrics.items() if name.endswith("_reference")}
    assert twins
    for name, value in twins.items():
        values = [value[-1]] if isinstance(value, tuple) else (value if isinstance(value, list) else [value])
        for item in values:
            if isinstance(item, bool):
                continue
            assert isinstance(item, float) and not math.isnan(item) and 0.0 <= item <= 100.0, (name, item)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS)
def test_reference_hooks_never_raise(text: str):
    for hook, row in _hook_rows():
        _check_reference_metrics(getattr(harness, hook)(row, [text]))
    assert opencompass_first_option(text) in ("", "A", "B", "C", "D")


@pytest.mark.slow
def test_reference_scorers_never_raise_on_fuzzed_outputs():
    """The project's fuzz set (random unicode, JSON fragments, nested brackets, 1 MB strings), every 10th output
    and all 1 MB ones (json_repair, which the notebook runs on every Chinese answer, takes milliseconds on each)."""
    generated = outputs(10_000)
    chosen = [text for index, text in enumerate(generated) if index % 10 == 0 or len(text) >= 1 << 20]
    assert sum(len(text) >= 1 << 20 for text in chosen) >= 4
    for text in chosen:
        assert opencompass_first_option(text) in ("", "A", "B", "C", "D")
        for language, task in (("en", "acquisition"), ("zh", "reasoning")):
            value = notebook_counting_stars_score(text, STARS, WRONG if task == "reasoning" else None, task, language)
            assert 0.0 <= value <= 1.0
        assert isinstance(reference_text(text), str)


@pytest.mark.slow
def test_difference_measurement_script_counts_flips_per_class():
    """``scripts/scoring_differences.py`` (the README's measured shares) on a small set: a class the two rules read
    alike changes nothing, a class they read differently changes every row, and --think-unclosed moves the
    unclosed-block rows."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "scoring_differences.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def table(*extra: str) -> dict[tuple[str, str], int]:
        done = subprocess.run(
            [sys.executable, str(script), "--rows", "8", "--markdown", *extra],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        cells = [line.split(" | ") for line in done.stdout.splitlines()[2:]]
        return {(cell[0].strip("| "), cell[1]): int(cell[3]) for cell in cells}

    keep = table()
    assert keep[("Counting-Stars EN", "plain JSON")] == 0 and keep[("Counting-Stars EN", "trailing comma")] == 8
    assert keep[("Counting-Stars ZH", "trailing comma")] == 0  # json_repair reads it in Chinese
    assert keep[("S-RT", "unclosed block (ran out of tokens)")] == 0
    assert table("--think-unclosed", "empty")[("S-RT", "unclosed block (ran out of tokens)")] == 8
    bad = subprocess.run(
        [sys.executable, str(script), "--rows", "2"], env=env, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and "--rows 2 is below 4; allowed: 4 or more" in bad.stderr


@pytest.mark.parametrize("language", ["en", "zh"])
def test_counting_stars_reference_brackets_inside_a_string_are_not_nesting(language: str):
    """A valid answer whose string field holds 1,500 ``[`` parses in the notebook (json.loads / json_repair read
    them as characters): it scores as the notebook scores it, not 0 (the twin counted them as nesting)."""
    key = NOTEBOOK_KEYS[language]
    answer = json.dumps({key: STARS[:2], "note": "[" * 1500 + '"quoted" \\\\ ]'}, ensure_ascii=False)
    assert json.loads(answer)[key] == STARS[:2] and json_repair.loads(answer)[key] == STARS[:2]
    assert _stars(answer, language)[1] == [1.0, 1.0, 0.0, 0.0]
    # the same brackets outside the string nest 1,500 deep: beyond the recursion limit, 0 as before
    deep = json.dumps({key: STARS[:2]})[:-1] + ', "x": ' + "[" * 1500 + "]" * 1500 + "}"
    assert _stars(deep, language)[1] == [0.0] * 4


def _parallel_evaluator(predictions: list[str], keywords: list[list[str]], depths: list[float]) -> float:
    """``NeedleBenchParallelEvaluator.score``'s ``average_score`` step by step (opencompass/datasets/needlebench/
    parallel.py): a slot per ``int(depth)`` of the first gold, 100 / N added to a keyword's slot when found."""
    slots = [int(depth) for depth in depths]
    scores_by_depth = dict.fromkeys(slots, 0.0)
    for prediction, words in zip(predictions, keywords, strict=True):
        for keyword, depth in zip(words, slots):
            if keyword in prediction:
                scores_by_depth[depth] += 100 / len(predictions)
    return sum(scores_by_depth.values()) / len(scores_by_depth)


@pytest.mark.parametrize("depths", [[0, 0.4, 0.8, 50, 100], [0, 25, 50, 75, 100], [10.2, 10.9, 11.0, 99.5, 100]])
def test_multi_retrieval_recall_reference_averages_per_distinct_integer_depth(depths: list[float]):
    """On a custom M-RT grid whose depths truncate to one integer the reference divides by the distinct slots (on
    the papers' grids that is plain recall): the mean of the per-row twins is the evaluator's average_score."""
    keywords = ["Amber", "Basalt", "Cobalt", "Dune", "Ember"]
    outputs = ["Amber Basalt Cobalt Dune Ember", "Amber Dune", "Cobalt", "none of them", "Basalt Ember Amber"]
    rows = [fixture_row("multi_retrieval_en_4k", keywords=keywords, requested_depths=depths) for _ in outputs]
    twins = [harness.process_multi_retrieval(row, [out])["recall_reference"] for row, out in zip(rows, outputs)]
    expected = _parallel_evaluator(outputs, [keywords] * len(outputs), depths)
    assert sum(twins) / len(twins) == pytest.approx(expected)
    distinct = len({int(depth) for depth in depths})
    assert twins[0] == pytest.approx(500 / distinct) and twins[1] == pytest.approx(200 / distinct)
    plain = [harness.process_multi_retrieval(row, [out])["recall"] for row, out in zip(rows, outputs)]
    assert plain == [100.0, 40.0, 20.0, 0.0, 60.0]  # the default metric stays plain recall


def test_the_report_keeps_a_reference_recall_above_100_up_to_100_per_needle(tmp_path: Path):
    """A colliding custom grid's reference recall above 100 is the reference's number, read as such; above 100 per
    needle it is not a score any row can log and is left out."""
    from needlebench.evaluation.report.load import read_samples
    from needlebench.tasks.families.base import ConfigSpec, Grid
    from needlebench.tasks.grid import _REGISTERED, register_config
    from support import write_samples

    keywords = ["Amber", "Basalt", "Cobalt", "Dune", "Ember"]
    depths = [0, 0.4, 0.8, 50, 100]
    grid = Grid(lengths=(1000,), depths=tuple(depths), needle_counts=(5,))
    spec = ConfigSpec("mrt_colliding", "multi_retrieval", "en", grid=grid)
    register_config(spec)  # fixture_row looks it up by name; the report by the lookup it is given (a manifest's)
    try:
        doc = fixture_row(
            "mrt_colliding", keywords=keywords, requested_depths=depths, context_length=1000, num_needles=5
        )
        values = [500 / 3, 500.5]
        rows = [{"doc": {**doc, "id": f"r{i}"}, "recall_reference": value} for i, value in enumerate(values)]
        left_out: list[tuple[str, str]] = []
        written = write_samples(tmp_path / "a", "needlebench_mrt_colliding", rows)
        samples = read_samples(written, left_out=left_out, lookup={spec.name: spec}.get)
        assert [sample.metrics.get("recall_reference") for sample in samples] == [pytest.approx(500 / 3), None]
        assert [where for _path, where in left_out] == ["line 2 metric recall_reference"]
    finally:
        _REGISTERED.pop("mrt_colliding", None)
    # the papers' grids have distinct integer depths: a row of one claiming colliding depths (its keywords and
    # depths are the samples file's, written by anyone) cannot log more than 100
    doc = fixture_row("multi_retrieval_en_4k", keywords=keywords * 4, requested_depths=[0] * 20)
    rows = [{"doc": doc, "recall_reference": 2000.0}]
    left_out = []
    samples = read_samples(write_samples(tmp_path / "b", "needlebench_multi_retrieval_en_4k", rows), left_out=left_out)
    assert [sample.metrics.get("recall_reference") for sample in samples] == [None]
    assert [where for _path, where in left_out] == ["line 1 metric recall_reference"]
