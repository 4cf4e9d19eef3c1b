"""ATC generator tests: every item is answerable by an independent solver, rotations, determinism, token counts,
the opencompass compat mode against hand-derived reference items, bad input."""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict

import pytest

from needlebench.compat.opencompass_atc import atc_rows as compat_atc_rows
from needlebench.compat.opencompass_atc import reference_item, reference_items
from needlebench.dataset.options import BuildOptions
from needlebench.errors import NeedlebenchError
from needlebench.sources.tokenizer import get_tokenizer
from needlebench.tasks.atc import (
    atc_data,
    atc_item,
    choice_question,
    few_shot_names,
    generated_turns,
    iter_atc_rows,
)
from needlebench.tasks.grid import ATC_ROTATIONS, ConfigSpec, get_config
from needlebench.tasks.names import builtin_names, load_names
from needlebench.tasks.schema import check_row, columns_for

ATC_CONFIGS = [f"atc_{lang}{suffix}" for lang in ("en", "zh") for suffix in ("", "_reasoning", "_512", "_open")]
LETTERS = "ABCD"

# ----------------------------------------------------------------------------------------------- the solver
# Written independently of the generator: it only knows the templates, terms and question frames of atc.yaml.

#: A name: capitalised words (English); a run of characters none of which occur in the templates (Chinese).
_ZH_TEMPLATE_CHARS = {
    char
    for text in atc_data()["zh"]["templates"] + atc_data()["zh"]["relationship_terms"]
    for char in re.sub(r"\{\w+\}", "", text)
}
NAME_PATTERN = {
    "en": r"[A-Z][a-z]+(?: [A-Z][a-z]+)*",
    "zh": "[^" + re.escape("".join(sorted(_ZH_TEMPLATE_CHARS))) + r"\s'\"]+",
}


def template_regex(template: str, terms: list[str], name: str) -> re.Pattern:
    """A template as a regex: named groups A and B (back-references on repeats), the terms as alternatives."""
    out, seen = [], set()
    for part in re.split(r"(\{A\}|\{B\}|\{relationship\})", template):
        if part in ("{A}", "{B}"):
            group = part[1]
            out.append(f"(?P={group})" if group in seen else f"(?P<{group}>{name})")
            seen.add(group)
        elif part == "{relationship}":
            out.append("(?:" + "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True)) + ")")
        else:
            out.append(re.escape(part))
    return re.compile("".join(out))


REGEXES = {
    lang: [
        template_regex(t, atc_data()[lang]["relationship_terms"], NAME_PATTERN[lang])
        for t in atc_data()[lang]["templates"]
    ]
    for lang in ("en", "zh")
}
SENTENCE = {"en": re.compile(r"[^.]+\."), "zh": re.compile(r"[^。]+。")}


def split_question(text: str, lang: str, open_ended: bool) -> tuple[str, str]:
    """(story, last person) of a question text, found through the question frame."""
    frame = atc_data()[lang]["open_question" if open_ended else "question"]
    before, after = frame.split("{last_person}")
    start = text.index(" " + before)
    after_head = after.split("\n")[0]
    match = re.compile(re.escape(before) + "(.+?)" + re.escape(after_head)).search(text, start)
    assert match is not None
    return text[:start], match.group(1)


def parse_story(story: str, lang: str) -> list[tuple[str, str, str]]:
    """(sentence, elder, younger) of every relation sentence; each sentence must match exactly one template."""
    sentences = [s.strip() for s in SENTENCE[lang].findall(story)]
    separator = atc_data()[lang]["sentence_separator"]
    assert separator.join(sentences) == story
    parsed = []
    for sentence in sentences:
        matches = [m for rx in REGEXES[lang] if (m := rx.fullmatch(sentence))]
        assert len(matches) == 1, sentence
        parsed.append((sentence, matches[0].group("A"), matches[0].group("B")))
    return parsed


def solve(text: str, lang: str, open_ended: bool = False) -> tuple[str, list[str], set[str]]:
    """(eldest relative of the asked person, sentences, names) — and proof that the item is well-formed:
    one elder per person, no cycle, every name connected to the asked person, exactly one eldest."""
    story, last = split_question(text, lang, open_ended)
    parsed = parse_story(story, lang)
    parent: dict[str, str] = {}
    names: set[str] = set()
    for _, elder, younger in parsed:
        assert younger not in parent, f"{younger} has two elders"
        parent[younger] = elder
        names |= {elder, younger}
    roots = names - parent.keys()
    assert len(roots) == 1, roots
    person, walked = last, [last]
    while person in parent:
        person = parent[person]
        assert person not in walked, "cycle"
        walked.append(person)
    assert set(walked) == names, "the chain is not connected"
    return person, [sentence for sentence, _, _ in parsed], names


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def all_rows() -> dict[str, list[dict]]:
    return {name: list(iter_atc_rows(get_config(name))) for name in ATC_CONFIGS}


def by_item(rows: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        grouped[row["item_id"]].append(row)
    return grouped


# ----------------------------------------------------------------------------------------------- generated items


def test_builtin_names_are_distinct_and_parse_as_names():
    for lang in ("en", "zh"):
        names = builtin_names(lang)
        assert len(names) == len(set(names)) == 3600
        assert all(re.fullmatch(NAME_PATTERN[lang], name) for name in names)
        assert load_names(None, lang) == list(names)
    assert not {c for name in builtin_names("zh") for c in name} & _ZH_TEMPLATE_CHARS


@pytest.mark.slow
@pytest.mark.parametrize("name", ATC_CONFIGS)
def test_every_item_is_answerable(all_rows, name):
    spec = get_config(name)
    rows = all_rows[name]
    assert len(rows) == spec.num_rows
    open_ended = spec.variant == "open"
    items = by_item(rows)
    assert len(items) == len(spec.needle_counts) * spec.repeats
    human = atc_data()[spec.language]["prompt"]["human"]
    for item_rows in items.values():
        first = item_rows[0]
        eldest, sentences, names = solve(first["question"], spec.language, open_ended)
        assert len(names) == first["num_needles"] == len(sentences) + 1
        assert sentences == first["needles"]
        assert first["keywords"] == [eldest]
        for row in item_rows:
            check_row("atc", row)
            assert list(row) == list(columns_for("atc"))
            assert row["task"] == "ATC" and row["config"] == name and row["language"] == spec.language
            assert row["size"] is None and row["depth_percent"] is None and row["needle_depths"] == []
            assert row["compat"] == "" and row["corpus"] == "names:builtin" and row["tokenizer"] == "cl100k_base"
            assert row["needles"] == first["needles"] and row["seed"] == first["seed"]
            if open_ended:
                assert row["answer"] == eldest and row["prompt"] == row["question"]
                assert (row["rotation"], row["options"], row["answer_letter"]) == ("", [], "")
                assert row["prompt_style"] == "open" and row["id"] == row["item_id"]
            else:
                assert row["prompt_style"] == ("reasoning" if spec.variant == "reasoning" else "direct")
                assert row["options"][LETTERS.index(row["answer_letter"])] == eldest
                assert row["options"].count(eldest) == 1 and len(set(row["options"])) == 4
                assert row["answer"] == row["answer_letter"]
                assert row["id"] == f"{row['item_id']}-{row['rotation']}"
                assert row["question"].endswith(
                    "".join(f"{letter}. {o}\n" for letter, o in zip(LETTERS, row["options"]))
                )
                assert row["prompt"].endswith(human.format(question=row["question"]))
                # Options are the eldest plus other chain names (padded only when the chain is shorter than 4).
                chain_options = [o for o in row["options"] if o in names]
                assert len(chain_options) == min(4, len(names))


@pytest.mark.parametrize("name", [n for n in ATC_CONFIGS if not n.endswith("_open")])
def test_rotations_carry_the_right_letters(all_rows, name):
    for item_rows in by_item(all_rows[name]).values():
        assert [row["rotation"] for row in item_rows] == list(ATC_ROTATIONS)
        base = item_rows[0]["options"]
        assert base[0] == item_rows[0]["keywords"][0] and item_rows[0]["answer_letter"] == "A"
        for row in item_rows:
            expected = [base[LETTERS.index(letter)] for letter in row["rotation"]]
            assert row["options"] == expected
            assert row["answer_letter"] == LETTERS[row["rotation"].index("A")]
        assert [row["answer_letter"] for row in item_rows] == ["A", "D", "C", "B"]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("style", ["direct", "reasoning"])
def test_few_shots_are_correct_generated_chains_not_test_items(all_rows, lang, style):
    turns = generated_turns(lang, style)
    assert len(turns) == 4
    frame = atc_data()[lang]["prompt"]
    letters = set()
    for question, answer in turns:
        eldest, sentences, _ = solve(question, lang)
        options = re.findall(r"^([ABCD])\. (.+)$", question, flags=re.MULTILINE)
        letter = next(choice for choice, option in options if option == eldest)
        letters.add(letter)
        if style == "direct":
            assert answer == frame["direct_answer"].format(letter=letter)
        else:
            assert answer.endswith(letter) and eldest in answer
            assert all(sentence in answer for sentence in sentences)
    assert len(letters) == 4
    config = f"atc_{lang}" + ("_reasoning" if style == "reasoning" else "")
    prefix = "".join(frame["human"].format(question=q) + a + frame["turn_separator"] for q, a in turns)
    shot_names = few_shot_names(lang)
    shot_questions = {q for q, _ in turns}
    for row in all_rows[config]:
        assert row["prompt"].startswith(prefix)
        assert row["question"] not in shot_questions
        assert not set(row["options"]) & shot_names


def test_extended_config_reaches_512_names(all_rows):
    for lang in ("en", "zh"):
        rows = all_rows[f"atc_{lang}_512"]
        assert {row["num_needles"] for row in rows} == {2**k for k in range(1, 10)}
        longest = [row for row in rows if row["num_needles"] == 512]
        assert len(longest) == 40 and all(len(row["needles"]) == 511 for row in longest)


def test_token_counts_are_exact(all_rows):
    tokenizer = get_tokenizer()
    for name in ("atc_en", "atc_zh_reasoning", "atc_en_open", "atc_zh_512"):
        lang = get_config(name).language
        separator = atc_data()[lang]["sentence_separator"]
        for row in all_rows[name][::3]:
            assert row["prompt_tokens"] == row["context_length"] == tokenizer.count(row["prompt"])
            assert row["haystack_tokens"] == tokenizer.count(separator.join(row["needles"]))


def test_determinism_and_repeats_differ(all_rows):
    for name in ("atc_en", "atc_zh_open"):
        again = list(iter_atc_rows(get_config(name)))
        assert again == all_rows[name]
        by_count: dict[int, set[str]] = defaultdict(set)
        for row in all_rows[name]:
            if row["rotation"] in ("", "ABCD"):
                by_count[row["num_needles"]].add(row["question"])
        assert all(len(questions) == 10 for questions in by_count.values())
    other_seed = list(iter_atc_rows(get_config("atc_en"), release_seed=1))
    assert [r["question"] for r in other_seed] != [r["question"] for r in all_rows["atc_en"]]
    assert [r["id"] for r in other_seed] == [r["id"] for r in all_rows["atc_en"]]


def test_atc_item_is_a_pure_function_of_its_seed():
    names = list(builtin_names("en"))
    first = atc_item(7, "en", 123, names)
    assert first == atc_item(7, "en", 123, names)
    assert first != atc_item(7, "en", 124, names)
    assert first.answer == first.names[0] and first.last_person == first.names[-1]
    assert len(set(first.names)) == 7 and sorted(first.order) == list(range(6))
    assert first.options == first.names[:4]
    short = atc_item(2, "en", 5, names)
    assert short.options[:2] == short.names and len(set(short.options)) == 4


# ----------------------------------------------------------------------------------------------- compat

TINY_EN = "Ann Lee,Bo Chen,Cy Diaz,Di Evans,Ed Fox,Flo Grant,Gus Hale,Hal Irwin,Ida Jones,Jo Kim"
TINY_ZH = "赵一,钱二,孙三,李四,周五,吴六,郑七,王八,冯九,陈十"
EN_FRAME = (
    "\nGiven the scrambled family relationships described above, who is the eldest relative that "
    "'{}' can trace back to in the context?\n"
)


def write_names(path, english: str | None = TINY_EN, chinese: str | None = TINY_ZH) -> str:
    data = {key: value for key, value in (("English", english), ("Chinese", chinese)) if value is not None}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(path)


def test_compat_reference_items_hand_checked(tmp_path):
    # Derivation with Python's random, seed 0 (repeat 0), over the 10 names above:
    #  n=2: sample -> indices [6, 9] (Gus Hale, Jo Kim); choice -> template 0 "{A} is {B}'s {relationship}.",
    #       term 4 "grandfather"; shuffle of [s0, ''] keeps s0 first; padding sample of 2 from the 8 others
    #       -> Hal Irwin, Ida Jones.
    #  n=3: sample -> [6, 9, 0] (Gus Hale, Jo Kim, Ann Lee); link 0: template 4 "{B} is the child of {A}.";
    #       link 1: template 7 "{B} considers {A} as their {relationship}." with term 6 "maternal grandmother";
    #       shuffle -> [s0, '', s1] (joined with no separator); padding sample of 1 -> Di Evans.
    names = load_names(write_names(tmp_path / "names.json"), "en")
    two = reference_items(names, 2, "en", 1)[0]
    assert choice_question(two, "ABCD") == (
        "Gus Hale is Jo Kim's grandfather. "
        + EN_FRAME.format("Jo Kim").rstrip("\n")
        + "\nA. Gus Hale\nB. Jo Kim\nC. Hal Irwin\nD. Ida Jones\n"
    )
    assert choice_question(two, "BCDA").endswith("\nA. Jo Kim\nB. Hal Irwin\nC. Ida Jones\nD. Gus Hale\n")
    three = reference_items(names, 3, "en", 1)[0]
    expected = (
        "Jo Kim is the child of Gus Hale.Ann Lee considers Jo Kim as their maternal grandmother. "
        + EN_FRAME.format("Ann Lee")
        + "A. Gus Hale\nB. Jo Kim\nC. Ann Lee\nD. Di Evans\n"
    )
    assert choice_question(three, "ABCD") == expected
    assert three.needles == (
        "Jo Kim is the child of Gus Hale.",
        "Ann Lee considers Jo Kim as their maternal grandmother.",
    )
    zh = reference_items(load_names(str(tmp_path / "names.json"), "zh"), 2, "zh", 1)[0]
    assert choice_question(zh, "ABCD") == (
        "郑七是陈十的爷爷。 \n在上面提供的打乱的家族关系文本中，'陈十'的能够向上追溯到的最年长的亲人是谁？"
        "\nA. 郑七\nB. 陈十\nC. 王八\nD. 冯九\n"
    )


def test_compat_rows_use_reference_items_and_shots(tmp_path):
    en = ",".join(builtin_names("en")[:30]) + ", Spaced Name"
    zh = ",".join(builtin_names("zh")[:30])
    path = write_names(tmp_path / "names.json", en, zh)
    digest = hashlib.sha256((tmp_path / "names.json").read_bytes()).hexdigest()[:12]
    rows = list(compat_atc_rows(get_config("atc_en_reasoning"), names_path=path))
    assert len(rows) == get_config("atc_en_reasoning").num_rows
    all_names = load_names(path, "en")
    for row in rows:
        item = reference_item(all_names, row["num_needles"], "en", row["repeat"])
        assert row["question"] == choice_question(item, row["rotation"])
        assert row["seed"] == row["repeat"] and row["compat"] == "opencompass"
        assert row["corpus"] == f"names:names.json@sha256:{digest}"
        assert row["prompt"].startswith("Question: Sharon House, as Jessica Stewart's father")
        assert row["prompt"].endswith("Question: " + row["question"])
        assert row["keywords"] == [item.answer] and row["needles"] == list(item.needles)
        # The reference strips the question, so a leading-space name loses its space (reproduced on purpose).
        assert row["question"].startswith("".join(row["needles"]).strip() + " \n")
    open_rows = list(compat_atc_rows(get_config("atc_zh_open"), names_path=path))
    assert len(open_rows) == get_config("atc_zh_open").num_rows
    for row in open_rows:
        eldest, _, _ = solve(row["prompt"], "zh", open_ended=True)
        assert row["answer"] == eldest and row["options"] == []
        assert row["prompt"].endswith("那么小明能够向上追溯到的最年长的亲人就是王刚。\n")


# ----------------------------------------------------------------------------------------------- bad input


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_names_file_format_and_errors(tmp_path):
    path = tmp_path / "n.json"
    path.write_text(json.dumps({"English": "A B, C D,", "Chinese": "甲乙"}), encoding="utf-8")
    assert load_names(str(path), "en") == ["A B", " C D", ""]
    assert load_names(str(path), "Chinese") == ["甲乙"]
    missing = write_names(tmp_path / "en_only.json", chinese=None)
    with pytest.raises(NeedlebenchError) as error:
        load_names(missing, "zh")
    assert "'Chinese'" in one_line(error)
    with pytest.raises(NeedlebenchError) as error:
        list(iter_atc_rows(get_config("atc_zh"), names_path=missing))
    assert "en_only.json" in one_line(error)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(NeedlebenchError) as error:
        load_names(str(broken), "en")
    assert "broken.json" in one_line(error)
    with pytest.raises(NeedlebenchError):
        load_names(str(tmp_path / "absent.json"), "en")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(NeedlebenchError):
        load_names(str(tmp_path / "list.json"), "en")
    with pytest.raises(NeedlebenchError) as error:
        load_names(None, "fr")
    assert "'fr'" in one_line(error)


def test_bad_needle_counts_compat_and_configs(tmp_path):
    names = list(builtin_names("en"))
    for bad in (1, 0, -3):
        with pytest.raises(NeedlebenchError) as error:
            atc_item(bad, "en", 0, names)
        assert repr(bad) in one_line(error)
        with pytest.raises(NeedlebenchError):
            reference_item(names, bad, "en", 0)
    with pytest.raises(NeedlebenchError) as error:
        BuildOptions(compat="lm-eval")
    assert "'lm-eval'" in one_line(error) and "opencompass" in str(error.value)
    with pytest.raises(NeedlebenchError) as error:
        list(iter_atc_rows(get_config("single_en_4k")))
    assert "single_en_4k" in one_line(error)
    small = write_names(tmp_path / "small.json")  # 10 names: too few for 19-name chains
    with pytest.raises(NeedlebenchError) as error:
        list(iter_atc_rows(get_config("atc_en"), names_path=small))
    assert "names" in one_line(error)
    with pytest.raises(NeedlebenchError):
        list(compat_atc_rows(get_config("atc_en"), names_path=small))
    with pytest.raises(NeedlebenchError):
        atc_item(3, "en", 0, names[:3])
    spec = ConfigSpec("atc_en", "atc", "en", variant="sideways")
    with pytest.raises(NeedlebenchError):
        list(iter_atc_rows(spec))
