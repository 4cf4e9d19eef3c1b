"""The token cache is trusted only when it proves right: digest, inputs, invariants and re-encoded spans.

Wrong values, another corpus' tables, unreadable entries and an unwritable cache all give the correct tables with
one warning line on stderr, never a traceback and never wrong data.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from needlebench.sources import tokenized


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tokens"


@pytest.fixture(scope="module")
def texts():
    from needlebench.sources.haystacks import corpus_for

    english = corpus_for(None, "en").text
    return english[:60_000], english[200_000:260_000]


@pytest.fixture(scope="module")
def truth(texts, cl100k):
    return tokenized._compute_tables(texts[0], cl100k)


def _entry(cache: Path, text: str, tokenizer) -> Path:
    return cache / f"{tokenized._cache_key(text, tokenizer)}.npz"


def _rewrite(path: Path, tables: dict, meta: dict) -> None:
    encoded = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with open(path, "wb") as handle:
        np.savez(handle, **tables, meta=encoded)


def _read(path: Path) -> tuple[dict, dict]:
    with np.load(path) as data:
        return {key: data[key] for key in tokenized._TABLES}, json.loads(bytes(data["meta"]))


def _same(tables: dict, truth: dict) -> bool:
    return all(np.array_equal(tables[key], truth[key]) and tables[key].dtype == truth[key].dtype for key in truth)


def _warnings(capsys) -> list[str]:
    lines = capsys.readouterr().err.splitlines()
    assert all(line.startswith("needlebench: warning: ") for line in lines), lines
    return lines


def test_entry_records_inputs_and_digest_and_loads_silently(cache, texts, truth, cl100k, capsys):
    assert _same(tokenized._load_or_compute(texts[0], cl100k), truth)
    tables, meta = _read(_entry(cache, texts[0], cl100k))
    assert meta["tokenizer"] == "cl100k_base" and meta["tag"] == tokenized._tables_tag(
        truth, tokenized._entry_meta(texts[0], cl100k)
    )
    assert meta["text_sha256"] == tokenized._entry_meta(texts[0], cl100k)["text_sha256"]
    assert _same(tokenized._load_or_compute(texts[0], cl100k), truth)
    assert _warnings(capsys) == []
    assert tokenized.check_tables(texts[0], cl100k, truth) is None


@pytest.mark.parametrize("forge_digest", [False, True])
def test_wrong_values_are_recomputed(cache, texts, truth, cl100k, capsys, forge_digest):
    tokenized._load_or_compute(texts[0], cl100k)
    path = _entry(cache, texts[0], cl100k)
    tables, meta = _read(path)
    tables["hard_tokens"] = tables["hard_tokens"] + 7  # the reported corruption: prompt_tokens off by 7
    if forge_digest:  # a consistent-looking entry (tagged with the secret): only the invariants and re-encoding tell
        meta["tag"] = tokenized._tables_tag(tables, tokenized._entry_meta(texts[0], cl100k))
    _rewrite(path, tables, meta)
    assert _same(tokenized._load_or_compute(texts[0], cl100k), truth)
    [line] = _warnings(capsys)
    assert str(path) in line and "recomputed" in line
    assert ("recorded tag" in line) != forge_digest
    assert _same(tokenized._load_or_compute(texts[0], cl100k), truth) and _warnings(capsys) == []  # replaced


def test_a_shifted_token_table_fails_the_re_encoding(texts, truth, cl100k):
    tables = dict(truth)
    tables["tokens"] = np.roll(truth["tokens"], 1)
    assert "tokens differ" in tokenized.check_tables(texts[0], cl100k, tables)
    tables = dict(truth)
    tables["sentence_chars"] = truth["sentence_chars"] + 1
    assert "sentence" in tokenized.check_tables(texts[0], cl100k, tables)


@pytest.mark.parametrize("forge_meta", [False, True])
def test_another_corpus_tables_are_recomputed(cache, texts, truth, cl100k, capsys, forge_meta):
    tokenized._load_or_compute(texts[1], cl100k)
    other = _entry(cache, texts[1], cl100k)
    target = _entry(cache, texts[0], cl100k)
    shutil.copyfile(other, target)
    if forge_meta:
        tables, _ = _read(target)
        meta = tokenized._entry_meta(texts[0], cl100k)
        meta = {**meta, "tag": tokenized._tables_tag(tables, meta)}
        _rewrite(target, tables, meta)
    capsys.readouterr()
    assert _same(tokenized._load_or_compute(texts[0], cl100k), truth)
    [line] = _warnings(capsys)
    assert ("another text" in line) != forge_meta


def test_truncated_and_garbage_entries_are_recomputed(cache, texts, truth, cl100k, capsys):
    tokenized._load_or_compute(texts[0], cl100k)
    path = _entry(cache, texts[0], cl100k)
    for damage in (path.read_bytes()[:1000], b"", b"not a zip file at all"):
        path.write_bytes(damage)
        assert _same(tokenized._load_or_compute(texts[0], cl100k), truth)
        [line] = _warnings(capsys)
        assert "unreadable" in line or "incomplete" in line
    assert _same(tokenized._read_entry(path, texts[0], cl100k)[0], truth)


def test_a_folder_where_the_entry_should_be(cache, texts, truth, cl100k, capsys):
    path = _entry(cache, texts[0], cl100k)
    path.mkdir(parents=True)
    (path / "keep").write_text("x")
    assert _same(tokenized._load_or_compute(texts[0], cl100k), truth)
    [line] = _warnings(capsys)
    assert "is not a file" in line and "in memory" in line
    assert (path / "keep").read_text() == "x"


def test_a_file_where_the_cache_folder_should_be(cache, texts, truth, cl100k, capsys):
    cache.parent.mkdir(parents=True)
    cache.write_text("not a folder")
    assert _same(tokenized._load_or_compute(texts[0], cl100k), truth)
    [line] = _warnings(capsys)
    assert "cannot write the token cache" in line and "in memory" in line
    assert cache.read_text() == "not a folder"


def test_a_read_only_cache(cache, texts, truth, cl100k, capsys, monkeypatch):
    cache.mkdir(parents=True)
    cache.chmod(0o555)
    from needlebench.safe_fs import Folder

    def refuse(*args, **kwargs):  # root ignores the mode bits: refuse as a read-only mount would
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Folder, "_new_temp", refuse)  # where every temporary file of the cache is created
    try:
        assert _same(tokenized._load_or_compute(texts[0], cl100k), truth)
    finally:
        monkeypatch.undo()
        cache.chmod(0o755)
    [line] = _warnings(capsys)
    assert "cannot write the token cache" in line and "Permission denied" in line
    assert list(cache.iterdir()) == []


@pytest.mark.slow
def test_the_cli_warns_in_one_line_and_builds_right(tmp_path):
    """A damaged entry of the real corpus, through the command line: one warning line, right rows, exit 0."""
    from needlebench.sources.haystacks import corpus_for
    from needlebench.sources.tokenizer import get_tokenizer

    text = corpus_for(None, "zh").text
    source = Path(os.environ["NEEDLEBENCH_CACHE"]) / "tokens"
    name = f"{tokenized._cache_key(text, get_tokenizer())}.npz"
    tokenized._load_or_compute(text, get_tokenizer())  # the shared test cache holds the entry
    cache = tmp_path / "cache" / "tokens"
    cache.mkdir(parents=True)
    tables, meta = _read(source / name)
    tables["hard_tokens"] = tables["hard_tokens"] + 7
    meta["tag"] = tokenized._tables_tag(tables, tokenized._entry_meta(text, get_tokenizer()))
    _rewrite(cache / name, tables, meta)
    env = {**os.environ, "NEEDLEBENCH_CACHE": str(tmp_path / "cache")}
    code = "from needlebench.cli import main; main()"
    args = ["build", "single_zh_4k", "--out", str(tmp_path / "ds")]
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("needlebench:")]
    assert len(warnings) == 1 and "boundary tables" in warnings[0] and "Traceback" not in result.stderr
    _, repaired = _read(cache / name)
    assert repaired["tag"] != meta["tag"]
    manifest = json.loads((tmp_path / "ds" / "needlebench.json").read_text())
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions

    reference = build_dataset(["single_zh_4k"], tmp_path / "ref", BuildOptions(), progress=False)
    assert manifest["configs"]["single_zh_4k"] == reference["configs"]["single_zh_4k"]


def test_parsed_cl100k_ranks_are_cached_and_checked(tmp_path, monkeypatch, cl100k):
    """The parsed BPE ranks are kept in the cache: the next load reads them (same tokens); a damaged copy is
    ignored and written again."""
    from needlebench.sources import tokenizer

    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(tmp_path))
    path = Path(tokenizer._ranks_cache_path())
    assert path.parent == tmp_path / "tokens" and tokenizer._cached_ranks() is None
    first = tokenizer._fast_cl100k()  # parses the BPE file, stores the ranks
    stored = path.read_bytes()
    ranks = tokenizer._cached_ranks()
    assert ranks is not None and len(ranks) == 100_256 and ranks == first._mergeable_ranks
    text = "Needles, haystacks and 滚滚长江东逝水 — counted the same."
    assert tokenizer._fast_cl100k().encode_ordinary(text) == cl100k.encode(text)
    path.write_bytes(stored[:-10] + b"0123456789")  # damaged: the checksum no longer matches
    assert tokenizer._cached_ranks() is None
    assert tokenizer._fast_cl100k().encode_ordinary(text) == cl100k.encode(text)
    assert path.read_bytes() == stored  # written again from the BPE file


def test_prefetched_cl100k_is_the_loaded_one_and_errors_reach_the_caller(monkeypatch):
    from needlebench.errors import NeedlebenchError
    from needlebench.sources import tokenizer

    monkeypatch.setattr(tokenizer, "_cl100k_loading", None)
    tokenizer.get_tokenizer.cache_clear()
    tokenizer.prefetch_cl100k()
    assert tokenizer.get_tokenizer("cl100k_base") is tokenizer.load_cl100k()

    def broken():
        raise NeedlebenchError("tokenizer cl100k_base is not cached")

    monkeypatch.setattr(tokenizer, "_cl100k_loading", None)
    monkeypatch.setattr(tokenizer, "load_cl100k", broken)
    tokenizer.get_tokenizer.cache_clear()
    tokenizer.prefetch_cl100k()
    with pytest.raises(NeedlebenchError, match="not cached"):
        tokenizer.get_tokenizer()
    monkeypatch.undo()
    tokenizer.get_tokenizer.cache_clear()


@pytest.mark.slow
def test_a_fork_during_the_prefetch_waits_for_it():
    """A worker forked while cl100k is still loading in the prefetch thread would wait forever for that thread:
    forks wait for the load, and the child has the tokenizer."""
    code = (
        "import os\n"
        "from needlebench.sources import tokenizer\n"
        "tokenizer.prefetch_cl100k()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if tokenizer.get_tokenizer().count('hello world') == 2 else 3)\n"
        "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "0", result.stderr
