"""`--compat opencompass`: a hand-checked example built from tiny input files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from needlebench.dataset.options import BuildOptions
from needlebench.dataset.rows import iter_rows
from needlebench.tasks.grid import get_config
from support.needles import ENGLISH_NEEDLES as NEEDLES
from support.needles import write_needles

DOCS = ["Alpha beta gamma.", "Delta epsilon.", "Zeta eta theta."]
FRAME = (
    "You are an intelligent AI assistant skilled in answering user questions.\n"
    "Please keep your answers concise and clear. Do not talk about irrelevant topics or repeat your answers.\n"
    "The document given to you by the user is {context}\n\nNow, the question is: {question}"
)
GUIDED = (
    "What is hidden on {island} Island? Before answering, please consider what in the document is most relevant "
    "to this question. Please answer in the format 'The item hidden on {island} Island is ______.'"
)


@pytest.fixture
def options(tmp_path):
    haystack = tmp_path / "haystack.jsonl"
    haystack.write_text("".join(json.dumps({"text": d, "title": str(i)}) + "\n" for i, d in enumerate(DOCS)))
    needles = write_needles(tmp_path / "needles.jsonl", NEEDLES)
    return BuildOptions(compat="opencompass", haystack_en=str(haystack), needles=str(needles))


def test_hand_checked_single_needle_prompts(options, cl100k):
    rows = {row["id"]: row for row in iter_rows(get_config("single_en_4k"), options, (1000,))}
    # repeat 0: random.seed(0) shuffles the three documents to (0, 2, 1); random.seed(0); choice -> needle 1.
    # The documents are short of the target, so all of them are used, concatenated with no separator.
    haystack0 = "Alpha beta gamma.Zeta eta theta.Delta epsilon."
    needle1 = "\n" + NEEDLES[1]["needle"] + "\n"
    row = rows["single_en_4k-L1000-d0-r0"]
    assert row["prompt"] == FRAME.format(context=needle1 + haystack0, question=GUIDED.format(island="Green"))
    assert row["answer"] == needle1 + "*Gold Cup"
    assert rows["single_en_4k-L1000-d100-r0"]["prompt"] == FRAME.format(
        context=haystack0 + needle1, question=GUIDED.format(island="Green")
    )
    # repeat 1 shuffles the repeat-0 order again (cumulative): random.seed(1) permutes a list [x, y, z] into
    # [y, z, x], so (0, 2, 1) becomes (2, 1, 0); random.seed(1); choice -> needle 0.
    haystack1 = "Zeta eta theta.Delta epsilon.Alpha beta gamma."
    needle0 = "\n" + NEEDLES[0]["needle"] + "\n"
    assert rows["single_en_4k-L1000-d0-r1"]["prompt"] == FRAME.format(
        context=needle0 + haystack1, question=GUIDED.format(island="Red")
    )
    assert row["prompt_tokens"] == cl100k.count(row["prompt"]) and row["compat"] == "opencompass"


def test_token_offset_insertion_in_the_middle(options, cl100k):
    row = next(r for r in iter_rows(get_config("single_en_4k"), options, (1000,)) if r["id"].endswith("d52-r0"))
    tokens = cl100k.encode("Alpha beta gamma.Zeta eta theta.Delta epsilon.")
    point = int(len(tokens) * 52 / 100)
    context = cl100k.decode(tokens[:point] + cl100k.encode("\n" + NEEDLES[1]["needle"] + "\n") + tokens[point:])
    assert FRAME.format(context=context, question=GUIDED.format(island="Green")) == row["prompt"]


def test_multi_retrieval_joins_with_the_enumeration_comma(options):
    spec = get_config("multi_retrieval_en_4k")
    row = next(iter_rows(spec, BuildOptions(**{**options.__dict__, "needles": None}), (2000,)))
    assert "?、" in row["question"] and "'" in row["question"]
    assert row["answer"].endswith("#" + "*".join(map(str, spec.depths)))


@pytest.mark.parametrize(
    "needles_text, message",
    [
        ("[1]\n", "expected a JSON object"),
        (json.dumps({"needle": "x", "language": "English"}) + "\n", "retrieval_question"),
    ],
)
def test_bad_needle_files_are_one_line_errors(tmp_path, options, needles_text, message):
    from needlebench.errors import NeedlebenchError

    bad = tmp_path / "bad_needles.jsonl"
    bad.write_text(needles_text)
    broken = BuildOptions(**{**options.__dict__, "needles": str(bad)})
    with pytest.raises(NeedlebenchError, match=message) as error:
        next(iter_rows(get_config("single_en_4k"), broken, (1000,)))
    assert "\n" not in str(error.value)


def test_bad_reasoning_file_is_a_one_line_error(tmp_path, options):
    from needlebench.errors import NeedlebenchError

    bad = tmp_path / "reasoning.json"
    bad.write_text(json.dumps([{"derivations": [], "derivation_count": 2, "question": "q", "answer": "a"}]))
    broken = BuildOptions(**{**options.__dict__, "reasoning_needles_en": str(bad)})
    with pytest.raises(NeedlebenchError, match="derivation"):
        next(iter_rows(get_config("multi_reasoning_en_4k"), broken, (1000,)))


def test_unicode_line_separators_inside_json_strings_are_not_line_breaks(tmp_path, options):
    needles = tmp_path / "needles.jsonl"
    record = {**NEEDLES[0], "needle": "Hidden on Red Island\u2028is the Blue Gem."}
    needles.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    row = next(
        iter_rows(get_config("single_en_4k"), BuildOptions(**{**options.__dict__, "needles": str(needles)}), (1000,))
    )
    assert "Red Island\u2028is the Blue Gem." in row["prompt"]


@pytest.mark.slow
def test_the_command_line_writes_the_hand_checked_prompts(options, tmp_path):
    """The front door: `needlebench build --compat opencompass` from the same files (the writer checks each row
    against its family's schema), `needlebench verify`, `datasets.load_dataset`: the hand-checked prompts."""
    import datasets

    out = tmp_path / "d"
    inputs = ["--haystack-en", options.haystack_en, "--needles", options.needles]
    for args in (
        ["build", "single_en_4k", "multi_retrieval_en_4k", "--compat", "opencompass", *inputs, "--out", str(out)],
        ["verify", str(out), *inputs],
    ):
        result = subprocess.run(
            [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, result.stderr
    rows = {row["id"]: row for row in datasets.load_dataset(str(out), "single_en_4k", split="test")}
    haystack0 = "Alpha beta gamma.Zeta eta theta.Delta epsilon."
    needle1 = "\n" + NEEDLES[1]["needle"] + "\n"
    assert rows["single_en_4k-L1000-d0-r0"]["prompt"] == FRAME.format(
        context=needle1 + haystack0, question=GUIDED.format(island="Green")
    )
    assert rows["single_en_4k-L1000-d0-r0"]["needle_boundaries"] == ["compat"]
    retrieval = datasets.load_dataset(str(out), "multi_retrieval_en_4k", split="test")
    assert (
        retrieval[0]["compat"] == "opencompass" and retrieval.num_rows == get_config("multi_retrieval_en_4k").num_rows
    )
