"""The built-in retrieval needle bank: needles generated from data/needles.yaml with leak checks."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from needlebench.errors import NeedlebenchError
from needlebench.seeding import RELEASE_SEED, rng
from needlebench.tasks.needles import (
    _TOKEN,
    DATA_FILE,
    LanguageData,
    RetrievalNeedle,
    _Relation,
    check_int,
    language_code,
    language_data,
    leaks_into,
    needle_problems,
)

#: The seed pinned for the published needle bank.
BANK_SEED: int = RELEASE_SEED


#: Largest bank :func:`needle_bank` builds (the name lists hold far more, the leak checks are quadratic).
MAX_BANK_SIZE = 2000


_MAX_ATTEMPTS = 500


def _pick(options: Sequence[Any], generator: np.random.Generator) -> Any:
    """One element of ``options``, uniformly."""
    return options[int(generator.integers(len(options)))]


def _draw_name(token: str, data: LanguageData, generator: np.random.Generator) -> str:
    """An invented name: the parts of a random shape of ``token`` (capitalised in English)."""
    shape = _pick(data.name_shapes[token], generator)
    name = "".join(_pick(data.name_parts[part], generator) for part in shape)
    return name.capitalize() if data.code == "en" else name


def _fill_pattern(pattern: str, data: LanguageData, generator: np.random.Generator) -> tuple[str, tuple[str, ...]]:
    """Fill every ``{token}`` of a subject/keyword pattern; return the text and the invented names used."""
    names: list[str] = []

    def replace(match: re.Match[str]) -> str:
        token = match.group(1)
        if token in data.name_shapes:
            names.append(_draw_name(token, data, generator))
            return names[-1]
        return str(_pick(data.words[token], generator))

    return _TOKEN.sub(replace, pattern), tuple(names)


def _render(template: str, **values: str) -> str:
    """Substitute ``{name}`` placeholders by plain replacement (values may contain braces or quotes)."""
    return _TOKEN.sub(lambda match: values[match.group(1)], template)


def _draw_needle(
    relation: _Relation, data: LanguageData, generator: np.random.Generator
) -> tuple[RetrievalNeedle, tuple[str, ...]]:
    """One candidate needle of a relation and the invented names it uses."""
    subject, subject_names = _fill_pattern(relation.subject, data, generator)
    keyword, keyword_names = _fill_pattern(_pick(relation.keywords, generator), data, generator)
    question = _render(
        data.formats.question,
        question=_render(relation.question, subject=subject),
        answer=_render(relation.answer, subject=subject),
    )
    needle = RetrievalNeedle(
        text=_render(relation.needle, subject=subject, keyword=keyword),
        question=question,
        subject=subject,
        keyword=keyword,
        language=data.code,
    )
    return needle, subject_names + keyword_names


def _is_denied(needle: RetrievalNeedle, deny: Sequence[str]) -> bool:
    """Does the subject or keyword name a real-world entity of the deny list?

    English compares whole words case-insensitively; Chinese looks for the denied strings as substrings.
    """
    if needle.language == "en":
        words = {word.lower() for word in (needle.subject + " " + needle.keyword).split()}
        return any(item.lower() in words for item in deny)
    return any(item in needle.subject or item in needle.keyword for item in deny)


class _LeakIndex:
    """``any(leaks_into(candidate, other) for other in added)`` answered at once: the subjects in a set, the
    keywords, texts and questions of the added needles joined by NUL, so that a keyword is looked for in all of
    them with one substring search (the loop of :func:`leaks_into` is kept for a field holding a NUL)."""

    def __init__(self) -> None:
        self._needles: list[RetrievalNeedle] = []
        self._subjects: set[str] = set()
        self._keywords: list[str] = []
        self._fields: list[str] = []
        self._joined: str | None = None
        self._nul = False

    def add(self, needle: RetrievalNeedle) -> None:
        fields = (needle.keyword, needle.text, needle.question)
        self._needles.append(needle)
        self._subjects.add(needle.subject)
        self._keywords.append(needle.keyword)
        self._fields.extend(fields)
        self._joined = None
        self._nul = self._nul or any("\0" in field for field in fields)

    def leaks(self, candidate: RetrievalNeedle) -> bool:
        fields = (candidate.keyword, candidate.text, candidate.question)
        if self._nul or any("\0" in field for field in fields):
            return any(leaks_into(candidate, other) for other in self._needles)
        if candidate.subject in self._subjects:
            return True
        if self._joined is None:
            self._joined = "\0".join(self._fields)
        own = "\0".join(fields)
        return candidate.keyword in self._joined or any(keyword in own for keyword in self._keywords)


def _build_bank(code: str, seed: int, size: int) -> tuple[RetrievalNeedle, ...]:
    """Draw the bank: relation ``i % R`` for needle ``i``, redrawn until it passes every check.

    Checks only look at earlier needles, so a smaller bank of the same seed is a prefix of a larger one.
    """
    data = language_data(code)
    generator = rng("needle-bank", code, seed)
    needles: list[RetrievalNeedle] = []
    used_names: set[str] = set()
    earlier = _LeakIndex()
    for index in range(size):
        relation = data.relations[index % len(data.relations)]
        for _ in range(_MAX_ATTEMPTS):
            candidate, names = _draw_needle(relation, data, generator)
            if (
                len(set(names)) == len(names)
                and used_names.isdisjoint(names)
                and not needle_problems(candidate)
                and not _is_denied(candidate, data.deny)
                and not earlier.leaks(candidate)
            ):
                break
        else:
            raise NeedlebenchError(
                f"could not build needle {index} ({code} relation {relation.id!r}) of a bank of size {size}: "
                f"no valid candidate in {_MAX_ATTEMPTS} draws; check {DATA_FILE} or ask for a smaller size"
            )
        needles.append(candidate)
        earlier.add(candidate)
        used_names.update(names)
    return tuple(needles)


@cache
def _cached_bank(code: str, seed: int, size: int) -> tuple[RetrievalNeedle, ...]:
    """:func:`_build_bank`, memoised."""
    return _build_bank(code, seed, size)


def needle_bank(language: str, *, seed: int = BANK_SEED, size: int = 200) -> tuple[RetrievalNeedle, ...]:
    """The generated retrieval needle bank of a language (``"en"``/``"zh"`` or ``"English"``/``"Chinese"``).

    Deterministic in ``(language, seed)`` and cached; the order is stable and a smaller size is a prefix of a
    larger one. Relations take turns (needle ``i`` uses relation ``i`` modulo their number).
    """
    code = language_code(language)
    return _cached_bank(code, check_int("seed", seed, 0), check_int("size", size, 1, MAX_BANK_SIZE))
