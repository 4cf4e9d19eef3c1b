"""Share of each boundary kind (``needle_boundaries``) per config of a built dataset folder."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pyarrow.parquet as pq

from needlebench.safe_fs import Folder
from needlebench.tasks.boundaries import KINDS


def boundary_counts(folder: Path, config: str, files: Iterable[str]) -> Counter:
    """How many needles of a built config sit on each boundary kind (empty for configs without needles), read from
    `files`, the config's files its manifest lists: nothing else in ``data/<config>/`` is opened, and each file is
    opened as a regular file without following a link (a FIFO or a link there is a one-line error, never a hang)."""
    counts: Counter = Counter()
    with Folder.open(folder) as root:
        for name in files:
            with root.open_read(name) as handle:
                parquet = pq.ParquetFile(handle)
                if "needle_boundaries" not in parquet.schema_arrow.names:
                    return Counter()
                column = parquet.read(columns=["needle_boundaries"]).column("needle_boundaries")
            counts.update(kind for kinds in column.to_pylist() for kind in kinds or ())
    return counts


def format_shares(counts: Counter) -> str:
    """``sentence 91.2% · word 8.8%`` (kinds in preference order, then any other value), or ``-``."""
    total = sum(counts.values())
    if not total:
        return "-"
    order = [kind for kind in KINDS if counts.get(kind)] + sorted(k for k in counts if k not in KINDS)
    return " · ".join(f"{kind} {100 * counts[kind] / total:.1f}%" for kind in order)
