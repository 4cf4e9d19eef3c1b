"""The Parquet writer's column builders: every form a string value may take gives the same Arrow column."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from needlebench.dataset import writer
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.rows import iter_rows
from needlebench.dataset.writer import _column
from needlebench.sources.tokenized import Utf8Text
from needlebench.tasks.grid import get_config

VALUES = ["In the beginning", "", None, "滚滚长江东逝水，浪花淘尽英雄。", "needle\n\nhaystack"]


def test_string_column_from_str_bytes_and_unjoined_parts():
    expected = pa.array(VALUES, type=pa.string())
    as_bytes = [None if value is None else value.encode("utf-8") for value in VALUES]
    data = memoryview("".join(value or "" for value in VALUES).encode("utf-8"))
    as_parts, cursor = [], 0
    for value in VALUES:  # each value as memoryview slices of one buffer plus an encoded literal, like a prompt
        if value is None:
            as_parts.append(None)
            continue
        size = len(value.encode("utf-8"))
        half = size // 2
        as_parts.append(Utf8Text([data[cursor : cursor + half], bytes(data[cursor + half : cursor + size])]))
        cursor += size
    for values in (VALUES, as_bytes, as_parts):
        column = _column(values, pa.string())
        assert column.equals(expected)
        assert column.null_count == 1
    assert len(as_parts[3]) == len(VALUES[3].encode("utf-8"))


def test_list_and_number_columns_keep_nulls():
    lists = [["a", "b"], None, []]
    assert _column(lists, pa.list_(pa.string())).equals(pa.array(lists, type=pa.list_(pa.string())))
    numbers = [1, None, 3]
    assert _column(numbers, pa.int64()).equals(pa.array(numbers, type=pa.int64()))


def test_zstd_level_follows_the_window():
    assert writer.zstd_level(0) == writer.zstd_level(writer.ZSTD_WINDOW) == 3
    assert writer.zstd_level(writer.ZSTD_WINDOW + 1) == 1


def _rows(prompt_bytes: int, count: int) -> list[dict]:
    """`count` rows of single_en_4k whose prompts share one random haystack of `prompt_bytes` (a needle each)."""
    template = next(iter_rows(get_config("single_en_4k"), BuildOptions()))
    letters = np.random.default_rng(0).choice(list(b"abcdefghij klmnopqrstuvwxyz"), size=prompt_bytes).astype(np.uint8)
    haystack = letters.tobytes().decode("ascii")
    rows = []
    for i in range(count):
        cut = (i + 1) * prompt_bytes // (count + 2)
        rows.append({**template, "prompt": haystack[:cut] + f" needle {i} " + haystack[cut:]})
    return rows


@pytest.mark.parametrize("prompt_bytes", [300_000, writer.ZSTD_WINDOW + 100_000])
def test_neighbouring_prompts_compress_together_within_the_window(tmp_path, prompt_bytes):
    rows = _rows(prompt_bytes, 4)
    path = tmp_path / "shard.parquet"
    writer.write_shard(iter(rows), "single", path, group_rows=4)
    single = len(pa.compress(rows[0]["prompt"].encode(), codec="zstd"))  # one prompt alone
    read = pq.read_table(path)
    assert read.column("prompt").to_pylist() == [row["prompt"] for row in rows]
    assert pq.ParquetFile(path).metadata.row_group(0).column(8).compression == "ZSTD"
    encodings = pq.ParquetFile(path).metadata.row_group(0).column(8).encodings
    if prompt_bytes <= writer.ZSTD_WINDOW:  # level 3: later prompts are copies of the first, nearly free
        assert path.stat().st_size < 1.5 * single
        assert "DELTA_BYTE_ARRAY" not in encodings
    else:  # beyond the window each prompt costs what follows the prefix it shares with the previous one
        assert "DELTA_BYTE_ARRAY" in encodings
        prompts = [row["prompt"].encode() for row in rows]
        shared = [len(os.path.commonprefix(pair)) for pair in zip(prompts, prompts[1:])]
        suffixes = single + sum(len(pa.compress(p[n:], codec="zstd")) for p, n in zip(prompts[1:], shared))
        assert 0.9 * suffixes < path.stat().st_size < 1.1 * suffixes < 3.5 * single


def test_long_prompts_go_in_row_groups_by_bytes(tmp_path, monkeypatch):
    """Beyond the window, row groups hold about LONG_PROMPT_GROUP_BYTES of prompts whatever `group_rows` says."""
    rows = _rows(writer.ZSTD_WINDOW + 1000, 5)
    monkeypatch.setattr(writer, "LONG_PROMPT_GROUP_BYTES", 2 * writer.ZSTD_WINDOW)
    path = tmp_path / "shard.parquet"
    writer.write_shard(iter(rows), "single", path, group_rows=1)
    metadata = pq.ParquetFile(path).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [2, 2, 1]
    assert pq.read_table(path).column("prompt").to_pylist() == [row["prompt"] for row in rows]


def test_writing_in_turn_gives_the_same_bytes_as_writing_in_a_thread(tmp_path):
    """Workers write row groups in turn (`overlap=False`), a lone process in a thread: the files are identical, and
    an error raised while writing reaches the caller either way."""
    rows = _rows(50_000, 7)
    paths = []
    for overlap in (True, False):
        paths.append(tmp_path / f"overlap-{overlap}.parquet")
        writer.write_shard(iter(rows), "single", paths[-1], group_rows=3, overlap=overlap)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert pq.read_table(paths[1]).column("prompt").to_pylist() == [row["prompt"] for row in rows]
    bad = [*rows[:4], {**rows[4], "context_length": "not a number"}]
    for overlap in (True, False):
        path = tmp_path / f"bad-{overlap}.parquet"
        with pytest.raises((TypeError, ValueError)):
            writer.write_shard(iter(bad), "single", path, group_rows=3, overlap=overlap)
        assert not path.exists() and not list(tmp_path.glob(".bad-*"))
