"""Reading the reference needles.jsonl (OpenCompass format) into retrieval needles."""

from __future__ import annotations

import json
import os

from needlebench.errors import NeedlebenchError
from needlebench.tasks.needles import LANGUAGE_NAMES, RetrievalNeedle, language_code

#: Fields every line of ``needles.jsonl`` must have (``arg2`` is the answer keyword).
NEEDLE_FIELDS = ("needle", "retrieval_question", "arg1", "arg2", "language")


def _read_lines(path: str | os.PathLike[str]) -> list[str]:
    """The lines of a UTF-8 text file, or a NeedlebenchError naming the file."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().split("\n")  # JSON strings may hold U+2028 etc.: split on newlines only
    except (OSError, UnicodeDecodeError) as error:
        raise NeedlebenchError(f"cannot read needles file {os.fspath(path)!r}: {error}") from error


def _parse_record(line: str, where: str) -> dict[str, str]:
    """One ``needles.jsonl`` record with every field of :data:`NEEDLE_FIELDS` as a string."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise NeedlebenchError(f"{where}: malformed JSON ({error.msg}); expected one JSON object per line") from error
    if not isinstance(record, dict):
        raise NeedlebenchError(f"{where}: expected a JSON object with fields {', '.join(NEEDLE_FIELDS)}")
    missing = [field for field in NEEDLE_FIELDS if field not in record]
    if missing:
        raise NeedlebenchError(f"{where}: missing field(s) {', '.join(missing)}; required: {', '.join(NEEDLE_FIELDS)}")
    wrong = [field for field in NEEDLE_FIELDS if not isinstance(record[field], str)]
    if wrong:
        raise NeedlebenchError(f"{where}: field(s) {', '.join(wrong)} must be strings")
    return {field: record[field] for field in NEEDLE_FIELDS}


def load_needles_file(path: str | os.PathLike[str], language: str) -> tuple[RetrievalNeedle, ...]:
    """The needles of one language from a reference ``needles.jsonl`` (language ``"English"``/``"Chinese"``).

    Blank lines are skipped; the needle text is stripped of surrounding whitespace, the other fields are kept
    verbatim. An unreadable file, a malformed line (named by its number), missing fields, or no needle of the
    language raise :class:`NeedlebenchError`.
    """
    code = language_code(language)
    name = LANGUAGE_NAMES[code]
    shown = os.fspath(path)
    needles: list[RetrievalNeedle] = []
    languages: set[str] = set()
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        record = _parse_record(line, f"{shown} line {number}")
        languages.add(record["language"])
        if record["language"] == name:
            needles.append(
                RetrievalNeedle(
                    text=record["needle"].strip(),
                    question=record["retrieval_question"],
                    subject=record["arg1"],
                    keyword=record["arg2"],
                    language=code,
                )
            )
    if not needles:
        found = ", ".join(sorted(languages)) or "none"
        raise NeedlebenchError(f"{shown}: no needle with language {name!r} (languages found: {found})")
    return tuple(needles)
