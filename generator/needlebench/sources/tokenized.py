"""A corpus tokenised once, with the boundaries that let any splice of it be counted exactly.

Written for tiktoken (below), and valid for any counting tokenizer that ``splices`` (see
:class:`needlebench.sources.tokenizer.TextTokenizer`: Hugging Face byte-level BPE tokenizers whose pre-tokeniser is
a regex split give their pieces through the same interface). For a tokenizer that does not, the tables are
estimates for placement and every count encodes its whole text.

tiktoken splits text with a pre-tokeniser regex into pieces and runs BPE inside each piece, so the tokens of a
text are the tokens of its pieces. The regex has no look-behind and looks at most one character ahead, so
scanning restarts identically at any piece boundary. A *hard* boundary is a piece boundary whose previous
character is not whitespace: cutting the text there changes no piece on either side. Counting a splice
(corpus spans and inserted strings) therefore needs only the corpus' token indices at hard boundaries plus
the encoding of short "glue" windows around each junction, re-scanned until they fall back into step with
the corpus' own pieces (see :meth:`TokenizedCorpus.count`). Nothing is ever re-tokenised in full.

The token array and boundary tables are cached on disk, keyed by the text's sha256 and the tokenizer. An entry records
the text's hash, the tokenizer and an HMAC tag of its arrays and record, keyed by the user's secret kept outside the
cache (:func:`needlebench.sources.cache.secret`), so an edited entry cannot be made to pass by recomputing a digest;
loading checks the tag, the tables' invariants and a few random spans re-encoded, and recomputes (with a one-line
warning) whatever does not pass.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import re
import stat
import sys
import time
import zipfile
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO

import numpy as np

from needlebench.errors import NeedlebenchError
from needlebench.interrupts import pid_alive
from needlebench.safe_fs import Folder
from needlebench.sources.cache import cache_folder, same_tag, signer, tokens_dir
from needlebench.sources.corpus import Corpus
from needlebench.sources.tokenizer import TextTokenizer
from needlebench.sources.utf8 import utf8_offsets

CACHE_FORMAT = 7

#: Sentence terminators followed by optional closing quotes/brackets.
_SENTENCE_END = re.compile(r"[.!?。！？]+[\"'”’」』)）]*")

#: A line break that ends a non-empty line (the insertion point is the break itself).
_LINE_END = re.compile(r"\S\n")

#: Characters of space-delimited words (letters, digits, apostrophes, hyphens): a cut between two of them would
#: split a word such as "don't" or "well-known".
_WORD_CHAR = re.compile(r"[A-Za-z0-9\u00C0-\u024F'’-]")

#: Characters around a glue window kept as margin from the window's end before trusting a boundary.
_MARGIN = 8
#: How far into a span to look for the scan to fall back into step with the corpus.
_SYNC_WINDOW = 512
#: Entries kept in a corpus' memo of glue counts and sync points before it is cleared.
_MEMO_SIZE = 1 << 16
#: Longest text whose count is remembered when every count encodes its whole text (tokenizers that do not splice).
_FALLBACK_MEMO_CHARS = 8192


def cache_dir() -> Path:
    """The token cache folder (:func:`needlebench.sources.cache.tokens_dir`)."""
    return tokens_dir()


@dataclass
class TokenizedCorpus:
    """The corpus stream (possibly repeated), its tokens and boundary tables."""

    corpus: Corpus
    tokenizer: TextTokenizer
    text: str
    tokens: np.ndarray  # uint32 token ids of `text`
    hard_chars: np.ndarray  # int64 sorted char positions of hard boundaries (includes 0 and len(text))
    hard_tokens: np.ndarray  # int64 token index at each hard boundary
    sentence_chars: np.ndarray  # int64 char positions right after a sentence end (insertion points)
    cycles: int  # copies of the corpus text in `text`
    copy_chars: int  # characters of one copy

    @property
    def num_tokens(self) -> int:
        return int(len(self.tokens))

    @property
    def tokens_per_copy(self) -> int:
        return self.num_tokens // self.cycles

    @cached_property
    def sentence_tokens(self) -> np.ndarray:
        """Approximate token index of every insertion point (that of the hard boundary at or before it)."""
        index = np.searchsorted(self.hard_chars, self.sentence_chars, side="right") - 1
        return self.hard_tokens[np.maximum(0, index)]

    @property
    def splice(self) -> bool:
        """Whether counts are sums of parts plus junction corrections (else every count encodes its whole text)."""
        return self.tokenizer.splices

    # ---- boundary look-ups -------------------------------------------------------------------------------
    # One value at a time, the look-ups go through memoryviews of the tables: `bisect` and indexing on them
    # return Python ints, about twice as fast as numpy's scalar `searchsorted` and indexing.
    @cached_property
    def _hard_chars(self) -> memoryview:
        return memoryview(np.ascontiguousarray(self.hard_chars, dtype=np.int64))

    @cached_property
    def _hard_tokens(self) -> memoryview:
        return memoryview(np.ascontiguousarray(self.hard_tokens, dtype=np.int64))

    def hard_at_or_after(self, char: int) -> int:
        """Index into the hard tables of the first hard boundary at or after `char`."""
        return bisect_left(self._hard_chars, char)

    def hard_at_or_before(self, char: int) -> int:
        return bisect_right(self._hard_chars, char) - 1

    def approx_token_index(self, char: int) -> int:
        """Token index of the nearest hard boundary at or before `char` (exact at hard boundaries)."""
        return self._hard_tokens[max(0, self.hard_at_or_before(char))]

    def char_at_token(self, token_index: int) -> int:
        """Char position of the hard boundary whose token index is closest to `token_index` (not after it)."""
        return self._hard_chars[max(0, bisect_right(self._hard_tokens, token_index) - 1)]

    def is_cut_point(self, char: int) -> bool:
        """A position where a haystack may end: after a non-space character, never inside a word."""
        if char <= 0 or char >= len(self.text):
            return char == len(self.text)
        before, after = self.text[char - 1], self.text[char]
        if before.isspace():
            return False
        return not (_WORD_CHAR.match(before) and _WORD_CHAR.match(after))

    def copy_index(self, char: int) -> int:
        return min(self.cycles - 1, char // self.copy_chars) if self.copy_chars else 0

    # ---- exact counting ------------------------------------------------------------------------------------
    @cached_property
    def _memo(self) -> dict:
        """Results of :meth:`encode_count` and :meth:`_sync_point` (rows of a cell repeat the same windows)."""
        return {}

    def _remember(self, key, value):
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[key] = value
        return value

    def encode_count(self, text: str) -> int:
        if not text:
            return 0
        known = self._memo.get(text)
        if known is None:
            if not self.splice and len(text) > _FALLBACK_MEMO_CHARS:
                return self.tokenizer.count(text)  # whole prompts: too large to keep, seldom counted twice
            known = self._remember(text, self.tokenizer.count(text))
        return known

    def _sync_point(self, glue: str, start: int, end: int) -> int | None:
        """First hard corpus boundary in (start, end - margin] at which scanning `glue + text[start:]` from the
        beginning has a piece boundary, i.e. the scan is back in step with the corpus' own pieces."""
        limit = min(end - _MARGIN, start + _SYNC_WINDOW)
        if limit <= start:
            return None
        key = (glue, start, limit)
        if key not in self._memo:
            self._remember(key, self._scan_sync(glue, start, limit))
        return self._memo[key]

    def _scan_sync(self, glue: str, start: int, limit: int) -> int | None:
        window = glue + self.text[start : limit + _MARGIN]
        offset = start - len(glue)
        hard = self._hard_chars
        first = self.hard_at_or_after(start + 1)
        for end in self.tokenizer.piece_ends(window):
            position = end + offset
            if position <= start:
                continue
            if position > limit:
                return None
            while first < len(hard) and hard[first] < position:
                first += 1
            if first < len(hard) and hard[first] == position:
                return position
        return None

    def count(self, segments: list, state: tuple[int, list[str]] | None = None) -> int:
        """Exact token count of the concatenation of `segments`: strings and `(start, end)` corpus spans.

        Long spans contribute through the token table; only glue windows around junctions are encoded. With
        `state` (from :meth:`count_state` of the segments before these) the count is that of all of them.
        """
        total, glue = self.count_state(segments, state)
        return total + self.encode_count("".join(glue))

    def count_state(self, segments: list, state: tuple[int, list[str]] | None = None) -> tuple[int, list[str]]:
        """Where :meth:`count` stands after `segments`: (tokens counted so far, glue text not yet encoded)."""
        total, glue = (0, []) if state is None else (state[0], list(state[1]))
        for segment in segments:
            if isinstance(segment, str):
                glue.append(segment)
                continue
            if not self.splice:
                glue.append(self.text[segment[0] : segment[1]])
                continue
            start, end = segment
            if end <= start:
                continue
            glue_text = "".join(glue)
            sync = self._sync_point(glue_text, start, end)
            last = self.hard_at_or_before(end - _MARGIN) if sync is not None else -1
            if sync is None or last < 0 or self._hard_chars[last] <= sync:
                glue.append(self.text[start:end])
                continue
            last_char = self._hard_chars[last]
            total += self.encode_count(glue_text + self.text[start:sync])
            total += self._hard_tokens[last] - self._hard_tokens[self.hard_at_or_after(sync)]
            glue = [self.text[last_char:end]]
        return total, glue

    def render(self, segments: list) -> str:
        return "".join(s if isinstance(s, str) else self.text[s[0] : s[1]] for s in segments)

    @cached_property
    def text_utf8(self) -> bytes:
        return self.text.encode("utf-8")

    @cached_property
    def _byte_offsets(self) -> np.ndarray | None:
        """UTF-8 byte offset of every char position; None for ASCII text (offsets equal positions)."""
        return None if len(self.text_utf8) == len(self.text) else utf8_offsets(self.text)

    def render_utf8(self, segments: list) -> bytes:
        """``render(segments).encode("utf-8")``, joined from byte spans of the corpus (no text is transcoded; the
        spans are memoryviews, so each byte is copied once, into the result)."""
        return bytes(self.utf8_parts(segments))

    def utf8_parts(self, segments: list) -> Utf8Text:
        """The UTF-8 bytes of ``render(segments)`` as parts, not joined yet: memoryviews of the corpus bytes and
        encoded strings (the Parquet writer joins a row group's parts at once, copying each byte once)."""
        data, offsets = memoryview(self.text_utf8), self._byte_offsets
        parts = []
        for segment in segments:
            if isinstance(segment, str):
                parts.append(segment.encode("utf-8"))
            elif offsets is None:
                parts.append(data[segment[0] : segment[1]])
            else:
                parts.append(data[int(offsets[segment[0]]) : int(offsets[segment[1]])])
        return Utf8Text(parts)


class Utf8Text:
    """A text as UTF-8 byte parts (``bytes`` and memoryviews of a corpus), joined only where it is written."""

    __slots__ = ("nbytes", "parts")

    def __init__(self, parts: list) -> None:
        self.parts = parts
        self.nbytes = sum(map(len, parts))

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __len__(self) -> int:
        return self.nbytes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Utf8Text) and bytes(self) == bytes(other)

    __hash__ = None  # mutable parts: not hashable


# ---- construction ----------------------------------------------------------------------------------------------
def _hard_boundaries(text: str, ends: np.ndarray, tokens: np.ndarray, byte_lengths: np.ndarray):
    """Hard boundaries (char positions, token indices) from the pieces' end positions `ends`."""
    ends = np.concatenate([[0], ends])
    ends = np.unique(ends)
    # previous character must not be whitespace (position 0 is always hard)
    prev_space = np.zeros(len(ends), dtype=bool)
    if len(ends) > 1:
        prev = np.array([text[i - 1].isspace() for i in ends[1:]], dtype=bool)
        prev_space[1:] = prev
    hard = ends[~prev_space]
    if hard[-1] != len(text):
        hard = np.append(hard, len(text))
    char_bytes = utf8_offsets(text)
    token_ends = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum(byte_lengths[tokens], out=token_ends[1:])
    hard_bytes = char_bytes[hard]
    token_index = np.searchsorted(token_ends, hard_bytes, side="left")
    aligned = token_ends[np.minimum(token_index, len(tokens))] == hard_bytes
    # the text's end may carry trailing whitespace: keep only positions that are token boundaries
    return hard[aligned].astype(np.int64), token_index[aligned].astype(np.int64)


def _sentence_positions(text: str) -> np.ndarray:
    """Insertion points: right after a sentence end (EN `. ! ?`, ZH `。！？`, with closing quotes) that is
    followed by whitespace or a non-word character, and at every line break that ends a non-empty line."""
    positions = set()
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        if end < len(text) and (text[end].isspace() or not _WORD_CHAR.match(text[end])):
            positions.add(end)
    for match in _LINE_END.finditer(text):
        positions.add(match.start() + 1)
    return np.asarray(sorted(positions), dtype=np.int64)


def _cache_key(text: str, tokenizer: TextTokenizer) -> str:
    digest = hashlib.sha256()
    digest.update(f"{CACHE_FORMAT}\x1f{tokenizer.name}\x1f{tokenizer.pattern}\x1f".encode())
    digest.update(text.encode("utf-8"))
    return digest.hexdigest()


def _compute_tables(text: str, tokenizer: TextTokenizer) -> dict[str, np.ndarray]:
    """The tables of `text`. For a tokenizer that does not splice, the "hard" tables are the starts of its tokens:
    estimates for placement only (every count then encodes its whole text)."""
    if tokenizer.splices:
        tokens, ends = tokenizer.tokens_and_piece_ends(text)
        hard_chars, hard_tokens = _hard_boundaries(text, ends, tokens, tokenizer.token_byte_lengths)
    else:
        tokens, hard_chars, hard_tokens = tokenizer.token_starts(text)
    return {
        "tokens": tokens,
        "hard_chars": hard_chars,
        "hard_tokens": hard_tokens,
        "sentence_chars": _sentence_positions(text),
    }


_TABLES = ("tokens", "hard_chars", "hard_tokens", "sentence_chars")
_DTYPES = {"tokens": np.uint32, "hard_chars": np.int64, "hard_tokens": np.int64, "sentence_chars": np.int64}
#: Spans of the cached tables re-encoded on every load (random hard-boundary spans of about this many chars).
_SPOT_CHECKS = 6
_SPOT_CHARS = 1500
#: Temporary cache files of earlier versions: ``.<key>.<pid>.<random>.tmp`` and ``tmp<random>.tmp``.
_TEMP_NAME = re.compile(r"^\.[0-9a-f]{64}\.(\d+)\.[a-z0-9_]{8}\.tmp$")
_LEGACY_TEMP_NAME = re.compile(r"^tmp[a-z0-9_]{8}\.tmp$")
#: Temporary files of :meth:`needlebench.safe_fs.Folder.atomic`: ``.<entry name>.<16 hex digits>.tmp``; one older
#: than :data:`_STALE_SECONDS` was left by a killed process (a live one writes its entry in seconds).
_ATOMIC_TEMP_NAME = re.compile(r"^\.(?:sentences-)?[0-9a-f]{64}\.npz\.[0-9a-f]{16}\.tmp$")
_STALE_SECONDS = 3600
#: What reading a damaged cache entry can raise.
_READ_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


def _warn(message: str) -> None:
    print(f"needlebench: warning: {' '.join(message.split())}", file=sys.stderr)


def _tables_tag(tables: dict[str, np.ndarray], meta: dict) -> str:
    """HMAC-SHA256 (keyed by the user's secret) of the entry's record and arrays."""
    digest = signer()
    digest.update(json.dumps(meta, sort_keys=True).encode("utf-8") + b"\x1f")
    for key in _TABLES:
        array = np.ascontiguousarray(tables[key])
        digest.update(f"{key}\x1f{array.dtype.str}\x1f{array.shape}\x1f".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def _entry_meta(text: str, tokenizer: TextTokenizer) -> dict:
    """What a cache entry must record about its inputs (its tag is added when written)."""
    return {
        "format": CACHE_FORMAT,
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "text_chars": len(text),
        "tokenizer": tokenizer.name,
        "pattern_sha256": hashlib.sha256(tokenizer.pattern.encode("utf-8")).hexdigest(),
    }


def check_tables(
    text: str, tokenizer: TextTokenizer, tables: dict[str, np.ndarray], spot_checks: int = _SPOT_CHECKS
) -> str | None:
    """Why `tables` are not the tables of `text` (None when they pass): shapes and invariants of the boundary
    tables, then a few random spans between hard boundaries re-encoded and compared with the cached tokens."""
    for key in _TABLES:
        array = tables[key]
        if array.dtype != _DTYPES[key] or array.ndim != 1:
            return f"its {key} table has the wrong type"
    tokens, chars, hard = tables["tokens"], tables["hard_chars"], tables["hard_tokens"]
    sentences = tables["sentence_chars"]
    if len(chars) != len(hard) or len(chars) < 2:
        return "its boundary tables do not match"
    if chars[0] != 0 or hard[0] != 0 or chars[-1] != len(text) or hard[-1] != len(tokens):
        return "its boundary tables do not span the text"
    if np.any(np.diff(chars) <= 0) or np.any(np.diff(hard) <= 0):
        return "its boundary tables are not increasing"
    if len(sentences) and (np.any(np.diff(sentences) <= 0) or sentences[0] < 0 or sentences[-1] > len(text)):
        return "its sentence table is not increasing inside the text"
    if len(tokens) and int(tokens.max()) >= tokenizer.n_vocab:
        return "it holds token ids outside the vocabulary"
    encode = tokenizer.encode
    generator = np.random.default_rng()
    starts = {0, len(chars) - 2} | {int(i) for i in generator.integers(0, len(chars) - 1, size=spot_checks)}
    for i in sorted(starts):
        j = max(i + 1, min(len(chars) - 1, int(np.searchsorted(chars, chars[i] + _SPOT_CHARS))))
        if tokenizer.splices and encode(text[chars[i] : chars[j]]) != tokens[hard[i] : hard[j]].tolist():
            return f"its tokens differ from the text's at characters {int(chars[i])}-{int(chars[j])}"
        lo, hi = int(chars[i]), int(chars[j])
        found = _sentence_positions(text[max(0, lo - 64) : hi + 64]) + max(0, lo - 64)
        found = found[(found >= lo) & (found < hi)]
        cached = sentences[(sentences >= lo) & (sentences < hi)]
        if not np.array_equal(found, cached):
            return f"its sentence positions differ from the text's at characters {lo}-{hi}"
    return None


def _read_entry(path: Path, text: str, tokenizer: TextTokenizer) -> tuple[dict | None, str | None]:
    """(tables, None) for a trustworthy entry; (None, why) for an unusable one; (None, None) when absent. The entry
    is read only when it is a regular file (never through a link, never a FIFO: :meth:`Folder.open_read`)."""
    try:
        folder = Folder.open(path.parent)
    except (OSError, NeedlebenchError):  # no cache folder (or a file there): no entry
        return None, None
    try:
        with folder, folder.open_read(path.name) as handle:
            with np.load(handle, allow_pickle=False) as data:
                if not set(_TABLES) | {"meta"} <= set(data.files):
                    return None, "is incomplete"
                meta = json.loads(bytes(data["meta"]).decode("utf-8"))
                tables = {key: data[key] for key in _TABLES}
    except FileNotFoundError:
        return None, None
    except NeedlebenchError:
        return None, "is not a file"
    except _READ_ERRORS as error:
        return None, f"is unreadable ({type(error).__name__})"
    if not isinstance(meta, dict) or {k: meta.get(k) for k in _entry_meta(text, tokenizer)} != _entry_meta(
        text, tokenizer
    ):
        return None, "was made from another text or tokenizer"
    if not same_tag(meta.get("tag"), _tables_tag(tables, _entry_meta(text, tokenizer))):
        return None, "does not match its recorded tag"
    problem = check_tables(text, tokenizer, tables)
    return (None, problem) if problem else (tables, None)


def _write_entry(path: Path, text: str, tokenizer: TextTokenizer, tables: dict[str, np.ndarray]) -> None:
    meta = _entry_meta(text, tokenizer)
    meta = {**meta, "tag": _tables_tag(tables, meta)}
    encoded = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    write_cache_entry(path, lambda handle: np.savez(handle, **tables, meta=encoded))


def write_cache_entry(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write the cache entry `path` with `write(handle)`: 0600 in its private folder (0700 whatever the umask,
    :func:`needlebench.sources.cache.cache_folder`), through a temporary file of :meth:`Folder.atomic` renamed over
    it by descriptors. OSError when the cache cannot be written (a folder of another user included)."""
    try:
        folder = cache_folder(path.parent)
    except NeedlebenchError as error:  # a folder of another user, or that others may write: not our cache
        raise PermissionError(errno.EPERM, str(error)) from None
    with folder, folder.atomic(path.name, mode=0o600) as handle:
        write(handle)


@functools.cache
def remove_cache_leftovers(folder: Path) -> list[str]:
    """Remove the temporary files killed processes left in the cache folder (once per process)."""
    removed = []
    try:
        handle = Folder.open(folder)
    except (OSError, NeedlebenchError):
        return removed
    with handle:
        try:
            names = handle.listdir()
        except OSError:
            return removed
        for name in names:
            match = _TEMP_NAME.match(name)
            try:
                stale = (match and not pid_alive(int(match.group(1)))) or _LEGACY_TEMP_NAME.match(name)
                info = handle.lstat(name)
                if info is None or not stat.S_ISREG(info.st_mode):  # never a link, never a folder
                    continue
                if stale or (_ATOMIC_TEMP_NAME.match(name) and time.time() - info.st_mtime > _STALE_SECONDS):
                    handle.unlink(name)
                    removed.append(name)
            except (OSError, OverflowError, NeedlebenchError):
                pass
    return removed


def _load_or_compute(text: str, tokenizer: TextTokenizer) -> dict[str, np.ndarray]:
    """The tables of `text`, from the disk cache when its entry is trustworthy, else computed (and cached when the
    cache is writable). A damaged or foreign entry, or a cache that cannot be written, is a one-line warning."""
    folder = cache_dir()
    remove_cache_leftovers(folder)
    path = folder / f"{_cache_key(text, tokenizer)}.npz"
    tables, problem = _read_entry(path, text, tokenizer)
    if tables is not None:
        return tables
    tables = _compute_tables(text, tokenizer)
    try:
        _write_entry(path, text, tokenizer, tables)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        if problem:
            _warn(f"token cache entry {path} {problem} and cannot be replaced ({reason}); tokenised in memory")
        else:
            _warn(f"cannot write the token cache in {folder} ({reason}); tokenised in memory")
        return tables
    if problem:
        _warn(f"token cache entry {path} {problem}; recomputed and replaced")
    return tables


def _repeat_tables(tables: dict[str, np.ndarray], copies: int, copy_chars: int) -> dict[str, np.ndarray]:
    """Tables of the text repeated `copies` times (valid when the junction is clean: see
    :func:`_junction_is_clean`). Position 0 of later copies follows whitespace, so it is not hard."""
    n_tokens = len(tables["tokens"])
    hard_chars, hard_tokens = tables["hard_chars"], tables["hard_tokens"]
    return {
        "tokens": np.tile(tables["tokens"], copies),
        "hard_chars": np.concatenate([hard_chars] + [hard_chars[1:] + k * copy_chars for k in range(1, copies)]),
        "hard_tokens": np.concatenate([hard_tokens] + [hard_tokens[1:] + k * n_tokens for k in range(1, copies)]),
        "sentence_chars": np.concatenate([tables["sentence_chars"] + k * copy_chars for k in range(copies)]),
    }


def _junction_is_clean(text: str, tables: dict[str, np.ndarray], tokenizer: TextTokenizer) -> bool:
    """True when `text + text` tokenises as the tokens of `text` twice (checked on a window around the
    junction that starts and ends at hard boundaries). Always true for a tokenizer that does not splice: its
    tables are estimates there, and every count encodes its whole text."""
    if not tokenizer.splices:
        return True
    hard = tables["hard_chars"]
    tail_start = int(hard[max(0, np.searchsorted(hard, len(text) - 256) - 1)])
    head_end = int(hard[min(len(hard) - 1, np.searchsorted(hard, 256))])
    encode = tokenizer.encode
    tail, head = text[tail_start:], text[:head_end]
    return encode(tail + head) == encode(tail) + encode(head)


def copies_for(corpus_tokens: int, max_window: int) -> int:
    """Copies of a corpus of `corpus_tokens` tokens needed for a window of `max_window` tokens to start anywhere
    in the first copy (1 when the window fits in the corpus)."""
    return 1 if max_window <= corpus_tokens else 1 + -(-max_window // corpus_tokens)


def tokenize_corpus(corpus: Corpus, tokenizer: TextTokenizer, copies: int = 1) -> TokenizedCorpus:
    """Tokenise `corpus` once (cached on disk); the stream is the corpus repeated `copies` times."""
    text = corpus.text
    tables = _load_or_compute(text, tokenizer)
    if len(tables["tokens"]) == 0:
        raise NeedlebenchError(f"haystack {corpus.name!r} has no tokens; it needs some text")
    if copies > 1:
        if _junction_is_clean(text, tables, tokenizer):
            tables = _repeat_tables(tables, copies, len(text))
        else:
            tables = _load_or_compute(text * copies, tokenizer)
        text = text * copies
    return TokenizedCorpus(
        corpus=corpus,
        tokenizer=tokenizer,
        text=text,
        tokens=tables["tokens"],
        hard_chars=tables["hard_chars"],
        hard_tokens=tables["hard_tokens"],
        sentence_chars=tables["sentence_chars"],
        cycles=copies,
        copy_chars=len(corpus.text),
    )
