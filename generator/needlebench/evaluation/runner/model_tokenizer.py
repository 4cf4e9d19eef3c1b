"""A model's tokenizer, read the way lm-eval reads it: a folder, a Hub model id, or a GGUF.

lm-eval's ``hf`` model (``lm_eval/models/huggingface.py``, ``_create_tokenizer``) loads
``AutoTokenizer.from_pretrained(tokenizer)`` when the ``tokenizer`` model arg is given, else
``AutoTokenizer.from_pretrained(pretrained, gguf_file=gguf_file)``, at the model's ``revision``.
:func:`resolve_source` turns such a reference into a local folder first: a folder or file as given; a Hub model id
(``ORG/NAME``) becomes its folder in the Hugging Face cache holding only its tokenizer and config files, fetched
through ``huggingface_hub`` at the same revision and with the same token (``HF_ENDPOINT``, ``HF_HUB_CACHE`` and
``HF_HUB_OFFLINE`` respected; :func:`needlebench.sources.hub.model_small_files`), and the weights are left to lm-eval.
:func:`load_tokenizer` then reads the folder with nothing downloaded (``local_files_only``). A GGUF is accepted in
three forms: ``DIR`` (or a Hub id) plus ``gguf_file=NAME`` (lm-eval's model args), the path of a ``.gguf`` file, or a
folder holding exactly one ``.gguf`` file and no tokenizer files.

Reading the tokenizer out of a GGUF takes transformers some 10 s (it converts the GGUF vocabulary), so the
converted fast tokenizer is saved once under ``$NEEDLEBENCH_CACHE/gguf-tokenizers/<sha256 of the GGUF file>``
and loaded from there in about a second afterwards (the sha256 itself is remembered per path, size and
modification time, so a large GGUF is not hashed on every run).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.sources.cache import cache_folder, cache_root, read_private
from needlebench.sources.hf_tokenizer import error_summary, load_transformers_tokenizer, transformers_log_held
from needlebench.sources.hub import check_token, is_model_id, model_small_files
from needlebench.terminal import notice

#: Files whose presence makes a folder a tokenizer folder (then any ``.gguf`` beside them is not guessed at).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
#: Written last into a cached tokenizer folder, so an interrupted save is never read.
MARKER = "needlebench-gguf-tokenizer.json"
INSTALL_HINT = "install them with `pip install 'needlebench[eval]'` (transformers, gguf)"
#: What a GGUF's ``general.architecture`` may be (it names the ``<architecture>.context_length`` key): ``llama``,
#: ``qwen2``, ``command-r``, ...
ARCHITECTURE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: Largest context length taken from a GGUF's metadata.
MAX_GGUF_CONTEXT = 1 << 32


@dataclass(frozen=True)
class TokenizerSource:
    """Where a tokenizer is read from: ``path`` (a folder or a model name) and, for a GGUF, its file name."""

    path: str
    gguf_file: str | None = None
    trust_remote_code: bool = False  # lm-eval's model arg: whether a tokenizer class of the folder may run

    def describe(self) -> str:
        return f"{self.path} (gguf_file={self.gguf_file})" if self.gguf_file else self.path


def resolve_source(
    path: str,
    gguf_file: str | None = None,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    subfolder: str | None = None,
    what: str = "tokenizer",
    trust_remote_code: bool = False,
) -> TokenizerSource:
    """The :class:`TokenizerSource` of a ``--tokenizer`` value (and ``--gguf-file``) or of lm-eval model args
    (``what`` names the model arg in messages): a local folder or file, else a Hub model id, whose tokenizer and
    config files (and ``gguf_file``) are fetched into the Hugging Face cache at ``revision`` with ``token``.
    ``trust_remote_code`` (lm-eval's model arg) lets a tokenizer class of the folder run when it is loaded."""
    trust = trust_remote_code is True
    given = Path(path).expanduser()
    if not given.exists() and is_model_id(path):
        folder = model_small_files(
            path,
            revision=revision or None,
            token=check_token(token) if isinstance(token, str) else token,
            subfolder=subfolder or "",
            gguf_file=gguf_file,
            what=what,
        )
        return TokenizerSource(str(folder), gguf_file, trust)
    if not given.exists() and not given.is_symlink():
        raise NeedlebenchError(
            f"{what} {path!r} is not a local folder nor a model in the local Hugging Face cache, and not a Hub model "
            "id (ORG/NAME) to fetch; give the folder of a model or tokenizer, a .gguf file, or a model id"
        )
    if is_model_id(path) and not given.is_absolute() and not path.startswith((".", "~")):
        # transformers and lm-eval take a folder of that name in the current folder before the Hub model: say so,
        # since the current folder may be one someone else made
        notice(f"{what} {path!r} is the local folder {given.resolve()} here, not the Hub model of that name")
    if subfolder and given.is_dir():
        given = given / subfolder
    if gguf_file:
        if given.is_file():
            raise NeedlebenchError(
                f"gguf_file {gguf_file!r} is given with the file {path!r}; give the folder holding it, or the .gguf "
                "path alone"
            )
        if given.is_dir() and not (given / gguf_file).is_file():
            found = sorted(item.name for item in given.glob("*.gguf"))
            raise NeedlebenchError(
                f"gguf_file {gguf_file!r} is not in {path}; GGUF files there: {', '.join(found) or 'none'}"
            )
        return TokenizerSource(str(given) if given.is_dir() else path, gguf_file, trust)
    if given.is_file():
        if given.suffix.lower() != ".gguf":
            raise NeedlebenchError(
                f"{what} {path!r} is a file but not a .gguf; give a tokenizer or model folder, a .gguf file, "
                "or a Hugging Face Hub model id"
            )
        return TokenizerSource(str(given.parent), given.name, trust)
    if given.is_dir() and not any((given / name).is_file() for name in TOKENIZER_FILES):
        found = sorted(item.name for item in given.glob("*.gguf"))
        if len(found) == 1:
            return TokenizerSource(str(given), found[0], trust)
        if len(found) > 1:
            raise NeedlebenchError(
                f"folder {path!r} holds {len(found)} GGUF files ({', '.join(found)}) and no tokenizer files; "
                "name one: --gguf-file NAME (budget) or gguf_file=NAME (--model_args)"
            )
    return TokenizerSource(str(given) if given.is_dir() else path, None, trust)


def _sha256(path: Path) -> str:
    """The sha256 of a file, remembered under the cache root per (absolute path, size, modification time)."""
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()
    memo = cache_root() / "gguf-tokenizers" / "sha256" / key
    try:
        known = read_private(memo.parent, memo.name, 128).decode("ascii").strip()
        if len(known) == 64:
            return known
    except (OSError, UnicodeDecodeError, NeedlebenchError):
        pass
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    value = digest.hexdigest()
    try:  # 0600 in a private cache folder (0700 whatever the umask), through a temporary file of the layer
        with cache_folder(memo.parent) as folder:
            folder.write_text(memo.name, value + "\n", mode=0o600)
    except (OSError, NeedlebenchError):  # a cache that cannot be written only costs the hashing next time
        pass
    return value


def _auto_tokenizer() -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise NeedlebenchError(f"counting a model's tokens needs transformers; {INSTALL_HINT}") from None
    return AutoTokenizer


def _load_gguf(source: TokenizerSource) -> Any:
    """A GGUF's tokenizer, from the cache when converted before, else converted (and cached)."""
    gguf = Path(source.path) / str(source.gguf_file)
    if not gguf.is_file():
        raise NeedlebenchError(f"GGUF file {gguf} does not exist; give the folder holding it and gguf_file=NAME")
    try:  # the magic first (gguf/constants.py GGUF_MAGIC), before a file of any size is hashed
        with gguf.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise NeedlebenchError(f"GGUF file {gguf} could not be read: {error_summary(exc)}") from None
    if magic != b"GGUF":
        raise NeedlebenchError(f"{gguf} is not a GGUF file (it does not start with the bytes 'GGUF')")
    auto = _auto_tokenizer()
    cached = cache_root() / "gguf-tokenizers" / _sha256(gguf)
    if (cached / MARKER).is_file():
        try:
            return auto.from_pretrained(str(cached), local_files_only=True, trust_remote_code=False)
        except Exception:  # a damaged entry: converted again below (and replaced by _save)
            pass
    try:
        with transformers_log_held():
            tokenizer = auto.from_pretrained(
                source.path, gguf_file=source.gguf_file, local_files_only=True, trust_remote_code=False
            )
    except ImportError as exc:  # transformers reads GGUF with the `gguf` package
        raise NeedlebenchError(f"reading {gguf.name} needs the gguf package ({exc}); {INSTALL_HINT}") from None
    except Exception as exc:  # a GGUF may come from anyone: whatever its conversion raises (a merge of four
        # parts, a token id past the vocabulary, a metadata value of the wrong type) is one line naming the file
        raise NeedlebenchError(f"the tokenizer of GGUF file {gguf} could not be read: {error_summary(exc)}") from None
    _save(tokenizer, cached, gguf.name)
    return tokenizer


def _save(tokenizer: Any, cached: Path, name: str) -> None:
    """Save a converted tokenizer under ``cached``: a new folder (0700, unpredictable name) in the private cache
    folder, its files made 0600 whatever the umask, renamed into place by descriptors; best effort."""
    try:
        parent = cache_folder(cached.parent)
    except (OSError, NeedlebenchError):
        return
    with parent:
        try:
            work = parent.new_private(lambda: f".tok-{secrets.token_hex(8)}")
        except OSError:
            return
        try:
            tokenizer.save_pretrained(str(parent.path / work))  # transformers writes by path, into our new folder
            with parent.sub(work) as folder:
                folder.write_text(MARKER, json.dumps({"gguf_file": name}) + "\n", mode=0o600)
                for entry in folder.listdir():
                    if folder.is_file(entry):
                        os.chmod(entry, 0o600, dir_fd=folder.fd, follow_symlinks=False)
            parent.rmtree(cached.name)
            parent.replace_from(parent, work, cached.name)
        except (OSError, NeedlebenchError):  # a cache that cannot be written only costs the conversion next time
            pass
        finally:
            parent.rmtree(work)


@lru_cache(maxsize=4)
def load_source(source: TokenizerSource) -> Any:
    """The transformers tokenizer of ``source`` (a local folder, see :func:`resolve_source`); nothing is
    downloaded."""
    if source.gguf_file:
        tokenizer = _load_gguf(source)
    else:
        tokenizer = load_transformers_tokenizer(source.path, trust_remote_code=source.trust_remote_code)
    try:  # named in errors of its chat template (see needlebench.evaluation.runner.chat_template)
        tokenizer.needlebench_source = source.describe()
    except (AttributeError, TypeError, ValueError):
        pass
    return tokenizer


def load_tokenizer(path: str, gguf_file: str | None = None) -> Any:
    """A transformers tokenizer from a folder, a ``.gguf`` file, a folder with one GGUF, ``path`` plus
    ``gguf_file``, or a Hub model id (see the module doc)."""
    return load_source(resolve_source(path, gguf_file))


def gguf_context_length(source: TokenizerSource) -> int | None:
    """The context length a GGUF's metadata records (``<architecture>.context_length``), or None when it records
    none. The file may come from anyone: one that ``gguf`` cannot read, an architecture that is not a string of
    letters, digits and ``_.-``, or a context length that is not one whole number between 1 and
    :data:`MAX_GGUF_CONTEXT` is a one-line error naming the file and the key (the GGUF value types are listed in
    ``gguf/constants.py``, ``GGUFValueType``)."""
    if not source.gguf_file:
        return None
    try:
        from gguf import GGUFReader, GGUFValueType
    except ImportError:
        return None
    path = Path(source.path) / source.gguf_file
    try:
        fields = GGUFReader(str(path)).fields
    except Exception as exc:  # a crafted header or array count: numpy, struct or gguf's own errors
        raise NeedlebenchError(f"GGUF file {path} could not be read: {error_summary(exc)}") from None
    arch = fields.get("general.architecture")
    if arch is None:
        return None
    name = None
    if arch.types == [GGUFValueType.STRING] and len(arch.data) == 1:
        name = bytes(arch.parts[arch.data[0]]).decode("utf-8", "replace")
    if name is None or not ARCHITECTURE.fullmatch(name):
        raise NeedlebenchError(
            f"GGUF file {path}: general.architecture is not a name of at most 64 letters, digits, '_', '.' or '-'"
        )
    key = f"{name}.context_length"
    length = fields.get(key)
    if length is None:
        return None
    integers = {
        GGUFValueType.UINT8,
        GGUFValueType.INT8,
        GGUFValueType.UINT16,
        GGUFValueType.INT16,
        GGUFValueType.UINT32,
        GGUFValueType.INT32,
        GGUFValueType.UINT64,
        GGUFValueType.INT64,
    }
    value = None
    if len(length.types) == 1 and length.types[0] in integers and len(length.data) == 1:
        value = int(length.parts[length.data[0]][0])
    if value is None or not 0 < value <= MAX_GGUF_CONTEXT:
        kind = f"a {'/'.join(kind.name for kind in length.types)} value" if value is None else str(value)
        raise NeedlebenchError(
            f"GGUF file {path}: {key} is {kind}, not a whole number of tokens between 1 and {MAX_GGUF_CONTEXT}"
        )
    return value
