"""Terminal output that works anywhere: one-line warnings, locale-safe streams, progress bars on stderr.

Every message of needlebench goes through here or through rich / tqdm on streams made safe by
:func:`make_streams_safe`, so an ASCII locale (``LC_ALL=C PYTHONUTF8=0``) never raises ``UnicodeEncodeError``.
Every message shows its control characters escaped (:func:`printable`): a folder or file name holding an escape
sequence (``ESC ] 0 ; ... BEL`` sets the window title, ``ESC [ 2 J`` clears the screen; ECMA-48) or a newline
prints as ``\x1b]0;...`` or ``\n`` and never acts on the terminal or adds a line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

PREFIX = "needlebench"
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: object) -> str:
    """`text` with every character Python does not call printable (``str.isprintable``: the control characters
    C0, DEL and C1, format characters such as the bidi overrides, line and paragraph separators) written as its
    escape (``\\n``, ``\\x1b``, ``\\u202e``); a space and any printable letter of any script are kept."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _ESCAPES.get(char) or ascii(char)[1:-1] for char in text)


def markup_safe(text: object) -> str:
    """`text` made :func:`printable`, with rich's markup brackets escaped (for a rich console, table or status)."""
    from rich.markup import escape

    return escape(printable(text))


def make_streams_safe() -> None:
    """Let stdout and stderr write any text: characters the locale cannot encode become escapes (``\\u2026``)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is None:
            continue
        try:
            reconfigure(errors="backslashreplace")
        except (ValueError, OSError):  # a detached or closed stream: leave it as it is
            continue


def warn(message: str, stream: TextIO | None = None) -> None:
    """Print a one-line warning on stderr (the work goes on)."""
    text = printable(" ".join(str(message).split()))
    print(f"{PREFIX}: warning: {text}", file=stream or sys.stderr, flush=True)


def notice(message: str, stream: TextIO | None = None) -> None:
    """Print a one-line notice on stderr (not a problem, just what the tool decided)."""
    text = printable(" ".join(str(message).split()))
    print(f"{PREFIX}: {text}", file=stream or sys.stderr, flush=True)


def progress_enabled(stream: TextIO | None = None) -> bool:
    """Progress bars only on an interactive stderr (logs and pipes stay quiet)."""
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):
        return False


def plain_rows(rows: Iterable[Iterable[object]]) -> str:
    """Rows as plain text for pipes: tab-separated columns, one row a line, nothing cut."""
    return "".join("\t".join(printable(cell) for cell in row) + "\n" for row in rows)


def working(message: str):
    """A context manager that shows a spinner with `message` on an interactive stderr (silent elsewhere)."""
    import contextlib
    import multiprocessing

    if not progress_enabled() or multiprocessing.parent_process() is not None:
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(markup_safe(message))
