"""Every write into a folder the user did not make for us goes through here: no name such a folder could have planted
is ever followed.

A dataset folder, a results folder or a cache may come from anyone (a git clone keeps symbolic links; another local
user may share ``/tmp``). Writing by path (``open(folder / name, "w")``, ``os.replace(temp, path)``) follows whatever
link sits at the name, or at any folder on the way, at the moment of the call, and a check made a moment before (an
``lstat``) does not hold at that moment. So every operation here is relative to a directory file descriptor
(:class:`Folder`), and each folder below the one the user named is opened with ``O_DIRECTORY | O_NOFOLLOW``: once
open, the descriptor is the folder that was checked, whatever is renamed or linked at its name afterwards (the
"at"-calls of POSIX.1-2008: ``openat``, ``renameat``, ``linkat``, ``unlinkat``, ``mkdirat``; Python's ``dir_fd``).

- A new file is written under an unpredictable name created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (mode 0600) in
  the target folder, then renamed over the target (:meth:`Folder.write_bytes`, :meth:`Folder.atomic`): a link
  planted at the target is replaced, never written through.
- A file is read only when it is a regular file, opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks, a
  device or socket is refused) and checked with ``fstat`` on the descriptor that is then read
  (:meth:`Folder.open_read`).
- Private folders and files (caches) get 0700 and 0600 with ``fchmod`` whatever the umask (:func:`private_folder`).

The folder the user named on the command line (``--out DIR``) is opened one component at a time from ``/``: a link
on that path is followed only where it belongs to the machine's or the user's own layout (:meth:`Folder.open`), so
``--out shared/sub/report`` never follows a link ``sub`` that a shared folder carries. New files get the mode asked
for less the umask (private files: 0600 whatever it is).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from needlebench.errors import NeedlebenchError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: errno values of a hard link that the file system does not support (a copy is made instead)
_NO_LINK = (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EMLINK, errno.EOPNOTSUPP)
_COPY_CHUNK = 1 << 20


def _trusted_ancestors() -> set[Path]:
    """The home folder, the current folder (as the shell names it, ``$PWD``, and as the kernel does) and all their
    ancestors: links there are the user's own layout, not something a folder from someone else planted."""
    found: set[Path] = set()
    places = [os.path.expanduser("~"), os.getcwd()]
    logical = os.environ.get("PWD")
    if logical and os.path.isabs(logical) and os.path.realpath(logical) == os.path.realpath(os.getcwd()):
        places.append(logical)
    for place in places:
        path = Path(os.path.abspath(place))
        found.update([path, *path.parents])
    return found


def _umask() -> int:
    """The process's umask, read without changing it (``Umask:`` of /proc/self/status, Linux 4.7+; elsewhere set and
    restored at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def parts_of(name: str | os.PathLike[str], where: object = None) -> tuple[str, ...]:
    """The components of a relative name inside a folder; a one-line error for an absolute name, ``..``, ``.``,
    an empty part, a NUL or a backslash."""
    text = os.fspath(name)
    path = PurePosixPath(text)
    if (
        not text
        or "\0" in text
        or "\\" in text
        or path.is_absolute()
        or any(part in ("", ".", "..") for part in text.split("/"))
    ):
        raise NeedlebenchError(
            f"{where or 'a folder'} names the file {text!r}; allowed: a relative path inside the folder without "
            "'..', '.' or empty parts"
        )
    return path.parts


class Folder:
    """An open directory: every operation is relative to its descriptor, never to a path looked up again.

    Names may have several parts (``"data/atc_en/x.parquet"``): each folder on the way is opened with
    ``O_NOFOLLOW``, so a link at any of them is refused (one-line :class:`NeedlebenchError`), never followed."""

    __slots__ = ("fd", "path")

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = Path(path)

    # --- opening ---------------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, create: bool = False, mode: int = 0o777, private: bool = False
    ) -> Folder:
        """The folder `path` the user named (created with its missing parents when `create`), opened one component
        at a time from ``/`` with ``O_NOFOLLOW``, so a component swapped for a link meanwhile is refused.

        A symbolic link on the way is followed only where it is part of the machine's or the user's own layout: a
        component directly under ``/`` (``/tmp`` -> ``/private/tmp``), or an ancestor of the home folder or of the
        current folder (``/home`` -> ``/usr/home``). Any other link (``shared/sub`` in a folder from someone else,
        typed as ``--out shared/sub/report``) is a one-line error naming it and the real path to give instead.
        With `private`, each folder this call creates is made 0700 (``fchmod`` on its own descriptor, whatever the
        umask)."""
        path = Path(path)
        absolute = Path(os.path.abspath(path))
        trusted = _trusted_ancestors()
        fd = os.open("/", _DIR_FLAGS)
        current = Path("/")
        try:
            for part in absolute.parts[1:]:
                current = current / part
                made = False
                try:
                    info = os.stat(part, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700 if private else mode, dir_fd=fd)
                        made = True
                    info = os.stat(part, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    if len(current.parts) > 2 and current not in trusted:
                        raise NeedlebenchError(
                            f"{path} goes through the symbolic link {current} (-> {_link_target(current)}); "
                            "needlebench follows no link below your home or current folder in a path it reads or "
                            f"writes (a folder from someone else may carry one): give the real path "
                            f"{os.path.realpath(path)}"
                        )
                    child = os.open(current, _DIR_FLAGS)
                else:
                    child = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                    if made and private:
                        os.fchmod(child, 0o700)  # the very folder made above: its descriptor, never a path
                os.close(fd)
                fd = child
        except NotADirectoryError:
            os.close(fd)
            raise NeedlebenchError(f"{path} is not a folder ({current} is a file)") from None
        except OSError as error:
            os.close(fd)
            if error.errno == errno.ELOOP:
                raise NeedlebenchError(
                    f"{path} changed while it was opened ({current} became a symbolic link); needlebench never "
                    "follows such a link"
                ) from None
            raise
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    def sub(self, name: str | os.PathLike[str], *, create: bool = False, mode: int = 0o777) -> Folder:
        """The folder `name` inside this one, each part opened with ``O_NOFOLLOW`` (created when `create`, with
        `mode` less the umask)."""
        fd = os.dup(self.fd)
        path = self.path
        try:
            for part in parts_of(name, self.path):
                path = path / part
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, mode, dir_fd=fd)
                try:
                    child = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as error:
                    if error.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise NeedlebenchError(
                            f"{path} is not a folder (a symbolic link or a file); needlebench never follows a "
                            f"link inside {self.path}"
                        ) from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return Folder(fd, path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Folder({str(self.path)!r})"

    @contextlib.contextmanager
    def _parent(self, name: str | os.PathLike[str], create: bool = False) -> Iterator[tuple[Folder, str]]:
        """(the folder holding `name`, its last part); the folder is closed after use."""
        parts = parts_of(name, self.path)
        if len(parts) == 1:
            yield self, parts[0]
            return
        with self.sub("/".join(parts[:-1]), create=create) as parent:
            yield parent, parts[-1]

    # --- looking ------------------------------------------------------------------------------------------------

    def lstat(self, name: str | os.PathLike[str]) -> os.stat_result | None:
        """``lstat`` of `name` (None when it or a folder on the way does not exist); a link on the way is refused."""
        try:
            with self._parent(name) as (parent, leaf):
                return os.stat(leaf, dir_fd=parent.fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def is_file(self, name: str | os.PathLike[str]) -> bool:
        info = self.lstat(name)
        return info is not None and stat.S_ISREG(info.st_mode)

    def is_dir(self, name: str | os.PathLike[str]) -> bool:
        info = self.lstat(name)
        return info is not None and stat.S_ISDIR(info.st_mode)

    def exists(self, name: str | os.PathLike[str]) -> bool:
        return self.lstat(name) is not None

    def listdir(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    # --- reading ------------------------------------------------------------------------------------------------

    def open_read(
        self, name: str | os.PathLike[str], *, limit: int | None = None, what: str = "", sole: bool = False
    ) -> IO[bytes]:
        """A binary file object on the regular file `name` (never a link, FIFO, device or socket: a one-line
        error), at most `limit` bytes long. FileNotFoundError when it does not exist. With `sole`, a file with other
        names (a hard link, which O_NOFOLLOW does not see: perhaps to a file of the user's elsewhere) is refused."""
        with self._parent(name) as (parent, leaf):
            path = parent.path / leaf
            try:
                fd = os.open(leaf, _READ_FLAGS, dir_fd=parent.fd)
            except OSError as error:
                if isinstance(error, FileNotFoundError):
                    raise
                if error.errno == errno.ELOOP:
                    raise NeedlebenchError(
                        f"{path}{what} is a symbolic link; needlebench never follows a link inside {self.path}"
                    ) from None
                raise NeedlebenchError(f"{path}{what} cannot be read: {error.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise NeedlebenchError(f"{path}{what} is not a regular file (a FIFO, device, socket or folder)")
            if limit is not None and info.st_size > limit:
                raise NeedlebenchError(f"{path}{what} holds {info.st_size:,} bytes; allowed: at most {limit:,}")
            if sole and info.st_nlink > 1:
                raise NeedlebenchError(
                    f"{path}{what} is a hard link ({info.st_nlink} names, perhaps a file elsewhere); allowed: a file "
                    "of this folder alone (copy it here, or name it on the command line)"
                )
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def read_bytes(
        self, name: str | os.PathLike[str], *, limit: int | None = None, what: str = "", sole: bool = False
    ) -> bytes:
        with self.open_read(name, limit=limit, what=what, sole=sole) as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise NeedlebenchError(f"{self.path / os.fspath(name)}{what} holds more than {limit:,} bytes")
        return data

    def read_text(self, name: str | os.PathLike[str], *, limit: int | None = None, what: str = "") -> str:
        data = self.read_bytes(name, limit=limit, what=what)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise NeedlebenchError(f"{self.path / os.fspath(name)}{what} is not UTF-8 text") from None

    # --- writing ------------------------------------------------------------------------------------------------

    def _new_temp(self, leaf: str) -> tuple[int, str]:
        """A new file beside `leaf` under an unpredictable name (``O_EXCL | O_NOFOLLOW``, 0600)."""
        for _ in range(100):
            temp = f".{leaf[:80]}.{secrets.token_hex(8)}.tmp"
            try:
                return os.open(temp, _NEW_FLAGS, 0o600, dir_fd=self.fd), temp
            except FileExistsError:
                continue
        raise FileExistsError(errno.EEXIST, "no unused temporary name", str(self.path))

    @contextlib.contextmanager
    def atomic(
        self, name: str | os.PathLike[str], *, mode: int = 0o644, create_parents: bool = False
    ) -> Iterator[IO[bytes]]:
        """A binary file object whose bytes replace `name` atomically when the block ends without an error (the
        temporary file is removed otherwise), with `mode` less the umask. Whatever sat at `name` (a planted link
        included) is replaced."""
        with self._parent(name, create=create_parents) as (parent, leaf):
            fd, temp = parent._new_temp(leaf)
            try:
                with os.fdopen(fd, "wb") as handle:
                    yield handle
                    handle.flush()
                    os.fsync(handle.fileno())
                    os.fchmod(handle.fileno(), mode & ~_umask())
                os.replace(temp, leaf, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=parent.fd)
                raise

    def write_bytes(
        self, name: str | os.PathLike[str], data: bytes, *, mode: int = 0o644, create_parents: bool = False
    ) -> None:
        with self.atomic(name, mode=mode, create_parents=create_parents) as handle:
            handle.write(data)

    def write_text(
        self, name: str | os.PathLike[str], text: str, *, mode: int = 0o644, create_parents: bool = False
    ) -> None:
        self.write_bytes(name, text.encode("utf-8"), mode=mode, create_parents=create_parents)

    def create_new(self, name: str | os.PathLike[str], data: bytes, *, mode: int = 0o600) -> bool:
        """Write `name` only when nothing is there (``O_EXCL``); False when something already is."""
        with self._parent(name) as (parent, leaf):
            try:
                fd = os.open(leaf, _NEW_FLAGS, mode, dir_fd=parent.fd)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
                os.fchmod(handle.fileno(), mode & ~_umask())
            return True

    def append_bytes(self, name: str | os.PathLike[str], data: bytes, *, mode: int = 0o600) -> None:
        """Append to the regular file `name` (created with `mode` when absent); a link or a non-regular file there
        is a one-line error, never written through."""
        with self._parent(name) as (parent, leaf):
            path = parent.path / leaf
            try:
                fd = os.open(
                    leaf,
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                    mode,
                    dir_fd=parent.fd,
                )
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise NeedlebenchError(f"{path} is a symbolic link; needlebench never writes through one") from None
                raise
            with os.fdopen(fd, "ab") as handle:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise NeedlebenchError(f"{path} is not a regular file; needlebench appends only to its own files")
                if info.st_nlink > 1:  # a hard link to a file elsewhere (swapped in under the name): not ours alone
                    raise NeedlebenchError(
                        f"{path} is a hard link to another file; needlebench appends only to files of its own"
                    )
                handle.write(data)

    def mkdir(self, name: str | os.PathLike[str], *, mode: int = 0o777, exist_ok: bool = True) -> None:
        with self._parent(name, create=True) as (parent, leaf):
            try:
                os.mkdir(leaf, mode, dir_fd=parent.fd)
            except FileExistsError:
                if not exist_ok:
                    raise
                info = os.stat(leaf, dir_fd=parent.fd, follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode):
                    raise NeedlebenchError(
                        f"{parent.path / leaf} is not a folder (a symbolic link or a file)"
                    ) from None

    def new_private(self, make_name: Callable[[], str]) -> str:
        """A new folder here, 0700 whatever the umask, under a name `make_name` draws (unpredictable: it must hold
        random characters), made by ``mkdirat`` (a name already taken draws again, as ``tempfile.mkdtemp`` does) and
        made private by ``fchmod`` on its own descriptor; returns the name."""
        for _ in range(100):
            name = make_name()
            try:
                os.mkdir(name, 0o700, dir_fd=self.fd)
            except FileExistsError:
                continue
            with self.sub(name) as made:
                os.fchmod(made.fd, 0o700)  # mkdir's mode is cut by the umask
            return name
        raise FileExistsError(errno.EEXIST, "no unused folder name", str(self.path))

    # --- removing and moving --------------------------------------------------------------------------------

    def unlink(self, name: str | os.PathLike[str], *, missing_ok: bool = True) -> None:
        """Remove the file (or link: the link itself, never its target) `name`."""
        try:
            with self._parent(name) as (parent, leaf):
                os.unlink(leaf, dir_fd=parent.fd)
        except (FileNotFoundError, NotADirectoryError):
            if not missing_ok:
                raise

    def rmdir(self, name: str | os.PathLike[str]) -> bool:
        """Remove the empty folder `name`; False when it is not empty or not there."""
        try:
            with self._parent(name) as (parent, leaf):
                os.rmdir(leaf, dir_fd=parent.fd)
        except OSError:
            return False
        return True

    def rmtree(self, name: str | os.PathLike[str]) -> None:
        """Remove the folder `name` and everything in it, descending by descriptors (never through a link: a link
        is removed itself). Nothing when it is not there."""
        try:
            with self._parent(name) as (parent, leaf):
                info = os.stat(leaf, dir_fd=parent.fd, follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode):
                    os.unlink(leaf, dir_fd=parent.fd)
                    return
                # shutil.rmtree with dir_fd walks by descriptors (its _rmtree_safe_fd, CPython Lib/shutil.py)
                shutil.rmtree(leaf, dir_fd=parent.fd)
        except (FileNotFoundError, NotADirectoryError):
            return

    def replace_from(self, source: Folder, source_name: str, name: str | os.PathLike[str]) -> None:
        """Rename `source`/`source_name` to `name` here (one atomic rename, both ends relative to descriptors)."""
        with source._parent(source_name) as (src, src_leaf), self._parent(name) as (dst, leaf):
            os.replace(src_leaf, leaf, src_dir_fd=src.fd, dst_dir_fd=dst.fd)

    def place_from(self, source: Folder, source_name: str, name: str | os.PathLike[str]) -> None:
        """Put the bytes of the regular file `source`/`source_name` at `name` here: a hard link made without
        following links (a copy through descriptors where links are not supported), replacing what was there."""
        with source._parent(source_name) as (src, src_leaf), self._parent(name, create=True) as (dst, leaf):
            info = os.stat(src_leaf, dir_fd=src.fd, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise NeedlebenchError(f"{src.path / src_leaf} is not a regular file")
            here = dst.lstat(leaf)
            if here is not None and (here.st_dev, here.st_ino) == (info.st_dev, info.st_ino):
                return
            temp = f".{leaf[:80]}.{secrets.token_hex(8)}.tmp"
            try:
                os.link(src_leaf, temp, src_dir_fd=src.fd, dst_dir_fd=dst.fd, follow_symlinks=False)
            except OSError as error:
                if error.errno not in _NO_LINK:
                    raise
                with src.open_read(src_leaf) as reader, dst.atomic(leaf, mode=stat.S_IMODE(info.st_mode)) as writer:
                    shutil.copyfileobj(reader, writer, _COPY_CHUNK)
                return
            try:
                os.replace(temp, leaf, src_dir_fd=dst.fd, dst_dir_fd=dst.fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dst.fd)
                raise


@contextlib.contextmanager
def opened(folder: Folder | str | os.PathLike[str]) -> Iterator[Folder]:
    """`folder` as an open :class:`Folder`: an open one as it is (left open), a path opened by :meth:`Folder.open` and
    closed after the block."""
    if isinstance(folder, Folder):
        yield folder
        return
    with Folder.open(folder) as handle:
        yield handle


def _link_target(path: Path) -> str:
    """Where the link `path` points, for a message (it may have changed since it was seen as a link)."""
    try:
        return os.readlink(path)
    except OSError:
        return "a target that changed while it was read"


def private_folder(path: str | os.PathLike[str]) -> Folder:
    """A cache folder of this user: each missing folder on the way created 0700 whatever the umask (``mkdirat``,
    then ``fchmod`` on the new folder's own descriptor, so a swap between the two cannot redirect the mode), opened as
    a :class:`Folder`; an existing one that another user owns, or that others may write, is a one-line error."""
    path = Path(path)
    handle = Folder.open(path, create=True, private=True)
    info = os.fstat(handle.fd)
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        handle.close()
        raise NeedlebenchError(
            f"the cache folder {path} is owned by another user or writable by others; needlebench keeps its caches "
            "private (remove it, or set NEEDLEBENCH_CACHE to a folder of your own)"
        )
    return handle


def write_file(path: str | os.PathLike[str], data: bytes | str, *, mode: int = 0o644) -> None:
    """Write `path` atomically, the folder opened as given (the user named it) and the file itself never followed:
    for outputs at a path the user chose (``--out report.md``)."""
    path = Path(path)
    with Folder.open(path.parent if str(path.parent) else ".", create=True) as folder:
        folder.write_bytes(path.name, data.encode("utf-8") if isinstance(data, str) else data, mode=mode)


def describe(value: Any) -> str:
    """A value as it may be shown in a one-line message: printable, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
