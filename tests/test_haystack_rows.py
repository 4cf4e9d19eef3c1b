"""Rows of S-RT, M-RT and M-RS: token counts exact, answers recoverable from the prompt, depths, seeds."""

from __future__ import annotations

import itertools

import pytest

from needlebench.dataset.options import BuildOptions
from needlebench.dataset.rows import iter_rows
from needlebench.tasks.grid import get_config
from needlebench.tasks.prompts import frame_parts
from needlebench.tasks.schema import columns_for

OPTIONS = BuildOptions()


def _rows(config: str, lengths=(1000,), limit=None):
    rows = iter_rows(get_config(config), OPTIONS, lengths)
    return list(itertools.islice(rows, limit))


def _context(row) -> str:
    family = {"S-RT": "single", "M-RT": "multi_retrieval", "M-RS": "multi_reasoning"}[row["task"]]
    before, after = frame_parts(family, row["language"], row["question"])
    assert row["prompt"].startswith(before) and row["prompt"].endswith(after)
    return row["prompt"][len(before) : len(row["prompt"]) - len(after)]


@pytest.mark.parametrize("config", ["single_en_4k", "single_zh_4k"])
def test_single_rows(config, cl100k):
    rows = _rows(config, lengths=(1000, 2000), limit=None)
    spec = get_config(config)
    assert len(rows) == 2 * len(spec.depths) * spec.repeats
    deviations = []
    for row in rows[::7]:
        assert row.keys() == columns_for("single").keys()
        context = _context(row)
        assert cl100k.count(context) == row["haystack_tokens"] == row["context_length"] - row["buffer"]
        assert cl100k.count(row["prompt"]) == row["prompt_tokens"]
        # the answer is recoverable from the prompt: the needle (with its keyword) is in the document
        assert row["needles"][0] in context and row["keywords"][0] in row["needles"][0]
        assert row["keywords"][0] not in row["question"]
        deviations.append(abs(row["needle_depths"][0] - row["depth_percent"]))
    # nearest sentence boundary: off by at most half a (long) sentence of a 400-token haystack, ~1% typically
    assert max(deviations) <= 15 and sum(deviations) / len(deviations) <= 4
    ids = [row["id"] for row in rows]
    assert len(set(ids)) == len(ids)
    seeds = {row["seed"] for row in rows}
    assert len(seeds) == len(rows)


def test_depths_and_repeats_of_a_cell(cl100k):
    rows = _rows("single_en_4k", lengths=(4000,))
    by_cell = {}
    for row in rows:
        by_cell.setdefault(row["repeat"], []).append(row)
    # within a (length, repeat) cell every depth shares the haystack and needle; repeats differ
    for cell in by_cell.values():
        assert len({row["needles"][0] for row in cell}) == 1
        depths = [row["needle_depths"][0] for row in cell]
        assert depths == sorted(depths)
        assert abs(depths[0]) < 1e-9 and abs(depths[-1] - 100) < 1e-9
    first_prompts = {cell[5]["prompt"] for cell in by_cell.values()}
    assert len(first_prompts) == len(by_cell)


@pytest.mark.parametrize("config", ["multi_retrieval_en_8k", "multi_retrieval_zh_32k"])
def test_multi_retrieval_rows(config, cl100k):
    spec = get_config(config)
    rows = _rows(config, lengths=(spec.lengths[0],), limit=3)
    for row in rows:
        context = _context(row)
        assert cl100k.count(context) == row["haystack_tokens"] == row["context_length"] - row["buffer"]
        assert cl100k.count(row["prompt"]) == row["prompt_tokens"]
        assert row["num_needles"] == len(spec.depths) == len(row["keywords"]) == len(set(row["keywords"]))
        positions = [context.index(needle) for needle in row["needles"]]
        assert positions == sorted(positions)
        for keyword in row["keywords"]:
            assert keyword not in row["question"]
        assert row["question"].count("?" if row["language"] == "en" else "？") == len(spec.depths)


def test_multi_retrieval_halves_a_buffer_that_leaves_no_room():
    row = _rows("multi_retrieval_en_4k", lengths=(1000,), limit=1)[0]
    assert row["buffer"] == 500 and row["haystack_tokens"] == 500


@pytest.mark.parametrize("language", ["en", "zh"])
def test_multi_reasoning_rows(language, cl100k):
    rows = _rows(f"multi_reasoning_{language}_4k", lengths=(3000,))
    spec = get_config(f"multi_reasoning_{language}_4k")
    assert len(rows) == len(spec.depths) * 4 * spec.repeats
    assert {row["num_needles"] for row in rows} == {2, 3, 4, 5}
    for row in rows[::37]:
        context = _context(row)
        assert cl100k.count(context) == row["haystack_tokens"] == 3000 - row["buffer"]
        assert cl100k.count(row["prompt"]) == row["prompt_tokens"]
        positions = [context.index(needle) for needle in row["needles"]]
        assert positions == sorted(positions)
        # the answer is only reachable through the chain: remove any needle and the answer is gone
        assert row["answer"] in context
        for needle in row["needles"]:
            assert row["answer"] not in row["prompt"].replace(needle, "") or needle != row["needles"][-1]
        without_last = row["prompt"].replace(row["needles"][-1], "")
        assert row["answer"] not in without_last
        # needles spaced by 10% of the haystack from the requested depth
        assert row["requested_depths"] == [min(100.0, row["depth_percent"] + 10 * i) for i in range(row["num_needles"])]


def test_seed_changes_everything():
    a = _rows("single_en_4k", limit=1)[0]
    b = next(iter_rows(get_config("single_en_4k"), BuildOptions(release_seed=1), (1000,)))
    assert a["prompt"] != b["prompt"] and a["seed"] != b["seed"]


def test_question_at_start():
    row = next(iter_rows(get_config("single_en_4k"), BuildOptions(question_position="start"), (1000,)))
    assert row["prompt"].index("Now, the question is") < row["prompt"].index("The document given to you")
