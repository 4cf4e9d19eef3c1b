"""Local input files in recipes: recorded by name, size and sha256 (never by path), found again by hash.

A recipe must travel: a dataset built from ``--haystack-en ~/essays.txt`` is verified on another machine, or after
the file moved. So the recipe records ``{"file": "essays.txt", "kind": "file", "size": 12345, "sha256": ...}`` and
``needlebench verify DIR --haystack-en PATH`` points it at the file again (the hash must match). On the machine that
built the dataset the file is found without the option, through a small index in the needlebench cache that maps
hashes to the paths they were read from (never published, and every hit is re-hashed before use).

Hub inputs (``hub:ORG/NAME@COMMIT``, ``opencompass@REV``) stay pinned specs in the recipe, as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from needlebench.errors import NeedlebenchError
from needlebench.sources.cache import cache_folder, read_private, tokens_dir
from needlebench.sources.pinned import (
    MAX_INPUT_BYTES,
    Pinned,
    current,
    origin_of,
    pin,
    pinned,
    read_user_file,
    read_user_folder,
    unpin,
)

#: Build options that may name a local file (or folder), and the option that re-points them in `verify`.
LOCAL_INPUT_OPTIONS = {
    "haystack_en": "--haystack-en",
    "haystack_zh": "--haystack-zh",
    "needles": "--needles",
    "reasoning_needles_en": "--reasoning-needles-en",
    "reasoning_needles_zh": "--reasoning-needles-zh",
    "names": "--names",
}
_INDEX = "local-inputs.json"
#: Largest index read back (a few hundred bytes per input).
_MAX_INDEX_BYTES = 16 * 2**20
_RECORD_KEYS = {"file", "kind", "size", "sha256"}


def is_local_spec(spec: object) -> bool:
    """Whether an input spec names a local path (not None/default, a ``hub:`` dataset or ``opencompass``)."""
    return (
        isinstance(spec, str)
        and spec != "default"
        and not spec.startswith("hub:")
        and spec != "opencompass"
        and not spec.startswith("opencompass@")
    )


def is_input_record(value: object) -> bool:
    """Whether a recipe value is a recorded local input (see :func:`input_record`)."""
    return (
        isinstance(value, dict)
        and set(value) == _RECORD_KEYS
        and _plain_name(value["file"])
        and value["kind"] in ("file", "folder")
        and isinstance(value["size"], int)
        and isinstance(value["sha256"], str)
        and len(value["sha256"]) == 64
    )


def _plain_name(name: object) -> bool:
    """A recorded input's file name is one plain name (no folder, no ``..``, no NUL): it names the link
    :func:`_under_recorded_name` makes inside a private folder, never a path anywhere else. Other control
    characters are legal in a file name and harmless there; they are escaped wherever a name is printed."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= 255
        and name not in (".", "..")
        and "/" not in name
        and "\\" not in name
        and "\x00" not in name
    )


def _digest(held: Pinned) -> dict:
    """The record of pinned bytes: a file's size and sha256, or a folder's (its .txt files in sorted order, as
    corpus.load_local reads them: the sha256 of ``name NUL sha256 LF`` lines)."""
    if held.kind == "file":
        data = held.files[0][1]
        return {"file": held.name, "kind": "file", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    digest = hashlib.sha256()
    for name, data in held.files:
        digest.update(f"{name}\0{hashlib.sha256(data).hexdigest()}\n".encode("utf-8", "surrogateescape"))
    return {"file": held.name, "kind": "folder", "size": held.size, "sha256": digest.hexdigest()}


def _read_input(path: Path) -> Pinned:
    """The bytes of a local input, read once per process (:mod:`needlebench.sources.pinned`): the bytes pinned for
    it (an experiment file's input, read through its folder's descriptor), else read from the path and pinned."""
    held = current(path)
    if held is not None:
        return held
    if path.is_dir():
        return read_user_folder(path, "input", MAX_INPUT_BYTES)
    read_user_file(path, "input", MAX_INPUT_BYTES)
    return pinned(path)


def input_record(spec: str) -> dict:
    """``{"file", "kind", "size", "sha256"}`` of a local input file or folder (of the very bytes the build reads),
    remembered in the local index."""
    given = Path(spec).expanduser().absolute()
    try:
        record = {**_digest(_read_input(given)), "file": given.name}
        path = given.resolve()  # remember the real file, not a link to it
    except OSError as error:
        raise NeedlebenchError(f"cannot read input {spec}: {error.strerror or error}") from None
    _remember(record["sha256"], path)
    return record


def _index_path() -> Path:
    return tokens_dir() / _INDEX


def _read_index() -> dict:
    """The index (empty when it is missing or unreadable: a link, a FIFO, beyond its size limit, not JSON)."""
    try:
        index = json.loads(read_private(tokens_dir(), _INDEX, _MAX_INDEX_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError, NeedlebenchError):
        return {}
    return index if isinstance(index, dict) else {}


def _remember(sha256: str, path: Path) -> None:
    """Note where a hashed input was read (best effort: an unwritable cache only loses the hint). The index is
    written 0600 in the private token cache folder, through a temporary file of :mod:`needlebench.safe_fs`."""
    index = _read_index()
    paths = [p for p in index.get(sha256, []) if isinstance(p, str) and p != str(path)]
    index[sha256] = [str(path), *paths][:5]
    try:
        text = json.dumps(index, indent=1, ensure_ascii=False)
        with cache_folder(tokens_dir()) as folder:
            folder.write_text(_INDEX, text, mode=0o600)
    except (OSError, UnicodeError, NeedlebenchError):
        return


def remember_path(key: str, path: Path) -> None:
    """Note that the input identified by `key` (a sha256, or a prefixed one such as ``tokenizer:<sha256>``) was read
    from `path` (best effort)."""
    _remember(key, Path(origin_of(path)).absolute())


def remembered_paths(key: str) -> list[str]:
    """The paths an input identified by `key` was read from on this machine, most recent first (unchecked)."""
    return [p for p in _read_index().get(key, []) if isinstance(p, str)]


def describe(record: dict) -> str:
    """``the local file essays.txt (12,345 bytes, sha256 0123456789ab…)``."""
    return f"the local {record['kind']} {record['file']} ({record['size']:,} bytes, sha256 {record['sha256'][:12]}…)"


def locate(name: str, record: dict, given: str | None) -> str:
    """The path to read a recorded local input from: `given` (checked against the hash) or a remembered path."""
    option = LOCAL_INPUT_OPTIONS[name]
    if given is not None:
        path = Path(given).expanduser()
        if not path.exists():
            raise NeedlebenchError(
                f"{option} {given} does not exist; give {describe(record)} the dataset was built with"
            )
        unpin(path)  # read now, once: the bytes checked against the hash are the bytes built from
        found = input_record(given)
        if found["sha256"] != record["sha256"] or found["kind"] != record["kind"]:
            raise NeedlebenchError(
                f"{option} {given} has sha256 {found['sha256'][:12]}… ({found['size']:,} bytes) but the recipe "
                f"records {describe(record)}; pass the {record['kind']} the dataset was built with"
            )
        return _under_recorded_name(path, record["file"])
    for candidate in _read_index().get(record["sha256"], []):
        path = Path(candidate)
        try:
            if path.exists() and _digest(_read_input(path))["sha256"] == record["sha256"]:
                return _under_recorded_name(path, record["file"])
        except (OSError, NeedlebenchError):
            continue
    raise NeedlebenchError(
        f"the recipe's {name} is {describe(record)}, which is not where it was read on this machine; "
        f"pass {option} PATH to point at it"
    )


_links: list[tempfile.TemporaryDirectory] = []


def _under_recorded_name(path: Path, name: str) -> str:
    """`path`, reachable under the file name the recipe records (the name is part of the corpus label on every
    row): a renamed input is linked from a temporary folder that lives as long as the process."""
    if path.name == name:
        return str(path)
    if not _plain_name(name):  # a recipe from someone else: a name, never a path (the link goes in our folder)
        raise NeedlebenchError(f"the recipe records the input file name {name!r}; allowed: one plain file name")
    holder = tempfile.TemporaryDirectory(prefix="needlebench-input-")
    _links.append(holder)
    link = Path(holder.name) / name
    held = pinned(path)
    link.symlink_to(path.absolute(), target_is_directory=held.kind == "folder" if held else path.is_dir())
    if held is not None:  # the bytes checked against the hash are the bytes read under the recorded name
        pin(link, Pinned(name, held.kind, held.files))
    return str(link)


def check_given(recipe: dict, given: dict[str, str | None]) -> None:
    """Options given to `verify` must re-point a local input of the recipe."""
    for name, value in given.items():
        if value is None:
            continue
        recorded = recipe.get(name)
        if not is_input_record(recorded):
            shown = "the built-in default" if recorded in (None, "default") else repr(recorded)
            raise NeedlebenchError(
                f"{LOCAL_INPUT_OPTIONS[name]} {value} was given but the recipe's {name} is {shown}, not a local file"
            )


#: ``hf:LABEL@sha256:HEX``: a tokenizer as a recipe records it (:mod:`needlebench.sources.hf_tokenizer`).
_RECORDED_TOKENIZER = re.compile(r"^hf:(?P<label>.+)@sha256:[0-9a-f]{64}$")


def _path_like(text: str, *, existing: bool) -> bool:
    """Whether `text` names a local path rather than a Hub id (``ORG/NAME``) or a folder label: absolute, ``~``,
    ``.``/``..`` parts, more than one ``/``, a backslash or NUL, or (`existing`) a file or folder that exists."""
    parts = text.split("/")
    return (
        not text
        or text.startswith(("/", "~"))
        or "\\" in text
        or "\0" in text
        or any(part in ("", ".", "..") for part in parts)
        or len(parts) > 2
        or (existing and os.path.lexists(text))
    )


def check_recipe_paths(recipe: dict) -> None:
    """A recipe handed over in someone else's manifest never names a local path that is read: local inputs are
    records located by hash in this machine's index or at a path given on the command line (:func:`locate`), the
    tokenizer a built-in name, a Hub id or ``hf:LABEL@sha256:HEX`` found by its hash. A path there is a one-line
    error naming the field and the option to use instead."""
    for name, option in LOCAL_INPUT_OPTIONS.items():
        value = recipe.get(name)
        if is_local_spec(value):
            raise NeedlebenchError(
                f"the recipe's {name} is the local path {value!r}; a recipe records a local input as "
                f"{{file, kind, size, sha256}}, never a path to read; pass {option} PATH to give a file of yours"
            )
    tokenizer = recipe.get("tokenizer")
    if isinstance(tokenizer, str) and tokenizer.startswith("hf:"):
        recorded = _RECORDED_TOKENIZER.match(tokenizer)
        label = recorded["label"] if recorded else tokenizer[3:]
        if _path_like(label, existing=recorded is None):
            raise NeedlebenchError(
                f"the recipe's tokenizer {tokenizer!r} names a local path; a recipe names a tokenizer by a built-in "
                "name, a Hub id or hf:LABEL@sha256:HEX, never a path to read; pass --tokenizer hf:PATH to give "
                "a tokenizer folder of yours"
            )
