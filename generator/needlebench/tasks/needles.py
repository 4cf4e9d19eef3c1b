"""Retrieval needles: a bilingual, leak-free bank generated from templates, and a reader for ``needles.jsonl``.

A retrieval needle is one sentence stating a fact about an invented entity ("Hidden on Velamir Island is the legendary
Amber Codex."), its question in the reference shape (the ``retrieval_question`` of ``needles.jsonl`` in the Hub dataset
opencompass/NeedleBench: EN ``... ? Please answer in the format '<template>.'``,
ZH ``...？请按照'<template>。'的格式回答。``), its subject (``arg1``) and its answer keyword (``arg2``), which the
reference scorers look for as a case-sensitive substring of the prediction.

The bank (:func:`needle_bank`) draws entity names from syllable lists and fills relation templates, both kept in
``data/needles.yaml``. Every needle is checked (:func:`needle_problems`) and the bank as a whole is kept free of
cross-needle leaks: subjects, keywords and invented names are unique, and no keyword occurs in another needle's
text, question or keyword, so any set of bank needles can share one multi-needle prompt.

:func:`load_needles_file` reads the reference ``needles.jsonl`` instead. :func:`splice_guide` adds the reference guide
sentence (open-compass/opencompass: ``opencompass/datasets/needlebench/origin.py``);
:attr:`RetrievalNeedle.question_only` and :attr:`RetrievalNeedle.answer_template` are the pieces M-RT joins
(``opencompass/datasets/needlebench/parallel.py``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml

from needlebench.errors import NeedlebenchError
from needlebench.seeding import rng
from needlebench.yamlload import safe_load

__all__ = [
    "EDITION_QUESTION",
    "LANGUAGE_CODES",
    "LANGUAGE_NAMES",
    "RetrievalNeedle",
    "answer_template_of",
    "choose_distinct_needles",
    "choose_needle",
    "language_code",
    "language_name",
    "needle_problems",
    "question_only_of",
    "splice_guide",
]


#: Language code <-> the ``language`` value of the reference ``needles.jsonl``.
LANGUAGE_NAMES: dict[str, str] = {"en": "English", "zh": "Chinese"}


LANGUAGE_CODES: dict[str, str] = {name: code for code, name in LANGUAGE_NAMES.items()}


DATA_FILE = "needles.yaml"


# Reference punctuation: M-RT cuts questions at the first question mark and templates at the first full stop.
_QUESTION_MARK = {"en": "?", "zh": "？"}


_FULL_STOP = {"en": ".", "zh": "。"}


_QUOTE = "'"


_QUOTE_CHARS = "'\"‘’“”「」『』"


_TITLE_WORD = re.compile(r"[A-Z][a-z]+")


_CJK = re.compile(r"[\u4e00-\u9fff]+")


_ASCII_LETTER = re.compile(r"[A-Za-z]")


_TOKEN = re.compile(r"\{(\w+)\}")


_EN_KEYWORD_WORDS = (2, 4)


_ZH_KEYWORD_CHARS = (2, 6)


def language_code(language: str) -> str:
    """``"en"``/``"zh"`` for a language code or a reference language name (``"English"``/``"Chinese"``)."""
    if language in LANGUAGE_NAMES:
        return language
    if language in LANGUAGE_CODES:
        return LANGUAGE_CODES[language]
    raise NeedlebenchError(f"unknown language {language!r}; allowed: en, zh, English, Chinese")


def language_name(language: str) -> str:
    """The reference ``needles.jsonl`` language name (``"English"``/``"Chinese"``) of a code or name."""
    return LANGUAGE_NAMES[language_code(language)]


def question_only_of(question: str, language: str) -> str:
    """The question cut after its first ``?`` (EN) / ``？`` (ZH), which is kept; the whole question if it has none."""
    head, mark, _ = question.partition(_QUESTION_MARK[language_code(language)])
    return head + mark


def answer_template_of(question: str, language: str) -> str:
    """The text between the first pair of ``'`` cut at the first ``.`` (EN) / ``。`` (ZH); ``""`` without a pair."""
    parts = question.split(_QUOTE)
    if len(parts) < 3:
        return ""
    return parts[1].split(_FULL_STOP[language_code(language)])[0]


@dataclass(frozen=True)
class RetrievalNeedle:
    """One retrieval needle (a line of the reference ``needles.jsonl``)."""

    text: str  # the needle sentence, no surrounding whitespace
    question: str  # retrieval question incl. the answer-format clause, in the reference shape
    subject: str  # arg1
    keyword: str  # arg2, the answer keyword
    language: str  # "en" | "zh"

    def __post_init__(self) -> None:
        if self.language not in LANGUAGE_NAMES:
            raise NeedlebenchError(f"RetrievalNeedle language {self.language!r} is not allowed; use 'en' or 'zh'")

    @property
    def question_only(self) -> str:
        """The question cut at its first ``?`` / ``？`` (kept), as M-RT joins them."""
        return question_only_of(self.question, self.language)

    @property
    def answer_template(self) -> str:
        """The answer template: text between the first pair of ``'`` cut at the first ``.`` / ``。``."""
        return answer_template_of(self.question, self.language)

    def as_record(self) -> dict[str, str]:
        """The needle as a reference ``needles.jsonl`` record."""
        return {
            "needle": self.text,
            "retrieval_question": self.question,
            "arg1": self.subject,
            "arg2": self.keyword,
            "language": LANGUAGE_NAMES[self.language],
        }


def splice_guide(question: str, language: str) -> str:
    """Insert the reference guide sentence before the answer-format lead-in (open-compass/opencompass:
    ``opencompass/datasets/needlebench/origin.py``).

    As the reference: ``parts = question.split(lead_in)`` and ``parts[0] + guide + lead_in + parts[1]`` (EN lead-in
    ``Please answer in the format``, ZH ``请按照``). A question without the lead-in gets the guide sentence
    appended after it instead.
    """
    formats = language_data(language_code(language)).formats
    parts = question.split(formats.lead_in)
    if len(parts) < 2:
        return question.rstrip() + formats.guide_joiner + formats.guide_sentence
    return parts[0] + formats.guide_sentence + formats.guide_joiner + formats.lead_in + parts[1]


def _as_asked(question: str, language: str) -> str:
    return question


#: The retrieval question of each edition (``spec.edition``): v1 splices the guide sentence in
#: (:func:`splice_guide`), v2 asks the question as it stands.
EDITION_QUESTION = {"v1": splice_guide, "v2": _as_asked}


def _format_problems_en(needle: RetrievalNeedle) -> list[str]:
    """English-only format problems (one sentence, Title Case keyword, no shared words with the question)."""
    problems = []
    text, keyword = needle.text, needle.keyword
    if not text[:1].isupper():
        problems.append("needle must start with an uppercase letter")
    if not text.endswith(".") or text.count(".") != 1:
        problems.append("needle must be one sentence ending in '.'")
    words = keyword.split(" ")
    if not _EN_KEYWORD_WORDS[0] <= len(words) <= _EN_KEYWORD_WORDS[1]:
        problems.append(f"keyword {keyword!r} must have 2-4 words")
    if not all(_TITLE_WORD.fullmatch(word) for word in words):
        problems.append(f"keyword {keyword!r} must be Title Case letters")
    question_words = {word.lower() for word in re.findall(r"[A-Za-z]+", needle.question)}
    if any(word.lower() in question_words for word in words):
        problems.append(f"a word of keyword {keyword!r} occurs in the question")
    return problems


def _format_problems_zh(needle: RetrievalNeedle) -> list[str]:
    """Chinese-only format problems (ends in '。', no ASCII letters, 2-6 CJK keyword, no shared bigram)."""
    problems = []
    text, keyword = needle.text, needle.keyword
    if not text.endswith("。") or text.count("。") != 1:
        problems.append("needle must be one sentence ending in '。'")
    if _ASCII_LETTER.search(text) or _ASCII_LETTER.search(needle.question):
        problems.append("needle and question must contain no ASCII letters")
    if not (_CJK.fullmatch(keyword) and _ZH_KEYWORD_CHARS[0] <= len(keyword) <= _ZH_KEYWORD_CHARS[1]):
        problems.append(f"keyword {keyword!r} must be 2-6 CJK characters")
    if any(keyword[i : i + 2] in needle.question for i in range(len(keyword) - 1)):
        problems.append(f"two characters of keyword {keyword!r} occur together in the question")
    return problems


def needle_problems(needle: RetrievalNeedle) -> tuple[str, ...]:
    """Why a needle breaks the bank's rules (empty when it is fine).

    Rules for both languages: single-line text without surrounding whitespace, no question mark or quotes; the
    keyword occurs exactly once in the text and not in the question; the subject occurs in the text and the
    question; the question has one question mark, one pair of ``'`` around a template ending in the full stop,
    and the answer-format lead-in once. Then the language rules (see ``_format_problems_en`` / ``_zh``).
    """
    code = needle.language
    text, question, keyword, subject = needle.text, needle.question, needle.keyword, needle.subject
    problems = []
    if not text or text != text.strip() or "\n" in text or "\r" in text:
        problems.append("needle must be one line without surrounding whitespace")
    if any(mark in text for mark in "?？") or any(quote in text for quote in _QUOTE_CHARS):
        problems.append("needle must contain no question mark or quotes")
    if not keyword or keyword != keyword.strip() or text.count(keyword) != 1:
        problems.append(f"keyword {keyword!r} must occur exactly once in the needle")
    if keyword and keyword in question:
        problems.append(f"keyword {keyword!r} occurs in the question")
    if not subject or subject not in text or subject not in question_only_of(question, code):
        problems.append(f"subject {subject!r} must occur in the needle and the question")
    if question.count(_QUESTION_MARK[code]) != 1 or question.count(_QUOTE) != 2 or "\n" in question:
        problems.append("question must have one question mark and one pair of quotes")
    quoted = question.split(_QUOTE)[1] if question.count(_QUOTE) >= 2 else ""
    stop = _FULL_STOP[code]
    if not quoted.endswith(stop) or quoted.count(stop) != 1:
        problems.append(f"answer template must end with {stop!r} and contain no other")
    if question.count(language_data(code).formats.lead_in) != 1:
        problems.append("question must contain the answer-format lead-in once")
    problems += _format_problems_en(needle) if code == "en" else _format_problems_zh(needle)
    return tuple(problems)


@dataclass(frozen=True)
class _Formats:
    question: str
    lead_in: str
    guide_sentence: str
    guide_joiner: str


@dataclass(frozen=True)
class _Relation:
    id: str
    subject: str
    keywords: tuple[str, ...]
    needle: str
    question: str
    answer: str


@dataclass(frozen=True)
class LanguageData:
    code: str
    formats: _Formats
    deny: tuple[str, ...]
    name_parts: Mapping[str, tuple[str, ...]]
    name_shapes: Mapping[str, tuple[tuple[str, ...], ...]]
    words: Mapping[str, tuple[str, ...]]
    relations: tuple[_Relation, ...]


def _field(mapping: Any, key: str, where: str) -> Any:
    """``mapping[key]`` or a NeedlebenchError naming the data file and the missing field."""
    if not isinstance(mapping, Mapping) or key not in mapping:
        raise NeedlebenchError(f"{DATA_FILE}: missing field {where}.{key}")
    return mapping[key]


def _strings(value: Any, where: str) -> tuple[str, ...]:
    """A non-empty list of non-empty strings, as a tuple, or a NeedlebenchError naming the field."""
    if not isinstance(value, list) or not value or not all(isinstance(item, str) and item for item in value):
        raise NeedlebenchError(f"{DATA_FILE}: {where} must be a non-empty list of non-empty strings")
    return tuple(value)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    """A non-empty mapping with string keys, or a NeedlebenchError naming the field."""
    if not isinstance(value, Mapping) or not value or not all(isinstance(key, str) for key in value):
        raise NeedlebenchError(f"{DATA_FILE}: {where} must be a non-empty mapping with string keys")
    return dict(value)


def _string(value: Any, where: str) -> str:
    """A string, or a NeedlebenchError naming the field."""
    if not isinstance(value, str):
        raise NeedlebenchError(f"{DATA_FILE}: {where} must be a string")
    return value


def _check_tokens(template: str, allowed: set[str], where: str) -> None:
    """Raise if the template uses a ``{token}`` outside ``allowed``."""
    unknown = sorted(set(_TOKEN.findall(template)) - allowed)
    if unknown:
        raise NeedlebenchError(f"{DATA_FILE}: {where} uses unknown token(s) {unknown}; allowed: {sorted(allowed)}")


def _parse_relation(raw: Any, where: str, fill_tokens: set[str]) -> _Relation:
    """One relation of the data file, with its templates' tokens checked."""
    relation = _Relation(
        id=_string(_field(raw, "id", where), f"{where}.id"),
        subject=_string(_field(raw, "subject", where), f"{where}.subject"),
        keywords=_strings(_field(raw, "keyword", where), f"{where}.keyword"),
        needle=_string(_field(raw, "needle", where), f"{where}.needle"),
        question=_string(_field(raw, "question", where), f"{where}.question"),
        answer=_string(_field(raw, "answer", where), f"{where}.answer"),
    )
    _check_tokens(relation.subject, fill_tokens, f"{where}.subject")
    for pattern in relation.keywords:
        _check_tokens(pattern, fill_tokens, f"{where}.keyword")
    _check_tokens(relation.needle, {"subject", "keyword"}, f"{where}.needle")
    _check_tokens(relation.question, {"subject"}, f"{where}.question")
    _check_tokens(relation.answer, {"subject"}, f"{where}.answer")
    return relation


def _parse_language(raw: Any, code: str) -> LanguageData:
    """The data of one language, validated."""
    formats_raw = _field(raw, "formats", code)
    formats = _Formats(
        **{
            key: _string(_field(formats_raw, key, f"{code}.formats"), f"{code}.formats.{key}")
            for key in ("question", "lead_in", "guide_sentence", "guide_joiner")
        }
    )
    parts_raw = _mapping(_field(raw, "name_parts", code), f"{code}.name_parts")
    name_parts = {key: _strings(value, f"{code}.name_parts.{key}") for key, value in parts_raw.items()}
    shapes_raw = _mapping(_field(raw, "name_shapes", code), f"{code}.name_shapes")
    name_shapes: dict[str, tuple[tuple[str, ...], ...]] = {}
    for token, shapes in shapes_raw.items():
        where = f"{code}.name_shapes.{token}"
        if not isinstance(shapes, list) or not shapes:
            raise NeedlebenchError(f"{DATA_FILE}: {where} must be a non-empty list of part lists")
        parsed = tuple(_strings(shape, where) for shape in shapes)
        unknown = sorted({part for shape in parsed for part in shape} - set(name_parts))
        if unknown:
            raise NeedlebenchError(f"{DATA_FILE}: {where} names unknown parts {unknown}; allowed: {sorted(name_parts)}")
        name_shapes[token] = parsed
    words_raw = _mapping(_field(raw, "words", code), f"{code}.words")
    words = {key: _strings(value, f"{code}.words.{key}") for key, value in words_raw.items()}
    fill_tokens = set(name_shapes) | set(words)
    relations_raw = _field(raw, "relations", code)
    if not isinstance(relations_raw, list) or not relations_raw:
        raise NeedlebenchError(f"{DATA_FILE}: {code}.relations must be a non-empty list")
    relations = tuple(
        _parse_relation(item, f"{code}.relations[{index}]", fill_tokens) for index, item in enumerate(relations_raw)
    )
    return LanguageData(
        code=code,
        formats=formats,
        deny=_strings(_field(raw, "deny", code), f"{code}.deny"),
        name_parts=name_parts,
        name_shapes=name_shapes,
        words=words,
        relations=relations,
    )


@cache
def language_data(code: str) -> LanguageData:
    """The validated ``data/needles.yaml`` section of a language code (read once)."""
    text = resources.files("needlebench").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    try:
        raw = safe_load(text)
    except yaml.YAMLError as error:
        raise NeedlebenchError(f"{DATA_FILE}: not valid YAML ({error})") from error
    return _parse_language(_field(raw, code, "<root>"), code)


def leaks_into(candidate: RetrievalNeedle, other: RetrievalNeedle) -> bool:
    """Could the two needles be confused in one prompt or by the substring scorer?

    True if they share a subject, or either keyword occurs in the other needle's keyword, text or question
    (which also rules out one keyword being a substring of the other).
    """
    if candidate.subject == other.subject:
        return True
    for first, second in ((candidate, other), (other, candidate)):
        if first.keyword in second.keyword or first.keyword in second.text or first.keyword in second.question:
            return True
    return False


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """``value`` if it is an int in range, else a NeedlebenchError naming it and the allowed range."""
    allowed = f"an integer >= {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise NeedlebenchError(f"{name} {value!r} is not allowed; use {allowed}")
    if value < minimum or (maximum is not None and value > maximum):
        raise NeedlebenchError(f"{name} {value!r} is out of range; use {allowed}")
    return int(value)


def choose_needle(needles: Sequence[RetrievalNeedle], seed: int) -> RetrievalNeedle:
    """One needle drawn with a local generator seeded by ``seed``."""
    if not needles:
        raise NeedlebenchError("choose_needle got no needles; pass at least one")
    generator = rng("choose-needle", check_int("seed", seed, 0))
    return needles[int(generator.integers(len(needles)))]


def choose_distinct_needles(needles: Sequence[RetrievalNeedle], count: int, seed: int) -> tuple[RetrievalNeedle, ...]:
    """``count`` needles that can share one prompt, in a seeded random order.

    Walks a seeded permutation and keeps a needle unless it shares its subject with a kept one, or a keyword
    occurs in another kept needle's keyword, text or question (so no keyword is a substring of another).
    """
    count = check_int("count", count, 1)
    generator = rng("choose-distinct-needles", check_int("seed", seed, 0))
    chosen: list[RetrievalNeedle] = []
    for index in generator.permutation(len(needles)):
        candidate = needles[int(index)]
        if not any(leaks_into(candidate, other) for other in chosen):
            chosen.append(candidate)
            if len(chosen) == count:
                return tuple(chosen)
    raise NeedlebenchError(
        f"count {count} is too many: only {len(chosen)} of the {len(needles)} needles have distinct subjects and "
        f"keywords; use a count of at most {len(chosen)} or more needles"
    )
