"""The sentence insertion points of a whole haystack stream, computed once and kept beside the token cache.

Placement looks sentence points up in a table of the whole stream (:func:`sentence_points`). Scanning an 8M-char
stream takes about half a second, in every build process and worker, so the table is cached on disk like the
tokens: keyed by the corpus text's sha256, the stream's copies and the sentence rule itself (the regex, so a rule
change is a new key). An entry holds the table and a digest of key and table; loading checks the digest, the
table's order and bounds, and re-scans a few random spans. An entry that fails is recomputed and replaced (one
warning). A cache that cannot be written is not an error (the token cache has already warned about it).
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np

from needlebench.errors import NeedlebenchError
from needlebench.safe_fs import Folder
from needlebench.sources.tokenized import TokenizedCorpus, cache_dir, write_cache_entry
from needlebench.tasks import boundaries

FORMAT = 1
#: Spans re-scanned on every load, and their length in characters.
_SPOT_CHECKS = 4
_SPOT_CHARS = 4000
#: Context the boundary patterns look at around a point: spot checks compare points this far inside a span.
_EDGE = 16


def _key(corpus: TokenizedCorpus) -> str:
    rule = boundaries._PATTERNS[boundaries.SENTENCE].pattern
    text = f"{FORMAT}\x1f{rule}\x1f{corpus.corpus.sha256}\x1f{corpus.cycles}\x1f{len(corpus.text)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _scan(text: str, lo: int, hi: int) -> np.ndarray:
    return np.asarray(boundaries.points(boundaries.SENTENCE, text, lo, hi), dtype=np.int64)


def check_table(text: str, table: np.ndarray, seed: str) -> bool:
    """True when `table` is a sorted table of positions in `text` that agrees with a fresh scan of a few spans."""
    if table.ndim != 1 or table.dtype != np.int64:
        return False
    if len(table) and (table[0] < 0 or table[-1] > len(text) or not bool(np.all(np.diff(table) > 0))):
        return False
    generator = np.random.default_rng(int(seed[:16], 16))
    for _ in range(_SPOT_CHECKS if len(text) > _SPOT_CHARS else 1):
        lo = int(generator.integers(0, max(1, len(text) - _SPOT_CHARS)))
        hi = min(len(text), lo + _SPOT_CHARS)
        inner_lo, inner_hi = (lo + _EDGE if lo else 0), (hi - _EDGE if hi < len(text) else hi)
        expected = _scan(text, lo, hi)
        expected = expected[(expected >= inner_lo) & (expected <= inner_hi)]
        found = table[table.searchsorted(inner_lo, side="left") : table.searchsorted(inner_hi, side="right")]
        if not np.array_equal(expected, found):
            return False
    return True


def _digest(key: str, table: np.ndarray) -> str:
    return hashlib.sha256(key.encode() + memoryview(np.ascontiguousarray(table)).cast("B")).hexdigest()


def _read(path: Path, text: str, key: str) -> np.ndarray | None:
    """The cached table, or None when there is none or it is not trustworthy (then with one warning)."""
    try:  # a regular file only: never through a link, never a FIFO (:meth:`Folder.open_read`)
        with Folder.open(path.parent) as folder, folder.open_read(path.name) as handle:
            with np.load(handle, allow_pickle=False) as entry:
                table, digest = entry["points"], str(entry["digest"])
    except FileNotFoundError:
        return None
    except NeedlebenchError:
        _warn(f"sentence table {path} is not a regular file; recomputed")
        return None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        _warn(f"sentence table {path} is unreadable ({type(error).__name__}); recomputed")
        return None
    if digest != _digest(key, table) or not check_table(text, table, key):
        _warn(f"sentence table {path} does not match its haystack; recomputed")
        return None
    return table


def _write(path: Path, key: str, table: np.ndarray) -> None:
    """Written as a token cache entry (0600 in the private cache folder, through a temporary file of the layer whose
    leftovers the token cache removes: :func:`needlebench.sources.tokenized.write_cache_entry`)."""
    write_cache_entry(path, lambda handle: np.savez(handle, points=table, digest=np.array(_digest(key, table))))


def _warn(message: str) -> None:
    print(f"needlebench: warning: {message}", file=sys.stderr)


def sentence_points(corpus: TokenizedCorpus) -> np.ndarray:
    """Every sentence insertion point of the corpus stream, sorted (read-only; memoised on the corpus)."""
    table = corpus.__dict__.get("_sentence_points")
    if table is not None:
        return table
    key = _key(corpus)
    path = cache_dir() / f"sentences-{key}.npz"
    table = _read(path, corpus.text, key)
    if table is None:
        table = _scan(corpus.text, 0, len(corpus.text))
        try:
            _write(path, key, table)
        except OSError:
            pass  # a read-only cache: the token cache has already said so; the table stays in memory
    table.flags.writeable = False
    corpus.__dict__["_sentence_points"] = table
    return table
