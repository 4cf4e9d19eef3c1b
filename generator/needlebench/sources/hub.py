"""Haystacks and reference files from the Hugging Face Hub (regenerating the datasets with new haystacks).

* ``hub:ORG/NAME[@REV][:CONFIG][:SPLIT][:COLUMN]`` names any Hub text dataset as a haystack
  (:func:`load_hub_documents`); the split defaults to ``train`` and the column to ``text``. Parts are positional,
  an empty part keeps its default: ``hub:ORG/NAME::validation:body``.
* ``opencompass[@REV]`` names the files of the Hub dataset ``opencompass/NeedleBench`` that the papers use
  (:func:`opencompass_file`, :func:`parse_corpus_option`).
* A model id (``pretrained=ORG/NAME`` as lm-eval and vLLM take it) gets only its small files, the tokenizer and
  config (:func:`model_small_files`, :data:`MODEL_SMALL_FILES`), never its weights, for the length check of
  ``needlebench eval``.

Pinned revision: :data:`OPENCOMPASS_REVISION` is commit ``bb30238fea08590e7b9b8021a40b51d44b105e55`` of
``opencompass/NeedleBench`` ("Update README.md", 2024-07-26), the revision whose files the reference
implementation documents (PaulGrahamEssays.jsonl, zh_finance.jsonl, needles.jsonl, names.json,
multi_needle_reasoning_{en,zh}.json and the other zh_*.jsonl); it was the head of ``main`` when this was written
(history: initial commit, "Upload 11 files", three card updates). The files are served under the MIT licence
(:data:`OPENCOMPASS_LICENSE`, from the repo's card). Pass ``opencompass@REV`` to use another revision.

Everything goes through ``huggingface_hub`` / ``datasets`` (so ``HF_ENDPOINT``, ``HF_HOME`` and ``HF_HUB_OFFLINE``
apply and downloads are cached); an unreachable endpoint or a missing repo, revision or file is a one-line
:class:`~needlebench.errors.NeedlebenchError`.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError

OPENCOMPASS_REPO = "opencompass/NeedleBench"
OPENCOMPASS_REVISION = "bb30238fea08590e7b9b8021a40b51d44b105e55"
OPENCOMPASS_LICENSE = "mit"
#: Files of opencompass/NeedleBench that needlebench reads.
OPENCOMPASS_FILES = (
    "PaulGrahamEssays.jsonl",
    "zh_finance.jsonl",
    "needles.jsonl",
    "names.json",
    "multi_needle_reasoning_en.json",
    "multi_needle_reasoning_zh.json",
)
#: Haystack file of each language in the reference v1 configs.
OPENCOMPASS_HAYSTACKS = {"en": "PaulGrahamEssays.jsonl", "zh": "zh_finance.jsonl"}

HUB_PREFIX = "hub:"
DEFAULT_SPLIT = "train"
DEFAULT_COLUMN = "text"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
#: A Hub repository id ``ORG/NAME`` (also used by :func:`needlebench.dataset.verify.check_repo_id`).
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
_SPEC_FORM = "hub:ORG/NAME[@REV][:CONFIG][:SPLIT][:COLUMN]"


def hub_errors() -> tuple[type[BaseException], ...]:
    """Exceptions raised by huggingface_hub / datasets for unreachable endpoints and missing repos or files."""
    from huggingface_hub import errors as hf_errors

    types: list[type[BaseException]] = [
        hf_errors.HfHubHTTPError,
        hf_errors.EntryNotFoundError,  # also LocalEntryNotFoundError: not cached and the endpoint unreachable
        hf_errors.OfflineModeIsEnabled,
        hf_errors.HFValidationError,
        ConnectionError,  # datasets: "Couldn't reach ... on the Hub"
        TimeoutError,
    ]
    for module_name in ("httpx2", "httpx"):  # huggingface_hub 2.x speaks httpx (packaged as httpx2 here)
        try:
            types.append(importlib.import_module(module_name).HTTPError)
        except ImportError:
            continue
    try:
        from datasets.exceptions import DatasetNotFoundError
    except ImportError:
        pass
    else:
        types.append(DatasetNotFoundError)
    return tuple(types)


#: What a Hub token looks like in a message (``hf_...``, an ``Authorization: Bearer ...`` value). ``hf_`` is
#: matched in lower case only: the names ``HF_ENDPOINT`` and ``HF_TOKEN`` in a message are advice, not secrets.
_TOKEN_TEXT = re.compile(r"(?i:(bearer\s+))\S+|\bhf_[A-Za-z0-9]{4,}")


def check_token(token: object) -> str | None:
    """A Hub token given explicitly (``--token``): printable ASCII without spaces. A control character (a CR
    copied with it), a space or a non-ASCII character is a one-line error that never shows the token."""
    if token is None:
        return None
    if not isinstance(token, str) or not token or not all(33 <= ord(char) < 127 for char in token):
        raise NeedlebenchError(
            "the Hub token given holds a control character, a space or a non-ASCII character (a line ending "
            "copied with it?); give the token alone (it is not shown here)"
        )
    return token


def redact_tokens(text: str) -> str:
    """`text` with anything that looks like a Hub token, and the token ``huggingface_hub`` would send, replaced by
    ``***``: error messages are printed and logged."""
    try:
        from huggingface_hub import get_token

        known = get_token()
    except Exception:  # noqa: BLE001 - a broken token file must not hide the error being reported
        known = None
    if known:
        text = text.replace(known, "***")
    return _TOKEN_TEXT.sub(lambda match: (match.group(1) or "") + "***", text)


def hub_error_message(error: BaseException, what: str) -> str:
    """A one-line message for a Hub failure while fetching ``what`` (a token in it is never shown)."""
    return redact_tokens(_hub_error_message(error, what))


def _hub_error_message(error: BaseException, what: str) -> str:
    from huggingface_hub import constants
    from huggingface_hub import errors as hf_errors

    endpoint = constants.ENDPOINT
    if isinstance(error, hf_errors.RevisionNotFoundError):
        return f"{what}: revision not found on {endpoint}; give an existing tag, branch or commit"
    if isinstance(error, hf_errors.RepositoryNotFoundError) or type(error).__name__ == "DatasetNotFoundError":
        return (
            f"{what}: not found or not accessible on {endpoint}; check the repository, revision and file names "
            "(and the token for a private repository)"
        )
    if isinstance(error, hf_errors.OfflineModeIsEnabled) or (
        isinstance(error, hf_errors.LocalEntryNotFoundError) and constants.HF_HUB_OFFLINE
    ):
        return f"{what}: not in the local cache and HF_HUB_OFFLINE is set; unset it or download the file first"
    if isinstance(error, hf_errors.EntryNotFoundError) and not isinstance(error, hf_errors.LocalEntryNotFoundError):
        return f"{what}: file not found in the repository on {endpoint}"
    if isinstance(error, hf_errors.HfHubHTTPError) and error.response is not None:
        return f"{what}: the Hub at {endpoint} answered HTTP {error.response.status_code}"
    cause = root_cause(error)
    reason = str(cause).splitlines()[0][:160] if str(cause) else ""
    detail = f"{type(cause).__name__}: {reason}" if reason else type(cause).__name__
    return f"{what}: cannot reach the Hub at {endpoint} ({detail}); check HF_ENDPOINT and the network"


def root_cause(error: BaseException) -> BaseException:
    """The innermost exception of a chain (the transport error behind a cache miss, for example)."""
    seen = {id(error)}
    while (inner := error.__cause__ or error.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        error = inner
    return error


def check_revision(revision: str | None) -> str | None:
    """A revision is None (the default), a tag, a branch or a commit id."""
    if revision is not None and not _REVISION.match(revision):
        raise NeedlebenchError(f"revision {revision!r} is not valid; allowed: a tag (v1.0.0), a branch or a commit id")
    return revision


def parse_corpus_option(value: str) -> tuple[str, str]:
    """``opencompass`` or ``opencompass@REV`` -> (repo id, revision); the revision defaults to the pinned one."""
    name, at, revision = value.partition("@")
    if name != "opencompass" or (at and not _REVISION.match(revision)):
        raise NeedlebenchError(
            f"corpus option {value!r} is not valid; allowed: opencompass or opencompass@REV (a tag, branch or commit)"
        )
    return OPENCOMPASS_REPO, revision or OPENCOMPASS_REVISION


def _preflight(repo_id: str, filename: str, revision: str) -> None:
    """Ask the Hub for the file's metadata without retries, so a bad endpoint or name fails fast and clearly."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url

    if constants.HF_HUB_OFFLINE:
        return
    get_hf_file_metadata(hf_hub_url(repo_id, filename, repo_type="dataset", revision=revision))


def download_dataset_file(repo_id: str, filename: str, revision: str) -> Path:
    """A file of a Hub dataset at a revision, through the huggingface_hub cache."""
    from huggingface_hub import hf_hub_download

    what = f"{filename} of dataset {repo_id}@{revision}"
    try:
        if _COMMIT.match(revision):  # immutable: a cached copy needs no network at all
            try:
                return Path(
                    hf_hub_download(repo_id, filename, repo_type="dataset", revision=revision, local_files_only=True)
                )
            except hub_errors():
                pass
        _preflight(repo_id, filename, revision)
        return Path(hf_hub_download(repo_id, filename, repo_type="dataset", revision=revision))
    except hub_errors() as error:
        raise NeedlebenchError(hub_error_message(error, what)) from None


def opencompass_file(filename: str, revision: str | None = None) -> Path:
    """Local path of a file of the Hub dataset ``opencompass/NeedleBench`` (downloaded once, then cached).

    ``revision`` defaults to :data:`OPENCOMPASS_REVISION`; ``filename`` must be one of :data:`OPENCOMPASS_FILES`.
    """
    if filename not in OPENCOMPASS_FILES:
        raise NeedlebenchError(f"file {filename!r} is not a NeedleBench file; allowed: {', '.join(OPENCOMPASS_FILES)}")
    return download_dataset_file(OPENCOMPASS_REPO, filename, check_revision(revision) or OPENCOMPASS_REVISION)


@dataclass(frozen=True)
class HubSpec:
    """A parsed ``hub:`` haystack spec."""

    repo_id: str
    revision: str | None = None
    config: str | None = None
    split: str = DEFAULT_SPLIT
    column: str = DEFAULT_COLUMN


def parse_hub_spec(spec: str) -> HubSpec:
    """Parse ``hub:ORG/NAME[@REV][:CONFIG][:SPLIT][:COLUMN]`` (empty parts keep their defaults)."""
    if not isinstance(spec, str) or not spec.startswith(HUB_PREFIX):
        raise NeedlebenchError(f"haystack {spec!r} is not a Hub spec; allowed: {_SPEC_FORM}")
    repo_part, *rest = spec[len(HUB_PREFIX) :].split(":")
    if len(rest) > 3:
        raise NeedlebenchError(f"haystack {spec!r} has too many ':' parts; allowed: {_SPEC_FORM}")
    repo_id, at, revision = repo_part.partition("@")
    if not REPO_ID.match(repo_id) or (at and not revision):
        raise NeedlebenchError(f"haystack {spec!r} does not name a Hub dataset; allowed: {_SPEC_FORM}")
    config, split, column = [*rest, "", "", ""][:3]
    return HubSpec(
        repo_id=repo_id,
        revision=check_revision(revision or None),
        config=config or None,
        split=split or DEFAULT_SPLIT,
        column=column or DEFAULT_COLUMN,
    )


def pin_hub_spec(spec: str, commit: str) -> str:
    """``spec`` with its revision set to ``commit`` when it names none (``hub:ORG/NAME:...`` ->
    ``hub:ORG/NAME@COMMIT:...``); a spec that names a revision is kept as given."""
    parsed = parse_hub_spec(spec)
    if parsed.revision is not None:
        return spec
    repo_part, colon, rest = spec[len(HUB_PREFIX) :].partition(":")
    return f"{HUB_PREFIX}{repo_part}@{commit}{colon}{rest}"


def resolve_dataset(repo_id: str, revision: str | None) -> tuple[str, str]:
    """(commit id, licence) of a Hub dataset at a revision (default ``main``), asked once without retries."""
    from huggingface_hub import HfApi

    wanted = revision or "main"
    try:
        info = HfApi().dataset_info(repo_id, revision=wanted)
    except hub_errors() as error:
        raise NeedlebenchError(hub_error_message(error, f"dataset {repo_id}@{wanted}")) from None
    card = getattr(info, "card_data", None)
    license_id = card.get("license") if card is not None else None
    return info.sha or wanted, str(license_id) if license_id else "see source"


def _load_column(parsed: HubSpec, commit: str, spec: str) -> list[str]:
    import datasets
    from datasets.exceptions import DatasetsError

    try:
        dataset = datasets.load_dataset(parsed.repo_id, parsed.config, split=parsed.split, revision=commit)
    except hub_errors() as error:
        raise NeedlebenchError(hub_error_message(error, f"haystack {spec}")) from None
    except (ValueError, FileNotFoundError, DatasetsError) as error:  # unknown config or split, no data files
        raise NeedlebenchError(f"haystack {spec}: {' '.join(str(error).split())[:200]}") from None
    if parsed.column not in dataset.column_names:
        raise NeedlebenchError(
            f"haystack {spec} has no column {parsed.column!r}; allowed: {', '.join(dataset.column_names)}"
        )
    return [value for value in dataset[parsed.column] if isinstance(value, str) and value.strip()]


def load_hub_documents(spec: str) -> tuple[list[str], dict[str, Any]]:
    """Documents (one per row, non-empty strings of the column) of a Hub text dataset, and their provenance.

    The revision is resolved to a commit first (so the recipe records exactly what was read) and the data is read
    with ``datasets.load_dataset`` at that commit.
    """
    parsed = parse_hub_spec(spec)
    commit, license_id = resolve_dataset(parsed.repo_id, parsed.revision)
    documents = _load_column(parsed, commit, spec)
    if not documents:
        raise NeedlebenchError(f"haystack {spec} has no text in column {parsed.column!r}; it needs some documents")
    meta = {
        "source": spec,
        "repo": parsed.repo_id,
        "revision": commit,
        "requested_revision": parsed.revision,
        "config": parsed.config,
        "split": parsed.split,
        "column": parsed.column,
        "license": license_id,
        "documents": len(documents),
    }
    return documents, meta


# --------------------------------------------------------------------------------------------- models

#: The files of a model repository that say how it tokenizes and how long its window is: what transformers'
#: ``AutoTokenizer`` and ``AutoConfig`` read (``transformers/tokenization_utils_base.py``,
#: ``transformers/configuration_utils.py``), never weights. Glob patterns of ``huggingface_hub`` (``fnmatch``).
MODEL_SMALL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "additional_chat_templates/*.jinja",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "*.tiktoken",
)


def is_model_id(value: str) -> bool:
    """Whether ``value`` is a Hub repository id as ``huggingface_hub`` takes it (``ORG/NAME``, or a legacy ``NAME``)
    rather than a path (``./x``, ``/x``, ``~/x``, ``a/b/c``)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if not value or value.startswith((".", "/", "~")):
        return False
    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return True


def model_small_files(
    repo_id: str,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    subfolder: str = "",
    gguf_file: str | None = None,
    what: str = "pretrained",
) -> Path:
    """The local folder (in the Hugging Face cache) of the Hub model ``repo_id`` at ``revision`` holding its
    :data:`MODEL_SMALL_FILES` (under ``subfolder``), and ``gguf_file`` when given (a GGUF is its own tokenizer: it is
    the file lm-eval would download next, into the same cache).

    ``HF_ENDPOINT``, ``HF_HOME`` / ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` apply as for lm-eval's own download; the
    token is ``token`` or, when None, the one ``huggingface_hub`` finds (``HF_TOKEN``, ``hf auth login``). A model
    that cannot be had is a one-line :class:`~needlebench.errors.NeedlebenchError` naming it and what was tried."""
    return _model_small_files(repo_id, revision, token, subfolder.strip("/"), gguf_file, what)


@lru_cache(maxsize=16)
def _model_small_files(
    repo_id: str, revision: str | None, token: str | bool | None, subfolder: str, gguf_file: str | None, what: str
) -> Path:
    from huggingface_hub import constants, snapshot_download

    prefix = f"{subfolder}/" if subfolder else ""
    patterns = [prefix + pattern for pattern in (*MODEL_SMALL_FILES, *([gguf_file] if gguf_file else []))]
    try:
        check_revision(revision)
        if _COMMIT.match(revision or ""):  # immutable: a cached copy needs no network at all
            try:
                folder = Path(
                    snapshot_download(repo_id, revision=revision, allow_patterns=patterns, local_files_only=True)
                )
                if _holds_small_files(folder / subfolder, gguf_file):
                    return folder / subfolder
            except hub_errors():
                pass
        with _quiet("huggingface_hub._snapshot_download"):  # "No files matched": said below in one line
            folder = Path(snapshot_download(repo_id, revision=revision, token=token, allow_patterns=patterns))
    except hub_errors() as error:
        raise NeedlebenchError(_model_error(error, repo_id, revision, what, gguf_file)) from None
    if not _holds_small_files(folder / subfolder, gguf_file):
        ref = _model_ref(repo_id, revision)
        if constants.HF_HUB_OFFLINE:  # a snapshot holding other files of the model
            raise NeedlebenchError(_not_cached(repo_id, revision, what))
        if gguf_file:
            raise NeedlebenchError(
                f"gguf_file {gguf_file!r} is not in model {ref} on {constants.ENDPOINT}; check its name"
            )
        ggufs = _gguf_files(repo_id, revision, token, prefix)
        raise NeedlebenchError(
            f"model {ref} on {constants.ENDPOINT} holds no tokenizer or config files ({prefix}config.json, "
            f"{prefix}tokenizer.json, ...); for a GGUF model pass gguf_file=NAME in --model_args"
            + (f" (GGUF files there: {', '.join(ggufs)})" if ggufs else "")
        )
    return folder / subfolder


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Warnings of the logger `name` held back (errors still shown)."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _gguf_files(repo_id: str, revision: str | None, token: str | bool | None, prefix: str) -> list[str]:
    """The ``.gguf`` files of a Hub model (under `prefix`), best effort (empty when they cannot be listed)."""
    from huggingface_hub import HfApi

    try:
        names = HfApi().list_repo_files(repo_id, revision=revision, token=token)
    except hub_errors():
        return []
    return sorted(name.removeprefix(prefix) for name in names if name.startswith(prefix) and name.endswith(".gguf"))


def _holds_small_files(folder: Path, gguf_file: str | None) -> bool:
    if gguf_file:
        return (folder / gguf_file).is_file()
    return any((folder / name).is_file() for name in MODEL_SMALL_FILES if "*" not in name)


def _model_ref(repo_id: str, revision: str | None) -> str:
    return f"{repo_id}@{revision}" if revision else repo_id


def _not_cached(repo_id: str, revision: str | None, what: str) -> str:
    from huggingface_hub import constants

    at = f" --revision {revision}" if revision else ""
    return (
        f"{what} {repo_id!r} is not a local folder, and model {_model_ref(repo_id, revision)} is not in the Hugging "
        f"Face cache ({constants.HF_HUB_CACHE}) while HF_HUB_OFFLINE is set: unset HF_HUB_OFFLINE to fetch its "
        f"tokenizer and config, or download the model first (`hf download {repo_id}{at}`), or give its folder"
    )


def _model_error(error: BaseException, repo_id: str, revision: str | None, what: str, gguf_file: str | None) -> str:
    from huggingface_hub import constants
    from huggingface_hub import errors as hf_errors

    ref = _model_ref(repo_id, revision)
    endpoint = constants.ENDPOINT
    if isinstance(error, hf_errors.OfflineModeIsEnabled) or (
        isinstance(error, hf_errors.LocalEntryNotFoundError) and constants.HF_HUB_OFFLINE
    ):
        return _not_cached(repo_id, revision, what)
    if isinstance(error, hf_errors.RevisionNotFoundError):
        return (
            f"{what} {repo_id!r}: model {repo_id} has no revision {revision!r} on {endpoint}; give an existing "
            "tag, branch or commit (revision=)"
        )
    if isinstance(error, (hf_errors.RepositoryNotFoundError, hf_errors.HFValidationError)):
        return (  # only the names the user gave: nothing here can hold a token
            f"{what} {repo_id!r} is not a local folder, and the Hub at {endpoint} has no model {ref} (or it is "
            "private or gated: give token= in --model_args or set HF_TOKEN); check the id, or give the model's folder"
        )
    if (
        gguf_file
        and isinstance(error, hf_errors.EntryNotFoundError)
        and not isinstance(error, hf_errors.LocalEntryNotFoundError)
    ):
        return f"gguf_file {gguf_file!r} is not in model {ref} on {endpoint}; check its name"
    return hub_error_message(error, f"{what} {repo_id!r} (model {ref} on the Hub; not a local folder)")
