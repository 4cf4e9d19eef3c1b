"""Name lists for the Ancestral Trace Challenge (ATC).

Two sources:

* the built-in lists of ``data/names.yaml`` (written for this project): every pairing of 60 given names with
  60 surnames per language, 3600 fictional full names in a stable order;
* a names file in the reference ``names.json`` format: a JSON object whose keys ``"English"`` and ``"Chinese"``
  each hold one comma-separated string, split on ``','`` with no stripping (as the reference does).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from importlib import resources

from needlebench.errors import NeedlebenchError
from needlebench.sources.pinned import read_user_file
from needlebench.yamlload import safe_load

#: Our language codes and the keys of the reference names.json.
REFERENCE_KEYS = {"en": "English", "zh": "Chinese"}
_ALIASES = {"en": "en", "zh": "zh", "english": "en", "chinese": "zh"}


def normalize_language(language: str) -> str:
    """``en``/``zh`` for a language code or reference key (``English``/``Chinese``); anything else is an error."""
    code = _ALIASES.get(str(language).lower())
    if code is None:
        raise NeedlebenchError(f"unknown language {language!r}; allowed: en, zh (or English, Chinese)")
    return code


@cache
def _names_data() -> dict:
    """The parsed ``data/names.yaml``."""
    text = resources.files("needlebench").joinpath("data/names.yaml").read_text(encoding="utf-8")
    return safe_load(text)


@cache
def builtin_names(language: str) -> tuple[str, ...]:
    """The built-in full names of a language, in their stable order (first list outer, second list inner)."""
    entry = _names_data()[normalize_language(language)]
    first, second = (entry[part] for part in entry["order"])
    separator = entry["separator"]
    return tuple(f"{a}{separator}{b}" for a in first for b in second)


def _read_json(path: str) -> object:
    """The JSON content of a file; unreadable or malformed files raise a one-line error."""

    try:
        return json.loads(read_user_file(path, "names file", 64 * 1024 * 1024).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NeedlebenchError(f"cannot read names file {path!r}: {error}") from error


def load_names(path: str | None, language: str) -> list[str]:
    """Names of a language: the built-in list when ``path`` is None, else the reference ``names.json`` entry.

    A file entry is split on ``','`` without stripping, so the list is exactly the reference's ``all_names``
    (possibly holding empty strings or leading spaces).
    """
    code = normalize_language(language)
    if path is None:
        return list(builtin_names(code))
    data = _read_json(path)
    key = REFERENCE_KEYS[code]
    if not isinstance(data, dict):
        raise NeedlebenchError(
            f"names file {path!r} is not a JSON object; expected keys 'English' and 'Chinese' holding "
            "comma-separated names"
        )
    if key not in data:
        raise NeedlebenchError(
            f"names file {path!r} has no {key!r} entry; expected keys 'English' and 'Chinese' holding "
            "comma-separated names"
        )
    value = data[key]
    if not isinstance(value, str):
        raise NeedlebenchError(
            f"names file {path!r}: entry {key!r} is a {type(value).__name__}; expected one comma-separated string"
        )
    return value.split(",")


def distinct_names(names: list[str] | tuple[str, ...]) -> list[str]:
    """Non-blank names with surrounding whitespace removed, duplicates dropped, first occurrence order kept."""
    cleaned = (name.strip() for name in names)
    return list(dict.fromkeys(name for name in cleaned if name))


def names_corpus_label(path: str | None) -> str:
    """The ``corpus`` column of ATC rows: ``names:builtin`` or ``names:<basename>@sha256:<first 12 hex>``."""
    if path is None:
        return "names:builtin"

    try:
        digest = hashlib.sha256(read_user_file(path, "names file", 64 * 1024 * 1024)).hexdigest()
    except OSError as error:
        raise NeedlebenchError(f"cannot read names file {path!r}: {error}") from error
    return f"names:{os.path.basename(path)}@sha256:{digest[:12]}"
