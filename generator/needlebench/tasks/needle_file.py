"""Reading the reference needles.jsonl (OpenCompass format) into retrieval needles."""

from __future__ import annotations

import json
import os

from needlebench.errors import NeedlebenchError
from needlebench.tasks.needles import LANGUAGE_NAMES, RetrievalNeedle, language_code

#: Fields every line of ``needles.jsonl`` must have (``arg2`` is the answer keyword).
NEEDLE_FIELDS = ("needle", "retrieval_question", "arg1", "arg2", "language")


#: Largest needles file read (the reference's needles.jsonl is 4 KB).
MAX_NEEDLES_BYTES = 16 * 1024 * 1024


def _read_lines(path: str | os.PathLike[str]) -> list[str]:
    """The lines of a UTF-8 text file (a regular file: a FIFO or device is refused before it is read), or a
    NeedlebenchError naming the file."""
    from needlebench.sources.corpus import read_regular_text  # deferred: the corpus module's imports

    # JSON strings may hold U+2028 etc.: split on newlines only
    return read_regular_text(path, "needles file", MAX_NEEDLES_BYTES).split("\n")


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


def _check_answerable(record: dict[str, str], where: str) -> None:
    """A needle whose answer (``arg2``) is not in the needle, or is given away by the question, makes rows no
    model can answer (or that any model answers): a one-line error naming the file, line and entry."""
    keyword, needle = record["arg2"], record["needle"]
    entry = f"entry arg1={record['arg1']!r} arg2={keyword!r}"
    if not keyword.strip():
        raise NeedlebenchError(f"{where}: {entry} has an empty answer (arg2); give the answer keyword")
    if keyword not in needle:
        raise NeedlebenchError(f"{where}: {entry}: the answer (arg2) does not occur in the needle {needle.strip()!r}")
    if keyword in record["retrieval_question"]:
        raise NeedlebenchError(f"{where}: {entry}: the answer (arg2) occurs in the retrieval_question, giving it away")


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
            _check_answerable(record, f"{shown} line {number}")
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
