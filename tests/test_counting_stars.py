"""Counting-Stars rows: exact texts, token-exact contexts, star placement, counts, compat mode, bad inputs."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from needlebench.compat.counting_stars import compat_haystack_text
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.rows import iter_rows
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.scoring import counting_stars_score
from needlebench.sources.tokenizer import get_tokenizer
from needlebench.tasks.boundaries import KINDS
from needlebench.tasks.counting_stars import (
    answer_json,
    draw_counts,
    question_text,
    star_sentence,
)
from needlebench.tasks.grid import ConfigSpec, get_config, registry
from needlebench.tasks.schema import columns_for
from support import A32, R32

SEPARATOR = "\n\n\n\n"
SMALL = (4000, 8000)
CONFIGS = [
    f"counting_stars_{task}_{language}_128k" for task in ("acquisition", "reasoning") for language in ("en", "zh")
]


# Parser oracle: the exact sentence forms of Table 1 / the reference notebook.
STAR_PATTERNS = {
    ("acquisition", "en"): re.compile(r"The little penguin counted (\d+) ★(?!,)"),
    ("acquisition", "zh"): re.compile(r"小企鹅数了(\d+)颗★(?!，)"),
    ("reasoning", "en"): re.compile(
        r"The little penguin counted (\d+) ★, but found that a mistake had been made, so the counting was done "
        r"again, and this time (\d+) ★ was counted correctly\."
    ),
    ("reasoning", "zh"): re.compile(r"小企鹅数了(\d+)颗★，但发现数错了，于是又数了一遍，这次数对了，是(\d+)颗★"),
}
KEYS = {"en": "little_penguin", "zh": "小企鹅"}


def oracle(prompt: str, task: str, language: str) -> tuple[list[int], list[int]]:
    """(correct counts, wrong counts) read back from a prompt, in order of appearance."""
    matches = list(STAR_PATTERNS[(task, language)].finditer(prompt))
    if task == "acquisition":
        return [int(m.group(1)) for m in matches], []
    return [int(m.group(2)) for m in matches], [int(m.group(1)) for m in matches]


def context_of(row: dict) -> str:
    tail = SEPARATOR + row["question"]
    assert row["prompt"].endswith(tail)
    return row["prompt"][: -len(tail)]


@pytest.fixture(scope="module")
def tokenizer():
    return get_tokenizer()


@pytest.fixture(scope="module")
def default_rows() -> dict[str, list[dict]]:
    return {name: list(iter_rows(get_config(name), BuildOptions(), SMALL)) for name in CONFIGS}


# ---- texts -----------------------------------------------------------------------------------------------------
def test_star_sentences_and_questions_are_exact():
    assert star_sentence("acquisition", "en", 15) == "The little penguin counted 15 ★"
    assert star_sentence("acquisition", "en", 15, wrapped=True) == "\nThe little penguin counted 15 ★\n"
    assert star_sentence("reasoning", "en", 15, 16, wrapped=True) == (
        "\nThe little penguin counted 16 ★, but found that a mistake had been made, so the counting was done again, "
        "and this time 15 ★ was counted correctly.\n"
    )
    assert star_sentence("acquisition", "zh", 15, wrapped=True) == "\n小企鹅数了15颗★\n"
    assert (
        star_sentence("reasoning", "zh", 15, 16) == "小企鹅数了16颗★，但发现数错了，于是又数了一遍，这次数对了，是15颗★"
    )
    assert question_text("acquisition", "en") == (
        "On this moonlit and misty night, the little penguin is looking up at the sky and concentrating on counting "
        '★. Please help the little penguin collect the number of ★, for example: {"little_penguin": [x, x, x,...]}. '
        "The summation is not required, and the numbers in [x, x, x,...] represent the counted number of ★ by the "
        "little penguin. Only output the results in JSON format without any explanation."
    )
    reasoning_en = question_text("reasoning", "en")
    assert (
        "collect the correct number of ★" in reasoning_en and "represent the correctly counted number" in reasoning_en
    )
    assert question_text("acquisition", "zh") == (
        "在这个月光皎洁、云雾缭绕的夜晚，小企鹅正望向天空，全神贯注地数★。请帮助小企鹅收集所数★的颗数，按照如下格式："
        '{"小企鹅":[x,x,x,...]}，不要求和，[x,x,x,...]中数字为小企鹅每次数★的颗数，仅以JSON格式输出结果，不需要输出任何解释。'
    )
    reasoning_zh = question_text("reasoning", "zh")
    assert "所数★的正确颗数" in reasoning_zh and "小企鹅正确数★的颗数" in reasoning_zh
    assert answer_json([3, 1], "zh") == '{"小企鹅": [3, 1]}'
    assert answer_json([3, 1], "en") == '{"little_penguin": [3, 1]}'


# ---- default build -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", CONFIGS)
def test_rows_schema_and_fields(default_rows, name):
    spec = get_config(name)
    rows = default_rows[name]
    assert [row["id"] for row in rows] == [f"{name}-L{length}" for length in SMALL]
    for row in rows:
        assert row.keys() == columns_for("counting_stars").keys()
        assert row["task"] == "Counting-Stars" and row["size"] == "128k" and row["buffer"] == 0
        assert row["task_variant"] == spec.variant and row["num_stars"] == 32 == len(row["star_counts"])
        assert row["depth_percent"] is None and row["compat"] == "" and row["repeat"] == 0
        assert row["question"] == question_text(spec.variant, spec.language)
        assert json.loads(row["answer"]) == {KEYS[spec.language]: row["star_counts"]}
        assert row["keywords"] == [str(count) for count in row["star_counts"]]
        assert row["needles"] == [
            star_sentence(spec.variant, spec.language, c, w)
            for c, w in zip(row["star_counts"], row["wrong_counts"] or [None] * 32)
        ]


@pytest.mark.parametrize("name", CONFIGS)
def test_parser_oracle_scores_one(default_rows, name):
    spec = get_config(name)
    for row in default_rows[name]:
        correct, wrong = oracle(row["prompt"], spec.variant, spec.language)
        assert correct == row["star_counts"]
        assert wrong == row["wrong_counts"]
        prediction = json.dumps({KEYS[spec.language]: correct}, ensure_ascii=False)
        score = counting_stars_score(
            prediction, row["star_counts"], row["wrong_counts"] or None, spec.variant, spec.language
        )
        assert score == 1.0
        if spec.variant == "reasoning":  # answering with the first, wrong counts earns 0.25 per star
            fooled = json.dumps({KEYS[spec.language]: wrong}, ensure_ascii=False)
            assert (
                counting_stars_score(fooled, row["star_counts"], row["wrong_counts"], "reasoning", spec.language)
                == 0.25
            )


@pytest.mark.parametrize("name", CONFIGS)
def test_token_counts_are_exact(default_rows, tokenizer, name):
    for row in default_rows[name]:
        context = context_of(row)
        assert row["haystack_tokens"] == row["context_length"] == tokenizer.count(context)
        assert row["prompt_tokens"] == tokenizer.count(row["prompt"])


@pytest.mark.parametrize("name", CONFIGS)
def test_stars_in_order_on_their_own_boundaries(default_rows, name, tokenizer):
    for row in default_rows[name]:
        context = context_of(row)
        positions = [context.find(needle) for needle in row["needles"]]
        assert all(p >= 0 for p in positions) and positions == sorted(positions)
        assert all(context.count(needle) == 1 for needle in row["needles"])
        assert context.endswith("\n" + row["needles"][-1])  # the last star closes the context
        depths = row["needle_depths"]
        assert all(a < b for a, b in itertools.pairwise(depths)) and depths[-1] == 100.0
        # evenly spread: star i within 1 point (at least 3 tokens) of (i+1)/32 of the haystack
        targets = [100 * (i + 1) / 32 for i in range(32)]
        haystack = row["haystack_tokens"] - sum(tokenizer.count("\n" + n) for n in row["needles"])
        slack = max(1.0, 300 / haystack) + 0.2  # + the few tokens the haystack differs from the estimate
        assert max(abs(d - t) for d, t in zip(depths, targets)) <= slack
        assert len(row["needle_boundaries"]) == 32 and set(row["needle_boundaries"]) <= set(KINDS)
        # no two stars share a boundary: there is haystack text between consecutive stars
        for needle, _, position, after in zip(row["needles"], row["needles"][1:], positions, positions[1:]):
            assert context[position + len(needle) : after].strip()


@pytest.mark.parametrize("name", [n for n in CONFIGS if "reasoning" in n])
def test_wrong_counts_never_collide(default_rows, name):
    for row in default_rows[name]:
        correct, wrong = row["star_counts"], row["wrong_counts"]
        assert len(wrong) == len(correct) and not set(wrong) & set(correct)
        assert len(set(wrong)) == len(wrong) and min(wrong) >= 1
        assert all(abs(w - c) == 1 for w, c in zip(wrong, correct))


def test_determinism_and_variation(default_rows):
    name = "counting_stars_acquisition_en_128k"
    again = list(iter_rows(get_config(name), BuildOptions(), (8000,)))
    assert again == default_rows[name][1:]
    first, second = default_rows[name]
    assert first["star_counts"] != second["star_counts"] and first["seed"] != second["seed"]
    (other,) = iter_rows(get_config(name), BuildOptions(release_seed=7), (4000,))
    assert other["star_counts"] != first["star_counts"] and other["prompt"] != first["prompt"]


def test_one_small_length_of_the_1000k_family(tokenizer):
    spec = get_config("counting_stars_reasoning_en_1000k")
    (row,) = iter_rows(spec, BuildOptions(), (31250,))
    assert row["id"] == "counting_stars_reasoning_en_1000k-L31250" and row["size"] == "1000k"
    assert tokenizer.count(context_of(row)) == row["haystack_tokens"] == 31250
    assert row["prompt_tokens"] == tokenizer.count(row["prompt"])
    correct, wrong = oracle(row["prompt"], "reasoning", "en")
    assert (correct, wrong) == (row["star_counts"], row["wrong_counts"])


def test_more_stars_fit_at_longer_lengths(tokenizer):
    spec = get_config("counting_stars_acquisition_zh_128k_m64")
    (row,) = iter_rows(spec, BuildOptions(), (8000,))
    assert row["num_stars"] == 64 and oracle(row["prompt"], "acquisition", "zh")[0] == row["star_counts"]
    assert tokenizer.count(context_of(row)) == 8000


# ---- counts --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stars", [32, 1024])
@pytest.mark.parametrize("task", ["acquisition", "reasoning"])
def test_draw_counts(stars, task):
    correct, wrong = draw_counts(stars, 12345, task)
    assert (correct, wrong) == draw_counts(stars, 12345, task)
    assert correct != draw_counts(stars, 12346, task)[0]
    assert len(set(correct)) == stars and min(correct) >= 1 and max(correct) <= max(128, 4 * stars)
    steps = np.diff(correct)
    assert not (np.all(steps > 0) or np.all(steps < 0) or len(set(steps.tolist())) == 1)
    if task == "acquisition":
        assert wrong == []
    else:
        assert not set(wrong) & set(correct) and len(set(wrong)) == stars
        assert all(abs(w - c) == 1 and w >= 1 for w, c in zip(wrong, correct))
        signs = {w - c for w, c in zip(wrong, correct)}
        assert signs == {-1, 1}


# ---- compat mode -------------------------------------------------------------------------------------------------
def test_piece_edits_match_string_edits():
    """The span-and-star edits behind compat mode equal the reference's string edits, also where an offset falls
    inside an earlier star or past the end."""
    from needlebench.compat import counting_stars as cs

    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    spaces = np.array([i for i, c in enumerate(text) if c == " "])
    generator = np.random.default_rng(3)
    for _ in range(200):
        pieces, plain = [(0, len(text))], text
        for index in range(6):
            star = cs._Star(index, f"\nS{index} x y\n")
            if generator.integers(2):
                at = int(generator.integers(0, len(plain) + 5))
                pieces, plain = cs._insert_at_char(pieces, at, star), plain[:at] + star.text + plain[at:]
            else:
                word = int(generator.integers(0, len(plain.split(" ")) + 3))
                words = plain.split(" ")
                pieces = cs._replace_nth_space(pieces, word, star, spaces)
                plain = " ".join(words[:word]) + star.text + " ".join(words[word:])
            assert "".join(text[p[0] : p[1]] if isinstance(p, tuple) else p.text for p in pieces) == plain


def _synthetic_english(folder: Path) -> Path:
    generator = np.random.default_rng(0)
    vocabulary = ["stone", "river", "light", "quiet", "garden", "we", "had", "the", "of", "and", "startup", "money"]
    folder.mkdir()
    for index in range(3):
        lines = []
        for _ in range(200):
            words = generator.choice(vocabulary, size=int(generator.integers(5, 30)))
            lines.append(" ".join(words).capitalize() + ".")
        (folder / f"essay{index}.txt").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    return folder


def _synthetic_chinese(path: Path) -> Path:
    generator = np.random.default_rng(1)
    characters = list("天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏")
    lines = []
    for index in range(400):
        if index % 50 == 0:
            lines.append(f"------------第{index}回 Chapter {index}------------")
        body = "".join(generator.choice(characters, size=int(generator.integers(8, 30))))
        lines.append(f"　　{body}，{body[:5]} ab, c.d!（{index}）。  ")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _reference_context(text: str, length: int, stars: list[str], language: str) -> tuple[str, int]:
    """A direct transcription of the reference notebook's insertion loop (string operations)."""
    size = int(length * (0.8 if language == "en" else 0.7))
    context = " ".join(text.split(" ")[:size]) if language == "en" else text[:size]
    before = len(context.split(" ")) if language == "en" else len(context)
    for indicator, k in enumerate(range(0, size, int(size / 32))):
        star = stars[indicator]
        if language == "zh":
            at = k + int(size / 32) + len(star) * indicator
            context = context[:at] + star + context[at:]
        else:
            words = context.split(" ")
            at = len(star.split(" ")) * indicator + k + int(size / 32)
            context = " ".join(words[:at]) + star + " ".join(words[at:])
        if indicator + 1 == 32:
            break
    return context, before


def _reference_english_text(folder: Path) -> str:
    return "".join(path.read_text(encoding="utf-8").replace("\n", " ") for path in sorted(folder.glob("*.txt")))


def _reference_chinese_text(path: Path) -> str:
    context = ""
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        context += line.strip().replace("------------", " ").replace("\n", " ").replace(" ", "")
    context = re.sub("[{}]".format(re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")), "", context)
    return re.sub("[a-zA-Z]", "", context)


@pytest.mark.parametrize("task", ["acquisition", "reasoning"])
def test_compat_english_matches_reference(tmp_path, monkeypatch, tokenizer, task):
    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(tmp_path / "cache"))
    folder = _synthetic_english(tmp_path / f"essays_{task}")
    text = _reference_english_text(folder)
    assert compat_haystack_text([p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))], "en") == text
    spec = get_config(f"counting_stars_{task}_en_128k")
    options = BuildOptions(compat="counting-stars", haystack_en=str(folder))
    rows = list(iter_rows(spec, options, SMALL))
    for row in rows:
        assert row["star_counts"] == A32 and row["wrong_counts"] == (R32 if task == "reasoning" else [])
        assert (
            row["compat"] == "counting-stars"
            and row["needles"][0].startswith("\n")
            and row["needles"][0].endswith("\n")
        )
        expected, words = _reference_context(text, row["context_length"], row["needles"], "en")
        assert words == int(0.8 * row["context_length"])
        context = context_of(row)
        assert context == expected
        assert row["haystack_tokens"] == tokenizer.count(context) and row["prompt_tokens"] == tokenizer.count(
            row["prompt"]
        )
        assert oracle(row["prompt"], task, "en") == (A32, R32 if task == "reasoning" else [])
        assert row["needle_depths"][-1] == 100.0 and row["corpus_cycles"] == 0


@pytest.mark.parametrize("task", ["acquisition", "reasoning"])
def test_compat_chinese_matches_reference(tmp_path, monkeypatch, tokenizer, task):
    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(tmp_path / "cache"))
    path = _synthetic_chinese(tmp_path / f"stone_{task}.txt")
    text = _reference_chinese_text(path)
    assert "------------" not in text and not re.search("[A-Za-z ,.!]", text) and "（" in text
    spec = get_config(f"counting_stars_{task}_zh_128k")
    rows = list(iter_rows(spec, BuildOptions(compat="counting-stars", haystack_zh=str(path)), SMALL))
    for row in rows:
        context = context_of(row)
        expected, characters = _reference_context(text, row["context_length"], row["needles"], "zh")
        assert characters == int(0.7 * row["context_length"])
        assert len(context) - sum(map(len, row["needles"])) == characters
        assert context == expected
        assert row["haystack_tokens"] == tokenizer.count(context) and row["prompt_tokens"] == tokenizer.count(
            row["prompt"]
        )
        assert oracle(row["prompt"], task, "zh") == (A32, R32 if task == "reasoning" else [])


def test_compat_default_chinese_corpus():
    spec = get_config("counting_stars_acquisition_zh_128k")
    (row,) = iter_rows(spec, BuildOptions(compat="counting-stars"), (4000,))
    context = context_of(row)
    assert len(context) - sum(map(len, row["needles"])) == 2800
    assert row["star_counts"] == A32 and row["corpus"].startswith("sanguo-yanyi@")


# ---- bad inputs --------------------------------------------------------------------------------------------------
def _one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_star_count_not_allowed():
    spec = ConfigSpec("counting_stars_acquisition_en_128k_m100", "counting_stars", "en", "128k", "acquisition", 100)
    with pytest.raises(NeedlebenchError) as excinfo:
        iter_rows(spec, BuildOptions(), (4000,))
    message = _one_line_error(excinfo)
    assert "M=100" in message and "1024" in message


def test_few_sentence_ends_fall_back_to_word_boundaries(tmp_path):
    # one sentence end per ~600 words: the 64 stars at 8,000 tokens mostly sit on word boundaries, each within
    # 1 point of its depth and on its own insertion point
    haystack = tmp_path / "sparse.txt"
    haystack.write_text(" ".join(["word"] * 600 + ["end."]) * 400, encoding="utf-8")
    spec = get_config("counting_stars_acquisition_en_128k_m64")
    row = next(iter_rows(spec, BuildOptions(haystack_en=str(haystack)), (8000,)))
    kinds = row["needle_boundaries"]
    assert len(kinds) == 64 and kinds.count("word") > 50
    targets = [100 * (i + 1) / 64 for i in range(64)]
    assert max(abs(d - t) for d, t in zip(row["needle_depths"], targets)) <= 1.0
    assert spec.num_rows == 31 and spec.name in registry()  # listing the config still works


@pytest.mark.parametrize("task", ["acquisition", "reasoning"])
@pytest.mark.parametrize("size", ["128k", "1000k"])
def test_the_largest_star_counts_fit_the_default_corpora_at_every_length(task, size):
    spec = get_config(f"counting_stars_{task}_en_{size}_m1024")
    # the capacity check covers every length of the config before the first row is made
    row = next(iter_rows(spec, BuildOptions(), (spec.lengths[0],)))
    assert row["num_stars"] == 1024 and len(row["star_counts"]) == 1024


def test_unknown_config_and_length():
    with pytest.raises(NeedlebenchError):
        get_config("counting_stars_acquisition_en_64k")
    with pytest.raises(NeedlebenchError) as excinfo:
        iter_rows(get_config("counting_stars_acquisition_en_128k"), BuildOptions(), (5000,))
    assert "5000" in _one_line_error(excinfo)


def test_compat_rejects_other_star_counts_and_modes():
    with pytest.raises(NeedlebenchError) as excinfo:
        iter_rows(get_config("counting_stars_acquisition_en_128k_m64"), BuildOptions(compat="counting-stars"))
    assert "M=64" in _one_line_error(excinfo)
    with pytest.raises(NeedlebenchError):
        iter_rows(get_config("counting_stars_acquisition_en_128k"), BuildOptions(compat="opencompass"))
    with pytest.raises(NeedlebenchError):
        iter_rows(get_config("counting_stars_acquisition_en_128k"), BuildOptions(question_position="start"))


@pytest.mark.parametrize(
    "call",
    [
        lambda: draw_counts(0, 1, "acquisition"),
        lambda: draw_counts(32, 1, "searching"),
        lambda: star_sentence("reasoning", "en", 15),
        lambda: star_sentence("acquisition", "fr", 15),
        lambda: star_sentence("acquisition", "en", 0),
        lambda: question_text("counting", "en"),
    ],
)
def test_bad_arguments(call):
    with pytest.raises(NeedlebenchError) as excinfo:
        call()
    _one_line_error(excinfo)
