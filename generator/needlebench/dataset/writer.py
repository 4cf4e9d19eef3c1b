"""Streaming rows into Parquet shards with explicit features and small row groups; fingerprints.

Rows are written in batches as they are produced (a split is never held in memory). Files are written under a
temporary name and renamed when complete. The Hugging Face features travel in the Parquet schema metadata, so
`load_dataset` uses the explicit types.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from needlebench.safe_fs import Folder
from needlebench.sources.tokenized import Utf8Text
from needlebench.tasks.schema import arrow_schema, check_row, features_dict

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

    def add(self, other: ShardStats) -> None:
        self.rows += other.rows
        self.haystack_tokens += other.haystack_tokens
        self.prompt_tokens += other.prompt_tokens


def rows_per_group(approx_prompt_chars: int) -> int:
    """Rows per row group for prompts of about `approx_prompt_chars` characters."""
    return max(1, min(MAX_ROW_GROUP_ROWS, ROW_GROUP_BYTES // max(1, approx_prompt_chars * 3)))


@cache
def schema_with_features(family: str) -> pa.Schema:
    schema = arrow_schema(family)
    metadata = {"huggingface": json.dumps({"info": {"features": features_dict(family)}}, sort_keys=True)}
    return schema.with_metadata(metadata)


def _validity(values: list) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap of `values` (None when no value is null) and the null count."""
    valid = np.fromiter((value is not None for value in values), dtype=bool, count=len(values))
    nulls = len(values) - int(valid.sum())
    return (pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None), nulls


#: Columns' data buffers from this size on are allocated from Arrow's pool (see :func:`_joined`).
_POOLED_BYTES = 1 << 20


def _offsets(lengths: list[int]) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _joined(parts: list, total: int) -> pa.Buffer:
    """`parts` copied into one buffer. Large ones come from Arrow's memory pool, which keeps and reuses freed
    memory: a fresh `bytes` of tens of MB is mapped anew by malloc and page-faulted in for every row group."""
    if total < _POOLED_BYTES:
        return pa.py_buffer(b"".join(parts))
    data = pa.allocate_buffer(total)
    view = memoryview(data).cast("B")
    position = 0
    for part in parts:
        end = position + len(part)
        view[position:end] = part
        position = end
    return data


def _string_array(values: list) -> pa.Array:
    """A string column built from UTF-8 bytes: far faster than pyarrow's own conversion of long `str`s (the
    encoded values are joined into one data buffer; `str.encode` output needs no second UTF-8 check). A value
    may already be UTF-8: `bytes`, or a :class:`Utf8Text` (a prompt as byte spans of a corpus, whose parts are
    copied straight into the column's buffer)."""
    validity, nulls = _validity(values)
    parts: list = []
    lengths: list[int] = []
    for value in values:
        if isinstance(value, Utf8Text):
            parts.extend(value.parts)
            lengths.append(value.nbytes)
        elif value is not None:
            encoded = value if isinstance(value, bytes) else value.encode("utf-8")
            parts.append(encoded)
            lengths.append(len(encoded))
        else:
            lengths.append(0)
    offsets = _offsets(lengths)
    data = _joined(parts, int(offsets[-1]))
    if offsets[-1] < 2**31:
        return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets.astype(np.int32)), data, validity, nulls)
    large = pa.LargeStringArray.from_buffers(len(values), pa.py_buffer(offsets), data, validity, nulls)
    return large.cast(pa.string())


def _column(values: list, dtype: pa.DataType) -> pa.Array:
    """An Arrow column of `dtype` (string, int64, float64 or lists of them; None is null), built from buffers:
    `pa.array` on Python lists imports pandas (a second of a small build's time) and converts slowly."""
    if dtype == pa.string():
        return _string_array(values)
    if pa.types.is_list(dtype):
        validity, nulls = _validity(values)
        offsets = _offsets([0 if value is None else len(value) for value in values])
        flat = [item for value in values if value is not None for item in value]
        child = _column(flat, dtype.value_type)
        buffers = [validity, pa.py_buffer(offsets.astype(np.int32))]
        return pa.ListArray.from_buffers(dtype, len(values), buffers, nulls, children=[child])
    numpy_type = {pa.int64(): np.int64, pa.float64(): np.float64}[dtype]
    validity, nulls = _validity(values)
    data = np.array([0 if value is None else value for value in values], dtype=numpy_type)
    return pa.Array.from_buffers(dtype, len(values), [validity, pa.py_buffer(data)], nulls)


def rows_to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """Column-wise conversion of rows (dicts with exactly the schema's keys) to a table."""
    columns = [_column([row[field.name] for row in rows], field.type) for field in schema]
    return pa.Table.from_arrays(columns, schema=schema)


#: Parquet codecs a build may choose: zstd (level by prompt size, see :func:`zstd_level`), snappy, or none
#: (fastest to write, largest files; for local evaluation runs).
COMPRESSIONS = ("zstd", "snappy", "none")
#: zstd level 3 keeps a 2 MiB window (level 1: 512 KiB).
ZSTD_WINDOW = 2**21


def zstd_level(prompt_bytes: int) -> int:
    """The zstd level of a file whose first prompt has `prompt_bytes` UTF-8 bytes.

    Neighbouring prompts of a split share most of their haystack. When a prompt fits level 3's 2 MiB window, the
    compressor finds the previous prompt and mostly copies: measured on this project's splits, level 3 writes
    2-2.5x faster than level 1 and files 3-6x smaller (up to ~1.8 MB prompts). Longer prompts reach no
    neighbour, and there level 1 is the fastest (level 3 is 1.5-2x slower for the same ratio)."""
    return 3 if prompt_bytes <= ZSTD_WINDOW else 1


#: Row groups of prompts longer than `ZSTD_WINDOW` hold about this many bytes of prompt text (far under the 300 MB
#: a Hub viewer request may read; a 1000k split: 15 English or 31 Chinese prompts).
LONG_PROMPT_GROUP_BYTES = 64 * 2**20
#: The data page limit of such files: one page per column chunk, so that DELTA_BYTE_ARRAY's shared prefixes run
#: across a whole row group (pyarrow otherwise starts a page, and the prefixes, at every 4 MB prompt).
_ONE_PAGE = 2**30


def long_prompt_options(prompt_bytes: int) -> dict:
    """Extra ParquetWriter options of a file whose first prompt has `prompt_bytes` UTF-8 bytes.

    Prompts beyond zstd level 3's window are out of the compressor's reach of their neighbour, but consecutive
    prompts of a split still share their text up to the earlier needle. The prompt column is then encoded as
    DELTA_BYTE_ARRAY (each value stores only what follows the prefix it shares with the previous one) in one
    page per row group: a third less to compress (the last shard of `single_en_1000k`: 1.69 s to 1.37 s of
    writing, 146 MB to 87 MB). Shorter prompts keep PLAIN pages (level 3 copies their neighbours already)."""
    if prompt_bytes <= ZSTD_WINDOW:
        return {}
    return {"column_encoding": {"prompt": "DELTA_BYTE_ARRAY"}, "data_page_size": _ONE_PAGE}


def _prompt_bytes(row: dict) -> int:
    prompt = row.get("prompt")
    if prompt is None:
        return 0
    return len(prompt) if isinstance(prompt, (bytes, Utf8Text)) else len(prompt.encode("utf-8"))


class _InlineExecutor(Executor):
    """Runs each call when it is submitted."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # raised where the result is asked for, as from a thread
            future.set_exception(error)
        return future


def write_shard(
    rows: Iterable[dict],
    family: str,
    path: Path | str,
    group_rows: int,
    compression: str = "zstd",
    *,
    overlap: bool = True,
    folder: Folder | None = None,
) -> ShardStats:
    """Write `rows` to `path` (the file name `path` inside the open `folder` when given) in row groups of
    `group_rows`, or of about `LONG_PROMPT_GROUP_BYTES` when the first prompt is longer than `ZSTD_WINDOW`. pyarrow
    writes into a file object on a new temporary file of :meth:`Folder.atomic` (an unpredictable name created with
    ``O_EXCL | O_NOFOLLOW``), renamed over `path` at the end and removed on an error: nothing planted in the folder is
    ever written through.

    The file is opened with the first row group (zstd's level and the layout depend on the first prompt's size,
    see :func:`zstd_level` and :func:`long_prompt_options`). With `overlap`,
    a row group is encoded and compressed in a thread while the next one is generated: right for a process that
    has the cores to itself; worker processes that already keep every core busy write in turn (measured on the
    2-core benchmark machine: a tenth less CPU and wall time for `single_en_128k` with two workers)."""
    schema = schema_with_features(family)
    stats = ShardStats()
    with contextlib.ExitStack() as outer:
        if folder is None:  # a path the caller chose: its folder opened as given, created when missing
            folder = outer.enter_context(Folder.open(Path(path).parent, create=True))
            name = Path(path).name
        else:
            name = os.fspath(path)
        sink = outer.enter_context(folder.atomic(name))
        _write_rows(rows, family, schema, sink, stats, group_rows, compression, overlap)
    return stats


def _write_rows(rows, family, schema, sink, stats, group_rows, compression, overlap) -> None:
    batch: list[dict] = []
    with contextlib.ExitStack() as stack:
        # pyarrow encodes and compresses a row group without the GIL: the next group is generated meanwhile
        compressor = stack.enter_context(ThreadPoolExecutor(max_workers=1) if overlap else _InlineExecutor())
        writer: pq.ParquetWriter | None = None
        pending: Future | None = None

        def close(writer: pq.ParquetWriter) -> None:
            if pending is not None:
                wait([pending])  # never close the file under a row group being written (an error path)
            writer.close()

        def flush(table: pa.Table) -> Future:
            nonlocal writer
            if writer is None:
                writer = pq.ParquetWriter(
                    sink,
                    schema,
                    compression=compression,
                    compression_level=zstd_level(first_bytes) if compression == "zstd" else None,
                    use_dictionary=[name for name in _DICTIONARY_COLUMNS if name in schema.names],
                    write_statistics=False,
                    store_schema=True,
                    **long_prompt_options(first_bytes),
                )
                stack.callback(close, writer)  # runs before the compressor's shutdown (exits are LIFO)
            if pending is not None:
                pending.result()
            return compressor.submit(writer.write_table, table, row_group_size=max(1, table.num_rows))

        first_bytes = 0  # the first prompt's size sets the level and the layout of the whole file
        batch_bytes = 0
        for row in rows:
            check_row(family, row)
            if stats.rows == 0:
                first_bytes = _prompt_bytes(row)
            batch.append(row)
            stats.rows += 1
            stats.haystack_tokens += int(row["haystack_tokens"] or 0)
            stats.prompt_tokens += int(row["prompt_tokens"] or 0)
            if first_bytes > ZSTD_WINDOW:  # long prompts: row groups by bytes (see long_prompt_options)
                batch_bytes += _prompt_bytes(row)
                full = batch_bytes >= LONG_PROMPT_GROUP_BYTES or len(batch) >= MAX_ROW_GROUP_ROWS
            else:
                full = len(batch) >= group_rows
            if full:
                pending = flush(rows_to_table(batch, schema))
                batch, batch_bytes = [], 0
        if batch or stats.rows == 0:
            pending = flush(rows_to_table(batch, schema))
        if pending is not None:
            pending.result()


def fingerprint_files(paths: Iterable[Path]) -> str:
    """sha256 over the bytes of the files, in sorted path order."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        with open(path, "rb") as handle:
            _digest_into(digest, handle)
    return digest.hexdigest()


def fingerprint_folder(folder: Folder, names: Iterable[str]) -> str:
    """:func:`fingerprint_files` of the regular files `names` of the open `folder` (read without following a link;
    sorted by name, the order of their paths)."""
    digest = hashlib.sha256()
    for name in sorted(names):
        with folder.open_read(name) as handle:
            _digest_into(digest, handle)
    return digest.hexdigest()


def _digest_into(digest, handle) -> None:
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        digest.update(chunk)
