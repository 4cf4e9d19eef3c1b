"""Where needlebench keeps what it can recompute: ``$NEEDLEBENCH_CACHE``, by default ``~/.cache/needlebench``.

Every entry under it records what it was made from and is checked when read (a damaged or stale entry is
recomputed), so the folder may be deleted at any time. The checks are HMAC-SHA256 tags keyed by a per-user secret
kept outside the cache (:func:`secret_path`, mode 0600): whoever edits an entry cannot make it pass by recomputing a
digest stored beside it.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import stat
import sys
from pathlib import Path

#: Bytes of the per-user secret.
_SECRET_BYTES = 32


def cache_root() -> Path:
    return Path(os.environ.get("NEEDLEBENCH_CACHE") or Path.home() / ".cache" / "needlebench")


def tokens_dir() -> Path:
    """The folder of tokenizer data: tokenised corpora, parsed BPE ranks, the index of local inputs."""
    return cache_root() / "tokens"


def secret_path() -> Path:
    """The per-user secret keying the cache's checks: ``$XDG_CONFIG_HOME/needlebench/secret.key`` (default
    ``~/.config/needlebench``), outside the cache so that deleting or sharing the cache never shares it."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "needlebench" / "secret.key"


def _read_secret(path: Path) -> bytes | None:
    """The secret at `path` if it is a regular file of this user that nobody else may read, else None."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        data = handle.read(_SECRET_BYTES + 1)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return data if len(data) == _SECRET_BYTES else None


def _create_secret(path: Path) -> None:
    """Write a new random secret at `path` (0600), never replacing one another process wrote meanwhile."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(os.urandom(_SECRET_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # fails if the file exists: the first process's secret wins
        except FileExistsError:
            pass
    finally:
        temporary.unlink(missing_ok=True)


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
    """The payload of a file written by :func:`write_checked`, or None when it is missing, unreadable, damaged or
    not tagged with this user's secret."""
    try:
        data = memoryview(path.read_bytes())
    except OSError:
        return None
    return data[32:] if len(data) >= 32 and hmac.compare_digest(sign(data[32:]), data[:32]) else None


def write_checked(path: Path, payload: bytes) -> None:
    """Write `payload` after its HMAC tag, through a temporary file and an atomic rename; best effort (a cache
    that cannot be written only costs the recomputation)."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
        with os.fdopen(handle, "wb") as out:
            out.write(sign(payload) + payload)
        os.replace(temporary, path)
    except OSError:
        return
