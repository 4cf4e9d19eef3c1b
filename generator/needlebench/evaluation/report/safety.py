"""What ``needlebench report`` does with input from someone else: results folders walked without following links,
files read only when they are regular files, JSON parsed with limits, and text from the results made safe for each
place it reaches (a terminal line, a file name, a figure title).

A results folder (a colleague's lm-eval ``--output_path``) may hold anything: links to the user's files, FIFOs and
devices under a samples file's name, folders nested past the interpreter's recursion limit, JSON nested as deep,
``NaN``/``Infinity`` (which Python's ``json`` accepts, RFC 8259 section 6 does not), integers of thousands of
digits (CPython refuses to convert more than 4,300, ``sys.int_info.default_max_str_digits``), model names with
terminal escapes or matplotlib mathtext.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from needlebench import safe_json
from needlebench.errors import NeedlebenchError
from needlebench.safe_fs import Folder
from needlebench.safe_json import JSONLimitError
from needlebench.terminal import printable

#: Deepest nesting of arrays and objects accepted in a results, samples or health file (lm-eval's are 5 deep).
MAX_JSON_DEPTH = 64
#: Most digits of a JSON integer kept as an integer; a longer one is read as an infinite float (and then refused or
#: left out as a non-finite number): ``float()`` of an integer over 308 digits overflows.
MAX_INT_DIGITS = 300
#: Largest magnitude of a score, count or metric the report averages (math.fsum overflows near 1e308).
MAX_MAGNITUDE = 1e15
#: Largest results or run-health JSON file read (samples files are read line by line, without a cap).
MAX_JSON_BYTES = 256 << 20
#: Deepest folder under a results folder that is searched for lm-eval files (lm-eval writes 1 or 2 levels).
MAX_FOLDER_DEPTH = 32


def shown(path: Any) -> str:
    """A path or name in a one-line message: :func:`~needlebench.terminal.printable` of its file-system path.

    Kept apart from ``printable``: an ``os.PathLike`` is shown as ``os.fspath`` gives it, where ``str()`` may differ
    (an ``os.DirEntry`` is ``<DirEntry 'name'>``, a bytes path ``b'...'``)."""
    return printable(os.fspath(path) if isinstance(path, os.PathLike) else path)


_LIMITS = safe_json.Limits(
    max_depth=MAX_JSON_DEPTH, max_int_digits=MAX_INT_DIGITS, over_digits="infinite", finite_only=False
)


def loads(text: str | bytes) -> Any:
    """``json.loads`` with limits (:func:`needlebench.safe_json.loads`): nesting at most :data:`MAX_JSON_DEPTH`
    (deeper is a :class:`~needlebench.safe_json.JSONLimitError` saying so, never a ``RecursionError``), integers
    longer than :data:`MAX_INT_DIGITS` digits read as infinite floats. ``NaN`` and ``Infinity`` are read as floats
    (the callers leave non-finite numbers out or refuse them)."""
    try:
        return safe_json.loads(text, _LIMITS)
    except JSONLimitError as error:  # only nesting is beyond these limits; the report's line names no field
        raise JSONLimitError(
            error.kind, error.path, error.literal, f"nested deeper than {MAX_JSON_DEPTH} levels"
        ) from None


def is_finite_number(value: Any) -> bool:
    """An int or float (not a bool) that is finite and at most :data:`MAX_MAGNITUDE` in magnitude."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) <= MAX_MAGNITUDE
    )


# --------------------------------------------------------------------------------------------- files


def kind_of(info: os.stat_result) -> str:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def not_regular(path: Path, info: os.stat_result) -> NeedlebenchError:
    return NeedlebenchError(
        f"{shown(path)} is {kind_of(info)}, not a regular file; a results folder holds lm-eval's own files, and "
        "needlebench never follows a link inside it"
    )


def regular_file(path: Path) -> bool:
    """Whether `path` is a regular file (``lstat``: a link is not followed); False when nothing is there, a
    one-line error when something else is (a link, FIFO, device, socket or folder under a file's name)."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        raise NeedlebenchError(f"cannot read {shown(path)}: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise not_regular(path, info)
    return True


def open_text(path: Path, limit: int | None = None) -> io.TextIOWrapper:
    """The regular file `path` as UTF-8 text (universal newlines, as ``open`` reads it), opened without following
    a link at its name (``O_NOFOLLOW``) and checked with ``fstat`` on the descriptor read (safe_fs); read up to the
    size it had when opened (:func:`size_at_open`)."""
    return io.TextIOWrapper(open_binary(path, limit), encoding="utf-8")


def open_binary(path: Path, limit: int | None = None) -> io.BufferedReader:
    """The regular file `path` for reading in binary, opened without following a link at its name (safe_fs), at most
    `limit` bytes, and read no further than its size when opened (:func:`size_at_open`)."""
    try:
        with Folder.open(path.parent) as folder:
            raw = folder.open_read(path.name, limit=limit)
    except NeedlebenchError as error:
        raise NeedlebenchError(printable(str(error))) from None
    except OSError as error:
        raise NeedlebenchError(f"cannot read {shown(path)}: {error.strerror}") from None
    return size_at_open(raw)


class _Prefix(io.RawIOBase):
    """The first `size` bytes of a binary file object (then end of file), closing it when closed."""

    def __init__(self, handle: Any, size: int) -> None:
        super().__init__()
        self._handle, self._left = handle, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        with memoryview(buffer) as view:
            count = self._handle.readinto(view[: self._left]) or 0
        self._left -= count
        return count

    def close(self) -> None:
        try:
            self._handle.close()
        finally:
            super().close()


def size_at_open(handle: Any) -> io.BufferedReader:
    """`handle` (a binary file object) read only up to the size ``fstat`` gives now: a file another process keeps
    appending to (a shared results folder) ends there, so a read never runs for as long as the writer goes on."""
    try:
        size = os.fstat(handle.fileno()).st_size
    except BaseException:
        handle.close()
        raise
    return io.BufferedReader(_Prefix(handle, size))


def walk_files(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry under the folder `root` that is not a folder, with its ``lstat``, without following links and
    without recursion; a folder nested deeper than :data:`MAX_FOLDER_DEPTH` is a one-line error."""
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as entries:
                found = [(Path(entry.path), entry.stat(follow_symlinks=False)) for entry in entries]
        except OSError as error:
            raise NeedlebenchError(f"cannot read the results folder {shown(folder)}: {error.strerror}") from None
        for path, info in found:
            if stat.S_ISDIR(info.st_mode):
                if depth >= MAX_FOLDER_DEPTH:
                    raise NeedlebenchError(
                        f"results folder {shown(root)} holds folders nested more than {MAX_FOLDER_DEPTH} deep "
                        f"({shown(path)[:200]}...); pass lm-eval --output_path folders"
                    )
                stack.append((path, depth + 1))
            else:
                yield path, info


# --------------------------------------------------------------------------------------------- sinks


#: Longest file name (in UTF-8 bytes, extension excluded) a report writes: NAME_MAX is 255 on Linux and macOS, and
#: safe_fs puts a temporary file beside it under a name of its own.
MAX_STEM_BYTES = 180


def bounded_stem(stem: str) -> str:
    """`stem` when it fits :data:`MAX_STEM_BYTES`, else its start and a hash of the whole (two long names that
    share their start stay apart)."""
    if len(stem.encode("utf-8")) <= MAX_STEM_BYTES:
        return stem
    digest = hashlib.sha256(stem.encode("utf-8")).hexdigest()[:12]
    head = stem.encode("utf-8")[: MAX_STEM_BYTES - 13].decode("utf-8", "ignore")
    return f"{head}-{digest}"


def unique_stem(stem: str, taken: set[str]) -> str:
    """`stem` (bounded), or ``<stem>-2``, ``-3``... when a file of that name (compared without case: macOS and
    Windows file systems) is already taken; the chosen one is added to `taken`."""
    stem = bounded_stem(stem)
    candidate, number = stem, 1
    while candidate.casefold() in taken:
        number += 1
        candidate = bounded_stem(f"{stem}-{number}")
    taken.add(candidate.casefold())
    return candidate


def plain_figure_text(text: Any) -> str:
    """Text from the results as matplotlib draws it literally: every ``$`` escaped (``\\$``), so no mathtext is
    parsed (matplotlib's ``cbook.is_math_text`` counts unescaped dollars only), and no control character."""
    text = "".join(char if char.isprintable() or char == "\n" else "\ufffd" for char in str(text))
    return text.replace("$", r"\$")


# --------------------------------------------------------------------------------------------- figures


#: rcParams that are settings of the session, not style (matplotlib's STYLE_BLACKLIST, lib/matplotlib/style/core.py):
#: left as they are when the figures are drawn with the defaults.
_NOT_STYLE = frozenset(
    {
        "interactive",
        "backend",
        "webagg.port",
        "webagg.address",
        "webagg.port_retries",
        "webagg.open_in_browser",
        "backend_fallback",
        "toolbar",
        "timezone",
        "figure.max_open_warning",
        "figure.raise_window",
        "savefig.directory",
        "tk.window_focus",
        "docstring.hardcopy",
        "date.epoch",
    }
)


def import_matplotlib() -> Any:
    """matplotlib, imported from an empty folder of its own when not yet imported: at import it reads the
    ``matplotlibrc`` of the current folder first (``matplotlib_fname`` in lib/matplotlib/__init__.py), which in a
    results folder from someone else may be a FIFO (the import would wait forever) or a link to an endless file."""
    if "matplotlib" in sys.modules:
        return sys.modules["matplotlib"]
    try:
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        here = None
    if here is None:
        import matplotlib

        return matplotlib
    try:
        with tempfile.TemporaryDirectory(prefix="needlebench-mpl-") as empty:
            os.chdir(empty)
            try:
                import matplotlib
            finally:
                os.fchdir(here)
    finally:
        os.close(here)
    return matplotlib


@contextlib.contextmanager
def default_style() -> Iterator[None]:
    """Within it, matplotlib draws with its own defaults (``rcParamsDefault``, from its bundled matplotlibrc), never
    a style from a ``matplotlibrc`` in the current folder (a results folder from someone else, when the user runs
    ``needlebench report .`` there) or ``$MATPLOTLIBRC``: the report's figures look the same wherever it is run."""
    matplotlib = import_matplotlib()
    defaults = {key: value for key, value in matplotlib.rcParamsDefault.items() if key not in _NOT_STYLE}
    with matplotlib.rc_context(rc=defaults):
        yield
