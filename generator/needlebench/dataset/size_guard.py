"""The size guard: before any work a build estimates its rows, context tokens and Parquet bytes from the configs
alone (no tokenisation) and refuses, with the figures, beyond ``--max-tokens`` or the free disk of ``--out``.

The byte estimate is the context tokens times what a token has cost in the built configs of this release (the
README's benchmark table: 1000k configs about 0.5 byte a token in zstd, the shorter ones less); snappy keeps a
64 KiB window, so a token costs about half its text, and no compression its text (about 4 bytes).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from needlebench.errors import NeedlebenchError
from needlebench.tasks.grid import ConfigSpec

#: Default ``--max-tokens``: above `needlebench build --all` (about 14.7 billion context tokens, 142 configs).
DEFAULT_MAX_TOKENS = 20_000_000_000
#: Parquet bytes per context token by codec (see the module docstring).
BYTES_PER_TOKEN = {"zstd": 0.6, "snappy": 2.0, "none": 4.5}


def estimate(
    specs: list[ConfigSpec], compression: str, depths: tuple[float, ...] | None = None
) -> tuple[int, int, int]:
    """Rows, context tokens and Parquet bytes the build of `specs` writes (approximately); `depths` (``--depths``)
    replaces the depth grid of the built-in configs whose family gives a row per depth (M-RT's depths place its
    needles, not rows; an experiment keeps its own depths)."""
    rows = tokens = 0
    for spec in specs:
        scale = 1.0
        if depths is not None and spec.family_object.row_per_depth and spec.grid is None and spec.depths:
            scale = len(depths) / len(spec.depths)
        rows += round(spec.num_rows * scale)
        tokens += round(spec.approx_tokens * scale)
    return rows, tokens, round(tokens * BYTES_PER_TOKEN[compression])


def _free_bytes(out_dir: Path) -> int:
    """Free bytes on the filesystem `out_dir` is (or will be) on."""
    existing = Path(out_dir).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return shutil.disk_usage(existing).free


def _gb(size: int) -> str:
    return f"{size / 1e9:,.1f} GB" if size >= 1e8 else f"{size / 1e6:,.1f} MB"


def check_size(
    specs: list[ConfigSpec],
    out_dir: Path,
    compression: str,
    max_tokens: int | None = None,
    depths: tuple[float, ...] | None = None,
) -> None:
    """Refuse (one line, exit 2, nothing written) a build beyond `max_tokens` context tokens or the free disk."""
    limit = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if limit < 1:
        raise NeedlebenchError(f"--max-tokens {limit} is not allowed; give a positive number of tokens")
    rows, tokens, size = estimate(specs, compression, depths)
    what = f"{len(specs)} config{'s' if len(specs) != 1 else ''}, {rows:,} rows of about {tokens:,} context tokens"
    if tokens > limit:
        given = "--max-tokens" if max_tokens is not None else "the default --max-tokens"
        raise NeedlebenchError(
            f"the build would write {what}, beyond {given} {limit:,}; build fewer configs (or a smaller "
            "experiment) or raise --max-tokens"
        )
    free = _free_bytes(out_dir)
    if size > free:
        raise NeedlebenchError(
            f"the build would write {what}, about {_gb(size)} of {compression} Parquet, but only {_gb(free)} "
            f"are free on the disk of {out_dir}; free some space or choose another --out"
        )
