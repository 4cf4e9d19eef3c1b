"""Hugging Face tokenizers as counting tokenizers (``--tokenizer hf:PATH_OR_NAME``), loaded offline.

A tokenizer is read from a local folder or from a model already in the local Hugging Face cache
(``local_files_only``: nothing is downloaded). It is recorded (rows, recipe, token cache) as
``hf:LABEL@sha256:HEX``: LABEL is the model name (``ORG/NAME``, also for a folder of the Hugging Face cache) or the
folder's name, HEX the sha256 of its ``tokenizer.json``; no machine path, so a recipe travels. The recorded form
loads again from the Hugging Face cache (by name) or from a folder it was read from on this machine (a small index
in the needlebench cache, see :mod:`needlebench.sources.inputs`), and only when the hash matches.

**Exact splice counting.** A byte-level BPE tokenizer without a normaliser whose pre-tokeniser is a regex split
(``ByteLevel(use_regex=True)`` as in GPT-2, SmolLM2, optionally after ``Digits(individual_digits=True)``, or a
``Split(Regex, Isolated)`` before ``ByteLevel`` as in Llama 3) tokenises a text as its pieces, each alone, and the
split regex restarts identically at any piece boundary: the same property as tiktoken's, so the tokenised corpus
counts prompts as the sum of their parts plus junction corrections (:mod:`needlebench.sources.tokenized`). The
pieces are read from the tokenizer itself (``word_ids`` of an encoding), never re-implemented. Any other tokenizer
(a normaliser, Metaspace/SentencePiece, WordPiece, ...) ``splices`` not: every count then encodes its whole text
(exact, slower) and the build says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import numpy as np

from needlebench.errors import NeedlebenchError
from needlebench.sources.inputs import remember_path, remembered_paths
from needlebench.sources.utf8 import utf8_offsets

#: ``hf:LABEL@sha256:HEX``: the recorded form of a Hugging Face tokenizer.
_RECORDED = re.compile(r"^hf:(?P<label>.+)@sha256:(?P<sha>[0-9a-f]{64})$")
#: Characters encoded at a time when a long text is tokenised (bounds the memory of the encodings).
CHUNK_CHARS = 1 << 20
#: Characters before a chunk's cut within which no piece end is trusted.
CHUNK_MARGIN = 4096
#: Folder names of the Hugging Face hub cache: ``models--ORG--NAME``.
_HUB_FOLDER = re.compile(r"^models--(?P<org>[^/]+?)--(?P<name>[^/]+)$")
INSTALL_HINT = "install it with `pip install 'needlebench[hf-tokenizer]'`"


#: Files of a model or tokenizer folder that transformers reads for its tokenizer (``tokenization_utils_base.py``,
#: ``vocab_files_names`` of the tokenizer classes) and their largest size: a sparse file of terabytes planted under
#: such a name is refused before it is read whole (honest ones are megabytes; the largest ``tokenizer.json`` on the
#: Hub are some 35 MB).
TOKENIZER_FILE_BYTES = 512 << 20
TOKENIZER_FILE_NAMES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def check_tokenizer_files(folder: Path) -> None:
    """Refuse (one line) a tokenizer file of ``folder`` (:data:`TOKENIZER_FILE_NAMES`, links followed as
    transformers follows them) larger than :data:`TOKENIZER_FILE_BYTES`. Entries that are not regular files are left
    to transformers, which reads only regular files (``os.path.isfile``)."""
    for name in TOKENIZER_FILE_NAMES:
        try:
            info = os.stat(folder / name)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(info.st_mode) and info.st_size > TOKENIZER_FILE_BYTES:
            raise NeedlebenchError(
                f"{folder / name} holds {info.st_size} bytes; a tokenizer file of more than "
                f"{TOKENIZER_FILE_BYTES >> 20} MiB is not read"
            )


#: Characters of a library's error message shown in a one-line error (a message may quote a whole file).
MESSAGE_CHARS = 300


def error_summary(exc: BaseException) -> str:
    """``Type: first line of the message``, cut to :data:`MESSAGE_CHARS` characters: what a one-line error shows of
    an exception raised while reading a file someone else made (the CLI escapes its control characters)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "\u2026"


@contextmanager
def transformers_log_held() -> Iterator[None]:
    """Hold what transformers logs (its handlers on the ``transformers`` logger, ``transformers/utils/logging.py``)
    while a file from anyone is read: shown as usual when the read succeeds, dropped when it fails, so that a bad
    file is the one line of its error and not that line after the warnings its values caused."""
    handlers = list(logging.getLogger("transformers").handlers)
    held: list[tuple[logging.Handler, logging.LogRecord]] = []

    def holder(handler: logging.Handler):
        def hold(record: logging.LogRecord) -> bool:
            held.append((handler, record))
            return False

        return hold

    filters = [(handler, holder(handler)) for handler in handlers]
    for handler, hold in filters:
        handler.addFilter(hold)
    try:
        yield
    finally:
        for handler, hold in filters:
            handler.removeFilter(hold)
    for handler, record in held:
        handler.handle(record)


def load_transformers_tokenizer(path: str, trust_remote_code: bool = False) -> Any:
    """A transformers tokenizer from a local folder, or a model name already in the local Hugging Face cache.

    Nothing is downloaded (``local_files_only``), and no code of the folder runs unless ``trust_remote_code``
    (lm-eval's model arg, default False): transformers would otherwise ask on the terminal whether to run an
    ``auto_map`` class (``resolve_trust_remote_code`` in ``transformers/dynamic_module_utils.py``). The folder may
    come from anyone: whatever transformers raises on its files (a ``tokenizer_config.json`` that is a list, a
    ``tokenizer.json`` without ``added_tokens``, a special token that is not a string, JSON nested too deep) is one
    line naming the folder."""
    folder = Path(path).expanduser()
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise NeedlebenchError(f"tokenizer counting needs transformers; {INSTALL_HINT}") from None
    source = str(folder) if folder.is_dir() else path
    if folder.is_dir():
        check_tokenizer_files(folder)
    try:
        with transformers_log_held():
            tokenizer = AutoTokenizer.from_pretrained(
                source, local_files_only=True, trust_remote_code=trust_remote_code
            )
    except Exception as exc:  # any failure of a third-party reader on files from anyone
        if not folder.is_dir() and isinstance(exc, (OSError, ValueError)):
            raise NeedlebenchError(
                f"tokenizer {path!r} is not a local folder nor a model in the local Hugging Face cache; "
                "pass the path of a model or tokenizer directory"
            ) from None
        raise NeedlebenchError(f"tokenizer folder {path!r} could not be loaded: {error_summary(exc)}") from None
    try:  # a tokenizer.json can load and then fail on its first text (an unknown token missing from its vocabulary)
        tokenizer(_PROBE_TEXT, add_special_tokens=False)
    except Exception as exc:
        raise NeedlebenchError(f"tokenizer folder {path!r} cannot encode text: {error_summary(exc)}") from None
    return tokenizer


#: Text every tokenizer a prompt is counted with must encode: letters, digits, punctuation, Chinese, an emoji.
_PROBE_TEXT = "Probe: the needle 4711 is hidden, isn't it? 针在草堆里。 ü ☃ 🧵"


def splice_safe(spec: dict) -> bool:
    """Whether a tokenizer (its ``tokenizer.json`` as a mapping) tokenises text as its regex pieces, each alone:
    BPE on bytes (``ByteLevel`` last, no prefix space), no normaliser, every other pre-tokeniser step a
    ``Digits(individual_digits=True)`` or a ``Split`` on a regex without look-behind that isolates its matches,
    and some regex split (``ByteLevel(use_regex=True)`` or a ``Split``)."""
    if spec.get("normalizer") is not None or (spec.get("model") or {}).get("type") != "BPE":
        return False
    steps = spec.get("pre_tokenizer") or {}
    steps = steps.get("pretokenizers", []) if steps.get("type") == "Sequence" else [steps]
    if not steps or steps[-1].get("type") != "ByteLevel" or steps[-1].get("add_prefix_space", False):
        return False
    splits = 0
    for step in steps[:-1]:
        kind = step.get("type")
        if kind == "Digits" and step.get("individual_digits"):
            continue
        pattern = (step.get("pattern") or {}).get("Regex")
        if kind != "Split" or pattern is None or "(?<" in pattern:
            return False
        if step.get("behavior") != "Isolated" or step.get("invert"):
            return False
        splits += 1
    return bool(splits or steps[-1].get("use_regex", True))


@dataclass
class HfTokenizer:
    """A Hugging Face tokenizer (no special tokens added) under its recorded name ``hf:LABEL@sha256:HEX``."""

    name: str
    tokenizer: Any = field(repr=False)  # the `tokenizers.Tokenizer`, or a transformers tokenizer wrapping one
    source: str = ""  # where it was loaded from (a folder or a model name); never recorded

    @cached_property
    def backend(self) -> Any:
        return getattr(self.tokenizer, "backend_tokenizer", self.tokenizer)

    @cached_property
    def spec(self) -> dict:
        return json.loads(self.backend.to_str())

    @cached_property
    def splices(self) -> bool:
        return splice_safe(self.spec)

    @cached_property
    def pattern(self) -> str:
        """What identifies the pre-tokenisation (with the name's hash of tokenizer.json): the token cache key."""
        spec = self.spec
        parts = {key: spec.get(key) for key in ("normalizer", "pre_tokenizer")}
        parts["model"] = (spec.get("model") or {}).get("type")
        parts["splices"] = self.splices
        return json.dumps(parts, sort_keys=True, ensure_ascii=False)

    @cached_property
    def n_vocab(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def _encode(self, text: str):
        return self.backend.encode(text, add_special_tokens=False)

    def encode(self, text: str) -> list[int]:
        return self._encode(text).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        return [encoding.ids for encoding in encode(list(texts), add_special_tokens=False)]

    def decode(self, tokens) -> str:
        return self.backend.decode(list(tokens))

    def count(self, text: str) -> int:
        return len(self._encode(text).ids)

    @cached_property
    def token_byte_lengths(self) -> np.ndarray:
        """Byte length of every token id: a byte-level token is one byte per character of the byte alphabet; an
        added token (matched in the raw text) is its content's UTF-8 length."""
        from tokenizers.pre_tokenizers import ByteLevel

        alphabet = set(ByteLevel.alphabet())
        lengths = np.zeros(self.n_vocab, dtype=np.int64)
        for token, token_id in self.backend.get_vocab(with_added_tokens=True).items():
            lengths[token_id] = len(token) if all(c in alphabet for c in token) else len(token.encode("utf-8"))
        for token_id, added in self.backend.get_added_tokens_decoder().items():
            lengths[token_id] = len(added.content.encode("utf-8"))
        return lengths

    def tokens_and_piece_ends(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """The tokens of `text` and the end (char) of each of its pieces, read from the encoding: a piece is the
        run of tokens of one pre-tokeniser word (an added token is a piece of its own).

        A long text is encoded in chunks of about :data:`CHUNK_CHARS` characters (bounded memory): each chunk
        starts at a hard boundary of the text (a piece end after a non-space character, where the scan restarts
        identically) and is kept up to its last hard boundary :data:`CHUNK_MARGIN` characters or more before its
        cut, which the cut cannot have moved."""
        if len(text) <= CHUNK_CHARS or not self.splices:
            return self._tokens_and_piece_ends(text)
        token_parts, end_parts, start = [], [], 0
        while start < len(text):
            stop = min(len(text), start + CHUNK_CHARS)
            chunk = text[start:stop]
            tokens, ends = self._tokens_and_piece_ends(chunk)
            if stop < len(text):
                keep = ends[ends <= len(chunk) - CHUNK_MARGIN]
                hard = [int(end) for end in keep[::-1][:4096] if not chunk[int(end) - 1].isspace()]
                if not hard:  # no hard boundary in the chunk (a very long run of spaces): the rest at once
                    tokens, ends = self._tokens_and_piece_ends(text[start:])
                    stop = len(text)
                else:
                    cut = hard[0]
                    cut_bytes = len(chunk[:cut].encode("utf-8"))
                    token_ends = np.cumsum(self.token_byte_lengths[tokens])
                    kept = int(np.searchsorted(token_ends, cut_bytes)) + 1
                    tokens, ends, stop = tokens[:kept], ends[ends <= cut], start + cut
            token_parts.append(tokens)
            end_parts.append(ends + start)
            start = stop
        return np.concatenate(token_parts), np.concatenate(end_parts)

    def _tokens_and_piece_ends(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        encoding = self._encode(text)
        tokens = np.asarray(encoding.ids, dtype=np.uint32)
        if not len(tokens):
            return tokens, np.zeros(0, dtype=np.int64)
        words = np.fromiter(
            (-1 - i if word is None else word for i, word in enumerate(encoding.word_ids)),
            dtype=np.int64,
            count=len(tokens),
        )
        last = np.flatnonzero(np.append(words[1:] != words[:-1], True))
        byte_ends = np.cumsum(self.token_byte_lengths[tokens])[last]
        offsets = utf8_offsets(text)
        chars = np.searchsorted(offsets, byte_ends)
        chars = chars[(chars < len(offsets)) & (offsets[np.minimum(chars, len(offsets) - 1)] == byte_ends)]
        return tokens, chars.astype(np.int64)

    def piece_ends(self, text: str) -> Iterator[int]:
        return iter(self.tokens_and_piece_ends(text)[1].tolist())

    def token_starts(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For tokenizers that do not splice: the tokens of `text` and increasing (char, token index) pairs at token
        starts (0 and the end included), an estimate of where each token begins."""
        encoding = self._encode(text)
        tokens = np.asarray(encoding.ids, dtype=np.uint32)
        chars, index, previous = [0], [0], 0
        for i, (start, _) in enumerate(encoding.offsets):
            if start > previous and i > index[-1]:
                chars.append(start)
                index.append(i)
                previous = start
        if chars[-1] >= len(text) and len(chars) > 1:
            chars.pop(), index.pop()
        chars.append(len(text))
        index.append(len(tokens))
        return tokens, np.asarray(chars, dtype=np.int64), np.asarray(index, dtype=np.int64)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _tokenizer_file(source: str) -> Path | None:
    """The ``tokenizer.json`` a folder or a cached model name was loaded from."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        path = folder / "tokenizer.json"
        return path if path.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(source, "tokenizer.json")
    except (ImportError, ValueError):
        return None
    return Path(found) if isinstance(found, str) else None


def _label(source: str) -> str:
    """``ORG/NAME`` for a model name or a folder of the Hugging Face cache, else the folder's name."""
    folder = Path(source).expanduser()
    if not folder.is_dir():
        return source
    resolved = folder.resolve()
    for part in reversed(resolved.parts):
        match = _HUB_FOLDER.match(part)
        if match:
            return f"{match['org']}/{match['name']}"
    return resolved.name


def _encoding_parts(backend: Any) -> dict:
    """What decides a text's tokens without special tokens added (not the post-processor, decoder, padding)."""
    spec = json.loads(backend.to_str())
    return {key: spec.get(key) for key in ("normalizer", "pre_tokenizer", "model", "added_tokens")}


def _raw_ok_key(sha: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        versions = f"{version('transformers')}:{version('tokenizers')}"
    except PackageNotFoundError:
        versions = "?"
    return f"tokenizer-raw-ok:{sha}:{versions}"


def _load_source(source: str) -> HfTokenizer:
    """Load a folder or cached model. transformers decides how a tokenizer encodes (what lm-eval's models see);
    once it has been seen to encode exactly as the bare ``tokenizer.json`` (same normaliser, pre-tokeniser, model
    and added tokens, remembered per file hash and library versions in the needlebench cache), later loads read
    the file with ``tokenizers`` alone, without importing transformers (seconds per process)."""
    path = _tokenizer_file(source)
    if path is not None:
        check_tokenizer_files(path.parent)
    sha = _file_sha256(path) if path is not None else None
    if sha is not None and remembered_paths(_raw_ok_key(sha)):
        from tokenizers import Tokenizer

        try:
            loaded = HfTokenizer(f"hf:{_label(source)}@sha256:{sha}", Tokenizer.from_file(str(path)), source)
        except Exception:  # tokenizers raises a bare Exception for a file it cannot read
            loaded = None
        if loaded is not None:
            remember_path(f"tokenizer:{sha}", path.parent)
            return loaded
    tokenizer = load_transformers_tokenizer(source)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise NeedlebenchError(
            f"tokenizer hf:{source} has no fast (tokenizers) backend; needlebench counts with its tokenizer.json"
        )
    if sha is None:
        sha = hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest()
    loaded = HfTokenizer(f"hf:{_label(source)}@sha256:{sha}", tokenizer, source)
    if path is not None:
        remember_path(f"tokenizer:{sha}", path.parent)
        from tokenizers import Tokenizer

        try:  # transformers may have built its tokenizer from other files than a tokenizer.json it cannot read
            raw = _encoding_parts(Tokenizer.from_file(str(path)))
        except Exception:  # tokenizers raises a bare Exception for a file it cannot read
            raw = None
        if raw == _encoding_parts(backend):
            remember_path(_raw_ok_key(sha), path)
    return loaded


#: Tokenizers loaded in this process by recorded name (forked build workers inherit them).
_loaded: dict[str, HfTokenizer] = {}


@cache
def load_hf_tokenizer(spec: str) -> HfTokenizer:
    """The tokenizer of ``hf:PATH_OR_NAME`` or of its recorded form ``hf:LABEL@sha256:HEX``."""
    recorded = _RECORDED.match(spec)
    if recorded is None:
        loaded = _load_source(spec[3:])
        _loaded.setdefault(loaded.name, loaded)
        return _loaded[loaded.name]
    if spec in _loaded:
        return _loaded[spec]
    label, sha = recorded["label"], recorded["sha"]
    candidates = remembered_paths(f"tokenizer:{sha}")
    if "/" in label or not Path(label).expanduser().is_dir():
        candidates.append(label)  # a model name in the local Hugging Face cache
    for candidate in candidates:
        if _tokenizer_file(candidate) is None:
            continue
        try:
            loaded = _load_source(candidate)
        except NeedlebenchError:
            continue
        if loaded.name.endswith(f"@sha256:{sha}"):
            loaded = HfTokenizer(spec, loaded.tokenizer, loaded.source)
            _loaded[spec] = loaded
            return loaded
    raise NeedlebenchError(
        f"tokenizer {label} (tokenizer.json sha256 {sha[:12]}…) is not in the local Hugging Face cache nor where "
        "it was read on this machine; pass --tokenizer hf:PATH pointing at its folder"
    )
