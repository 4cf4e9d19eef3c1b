"""NeedleBench v2 configs: the grids of the reference v2 configs at every size, and the v2 haystack rows."""

from __future__ import annotations

import re
from itertools import islice

import pytest
from typer.testing import CliRunner

from needlebench.cli import app
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.rows import iter_rows
from needlebench.tasks.grid import get_config, match_configs
from needlebench.tasks.kinship import reserved_text

#: `context_lengths` of `configs/datasets/needlebench_v2/needlebench_v2_<size>/needlebench_v2_single_<size>.py`
#: (M-RT and M-RS import them), as written there.
REFERENCE_LENGTHS = {
    "4k": [1000, 2000, 3000, 4000],
    "8k": [1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000],
    "32k": [1000, 4000, 8000, 12000, 16000, 20000, 24000, 28000, 32000],
    "128k": [1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000],
    "200k": [1000, 25000, 50000, 75000, 100000, 125000, 150000, 175000, 200000],
    "256k": [32000, 128000, 256000],
    "1000k": [1000, 125000, 250000, 375000, 500000, 625000, 750000, 875000, 1000000],
}
REFERENCE_DEPTHS = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
#: `length_buffer` of every v2 config (the same in single, multi_retrieval and multi_reasoning).
REFERENCE_BUFFERS = {
    "en": {"4k": 500, "8k": 500, "32k": 3000, "128k": 3000, "200k": 3000, "256k": 3000, "1000k": 3000},
    "zh": dict.fromkeys(REFERENCE_LENGTHS, 200),
}
#: `num_repeats_per_file`.
REFERENCE_REPEATS = {"single": 10, "multi_retrieval": 25, "multi_reasoning": 10}


@pytest.mark.parametrize("size", list(REFERENCE_LENGTHS))
@pytest.mark.parametrize("family", list(REFERENCE_REPEATS))
@pytest.mark.parametrize("language", ["en", "zh"])
def test_v2_grids_equal_the_reference_configs(size, family, language):
    spec = get_config(f"v2_{family}_{language}_{size}")
    assert spec.edition == "v2" and spec.size == size and spec.language == language
    assert list(spec.lengths) == REFERENCE_LENGTHS[size]
    assert list(spec.depths) == REFERENCE_DEPTHS
    assert spec.buffer == REFERENCE_BUFFERS[language][size]
    assert spec.repeats == REFERENCE_REPEATS[family]
    counts = {"single": [1], "multi_retrieval": [11], "multi_reasoning": [2, 3, 4, 5]}[family]
    assert list(spec.needle_counts) == counts
    cells = len(spec.lengths) * spec.repeats * (1 if family == "multi_retrieval" else len(spec.depths) * len(counts))
    assert spec.num_rows == cells


def test_v2_atc_config():
    for language in ("en", "zh"):
        spec = get_config(f"v2_atc_{language}")
        assert list(spec.needle_counts) == [2, 4, 8, 16, 32, 64, 128, 256, 512] and spec.repeats == 10
        assert spec.num_rows == 9 * 10 * 4 and spec.schema_family == "atc_v2"


def test_v1_configs_are_unchanged_and_v2_configs_come_last():
    names = [spec.name for spec in match_configs(["*"])]
    v2 = [name for name in names if name.startswith("v2_")]
    assert len(v2) == 44 and names[-44:] == v2
    assert get_config("single_en_32k").lengths[0] == 9000 and get_config("single_en_4k").depths[1] == 5
    assert get_config("single_en_4k").edition == "v1"


def test_list_shows_rows_and_tokens_of_the_v2_configs():
    result = CliRunner().invoke(app, ["list", "v2_*"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # not a terminal: plain lines, one config a line (config, task, language, size, rows, context tokens)
    lines = {line.split("\t")[0]: line.split("\t") for line in result.output.splitlines() if line.startswith("v2_")}
    assert len(lines) == 44
    assert lines["v2_single_en_4k"][4:] == ["440", "880,000"]  # 4 lengths x 11 depths x 10; (L-500) x 110
    assert lines["v2_atc_zh"][4:] == ["360", "1,297,521"]  # the needle chains of a default build


def test_v2_single_and_multi_retrieval_prompts_have_the_v2_frame_and_no_guide():
    single = next(iter_rows(get_config("v2_single_zh_4k"), BuildOptions(), (1000,)))
    assert single["prompt"].startswith(
        "这是一个长文本能力的测试，你需要首先阅读下面的长文档，然后根据文档中的信息回答最后的问题。\n长文档的内容如下\n\n<文档>\n"
    )
    assert single["prompt"].endswith(f"\n</文档>\n\n根据文档中的信息，现在请问：{single['question']}\n")
    assert "在回答之前" not in single["prompt"] and single["haystack_tokens"] == 1000 - 200
    multi = next(iter_rows(get_config("v2_multi_retrieval_en_4k"), BuildOptions(), (2000,)))
    assert "answer the final questions one by one based on the information in the document." in multi["prompt"]
    assert "Before answering" not in multi["prompt"] and multi["num_needles"] == 11
    assert multi["prompt"].endswith(
        f"</Document>\n\nBased on the information in the document, now please answer: {multi['question']}\n"
    )


def test_v2_reasoning_rows_hide_a_leak_free_kinship_chain():
    spec = get_config("v2_multi_reasoning_en_32k")
    rows = list(islice(iter_rows(spec, BuildOptions(), (1000,)), 44))  # repeat 0: 4 needle counts x 11 depths
    assert {row["num_needles"] for row in rows} == {2, 3, 4, 5}
    assert {row["buffer"] for row in rows} == {500}  # 3000 >= 1000 tokens: halved, as v1's full-buffer cell
    reserved = reserved_text("en")
    for row in rows:
        assert row["haystack_tokens"] == 500
        prompt, answer, needles = row["prompt"], row["answer"], row["needles"]
        assert len(needles) == row["num_needles"] and all(needle in prompt for needle in needles)
        document = prompt[prompt.index("<Document>") : prompt.index("</Document>")]
        # the eldest is named only by the chain (the haystack and the examples never name it)
        haystack = document
        for needle in needles:
            haystack = haystack.replace(needle, "")
        assert answer in document and answer not in haystack and answer not in reserved
        youngest = re.search(r"relative that '(.+)' can trace", row["question"]).group(1)
        assert f"So the oldest relative '{youngest}' can trace back" in prompt
        assert row["requested_depths"] == [min(100.0, row["depth_percent"] + 10 * i) for i in range(row["num_needles"])]
        first = [d for d in row["needle_depths"]]
        assert all(abs(a - b) <= 15 for a, b in zip(first, row["requested_depths"]))
    # the chain of a cell and needle count is the same at every depth (only placement changes)
    by_count = {}
    for row in rows:
        by_count.setdefault(row["num_needles"], set()).add(tuple(row["needles"]))
    assert all(len(chains) == 1 for chains in by_count.values())


def test_the_card_explains_v1_and_v2_only_when_v2_configs_are_present():
    from needlebench.dataset import card
    from needlebench.tasks.schema import features_for

    def manifest(names):
        entries = {name: {"rows": 5, "fingerprint": f"fp-{name}", "files": []} for name in names}
        return {
            "format": "needlebench-dataset",
            "format_version": 1,
            "generator_version": "0.1.0",
            "recipe": {"release_seed": 1, "tokenizer": "cl100k_base"},
            "configs": entries,
        }

    both = card.render_card(manifest(["single_en_4k", "v2_single_en_4k", "v2_atc_zh"]))
    assert "### NeedleBench v1 and v2" in both
    assert "| Overall per size | 0.4 S-RT + 0.3 M-RT + 0.3 M-RS | mean of S-RT, M-RT and M-RS |" in both
    assert "**S-RT** (`single_*` configs: 1)" in both and "**S-RT v2** (`v2_single_*` configs: 1)" in both
    assert "**ATC v2** (`v2_atc_*` configs: 1)" in both
    data = card.card_data(manifest(["v2_atc_zh"]))
    assert data.dataset_info[0]["features"] == features_for("atc_v2")._to_yaml_list()
    v1_only = card.render_card(manifest(["single_en_4k"]))
    assert "v2" not in v1_only.split("## How the data was built")[0]
