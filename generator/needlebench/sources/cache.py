"""Where needlebench keeps what it can recompute: ``$NEEDLEBENCH_CACHE``, by default ``~/.cache/needlebench``.

Every entry under it records what it was made from and is checked when read (a damaged or stale entry is
recomputed), so the folder may be deleted at any time. The checks are HMAC-SHA256 tags keyed by a per-user secret
kept outside the cache (:func:`secret_path`, mode 0600): whoever edits an entry cannot make it pass by recomputing a
digest stored beside it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import hmac
import os
import secrets
import stat
import sys
from pathlib import Path
from typing import BinaryIO

from needlebench.errors import NeedlebenchError
from needlebench.safe_fs import Folder, private_folder

#: Bytes of the per-user secret.
_SECRET_BYTES = 32


def cache_root() -> Path:
    """``$NEEDLEBENCH_CACHE``, an absolute path (default ``~/.cache/needlebench``). A relative value is a one-line
    error: it would follow the current folder, which may be one someone else made (a handed dataset or results
    folder), and the cache holds what needlebench trusts (lm-eval's pickled ``--resume`` responses among them)."""
    value = os.environ.get("NEEDLEBENCH_CACHE")
    if not value:
        return _home() / ".cache" / "needlebench"
    if not os.path.isabs(value):
        raise NeedlebenchError(
            f"NEEDLEBENCH_CACHE={value!r} is a relative path; allowed: an absolute path (a relative one would put "
            "the cache in whatever folder the command runs from)"
        )
    return Path(value)


def _home() -> Path:
    """The home folder, an absolute path: ``HOME=.`` would put the cache and the secret in whatever folder the
    command runs from (a one-line error instead)."""
    home = Path.home()
    if not home.is_absolute():
        raise NeedlebenchError(
            f"HOME={str(home)!r} is a relative path; allowed: an absolute path (or set NEEDLEBENCH_CACHE and "
            "XDG_CONFIG_HOME to absolute ones)"
        )
    return home


def tokens_dir() -> Path:
    """The folder of tokenizer data: tokenised corpora, parsed BPE ranks, the index of local inputs."""
    return cache_root() / "tokens"


def secret_path() -> Path:
    """The per-user secret keying the cache's checks: ``$XDG_CONFIG_HOME/needlebench/secret.key`` (default
    ``~/.config/needlebench``), outside the cache so that deleting or sharing the cache never shares it."""
    base = os.environ.get("XDG_CONFIG_HOME")
    if not base or not os.path.isabs(base):  # the XDG Base Directory spec: a relative path is invalid, ignore it
        base = _home() / ".config"
    return Path(base) / "needlebench" / "secret.key"


def _private(path: Path) -> Folder:
    """:func:`needlebench.safe_fs.private_folder` (created 0700 whatever the umask); an existing folder of this user
    that others may write (made under a loose umask by an earlier version) is made private first (``fchmod``)."""
    try:
        return private_folder(path)
    except NeedlebenchError:
        with contextlib.suppress(OSError, NeedlebenchError), Folder.open(path) as folder:
            info = os.fstat(folder.fd)
            if info.st_uid == os.getuid() and stat.S_ISDIR(info.st_mode):
                os.fchmod(folder.fd, stat.S_IMODE(info.st_mode) & ~0o077)
        return private_folder(path)


def cache_folder(path: Path) -> Folder:
    """The open cache folder `path`, private whatever the umask: it and each folder from the cache root down to it
    are this user's, mode 0700 (created so, or made so), so no other local user can plant a link or a file in them.
    A one-line :class:`NeedlebenchError` when one is another user's; callers treat that as a cache that cannot be
    written (a warning, or nothing)."""
    path = Path(path)
    root = cache_root()
    try:
        relative = path.relative_to(root)
    except ValueError:
        return _private(path)
    current = root
    for part in ("", *relative.parts[:-1]):
        current = current / part if part else current
        _private(current).close()
    return _private(path)


def read_private(folder: Path, name: str, limit: int) -> bytes:
    """The bytes of the regular file `name` of the cache folder `folder` (never a link, FIFO or device; at most
    `limit` bytes); OSError or :class:`NeedlebenchError` otherwise."""
    with Folder.open(folder) as handle:
        return handle.read_bytes(name, limit=limit)


def _read_secret(path: Path) -> bytes | None:
    """The secret at `path` if it is a regular file of this user that nobody else may read, else None."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO never blocks
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        data = handle.read(_SECRET_BYTES + 1)
    return data if len(data) == _SECRET_BYTES else None


def _create_secret(path: Path) -> None:
    """Write a new random secret at `path` (0600, its folder 0700 whatever the umask), never replacing one another
    process wrote meanwhile: written whole into a file with no name (``O_TMPFILE``, open(2)), then given `path` by
    descriptors (``linkat`` through ``/proc/self/fd``, which fails when `path` exists: the first process's secret
    wins). A process stopped half-way (a daemon thread at exit) leaves no file behind. Where ``O_TMPFILE`` is not
    supported, a temporary name (``O_EXCL | O_NOFOLLOW``) hard-linked the same way and removed."""
    try:
        folder = _private(path.parent)
    except NeedlebenchError:
        raise PermissionError(errno.EPERM, "its folder is another user's or others may write it") from None
    with folder:
        try:
            descriptor = os.open(".", os.O_WRONLY | getattr(os, "O_TMPFILE", 0) | os.O_CLOEXEC, 0o600, dir_fd=folder.fd)
        except OSError:
            descriptor = None
        if descriptor is not None and getattr(os, "O_TMPFILE", 0) and stat.S_ISREG(os.fstat(descriptor).st_mode):
            with os.fdopen(descriptor, "wb") as handle:
                _fill_secret(handle)
                with contextlib.suppress(FileExistsError):
                    os.link(f"/proc/self/fd/{handle.fileno()}", path.name, dst_dir_fd=folder.fd, follow_symlinks=True)
            return
        if descriptor is not None:
            os.close(descriptor)
        temporary = f".{path.name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        descriptor = os.open(temporary, flags, 0o600, dir_fd=folder.fd)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                _fill_secret(handle)
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path.name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd, follow_symlinks=False)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder.fd)


def _fill_secret(handle: BinaryIO) -> None:
    """Write a fresh secret into the open file `handle` (mode 0600 whatever the umask) and flush it to disk."""
    os.fchmod(handle.fileno(), 0o600)
    handle.write(os.urandom(_SECRET_BYTES))
    handle.flush()
    os.fsync(handle.fileno())


@functools.cache
def secret() -> bytes:
    """The per-user secret (created on first use). When it cannot be read or created safely, a secret of this
    process only, with a one-line warning: nothing recorded earlier is trusted (cache entries are recomputed)."""
    path = secret_path()
    problem = None
    for _ in range(2):
        try:
            found = _read_secret(path)
        except FileNotFoundError:
            try:
                _create_secret(path)
            except OSError as error:
                problem = f"cannot be created ({error.strerror or type(error).__name__})"
                break
            continue
        except OSError as error:
            problem = f"cannot be read ({error.strerror or type(error).__name__})"
            break
        if found is not None:
            return found
        problem = "is not a 32-byte file of this user readable by nobody else (mode 0600)"
        break
    print(
        f"needlebench: warning: the secret {path} {problem}; nothing cached earlier is trusted in this run",
        file=sys.stderr,
    )
    return os.urandom(_SECRET_BYTES)


def signer() -> hmac.HMAC:
    """An HMAC-SHA256 keyed by :func:`secret`, to feed with ``update``."""
    return hmac.new(secret(), digestmod=hashlib.sha256)


def sign(data: bytes) -> bytes:
    return hmac.digest(secret(), data, hashlib.sha256)


def same_tag(tag: bytes | str, expected: bytes | str) -> bool:
    """Constant-time comparison of two tags (bytes, or hex strings)."""
    if isinstance(tag, str) != isinstance(expected, str):
        return False
    return hmac.compare_digest(tag, expected)


def read_checked(path: Path) -> memoryview | None:
    """The payload of a file written by :func:`write_checked`, or None when it is missing, unreadable (a link, a
    FIFO, a device), damaged or not tagged with this user's secret."""
    try:
        with Folder.open(path.parent) as folder:
            data = memoryview(folder.read_bytes(path.name))
    except (OSError, NeedlebenchError):
        return None
    return data[32:] if len(data) >= 32 and hmac.compare_digest(sign(data[32:]), data[:32]) else None


def write_checked(path: Path, payload: bytes) -> None:
    """Write `payload` after its HMAC tag (0600, in a private cache folder: :func:`cache_folder`), through a
    temporary file and an atomic rename by descriptors; best effort (a cache that cannot be written only costs the
    recomputation)."""
    try:
        with cache_folder(path.parent) as folder:
            folder.write_bytes(path.name, sign(payload) + payload, mode=0o600)
    except (OSError, NeedlebenchError):
        return
