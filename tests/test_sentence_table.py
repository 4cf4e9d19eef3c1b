"""The whole-stream sentence table: equal to a scan, cached on disk, and never trusted when it is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from needlebench.sources import tokenized
from needlebench.sources.corpus import Corpus
from needlebench.tasks import boundaries, sentence_table


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tokens"


def _corpus(cl100k, text: str, copies: int = 1) -> tokenized.TokenizedCorpus:
    corpus = Corpus(name="t", language="en", documents=(text,), source="test", license="test")
    return tokenized.tokenize_corpus(corpus, cl100k, copies)


@pytest.fixture(scope="module")
def text(english_corpus) -> str:
    return english_corpus.corpus.text[:40_000]


def test_table_equals_a_scan_and_is_cached(cache, cl100k, text, capsys):
    corpus = _corpus(cl100k, text)
    table = sentence_table.sentence_points(corpus)
    expected = boundaries.points(boundaries.SENTENCE, corpus.text, 0, len(corpus.text))
    assert table.tolist() == expected and len(expected) > 100
    assert not table.flags.writeable
    [entry] = cache.glob("sentences-*.npz")
    again = sentence_table.sentence_points(_corpus(cl100k, text))  # a new corpus object: read from disk
    assert np.array_equal(again, table) and capsys.readouterr().err == ""
    repeated = sentence_table.sentence_points(_corpus(cl100k, text, copies=2))  # another stream, another entry
    assert len(list(cache.glob("sentences-*.npz"))) == 2 and len(repeated) > len(table)


def _rewrite(entry, table, digest=None):
    """The entry with another table; its digest recomputed (a forged entry) unless `digest` is given."""
    key = entry.stem.removeprefix("sentences-")
    digest = sentence_table._digest(key, table) if digest is None else digest
    with open(entry, "wb") as handle:
        np.savez(handle, points=table, digest=np.array(digest))


@pytest.mark.parametrize(
    ("damage", "forge"),
    [
        (lambda table: np.delete(table, len(table) // 2), False),  # a point missing: the digest fails
        (lambda table: table + 1, True),  # shifted, digest forged: the re-scan fails
        (lambda table: table[::-1], True),  # unsorted
        (lambda table: table.astype(np.int32), True),  # wrong type
    ],
)
def test_a_wrong_table_is_recomputed_with_one_warning(cache, cl100k, text, capsys, damage, forge):
    truth = sentence_table.sentence_points(_corpus(cl100k, text))
    [entry] = cache.glob("sentences-*.npz")
    key = entry.stem.removeprefix("sentences-")
    _rewrite(entry, damage(np.array(truth)), None if forge else sentence_table._digest(key, truth))
    table = sentence_table.sentence_points(_corpus(cl100k, text))
    assert np.array_equal(table, truth)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not match its haystack; recomputed" in err[0]
    assert np.array_equal(np.load(entry)["points"], truth)  # replaced


def test_garbage_and_a_read_only_cache(cache, cl100k, text, capsys, monkeypatch):
    truth = sentence_table.sentence_points(_corpus(cl100k, text))
    [entry] = cache.glob("sentences-*.npz")
    entry.write_bytes(b"not a numpy file")
    assert np.array_equal(sentence_table.sentence_points(_corpus(cl100k, text)), truth)
    assert "is unreadable" in capsys.readouterr().err
    entry.unlink()

    def refuse(*args, **kwargs):  # root ignores mode bits: refuse as a read-only mount would
        raise PermissionError(13, "Permission denied")

    from needlebench.safe_fs import Folder

    monkeypatch.setattr(Folder, "_new_temp", refuse)  # where every temporary file of the cache is created
    assert np.array_equal(sentence_table.sentence_points(_corpus(cl100k, text)), truth)
    assert not list(cache.glob("sentences-*")) and capsys.readouterr().err == ""
