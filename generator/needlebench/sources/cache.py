"""Where needlebench keeps what it can recompute: ``$NEEDLEBENCH_CACHE``, by default ``~/.cache/needlebench``.

Every entry under it records what it was made from and is checked when read (a damaged or stale entry is
recomputed), so the folder may be deleted at any time.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("NEEDLEBENCH_CACHE") or Path.home() / ".cache" / "needlebench")
