"""Streaming rows into Parquet shards with explicit features and small row groups; fingerprints.

Rows are written in batches as they are produced (a split is never held in memory). Files are written under a
temporary name and renamed when complete. The Hugging Face features travel in the Parquet schema metadata, so
`load_dataset` uses the explicit types.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from needlebench.tasks.schema import arrow_schema, check_row, features_for

#: Row groups are sized to stay near this many bytes of prompt text (the Hub viewer rejects huge groups).
ROW_GROUP_BYTES = 32 * 1024 * 1024
MAX_ROW_GROUP_ROWS = 256
#: Columns that may be dictionary-encoded (short, repeated values); long text columns are not.
_DICTIONARY_COLUMNS = ["task", "config", "language", "size", "corpus", "tokenizer", "version", "compat"]


@dataclass
class ShardStats:
    rows: int = 0
    haystack_tokens: int = 0
    prompt_tokens: int = 0

    def add(self, other: "ShardStats") -> None:
        self.rows += other.rows
        self.haystack_tokens += other.haystack_tokens
        self.prompt_tokens += other.prompt_tokens


def rows_per_group(approx_prompt_chars: int) -> int:
    """Rows per row group for prompts of about `approx_prompt_chars` characters."""
    return max(1, min(MAX_ROW_GROUP_ROWS, ROW_GROUP_BYTES // max(1, approx_prompt_chars * 3)))


@cache
def schema_with_features(family: str) -> pa.Schema:
    schema = arrow_schema(family)
    features = features_for(family)
    metadata = {"huggingface": json.dumps({"info": {"features": features.to_dict()}}, sort_keys=True)}
    return schema.with_metadata(metadata)


def _string_array(values: list) -> pa.Array:
    """A string column built from UTF-8 bytes: far faster than pyarrow's own conversion of long `str`s."""
    encoded = [None if value is None else value.encode("utf-8") for value in values]
    return pa.array(encoded, type=pa.binary()).cast(pa.string())


def rows_to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Column-wise conversion of rows (dicts with exactly the schema's keys) to a table."""
    columns = []
    for field in schema:
        values = [row[field.name] for row in rows]
        columns.append(_string_array(values) if field.type == pa.string() else pa.array(values, type=field.type))
    return pa.Table.from_arrays(columns, schema=schema)


#: Parquet codecs a build may choose: zstd (level 1: most of zstd's ratio at a fraction of its time), snappy,
#: or none (fastest to write, largest files; for local evaluation runs).
COMPRESSIONS = {"zstd": ("zstd", 1), "snappy": ("snappy", None), "none": ("none", None)}


def write_shard(
    rows: Iterable[dict], family: str, path: Path, group_rows: int, compression: str = "zstd"
) -> ShardStats:
    """Write `rows` to `path` (via a temporary file renamed at the end) in row groups of `group_rows`."""
    codec, level = COMPRESSIONS[compression]
    schema = schema_with_features(family)
    stats = ShardStats()
    temporary = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    batch: list[dict] = []
    try:
        with pq.ParquetWriter(
            temporary,
            schema,
            compression=codec,
            compression_level=level,
            use_dictionary=[name for name in _DICTIONARY_COLUMNS if name in schema.names],
            write_statistics=False,
            store_schema=True,
        ) as writer:
            for row in rows:
                check_row(family, row)
                batch.append(row)
                stats.rows += 1
                stats.haystack_tokens += int(row["haystack_tokens"] or 0)
                stats.prompt_tokens += int(row["prompt_tokens"] or 0)
                if len(batch) >= group_rows:
                    writer.write_table(rows_to_table(batch, schema), row_group_size=group_rows)
                    batch = []
            if batch or stats.rows == 0:
                writer.write_table(rows_to_table(batch, schema), row_group_size=group_rows)
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return stats


def fingerprint_files(paths: Iterable[Path]) -> str:
    """sha256 over the bytes of the files, in sorted path order."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
