"""Tests of the retrieval needle bank, the needles.jsonl reader, needle choice and the guide splice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from needlebench.errors import NeedlebenchError
from needlebench.tasks.needle_bank import BANK_SEED, needle_bank
from needlebench.tasks.needle_file import load_needles_file
from needlebench.tasks.needles import (
    LANGUAGE_CODES,
    LANGUAGE_NAMES,
    RetrievalNeedle,
    choose_distinct_needles,
    choose_needle,
    language_code,
    needle_problems,
    splice_guide,
)

SEEDS = (BANK_SEED, 0, 1, 12345)
DENY_EN = ("Paris", "London", "Earth", "Mars", "Rome", "Atlantis", "Orion", "Polaris")
DENY_ZH = ("北京", "上海", "巴黎", "伦敦", "地球", "火星", "罗马")

# The paper's examples (figures 16-19) in the reference needles.jsonl shape.
EMERALD = RetrievalNeedle(
    text="Hidden on Emerald Island is the legendary Stardust Shard.",
    question=(
        "What legendary item is hidden on Emerald Island? "
        "Please answer in the format 'The legendary item hidden on the Emerald Island is ______.'"
    ),
    subject="Emerald Island",
    keyword="Stardust Shard",
    language="en",
)
POLARIS = RetrievalNeedle(
    text="The ruler of the Polaris star system is Orion the Hunter.",
    question=(
        "Who is the ruler of the Polaris star system? "
        "Please answer in the format 'The ruler of the Polaris star system is ______.'"
    ),
    subject="Polaris star system",
    keyword="Orion the Hunter",
    language="en",
)
ZH_EXAMPLE = RetrievalNeedle(
    text="翡翠岛上藏着传说中的星尘碎片。",
    question="翡翠岛上藏着什么传说中的宝物？请按照'翡翠岛上藏着的传说宝物是______。'的格式回答。",
    subject="翡翠岛",
    keyword="星尘碎片",
    language="zh",
)


def _record(needle: RetrievalNeedle) -> str:
    return json.dumps(needle.as_record(), ensure_ascii=False)


# ----------------------------------------------------------------------------------------------- bank


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("seed", SEEDS)
def test_bank_is_unique_and_leak_free(language: str, seed: int) -> None:
    bank = needle_bank(language, seed=seed)
    assert len(bank) == 200
    assert len({n.subject for n in bank}) == len(bank)
    assert len({n.keyword for n in bank}) == len(bank)
    for needle in bank:
        assert needle.language == language
        assert needle_problems(needle) == ()
        assert needle.text.count(needle.keyword) == 1
        assert needle.keyword not in needle.question
        assert needle.subject in needle.text and needle.subject in needle.question_only
    keywords = [n.keyword for n in bank]
    joined_questions = "\n".join(n.question for n in bank)
    for keyword in keywords:
        # no keyword inside another keyword, and none leaks into any question of the bank
        assert sum(keyword in other for other in keywords) == 1
        assert keyword not in joined_questions


@pytest.mark.parametrize("seed", SEEDS)
def test_english_bank_format(seed: int) -> None:
    for needle in needle_bank("en", seed=seed):
        text, keyword = needle.text, needle.keyword
        assert text == text.strip() and "\n" not in text
        assert text[0].isupper() and text.endswith(".") and text.count(".") == 1
        assert not any(char in text for char in "?'\"‘’“”")
        words = keyword.split(" ")
        assert 2 <= len(words) <= 4
        assert all(re.fullmatch(r"[A-Z][a-z]+", word) for word in words)
        assert re.fullmatch(r"[^?]+\? Please answer in the format '[^'.]+\.'", needle.question)
        assert "______" in needle.answer_template
        assert not {word.lower() for word in re.findall(r"[A-Za-z]+", text)} & {d.lower() for d in DENY_EN}


@pytest.mark.parametrize("seed", SEEDS)
def test_chinese_bank_format(seed: int) -> None:
    for needle in needle_bank("zh", seed=seed):
        text, keyword = needle.text, needle.keyword
        assert text == text.strip() and "\n" not in text
        assert text.endswith("。") and text.count("。") == 1
        assert not re.search(r"[A-Za-z]", text) and not re.search(r"[A-Za-z]", needle.question)
        assert not any(char in text for char in "?？'\"‘’“”")
        assert re.fullmatch(r"[\u4e00-\u9fff]{2,6}", keyword)
        assert re.fullmatch(r"[^？]+？请按照'[^'。]+。'的格式回答。", needle.question)
        assert "______" in needle.answer_template
        assert not any(name in text or name in needle.question for name in DENY_ZH)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_bank_uses_at_least_eight_relations(language: str) -> None:
    bank = needle_bank(language)
    shapes = {n.answer_template.replace(n.subject, "<S>") for n in bank}
    assert len(shapes) >= 8


@pytest.mark.parametrize("language", ["en", "zh"])
def test_bank_is_deterministic_and_seeded(language: str) -> None:
    bank = needle_bank(language, seed=7)
    assert needle_bank(language, seed=7) == bank
    assert needle_bank(language, seed=7, size=50) == bank[:50]  # smaller banks are prefixes
    assert needle_bank(language, seed=8) != bank
    assert needle_bank(LANGUAGE_NAMES[language], seed=7) == bank
    assert needle_bank(language) == needle_bank(language, seed=BANK_SEED)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"language": "fr"}, "'fr'"),
        ({"language": "en", "size": 0}, "size 0"),
        ({"language": "en", "size": 10**6}, "size 1000000"),
        ({"language": "en", "seed": -1}, "seed -1"),
        ({"language": "en", "seed": "1"}, "seed '1'"),
    ],
)
def test_bank_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    language = kwargs.pop("language")
    with pytest.raises(NeedlebenchError, match=re.escape(message)):
        needle_bank(language, **kwargs)  # type: ignore[arg-type]


def test_language_mapping() -> None:
    assert LANGUAGE_NAMES == {"en": "English", "zh": "Chinese"}
    assert LANGUAGE_CODES == {"English": "en", "Chinese": "zh"}
    assert language_code("Chinese") == "zh"
    with pytest.raises(NeedlebenchError, match="'german'"):
        language_code("german")


# ----------------------------------------------------------------------------------------------- question pieces


def test_question_pieces_on_paper_examples() -> None:
    assert EMERALD.question_only == "What legendary item is hidden on Emerald Island?"
    assert EMERALD.answer_template == "The legendary item hidden on the Emerald Island is ______"
    assert POLARIS.question_only == "Who is the ruler of the Polaris star system?"
    assert POLARIS.answer_template == "The ruler of the Polaris star system is ______"
    assert ZH_EXAMPLE.question_only == "翡翠岛上藏着什么传说中的宝物？"
    assert ZH_EXAMPLE.answer_template == "翡翠岛上藏着的传说宝物是______"


def test_splice_guide_english() -> None:
    assert splice_guide(EMERALD.question, "en") == (
        "What legendary item is hidden on Emerald Island? Before answering, please consider what in the document "
        "is most relevant to this question. Please answer in the format "
        "'The legendary item hidden on the Emerald Island is ______.'"
    )
    # M-RT's "format of" lead-in keeps its "of" (open-compass/opencompass: opencompass/datasets/needlebench/parallel.py)
    assert splice_guide("Who is A?、Who is B?Please answer in the format of 'A is ______、B is ______'", "en") == (
        "Who is A?、Who is B?Before answering, please consider what in the document is most relevant to this "
        "question. Please answer in the format of 'A is ______、B is ______'"
    )


def test_splice_guide_chinese() -> None:
    assert splice_guide(ZH_EXAMPLE.question, "zh") == (
        "翡翠岛上藏着什么传说中的宝物？在回答之前，请思考文档中与此问题最相关的内容是什么。"
        "请按照'翡翠岛上藏着的传说宝物是______。'的格式回答。"
    )


def test_splice_guide_without_lead_in_appends() -> None:
    assert splice_guide("Who is the ruler of the Polaris star system?", "en") == (
        "Who is the ruler of the Polaris star system? Before answering, please consider what in the document is "
        "most relevant to this question."
    )
    assert splice_guide("谁是统治者？", "Chinese") == "谁是统治者？在回答之前，请思考文档中与此问题最相关的内容是什么。"


# ----------------------------------------------------------------------------------------------- needles.jsonl


def test_load_needles_file_both_languages(tmp_path: Path) -> None:
    path = tmp_path / "needles.jsonl"
    raw_zh = dict(ZH_EXAMPLE.as_record(), needle="\n" + ZH_EXAMPLE.text + "\n")
    path.write_text(
        "\n".join([_record(EMERALD), json.dumps(raw_zh, ensure_ascii=False), "", _record(POLARIS)]) + "\n",
        encoding="utf-8",
    )
    assert load_needles_file(str(path), "English") == (EMERALD, POLARIS)
    assert load_needles_file(path, "Chinese") == (ZH_EXAMPLE,)  # needle text stripped
    assert load_needles_file(str(path), "en") == (EMERALD, POLARIS)


def test_load_needles_file_unreadable(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(NeedlebenchError, match="nope.jsonl"):
        load_needles_file(str(missing), "English")
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(NeedlebenchError, match="binary.jsonl"):
        load_needles_file(str(binary), "English")


def test_load_needles_file_malformed_line(tmp_path: Path) -> None:
    path = tmp_path / "needles.jsonl"
    path.write_text(_record(EMERALD) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(NeedlebenchError, match="line 2: malformed JSON"):
        load_needles_file(str(path), "English")
    path.write_text(_record(EMERALD) + "\n[1, 2]\n", encoding="utf-8")
    with pytest.raises(NeedlebenchError, match="line 2: expected a JSON object"):
        load_needles_file(str(path), "English")


def test_load_needles_file_missing_fields(tmp_path: Path) -> None:
    record = EMERALD.as_record()
    del record["arg2"], record["retrieval_question"]
    path = tmp_path / "needles.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(NeedlebenchError, match=r"line 1: missing field\(s\) retrieval_question, arg2") as error:
        load_needles_file(str(path), "English")
    assert "\n" not in str(error.value)
    path.write_text(json.dumps(dict(EMERALD.as_record(), arg2=3)) + "\n", encoding="utf-8")
    with pytest.raises(NeedlebenchError, match=r"line 1: field\(s\) arg2 must be strings"):
        load_needles_file(str(path), "English")


def test_load_needles_file_no_needle_for_language(tmp_path: Path) -> None:
    path = tmp_path / "needles.jsonl"
    path.write_text(_record(EMERALD) + "\n", encoding="utf-8")
    with pytest.raises(NeedlebenchError, match=r"no needle with language 'Chinese' \(languages found: English\)"):
        load_needles_file(str(path), "Chinese")
    with pytest.raises(NeedlebenchError, match="'Klingon'"):
        load_needles_file(str(path), "Klingon")


# ----------------------------------------------------------------------------------------------- choosing


def test_choose_needle_is_seeded() -> None:
    bank = needle_bank("en")
    assert choose_needle(bank, 3) == choose_needle(bank, 3)
    assert len({choose_needle(bank, seed) for seed in range(40)}) > 20
    with pytest.raises(NeedlebenchError, match="no needles"):
        choose_needle((), 0)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_choose_distinct_needles(language: str) -> None:
    bank = needle_bank(language)
    chosen = choose_distinct_needles(bank, 20, seed=5)
    assert len(chosen) == 20
    assert chosen == choose_distinct_needles(bank, 20, seed=5)
    assert chosen != choose_distinct_needles(bank, 20, seed=6)
    assert len({n.subject for n in chosen}) == 20
    keywords = [n.keyword for n in chosen]
    assert all(sum(k in other for other in keywords) == 1 for k in keywords)


def test_choose_distinct_needles_rejects_clashes() -> None:
    twin = RetrievalNeedle(EMERALD.text, EMERALD.question, "Other Island", EMERALD.keyword, "en")
    inner = RetrievalNeedle(
        "Hidden on Ruby Island is the legendary Stardust Shard Box.",
        EMERALD.question.replace("Emerald", "Ruby"),
        "Ruby Island",
        "Stardust Shard Box",
        "en",
    )
    same_subject = RetrievalNeedle(POLARIS.text, POLARIS.question, EMERALD.subject, POLARIS.keyword, "en")
    for clash in (twin, inner, same_subject):
        with pytest.raises(NeedlebenchError, match="count 2 is too many: only 1 of the 2 needles"):
            choose_distinct_needles([EMERALD, clash], 2, seed=0)
    assert set(choose_distinct_needles([EMERALD, POLARIS], 2, seed=0)) == {EMERALD, POLARIS}
    with pytest.raises(NeedlebenchError, match="count 0"):
        choose_distinct_needles([EMERALD], 0, seed=0)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_bank_leak_index_agrees_with_leaks_into(language: str) -> None:
    """The bank's indexed leak check answers as the pairwise `leaks_into` over every earlier needle, on needles that
    leak (shared subject, keyword inside another keyword, text or question) and on the bank's clean ones."""
    from dataclasses import replace

    from needlebench.tasks.needle_bank import _LeakIndex
    from needlebench.tasks.needles import leaks_into

    bank = needle_bank(language, seed=SEEDS[0], size=60)
    index = _LeakIndex()
    for needle in bank[:40]:
        index.add(needle)
    earlier = bank[:40]
    probes = list(bank[40:])
    probes += [replace(bank[45], subject=bank[3].subject), replace(bank[46], keyword=bank[5].keyword[1:])]
    probes += [
        replace(bank[47], text=bank[47].text + bank[7].keyword),
        replace(bank[48], keyword=bank[9].question[2:9]),
    ]
    probes += [replace(bank[49], question=bank[49].question + "\0"), replace(bank[50], text=bank[11].keyword + "\0")]
    answers = [index.leaks(probe) for probe in probes]
    assert answers == [any(leaks_into(probe, other) for other in earlier) for probe in probes]
    assert not any(answers[:20]) and all(answers[20:22]) and answers[22] and answers[23]
