"""The lm-eval side of the family objects: every template's oracle answer scores full marks through its own hook,
the hooks the task YAMLs name are exactly those the families hold (and ``utils.py`` serves them), the groups
``needlebench eval`` expands are the group YAMLs, and the answer forms the scorers define are the ones they read."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from needlebench.evaluation import scoring
from needlebench.evaluation.families import eval_family
from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.harness.task_yaml import function_refs, load_yaml
from needlebench.evaluation.runner.guard import needlebench_configs
from needlebench.tasks.grid import get_config, registry
from support import (
    atc_rows,
    counting_stars_row,
    fixture_row,
    multi_reasoning_row,
    multi_retrieval_row,
    single_row,
)

TASK_DIR = Path(__file__).resolve().parent.parent / "harness_tasks" / "needlebench"


def _rows_of_every_template() -> list[dict]:
    return [
        single_row(),
        single_row("v2_single_zh_4k"),
        multi_retrieval_row(),
        multi_retrieval_row("v2_multi_retrieval_en_4k"),
        multi_reasoning_row(),
        multi_reasoning_row("v2_multi_reasoning_en_4k", answer="Ann Smith"),
        *atc_rows("atc_zh_reasoning"),
        *atc_rows("atc_en"),
        fixture_row("atc_zh_open", answer="张伟", prompt_style="open", context_length=0),
        fixture_row("v2_atc_en", answer="Ann", num_needles=3),
        counting_stars_row(),
        counting_stars_row("counting_stars_reasoning_zh_128k"),
    ]


def test_every_templates_oracle_answer_scores_full_marks_through_its_hook():
    covered = set()
    for row in _rows_of_every_template():
        spec = get_config(row["config"])
        template = eval_family(spec).template(spec)
        covered.add(template.key)
        metrics = template.hook(row, [harness.oracle_answer(row)])
        assert set(metrics) == set(template.metric_names()), template.key
        full = 1.0 if template.key == "counting_stars" else 100.0
        for metric, aggregation in template.metrics:
            if aggregation == "mean":
                assert metrics[metric] == full, (row["config"], metric)
    assert covered == set(harness.TEMPLATES)


def test_the_hooks_the_yamls_name_are_the_families_and_utils_serves_them():
    files = harness.task_files()
    named = {ref for text in files.values() for ref in function_refs(load_yaml(text))}
    assert named == {f"utils.{name}" for name in harness.hooks()}
    spec = importlib.util.spec_from_file_location("needlebench_task_utils", TASK_DIR / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    for name, hook in harness.hooks().items():
        # bound in the module's namespace (not only reachable by attribute): tools that read a module's globals,
        # such as runpy, see every hook too
        assert vars(utils)[name] is hook is getattr(harness, name)
    assert not hasattr(harness, "process_nothing")


def test_groups_expanded_by_eval_are_the_group_yamls():
    files = harness.task_files()
    for name, text in files.items():
        if not name.startswith("_needlebench"):
            continue
        group = yaml.safe_load(text)
        members = [task.removeprefix(harness.TASK_PREFIX) for task in group["task"]]
        assert needlebench_configs([group["group"]]) == members, group["group"]
    # the v1 family group holds no v2 task; the v2 groups are known to the length check
    assert not any(config.startswith("v2_") for config in needlebench_configs(["needlebench_single"]))
    assert needlebench_configs("needlebench_v2_atc") == ["v2_atc_en", "v2_atc_zh"]


def test_budgets_come_from_the_family_tables():
    budgets = {name: harness.max_gen_toks_for(spec) for name, spec in registry().items()}
    assert budgets["atc_en_reasoning"] == 1024 and budgets["atc_en"] == 128 and budgets["atc_en_open"] == 512
    assert budgets["v2_multi_reasoning_en_4k"] == 1024 and budgets["v2_atc_zh"] == 2048
    assert budgets["counting_stars_acquisition_en_128k_m64"] == 8 * 64 + 64
    assert harness.template_key(get_config("v2_multi_retrieval_en_4k")) == "multi_retrieval"


@pytest.mark.parametrize(("style", "language"), sorted(scoring.atc.ANSWER_STATEMENTS))
def test_answer_statements_are_read_by_the_option_extractor(style, language):
    for letter in "ABCD":
        assert scoring.extract_option(scoring.option_answer(letter, style, language)) == letter


def test_answer_forms_of_counting_stars_and_v2_are_read_by_their_scorers():
    for language in ("en", "zh"):
        text = scoring.answer_json([3, 1, 2], language)
        assert scoring.parse_counts(text, language) == [3, 1, 2]
        assert json.loads(text) == {scoring.counting_stars.COUNT_KEY[language]: [3, 1, 2]}
    assert scoring.boxed_answer(scoring.box("Ann Smith")) == "Ann Smith"
