"""M-RS needle chains: only the full chain yields the answer, determinism, reference-file loading, bad input."""

from __future__ import annotations

import json

import pytest

from needlebench.errors import NeedlebenchError
from needlebench.tasks.reasoning_needles import (
    ReasoningNeedleSet,
    choose_reasoning_set,
    generate_reasoning_set,
    load_reasoning_file,
)

SEEDS = range(60)
COUNTS = (2, 3, 4, 5)
END = {"en": ".", "zh": "。"}


def mentions(text: str, entity: str) -> bool:
    return entity in text


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("count", COUNTS)
def test_only_the_full_chain_yields_the_answer(language, count):
    for seed in SEEDS:
        item = generate_reasoning_set(count, language, seed)
        assert isinstance(item, ReasoningNeedleSet) and item.language == language
        assert len(item.needles) == count and len(item.entities) == count
        assert all(needle == needle.strip() and needle.endswith(END[language]) for needle in item.needles)
        assert item.answer and item.answer == item.answer.strip()
        # The answer: only in the last needle, never in the question.
        assert item.answer not in item.question
        assert item.answer in item.needles[-1]
        for removed in range(count - 1):
            kept = item.needles[:removed] + item.needles[removed + 1 :]
            # the answer stays only in the last needle, which is unreachable without the removed link:
            assert [needle for needle in kept if item.answer in needle] == [item.needles[-1]]
        # The first needle names the question's entity, which no other needle names.
        first = item.entities[0]
        assert mentions(item.question, first) and mentions(item.needles[0], first)
        assert not any(mentions(needle, first) for needle in item.needles[1:])
        # Needle i > 0 names an entity introduced only by needle i-1 (and absent from the question).
        for i in range(1, count):
            entity = item.entities[i]
            holders = [j for j, needle in enumerate(item.needles) if mentions(needle, entity)]
            assert holders == [i - 1, i], (item, entity)
            assert not mentions(item.question, entity)
        # No entity string hides inside another, nor inside the answer.
        strings = [*item.entities, item.answer]
        assert len(set(strings)) == len(strings)
        assert not any(a != b and a in b for a in strings for b in strings)


def test_generation_is_deterministic_and_seeds_differ():
    for language in ("en", "zh"):
        for count in COUNTS:
            assert generate_reasoning_set(count, language, 42) == generate_reasoning_set(count, language, 42)
            distinct = {generate_reasoning_set(count, language, seed).question for seed in range(20)}
            assert len(distinct) == 20
        assert choose_reasoning_set(3, language, 7) == generate_reasoning_set(3, language, 7)


def test_sources_and_languages():
    item = generate_reasoning_set(2, "English", 1)
    assert item.language == "en" and item.source == "needlebench-synthetic"
    assert generate_reasoning_set(2, "Chinese", 1).language == "zh"


RECORDS = [
    {
        "id": "a",
        "type": "x",
        "level": 1,
        "derivations": ["A is B.", "B is C."],
        "derivation_count": 2,
        "question": "What is A?",
        "answer": "C",
    },
    {
        "id": "b",
        "derivations": [" D is E. ", "E is F."],
        "derivation_count": 2,
        "question": "What is D?",
        "answer": "F",
    },
    {"derivations": ["G is H.", "H is I.", "I is J."], "derivation_count": 3, "question": "What is G?", "answer": "J"},
]


def write(tmp_path, data, name="multi_needle_reasoning_en.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_load_reference_format(tmp_path):
    path = write(tmp_path, RECORDS)
    sets = load_reasoning_file(path, "en")
    assert [s.needles for s in sets] == [tuple(r["derivations"]) for r in RECORDS]  # verbatim
    assert [s.answer for s in sets] == ["C", "F", "J"]
    assert sets[1].source == "multi_needle_reasoning_en.json#1" and sets[0].language == "en"
    picks = {choose_reasoning_set(2, "en", seed, path).answer for seed in range(30)}
    assert picks == {"C", "F"}
    assert choose_reasoning_set(2, "en", 5, path) == choose_reasoning_set(2, "en", 5, path)
    assert choose_reasoning_set(3, "en", 9, path).answer == "J"
    with pytest.raises(NeedlebenchError) as error:
        choose_reasoning_set(4, "en", 0, path)
    assert "derivation_count 4" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("field", ["derivations", "derivation_count", "question", "answer"])
def test_missing_field_is_a_one_line_error(tmp_path, field):
    broken = [dict(RECORDS[0]), {k: v for k, v in RECORDS[1].items() if k != field}]
    path = write(tmp_path, broken, "bad.json")
    with pytest.raises(NeedlebenchError) as error:
        load_reasoning_file(path, "en")
    message = str(error.value)
    assert "bad.json" in message and repr(field) in message and "\n" not in message


def test_malformed_files(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text("[{", encoding="utf-8")
    for path in (
        str(bad),
        write(tmp_path, {"not": "a list"}, "obj.json"),
        str(tmp_path / "absent.json"),
        write(
            tmp_path, [{"derivations": "A is B.", "derivation_count": 1, "question": "q", "answer": "a"}], "types.json"
        ),
    ):
        with pytest.raises(NeedlebenchError) as error:
            load_reasoning_file(path, "en")
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("count", [0, 1, 6, 10])
def test_bad_needle_counts(tmp_path, count):
    with pytest.raises(NeedlebenchError) as error:
        generate_reasoning_set(count, "en", 0)
    assert repr(count) in str(error.value) and "2 to 5" in str(error.value)
    with pytest.raises(NeedlebenchError):
        choose_reasoning_set(count, "zh", 0)
    with pytest.raises(NeedlebenchError):
        choose_reasoning_set(count, "en", 0, write(tmp_path, RECORDS))


def test_bad_language_and_seed():
    with pytest.raises(NeedlebenchError) as error:
        generate_reasoning_set(3, "fr", 0)
    assert "'fr'" in str(error.value)
    with pytest.raises(NeedlebenchError):
        generate_reasoning_set(3, "en", -1)
