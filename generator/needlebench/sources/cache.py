"""Where needlebench keeps what it can recompute: ``$NEEDLEBENCH_CACHE``, by default ``~/.cache/needlebench``.

Every entry under it records what it was made from and is checked when read (a damaged or stale entry is
recomputed), so the folder may be deleted at any time.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("NEEDLEBENCH_CACHE") or Path.home() / ".cache" / "needlebench")


def read_checked(path: Path) -> memoryview | None:
    """The payload of a file written by :func:`write_checked`, or None when it is missing, unreadable or damaged."""
    import hashlib

    try:
        data = memoryview(path.read_bytes())
    except OSError:
        return None
    return data[32:] if hashlib.sha256(data[32:]).digest() == data[:32] else None


def write_checked(path: Path, payload: bytes) -> None:
    """Write `payload` after its sha256, through a temporary file and an atomic rename; best effort (a cache that
    cannot be written only costs the recomputation)."""
    import hashlib
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
        with os.fdopen(handle, "wb") as out:
            out.write(hashlib.sha256(payload).digest() + payload)
        os.replace(temporary, path)
    except OSError:
        return
