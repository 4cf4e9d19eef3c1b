"""`--compat opencompass` on v2 configs: byte for byte the reference v2 loaders, from tiny input files.

`data/opencompass_v2_examples.json` holds what the reference loaders (``opencompass/datasets/needlebench_v2``)
return for the files written below; the hand-derived asserts spell out why (seeds, shuffles, chains)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from needlebench.dataset.options import BuildOptions
from needlebench.dataset.rows import iter_rows
from needlebench.tasks.grid import get_config
from support.needles import REFERENCE_NEEDLES, write_needles

EXAMPLES = json.loads((Path(__file__).parent / "data" / "opencompass_v2_examples.json").read_text(encoding="utf-8"))
DOCS = {"en": ["Alpha beta gamma.", "Delta epsilon.", "Zeta eta theta."], "zh": ["甲乙丙。", "丁戊。", "己庚辛。"]}
NAMES = {"English": "Ann Lee,Bob Ray,Cid Fox,Dee Moss,Eve Park,Fay Hunt", "Chinese": "张三,李四,王五,赵六,钱七,孙八"}
SRT_FRAME_EN = (
    "This is a test of long-text capability. You need to first read the long document below, and then answer the "
    "final question based on the information in the document.\nThe content of the long document is as follows\n\n"
    "<Document>\n{context}\n</Document>\n\nBased on the information in the document, now please answer: {question}\n"
)


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    folder = tmp_path_factory.mktemp("oc_v2")
    for language, name in (("en", "PaulGrahamEssays.jsonl"), ("zh", "zh_finance.jsonl")):
        lines = [
            json.dumps({"text": text, "title": str(i)}, ensure_ascii=False) for i, text in enumerate(DOCS[language])
        ]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_needles(folder / "needles.jsonl")
    (folder / "names.json").write_text(json.dumps(NAMES, ensure_ascii=False), encoding="utf-8")
    return BuildOptions(
        compat="opencompass",
        haystack_en=str(folder / "PaulGrahamEssays.jsonl"),
        haystack_zh=str(folder / "zh_finance.jsonl"),
        needles=str(folder / "needles.jsonl"),
        names=str(folder / "names.json"),
    )


def run(*args: str) -> subprocess.CompletedProcess:
    """The ``needlebench`` command (its console-script entry point) in a fresh process."""
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def rows(options):
    built = {}
    for language in ("en", "zh"):
        for family in ("single", "multi_retrieval", "multi_reasoning"):
            spec = get_config(f"v2_{family}_{language}_4k")
            built.update({row["id"]: row for row in iter_rows(spec, options, (1000,))})
        atc = iter_rows(get_config(f"v2_atc_{language}"), options)
        built.update({row["id"]: row for row in itertools.islice(atc, 40)})  # the 2-relation items
    return built


def test_every_reference_example_is_reproduced_byte_for_byte(rows):
    assert len(EXAMPLES["rows"]) == 28
    for row_id, expected in EXAMPLES["rows"].items():
        row = rows[row_id]
        assert row["prompt"] == expected["prompt"], row_id
        if row["task"] != "M-RT" and row["task"] != "S-RT":
            assert row["answer"] == expected["answer"], row_id
        assert row.get("question_type", expected.get("question_type")) == expected.get("question_type"), row_id
        assert row["compat"] == "opencompass"


def test_single_needle_hand_checked(rows):
    # repeat 0: random.seed(0) shuffles the documents to (0, 2, 1); random.seed(0); choice -> the Green needle.
    # No guide sentence in v2; the needle goes at int(T * 50 / 100) tokens of the 13-token haystack.
    row = rows["v2_single_en_4k-L1000-d50-r0"]
    context = "Alpha beta gamma.Zeta\nHidden on Green Island is the Gold Cup.\n eta theta.Delta epsilon."
    assert row["prompt"] == SRT_FRAME_EN.format(context=context, question=REFERENCE_NEEDLES[1]["retrieval_question"])
    assert row["answer"] == "\nHidden on Green Island is the Gold Cup.\n*Gold Cup" and row["keywords"] == ["Gold Cup"]


def test_multi_retrieval_hand_checked(rows):
    # Two English needles only, so they take depths 0 and 10; questions and formats joined with '、'.
    row = rows["v2_multi_retrieval_en_4k-L1000-r0"]
    assert row["question"] == (
        "What is hidden on Green Island?、What is hidden on Red Island?Please answer in the format of "
        "'The item hidden on Green Island is ______、The item hidden on Red Island is ______'"
    )
    assert "answer the final questions one by one" in row["prompt"] and row["keywords"] == ["Gold Cup", "Blue Gem"]


def test_multi_reasoning_hand_checked(rows):
    # random.seed(0); sample(names, 3) = Dee Moss, Fay Hunt, Ann Lee (eldest first): two relation sentences,
    # the first at depth 0, the second 10% further, clamped to the end of the 13-token haystack.
    row = rows["v2_multi_reasoning_en_4k-L1000-d0-n2-r0"]
    assert row["answer"] == "Dee Moss"
    assert row["needles"] == [
        "Dee Moss, as Fay Hunt's paternal grandfather, has a significant impact on Fay Hunt's upbringing.",
        "Fay Hunt is not only Ann Lee's maternal grandmother but also Ann Lee's role model.",
    ]
    context = "\n" + row["needles"][0] + "\nAlpha beta gamma.Zeta eta theta.Delta epsilon.\n" + row["needles"][1] + "\n"
    assert f"<Document>\n{context}\n</Document>" in row["prompt"]
    assert "who is the eldest relative that 'Ann Lee' can trace back to" in row["question"]
    assert row["prompt"].endswith(
        "\"So the oldest relative 'Ann Lee' can trace back to in the provided text is "
        '\\boxed{(your answer here)}."\n\n'
    )


def test_atc_hand_checked(rows):
    # ELDEST_ANCESTOR repeat 0 uses random.seed(1): Bob Ray -> Eve Park -> Ann Lee, mother (1) + maternal
    # grandfather (2) = 3 generations; RELATIONSHIP_DISTANCE repeat 0 uses random.seed(30001).
    eldest = rows["v2_atc_en-n2-eldest_ancestor-r0"]
    assert eldest["answer"] == "Bob Ray" and eldest["seed"] == 1 and eldest["generations"] == 3
    story = (
        "Bob Ray, as Eve Park's mother, has a significant impact on Eve Park's upbringing.Eve Park is not only "
        "Ann Lee's maternal grandfather but also Ann Lee's role model."
    )
    assert f"provided below:\n{story}\n\nGiven the scrambled" in eldest["prompt"]
    distance = rows["v2_atc_en-n2-relationship_distance-r0"]
    assert distance["seed"] == 30001 and distance["answer"] == "3" == str(distance["generations"])
    nth = rows["v2_atc_en-n2-nth_ancestor-r1"]
    assert nth["seed"] == 10002
    assert f"who is the {nth['generations']}th generation ancestor of" in nth["prompt"]  # the reference's "{n}th"
    assert rows["v2_atc_zh-n2-eldest_ancestor-r0"]["answer"] == "李四"


@pytest.mark.slow
def test_the_command_line_builds_verifies_and_loads_the_same_bytes(options, tmp_path):
    """The front door: `needlebench build --compat opencompass` of the v2 haystack configs (the Parquet writer
    checks each row against its family's schema), `needlebench verify`, `datasets.load_dataset`: the reference
    examples come out byte for byte. (v2 ATC needs a names list of 513 names for its 512-relation chains, more
    than the examples' file has; its CLI build is in tests/test_front_door.py.)"""
    import datasets

    configs = [
        f"v2_{family}_{language}_4k"
        for language in ("en", "zh")
        for family in ("single", "multi_retrieval", "multi_reasoning")
    ]
    inputs = [
        "--haystack-en",
        options.haystack_en,
        "--haystack-zh",
        options.haystack_zh,
        "--needles",
        options.needles,
        "--names",
        options.names,
    ]
    out = tmp_path / "d"
    built = run("build", *configs, "--compat", "opencompass", *inputs, "--out", str(out))
    assert built.returncode == 0, built.stderr
    verified = run("verify", str(out), *inputs)
    assert verified.returncode == 0 and "all configs match" in verified.stdout, verified.stderr
    loaded = {}
    for config in configs:
        split = datasets.load_dataset(str(out), config, split="test")
        assert set(split["needle_boundaries"][0]) == {"compat"}
        loaded.update({row["id"]: row for row in split if row["id"] in EXAMPLES["rows"]})
    checked = 0
    for row_id, expected in EXAMPLES["rows"].items():
        if "_atc_" in row_id:
            continue
        assert loaded[row_id]["prompt"] == expected["prompt"], row_id
        if loaded[row_id]["task"] == "M-RS":
            assert loaded[row_id]["answer"] == expected["answer"], row_id
        checked += 1
    assert checked == 12
