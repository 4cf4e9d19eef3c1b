"""Prompt frames (from `data/prompts.yaml`) and the assembly of retrieval questions."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml

from needlebench.errors import NeedlebenchError

QUESTION_POSITIONS = ("end", "start")
CONTEXT_SLOT = "{context}"


@cache
def prompt_data() -> dict:
    text = resources.files("needlebench").joinpath("data/prompts.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def frame(family: str, language: str, position: str = "end") -> tuple[str, str]:
    """The frame around the context as (before, after), with the question still to be filled in."""
    if position not in QUESTION_POSITIONS:
        raise NeedlebenchError(f"unknown question position {position!r}; allowed: {', '.join(QUESTION_POSITIONS)}")
    template = prompt_data()[family][language][position]
    before, after = template.split(CONTEXT_SLOT)
    return before, after


def frame_parts(family: str, language: str, question: str, position: str = "end") -> tuple[str, str]:
    """Prompt text before and after the context, the question filled in."""
    before, after = frame(family, language, position)
    return before.replace("{question}", question), after.replace("{question}", question)


def guide_sentence(language: str) -> str:
    return prompt_data()["guide"][language]


def multi_retrieval_question(questions: list[str], templates: list[str], language: str, join: str | None = None) -> str:
    """Joined questions followed by the answer-format clause over the joined templates (reference §4)."""
    separator = prompt_data()["multi_retrieval_join"][language] if join is None else join
    clause = prompt_data()["multi_retrieval_format"][language].replace("{templates}", separator.join(templates))
    return separator.join(questions) + clause
