"""Local inputs read once: the bytes of a haystack, needles or names file (or of a haystack folder's ``.txt``
files) are read a single time per process and every later use (the corpus, its hash in the recipe, the needles)
takes those bytes, never the path again.

A check and the read it guards must use the same descriptor: a file checked by path and then read by path again can
be swapped for a link between the two (a second process flipping ``race.txt`` between a file and a link to a private
file). An experiment file's folder is opened once, before the file is read, and its inputs are opened relative to
that descriptor with ``O_NOFOLLOW`` (:class:`needlebench.safe_fs.Folder`) and pinned here; a file path the user
typed is read once (following a link there: it is theirs) and pinned too; in a folder the user typed, each ``.txt``
entry is read relative to the folder's descriptor without following links (the folder may come from someone else).
Build workers are forked (:mod:`needlebench.dataset.build`) and inherit the pins.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from needlebench.errors import NeedlebenchError
from needlebench.safe_fs import Folder


@dataclass(frozen=True)
class Pinned:
    """A local input's bytes: one file (``kind="file"``, one entry) or a folder's ``.txt`` files in sorted order."""

    name: str
    kind: str
    files: tuple[tuple[str, bytes], ...]
    #: For a path the user typed: its identity, size and modification time when read (a file the user changes
    #: between two commands run in one process is read again); None for an input read through an experiment
    #: folder's descriptors, which is never read again.
    stamp: tuple | None = None

    @property
    def size(self) -> int:
        return sum(len(data) for _, data in self.files)


_PINNED: dict[str, Pinned] = {}
#: Largest local input read (a haystack: see :data:`needlebench.sources.corpus.MAX_HAYSTACK_BYTES`).
MAX_INPUT_BYTES = 64 * 1024 * 1024


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def pinned(path: str | os.PathLike[str]) -> Pinned | None:
    """The bytes pinned for `path` (a dictionary look-up: nothing on disk is touched), or None."""
    return _PINNED.get(_key(path))


def pin(path: str | os.PathLike[str], value: Pinned, *, fresh: bool = False) -> Pinned:
    """Pin `value` as what `path` holds for the rest of the process: the first pin stays, unless `fresh` (a new
    read of the same input, which every later use then takes)."""
    if fresh:
        _PINNED[_key(path)] = value
        return value
    return _PINNED.setdefault(_key(path), value)


def unpin(path: str | os.PathLike[str]) -> None:
    """Forget the bytes pinned for `path` (the next use reads it again, once)."""
    _PINNED.pop(_key(path), None)


def _stamp(path: str | os.PathLike[str]) -> tuple | None:
    """What tells a changed file or folder (of ``.txt`` files) at a path the user typed: identity, size, mtime."""
    try:
        info = os.stat(os.path.expanduser(os.fspath(path)))
        stamp: tuple = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if stat.S_ISDIR(info.st_mode):
            for entry in sorted(Path(os.path.expanduser(os.fspath(path))).iterdir()):
                if entry.suffix == ".txt":
                    found = entry.stat()
                    stamp += ((entry.name, found.st_ino, found.st_size, found.st_mtime_ns),)
        return stamp
    except OSError:
        return None


def current(path: str | os.PathLike[str]) -> Pinned | None:
    """The pin of `path` unless it is the pin of a path the user typed that has changed since (then forgotten)."""
    held = pinned(path)
    if held is not None and held.stamp is not None and _stamp(path) != held.stamp:
        unpin(path)
        return None
    return held


def read_fd(fd: int, shown: str, what: str, limit: int | None) -> bytes:
    """The bytes of the open regular file `fd` (closed here), at most `limit`; a one-line error otherwise."""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NeedlebenchError(
                f"{what} {shown} is not a regular file (a FIFO, device, socket or folder); give a file"
            )
        if limit is not None and info.st_size > limit:
            raise NeedlebenchError(f"{what} {shown} has {info.st_size:,} bytes; allowed: at most {limit:,}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read() if limit is None else handle.read(limit + 1)
    except OSError as error:
        raise NeedlebenchError(f"cannot read {what} {shown}: {error.strerror or error}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if limit is not None and len(data) > limit:
        raise NeedlebenchError(f"{what} {shown} has more than {limit:,} bytes")
    return data


def read_user_file(path: str | os.PathLike[str], what: str, limit: int | None = None) -> bytes:
    """The bytes of a file at a path the user gave (a link there is followed: it is theirs), read once per process:
    pinned bytes when there are, else read through one descriptor (``O_NONBLOCK``: a FIFO never blocks the open,
    open(2); refused by ``fstat`` on that descriptor) and pinned."""
    shown = os.fspath(path)
    held = current(path)
    if held is not None:
        if held.kind != "file":
            raise NeedlebenchError(f"{what} {shown} is a folder; give a file")
        data = held.files[0][1]
        if limit is not None and len(data) > limit:
            raise NeedlebenchError(f"{what} {shown} has {len(data):,} bytes; allowed: at most {limit:,}")
        return data
    try:
        fd = os.open(os.path.expanduser(shown), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise NeedlebenchError(f"cannot read {what} {shown}: {error.strerror or error}") from None
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    stamp = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)  # of the file read, as _stamp gives it
    data = read_fd(fd, shown, what, limit)
    return pin(path, Pinned(Path(shown).name, "file", ((Path(shown).name, data),), stamp)).files[0][1]


def read_user_folder(path: str | os.PathLike[str], what: str, limit: int) -> Pinned:
    """The ``.txt`` files of a folder the user gave, sorted, at most `limit` bytes in all; read once per process
    (pinned). The folder is opened as the user typed it (:meth:`needlebench.safe_fs.Folder.open`) and each entry
    relative to its descriptor without following links (:func:`read_folder_txt`): the folder may come from someone
    else (a clone, a shared folder), and a ``.txt`` entry that is a link (to the user's ``~/notes.txt``) is a
    one-line error naming it, as in an experiment file's folder."""
    held = current(path)
    if held is not None:
        return held
    shown = os.fspath(path)
    where = Path(shown).expanduser()
    stamp = _stamp(path)
    try:
        with Folder.open(where) as folder:
            read = read_folder_txt(folder, where.name, shown, what, limit, sole=False)
    except OSError as error:
        raise NeedlebenchError(f"cannot read {what} {shown}: {error.strerror or error}") from None
    return pin(path, Pinned(read.name, "folder", read.files, stamp))


def read_folder_txt(folder: Folder, name: str, shown: str, what: str, limit: int, *, sole: bool = True) -> Pinned:
    """The ``.txt`` regular files directly in `folder` (sorted), each read through one ``O_NOFOLLOW`` descriptor;
    a ``.txt`` entry that is a link, FIFO or device is a one-line error, other entries are skipped. With `sole`, a
    file with other names (a hard link) is refused too (:meth:`needlebench.safe_fs.Folder.open_read`)."""
    files = []
    total = 0
    for entry in folder.listdir():
        if not entry.endswith(".txt") or len(entry) <= 4:
            continue
        info = folder.lstat(entry)
        if info is None or stat.S_ISDIR(info.st_mode):
            continue
        try:
            data = folder.read_bytes(entry, limit=limit - total, what=f" ({what} {shown})", sole=sole)
        except NeedlebenchError as error:  # the size lines of Folder.open_read/read_bytes (not a name holding "holds")
            left = limit - total
            if str(error).endswith((f"allowed: at most {left:,}", f"holds more than {left:,} bytes")):
                raise NeedlebenchError(
                    f"{what} {shown} has more than {limit:,} bytes; allowed: at most {limit:,} bytes of text; "
                    "give a part of it"
                ) from None
            raise
        total += len(data)
        files.append((entry, data))
    return Pinned(name, "folder", tuple(files))


#: Private copies of local folders (an experiment's tokenizer folder) and the folder each was copied from.
_COPIES: dict[str, str] = {}


def note_copy(copy: Path, origin: Path) -> None:
    """Remember that `copy` is a private copy of `origin` (the local index names `origin`, which outlives it)."""
    _COPIES[_key(copy)] = str(origin)


def origin_of(path: str | os.PathLike[str]) -> str:
    """The folder a private copy was made from, else `path` itself."""
    return _COPIES.get(_key(path), os.fspath(path))
