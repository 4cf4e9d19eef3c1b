"""Prompt frames (v1 `data/prompts.yaml`, v2 `data/prompts_v2.yaml`) and the assembly of retrieval questions."""

from __future__ import annotations

from functools import cache
from importlib import resources

from needlebench.errors import NeedlebenchError
from needlebench.yamlload import safe_load

QUESTION_POSITIONS = ("end", "start")
CONTEXT_SLOT = "{context}"


_PROMPT_FILES = {"v1": "data/prompts.yaml", "v2": "data/prompts_v2.yaml"}


@cache
def prompt_data(edition: str = "v1") -> dict:
    text = resources.files("needlebench").joinpath(_PROMPT_FILES[edition]).read_text(encoding="utf-8")
    return safe_load(text)


def frame(family: str, language: str, position: str = "end", edition: str = "v1") -> tuple[str, str]:
    """The frame around the context as (before, after), with the question still to be filled in."""
    if position not in QUESTION_POSITIONS:
        raise NeedlebenchError(f"unknown question position {position!r}; allowed: {', '.join(QUESTION_POSITIONS)}")
    template = prompt_data(edition)[family][language][position]
    before, after = template.split(CONTEXT_SLOT)
    return before, after


def frame_parts(
    family: str, language: str, question: str, position: str = "end", edition: str = "v1", **fields: str
) -> tuple[str, str]:
    """Prompt text before and after the context, the question (and any other ``{field}``, such as the v2 M-RS
    ``last_person``) filled in."""
    before, after = frame(family, language, position, edition)
    for name, value in {"question": question, **fields}.items():
        before, after = before.replace("{" + name + "}", value), after.replace("{" + name + "}", value)
    return before, after


def v2_reasoning_question(language: str, last_person: str) -> str:
    """The v2 M-RS question about the youngest person of a kinship chain."""
    return prompt_data("v2")["multi_reasoning_question"][language].replace("{last_person}", last_person)


def guide_sentence(language: str) -> str:
    return prompt_data()["guide"][language]


def multi_retrieval_question(questions: list[str], templates: list[str], language: str, join: str | None = None) -> str:
    """Joined questions followed by the answer-format clause over the joined templates (open-compass/opencompass:
    ``opencompass/datasets/needlebench/parallel.py``)."""
    separator = prompt_data()["multi_retrieval_join"][language] if join is None else join
    clause = prompt_data()["multi_retrieval_format"][language].replace("{templates}", separator.join(templates))
    return separator.join(questions) + clause
