"""Stratified ``--subset`` selection and the ``needlebench eval`` argument handling around it."""

from __future__ import annotations

import json

import pytest

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.subset import coverage, parse_subset, stratified_indices
from needlebench.evaluation.runner.evaluate import project_tasks_kept
from needlebench.evaluation.runner.options import parse_eval
from needlebench.tasks.grid import get_config


def _grid_rows(config: str) -> list[dict]:
    """Rows shaped like the config's split (repeats included), in build order."""
    spec = get_config(config)
    rows = []
    if spec.family == "atc":
        for n in spec.needle_counts:
            for repeat in range(spec.repeats):
                for rotation in ("ABCD", "BCDA", "CDAB", "DABC"):
                    rows.append(
                        {
                            "context_length": 0,
                            "num_needles": n,
                            "item_id": f"{n}-{repeat}",
                            "rotation": rotation,
                            "prompt_style": "direct",
                            "depth_percent": None,
                        }
                    )
        return rows
    depths = [float(d) for d in spec.depths] if spec.family in ("single", "multi_reasoning") else [None]
    needles = spec.needle_counts if spec.family == "multi_reasoning" else (None,)
    for length in spec.lengths:
        for depth in depths:
            for n in needles:
                for _ in range(spec.repeats):
                    rows.append(
                        {
                            "context_length": length,
                            "depth_percent": depth,
                            "num_needles": n,
                        }
                    )
    return rows


@pytest.mark.parametrize(
    "config",
    [
        "single_en_4k",
        "single_zh_32k",
        "multi_reasoning_en_8k",
        "multi_retrieval_zh_128k",
    ],
)
def test_subset_covers_every_length_and_depth_then_every_cell(config: str):
    rows = _grid_rows(config)
    spec = get_config(config)
    full = coverage(rows)
    marginal = max(len(values) for values in full.values())
    chosen = stratified_indices(rows, marginal, config)
    assert len(chosen) == marginal and chosen == sorted(chosen)
    assert coverage(rows[i] for i in chosen) == full  # every length, depth and needle count
    cells = {(r["context_length"], r["depth_percent"], r["num_needles"]) for r in rows}
    chosen = stratified_indices(rows, len(cells), config)
    assert {(rows[i]["context_length"], rows[i]["depth_percent"], rows[i]["num_needles"]) for i in chosen} == cells
    assert len(cells) * spec.repeats == len(rows)
    assert stratified_indices(rows, len(cells), config) == chosen  # fixed seed
    assert stratified_indices(rows, 10 * len(rows), config) == list(range(len(rows)))


def test_subset_keeps_atc_items_whole_and_spreads_needle_counts():
    rows = _grid_rows("atc_en")
    chosen = stratified_indices(rows, 72, "atc_en")  # 18 items
    items = {rows[i]["item_id"] for i in chosen}
    assert len(items) == 18 and len(chosen) == 72
    assert {rows[i]["num_needles"] for i in chosen} == set(get_config("atc_en").needle_counts)
    assert len(stratified_indices(rows, 5, "atc_en")) == 8  # rounded up to whole items


def test_parse_subset_rejects_bad_values():
    assert parse_subset(None) is None and parse_subset("12") == 12
    for bad in ("ten", "-3", "1.5"):
        with pytest.raises(NeedlebenchError, match="subset"):
            parse_subset(bad)


def test_eval_subset_becomes_task_metadata():
    argv = ["run", "--model", "hf", "--tasks", "needlebench_single_en_4k", "--metadata", json.dumps({"data_dir": "d"})]
    assert parse_eval([*argv, "--subset", "40"])[2].metadata == {"data_dir": "d", "subset": 40}
    assert parse_eval(["run", "--tasks", "t", "--subset=8"])[2].metadata == {"subset": 8}
    assert parse_eval(["run", "--tasks", "t", "--metadata", "subset=8", "--subset", "8"])[2].metadata == {"subset": 8}
    assert parse_eval(["run", "--tasks", "t", "--limit", "4"])[2].metadata == {}
    with pytest.raises(NeedlebenchError, match="--subset and --limit"):
        parse_eval(["run", "--subset", "8", "--limit", "4"])
    with pytest.raises(NeedlebenchError, match="disagree"):
        parse_eval(["run", "--tasks", "t", "--metadata", "subset=4", "--subset", "8"])
    with pytest.raises(NeedlebenchError, match="--subset: expected one argument"):
        parse_eval(["run", "--subset"])
    with pytest.raises(NeedlebenchError, match="whole number"):
        parse_eval(["run", "--subset", "ten"])
    # lm-eval reads --metadata subset=-1 as the float -1.0: a negative count, said as such
    with pytest.raises(NeedlebenchError, match="must be a positive number of rows"):
        parse_eval(["run", "--tasks", "t", "--metadata", "subset=-1"])
    with pytest.raises(NeedlebenchError, match="needlebench eval ls --help"):
        parse_eval(["ls", "--subset", "3"])


def test_user_include_path_keeps_the_project_tasks(tmp_path, monkeypatch):
    import lm_eval.tasks as lm_eval_tasks

    seen = []

    class Recorder:
        def __init__(self, *args, include_path=None, **kwargs):
            seen.append(include_path)

    monkeypatch.setattr(lm_eval_tasks, "TaskManager", Recorder)
    ours = tmp_path / "ours"
    managers = []
    with project_tasks_kept(str(tmp_path / "mine"), ours, managers=managers):
        lm_eval_tasks.TaskManager(include_path=str(tmp_path / "mine"))
    assert seen == [[str(ours), str(tmp_path / "mine")]] and len(managers) == 1
    assert lm_eval_tasks.TaskManager is Recorder  # restored
    with project_tasks_kept(None, ours):  # nothing to add: --include_path is defaulted instead
        lm_eval_tasks.TaskManager(include_path="default")
    assert seen[-1] == "default"
