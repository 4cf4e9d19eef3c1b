"""JSON from someone else, read with limits: one reader for the manifest, the judge's files and the report's.

:func:`loads` is ``json.loads`` (the same grammar, values and :class:`json.JSONDecodeError` messages) with the
limits of :class:`Limits`: nesting depth, digits of an integer (refused, or read as an infinite float), characters
of a number (Python refuses to convert an integer of more than 4,300 digits, ``sys.set_int_max_str_digits`` in the
CPython docs, "Integer string conversion length limitation"), ``NaN``/``Infinity`` and numbers beyond a float
(RFC 8259 section 6 has no such values; Python's ``json`` reads them), and strings with a lone surrogate
(``"\\ud800"``, which no UTF-8 file can carry). A value beyond a limit is one :class:`JSONLimitError` carrying the
field that holds it (:func:`dotted_path`, :func:`indexed_path`) and the reason (``kind``, the number's text), so
each caller words its own one-line message.

The whole text is decoded first, so a syntax error anywhere wins over a value beyond a limit, and the values are
then walked without recursion, the last child first; a text nested past the interpreter's recursion limit is one
:class:`JSONLimitError` of kind :data:`RECURSION` (no field: the decoder stops where it is), never a
``RecursionError``. Imports only the standard library (a shared utility, used by every stage).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

#: Kinds of :class:`JSONLimitError`. A number: more digits than ``max_int_digits`` (``literal`` is its text) ...
DIGITS = "digits"
#: ... more characters than ``max_number_chars``, sign and exponent included ...
CHARS = "chars"
#: ... a number whose float is infinite (``1e999``) ...
RANGE = "range"
#: ... ``NaN``, ``Infinity`` or ``-Infinity`` (``literal``).
CONSTANT = "constant"
#: A string (``path``) or a key of the object at ``path`` holding a lone surrogate.
SURROGATE = "surrogate"
SURROGATE_KEY = "surrogate_key"
#: An array or object at ``path`` nested deeper than ``max_depth``.
DEPTH = "depth"
#: Nesting past the interpreter's recursion limit: the decoder stopped (``path`` is empty).
RECURSION = "recursion"


@dataclass(frozen=True)
class Limits:
    """What :func:`loads` accepts.

    - `max_depth`: an array or object at most this many levels deep (the top one is level 1).
    - `max_int_digits`: digits of an integer (sign not counted), None for no limit; one longer is refused
      (`over_digits` ``"refuse"``) or read as ``inf``/``-inf`` (``"infinite"``, like ``float()`` of it, whatever
      `finite_only` says).
    - `max_number_chars`: characters of any number (integer or not, sign included), None for no limit; checked
      after `max_int_digits`.
    - `finite_only`: ``NaN``, ``Infinity`` and numbers beyond a float refused (else read as float values).
    - `lone_surrogates`: strings and keys holding a lone surrogate read (else refused; only an ``\\uD800``-
      ``\\uDFFF`` escape in the text can make one, so the strings are checked only when the text has one).
    """

    max_depth: int
    max_int_digits: int | None = None
    over_digits: Literal["refuse", "infinite"] = "refuse"
    max_number_chars: int | None = None
    finite_only: bool = True
    lone_surrogates: bool = True

    def __post_init__(self) -> None:
        if self.over_digits not in ("refuse", "infinite"):
            raise ValueError(f"over_digits {self.over_digits!r}; allowed: 'refuse', 'infinite'")


class JSONLimitError(ValueError):
    """A JSON text beyond a :class:`Limits`: `kind` (:data:`DEPTH`, :data:`DIGITS`...), the field `path` (keys
    and list indexes from the top; empty for the top value and for :data:`RECURSION`) and, for a number,
    `literal`, its text as written. Callers word the message (`message`; else ``str()`` is a plain default)."""

    def __init__(self, kind: str, path: tuple[str | int, ...] = (), literal: str = "", message: str = "") -> None:
        self.kind = kind
        self.path = path
        self.literal = literal
        super().__init__(message or f"{indexed_path(path)}: {kind}" + (f" ({literal[:20]})" if literal else ""))


def dotted_path(path: tuple[str | int, ...] | list[str | int]) -> str:
    """A field as ``configs.atc_en.rows`` (list indexes as numbers: ``files.0``), ``(top level)`` for the top value;
    at most 120 characters (longer ends in ``...``). Keys are kept as they are: the caller makes them printable."""
    text = ".".join(str(part) for part in path) or "(top level)"
    return text if len(text) <= 120 else text[:117] + "..."


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def indexed_path(path: tuple[str | int, ...] | list[str | int]) -> str:
    """A field as ``[3].doc.question``: a key that is not a short name as ``['its repr']`` (its first 60
    characters; ``repr`` escapes every character ``str.isprintable`` refuses), ``the value`` for the top value."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _NAME.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part[:60]!r}]"
    return out or "the value"


class _Refused:
    """A number refused while decoding, kept in place until the walk finds the field that holds it."""

    __slots__ = ("kind", "literal")

    def __init__(self, kind: str, literal: str) -> None:
        self.kind = kind
        self.literal = literal


#: A ``\uD800``-``\uDFFF`` escape: the only way a lone surrogate (which UTF-8 cannot carry) gets into decoded JSON.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def loads(text: str | bytes, limits: Limits) -> Any:
    """`text` (str, or bytes as ``json.loads`` takes them) decoded as ``json.loads`` decodes it, within `limits`:
    :class:`json.JSONDecodeError` for a syntax error, :class:`JSONLimitError` for a value beyond a limit (the first
    one the walk meets: the text is decoded whole, then walked last child first)."""
    digits, chars, finite = limits.max_int_digits, limits.max_number_chars, limits.finite_only

    def parse_int(literal: str) -> int | float | _Refused:
        if digits is not None and len(literal) - literal.startswith("-") > digits:
            if limits.over_digits == "infinite":
                return -math.inf if literal.startswith("-") else math.inf
            return _Refused(DIGITS, literal)
        if chars is not None and len(literal) > chars:
            return _Refused(CHARS, literal)
        return int(literal)

    def parse_float(literal: str) -> float | _Refused:
        if chars is not None and len(literal) > chars:
            return _Refused(CHARS, literal)
        value = float(literal)
        return _Refused(RANGE, literal) if finite and not math.isfinite(value) else value

    hooks: dict[str, Any] = {}  # json's own readers where no limit applies (they are faster)
    if digits is not None or chars is not None:
        hooks["parse_int"] = parse_int
    if chars is not None or finite:
        hooks["parse_float"] = parse_float
    if finite:
        hooks["parse_constant"] = lambda literal: _Refused(CONSTANT, literal)
    try:
        value = json.loads(text, **hooks)
    except RecursionError:
        raise JSONLimitError(RECURSION) from None
    strings = False  # check strings only when an escape could have made a lone surrogate
    if not limits.lone_surrogates:
        pattern = _SURROGATE_ESCAPE_BYTES if isinstance(text, (bytes, bytearray)) else _SURROGATE_ESCAPE
        strings = pattern.search(text) is not None
    _walk(value, limits.max_depth, strings)
    return value


def _walk(value: Any, max_depth: int, strings: bool) -> None:
    """The first value beyond a limit, as a :class:`JSONLimitError`: a refused number, a lone surrogate (when
    `strings`), an array or object deeper than `max_depth`. Without recursion; a field's path is kept as a chain
    ``(parent chain, key)`` and spelled out only for the error."""
    stack: list[tuple[Any, int, tuple | None]] = [(value, 0, None)]
    while stack:
        item, depth, chain = stack.pop()
        if isinstance(item, _Refused):
            raise JSONLimitError(item.kind, _path(chain), item.literal)
        if strings and isinstance(item, str) and _lone_surrogate(item):
            raise JSONLimitError(SURROGATE, _path(chain))
        if isinstance(item, (dict, list)):
            if depth >= max_depth:
                raise JSONLimitError(DEPTH, _path(chain))
            if isinstance(item, dict):
                if strings and any(_lone_surrogate(key) for key in item):
                    raise JSONLimitError(SURROGATE_KEY, _path(chain))
                pairs = item.items()
            else:
                pairs = enumerate(item)
            stack.extend((child, depth + 1, (chain, key)) for key, child in pairs)


def _path(chain: tuple | None) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    while chain is not None:
        chain, key = chain
        parts.append(key)
    return tuple(reversed(parts))
