"""v2 ATC and the v2 kinship chains: a solver that reads only the prompt answers every item of all four types."""

from __future__ import annotations

import json
import re
from collections import Counter
from itertools import islice

import pytest

from needlebench.dataset.options import BuildOptions
from needlebench.dataset.rows import iter_rows
from needlebench.errors import NeedlebenchError
from needlebench.tasks.grid import V2_ATC_QUESTION_TYPES, get_config
from needlebench.tasks.kinship import kinship_chain, kinship_data, ordinal

STORY = {
    "en": re.compile(r"provided below:\n(?P<story>.*)\n\nGiven the scrambled", re.S),
    "zh": re.compile(r"文本如下：\n(?P<story>.*)\n\n在上面提供的", re.S),
}
#: The final question of each type: who is asked about, and n where the type has one.
QUESTIONS = {
    "en": [
        (
            "ELDEST_ANCESTOR",
            re.compile(r"who is the eldest relative that '(?P<a>.+)' can trace back to in the context\?$"),
        ),
        ("NTH_ANCESTOR", re.compile(r"who is the (?P<n>\d+)(?:st|nd|rd|th) generation ancestor of '(?P<a>.+)'\?$")),
        ("NTH_DESCENDANT", re.compile(r"who is the (?P<n>\d+)(?:st|nd|rd|th) generation descendant of '(?P<a>.+)'\?$")),
        (
            "RELATIONSHIP_DISTANCE",
            re.compile(r"what is the relationship distance between '(?P<a>.+)' and '(?P<b>.+)'\?$"),
        ),
    ],
    "zh": [
        ("ELDEST_ANCESTOR", re.compile(r"'(?P<a>.+)'的能够向上追溯到的最年长的亲人是谁？$")),
        ("NTH_ANCESTOR", re.compile(r"'(?P<a>.+)'的(?P<n>\d+)代祖先是谁？$")),
        ("NTH_DESCENDANT", re.compile(r"'(?P<a>.+)'的(?P<n>\d+)代子孙是谁？$")),
        ("RELATIONSHIP_DISTANCE", re.compile(r"'(?P<a>.+)'和'(?P<b>.+)'之间的关系距离是多少？$")),
    ],
}


def _sentence_patterns(language: str) -> list[re.Pattern]:
    """Each v2 template as a regex with groups A (elder), B (younger) and the relation term."""
    data = kinship_data(language)
    terms = "|".join(sorted(map(re.escape, data["relationship_terms"]), key=len, reverse=True))
    patterns = []
    for template in data["templates"]:
        seen: set[str] = set()
        parts = re.split(r"(\{A\}|\{B\}|\{relationship\})", template)
        regex = ""
        for part in parts:
            if part in ("{A}", "{B}"):
                key = part[1]
                regex += f"(?P={key})" if key in seen else f"(?P<{key}>[^,.;，。]+?)"
                seen.add(key)
            elif part == "{relationship}":
                regex += f"(?P<term>{terms})"
            else:
                regex += re.escape(part)
        patterns.append(re.compile(regex))
    return patterns


def solve(prompt: str, language: str) -> tuple[str, str]:
    """(question type, answer) read from the prompt alone: parse every relation sentence, rebuild the tree and
    answer the final question."""
    story = STORY[language].search(prompt).group("story")
    patterns = _sentence_patterns(language)
    generations = kinship_data(language)["generations"]
    parent: dict[str, tuple[str, int]] = {}
    position = 0
    while position < len(story):
        if story[position] == " ":
            position += 1
            continue
        matches = {
            (m.group("A"), m.group("B"), m.group("term"), m.end()) for p in patterns if (m := p.match(story, position))
        }
        assert len(matches) == 1, (story[position : position + 80], matches)
        elder, younger, term, position = matches.pop()
        assert younger not in parent
        parent[younger] = (elder, generations[term])
    child = {elder: younger for younger, (elder, _) in parent.items()}
    question = prompt.rstrip("\n").splitlines()[-1]
    found = ((kind, pattern.search(question)) for kind, pattern in QUESTIONS[language])
    question_type, match = next(((kind, match) for kind, match in found if match), (None, None))
    if match is None:
        raise AssertionError(f"unknown question: {question}")
    person = match.group("a")
    if question_type == "ELDEST_ANCESTOR":
        while person in parent:
            person = parent[person][0]
        return question_type, person
    if question_type == "NTH_ANCESTOR":
        left = int(match.group("n"))
        while left > 0:
            person, step = parent[person]
            left -= step
        assert left == 0
        return question_type, person
    if question_type == "NTH_DESCENDANT":
        left = int(match.group("n"))
        while left > 0:
            person = child[person]
            left -= parent[person][1]
        assert left == 0
        return question_type, person
    distance, other = 0, match.group("b")
    while other != person:
        other, step = parent[other]
        distance += step
    return question_type, str(distance)


@pytest.mark.slow
@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_solver_answers_every_item_of_all_four_types(language):
    rows = list(iter_rows(get_config(f"v2_atc_{language}"), BuildOptions()))
    assert len(rows) == 9 * 4 * 10
    assert Counter(row["question_type"] for row in rows) == {qt: 90 for qt in V2_ATC_QUESTION_TYPES}
    assert sorted({row["num_needles"] for row in rows}) == [2, 4, 8, 16, 32, 64, 128, 256, 512]
    for row in rows:
        assert solve(row["prompt"], language) == (row["question_type"], row["answer"]), row["id"]
        assert row["keywords"] == [row["answer"]] and len(row["needles"]) == row["num_needles"]
        assert row["prompt_tokens"] == row["context_length"] > row["haystack_tokens"]
    # relationship distances are the generation counts: between n (all parents) and 2n (all grandparents)
    for row in rows:
        assert row["num_needles"] <= row["generations"] <= 2 * row["num_needles"]


@pytest.mark.slow
def test_the_solver_also_answers_the_compat_items(tmp_path):
    from needlebench.tasks.names import builtin_names

    names = tmp_path / "names.json"
    names.write_text(
        json.dumps({"English": ",".join(builtin_names("en")[:600]), "Chinese": ",".join(builtin_names("zh")[:600])})
    )
    for language in ("en", "zh"):
        rows = list(iter_rows(get_config(f"v2_atc_{language}"), BuildOptions(compat="opencompass", names=str(names))))
        assert len(rows) == 360 and {row["compat"] for row in rows} == {"opencompass"}
        for row in rows:
            assert solve(row["prompt"], language) == (row["question_type"], row["answer"]), row["id"]
        type_index = V2_ATC_QUESTION_TYPES.index(rows[-1]["question_type"])
        assert rows[-1]["seed"] == rows[-1]["repeat"] + 1 + 10000 * type_index


def test_default_items_are_deterministic_and_use_correct_ordinals():
    spec = get_config("v2_atc_en")
    first = [row["prompt"] for row in islice(iter_rows(spec, BuildOptions()), 80)]
    again = [row["prompt"] for row in islice(iter_rows(spec, BuildOptions()), 80)]
    other = [row["prompt"] for row in islice(iter_rows(spec, BuildOptions(release_seed=7)), 80)]
    assert first == again and first != other
    assert not any(re.search(r"\b(2|3)th generation", prompt) for prompt in first)
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 103, 111)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "103rd",
        "111th",
    ]


def test_chains_need_enough_names_and_drop_leaking_ones():
    with pytest.raises(NeedlebenchError, match="needs 4 distinct en names but only 3"):
        kinship_chain(3, "en", 1, ["A B", "C D", "E F"])
    names = ["Ann Lee", "Bob Ray", "Cid Fox", "Dee Moss"]
    chain = kinship_chain(2, "en", 5, names, leaks=lambda name: name == "Bob Ray")
    assert "Bob Ray" not in chain.names and sorted(chain.names) == ["Ann Lee", "Cid Fox", "Dee Moss"]
