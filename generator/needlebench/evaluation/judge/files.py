"""What ``needlebench judge`` reads and writes in a results folder, which may come from someone else.

- Every file is reached through :mod:`needlebench.safe_fs`: the results folder is opened once, each folder below it
  with ``O_NOFOLLOW`` (:func:`find_samples` never descends into a link), a samples file is read only when it is a
  regular file (a link, FIFO or device is refused in one line), and ``judged_samples_*.jsonl`` and the cache are
  replaced through an ``O_EXCL`` temporary under an unpredictable name, so no name the folder planted is written
  through. Samples files are read line by line, each line at most :data:`MAX_SAMPLES_LINE` bytes (a longer one is a
  one-line error, never held whole).
- A judged file is ours or ignored: beside ``judged_<samples name>`` the judge writes ``judged_<samples name>.tag``,
  an HMAC-SHA256 tag (the same per-user secret) over the samples file's name and sha256 and the judged file's
  sha256 (:func:`judged_tag`). ``needlebench report`` reads a judged file only when its tag verifies
  (:func:`verified_judged`), so verdicts planted by a sender never show as this user's judge's; a judge run that
  cannot write a complete judged file removes the one before it (:func:`remove_judged`).
- JSON is read with limits (:func:`load_json`): nesting depth, digits of a number, no ``NaN``/``Infinity``; a bad
  value is a one-line error naming the file, the line and the field.
- The cache (:class:`JudgeCache`) holds only verdicts this user's needlebench wrote: each entry carries an
  HMAC-SHA256 tag keyed by the per-user secret (:func:`needlebench.sources.cache.sign`, kept outside the folder), so
  a sender cannot pre-fill verdicts. Entries whose tag does not verify are ignored, counted in one warning line and
  dropped from the file; rows are then asked again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from needlebench import safe_json
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.lm_eval_files import JUDGED_PREFIX, SAMPLES_RE, TAG_SUFFIX
from needlebench.safe_fs import Folder
from needlebench.sources.cache import same_tag, sign
from needlebench.terminal import printable as shown  # a path or name in a message: its control characters escaped
from needlebench.terminal import warn

CACHE_NAME = ".needlebench-judge-cache.jsonl"

#: Deepest nesting of a JSON value read (lm-eval samples nest about 5 deep; a judge reply 4).
MAX_JSON_DEPTH = 64
#: Longest number (characters) in JSON read: lm-eval writes no longer ones; a 5,000-digit integer would otherwise
#: hit Python's int conversion limit (sys.set_int_max_str_digits, 4,300 by default) deep in the reader.
MAX_NUMBER_CHARS = 100
#: Deepest folder searched for samples files (lm-eval writes them 1 below --output_path).
MAX_FOLDER_DEPTH = 32
#: Longest file name of the common file systems (ext4, XFS, btrfs, tmpfs: NAME_MAX in <limits.h>), bytes.
NAME_MAX = 255
#: Longest cache line read (a reply is at most 64 KiB of text; JSON escapes can make it up to 6 times longer).
MAX_CACHE_LINE = 1 << 20
#: Fields of a cache entry, all covered by its tag.
_ENTRY_FIELDS = ("key", "model", "score", "reply", "endpoint")
#: What the tag of a cache entry signs before the entry (keeps these tags apart from any other the secret makes).
_TAG_DOMAIN = b"needlebench judge cache entry v1\0"
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
#: Longest line of a samples file read (bytes). lm-eval logs the whole prompt in each row: a 1M-token row is a few
#: MB; a longer line is refused after this many bytes, never held whole.
MAX_SAMPLES_LINE = 256 << 20
#: Largest tag file read (one short JSON line).
MAX_TAG_BYTES = 4096
#: What the tag of a judged file signs first (keeps these tags apart from the cache entries' and any other).
_JUDGED_DOMAIN = b"needlebench judged samples v1\0"


# --- JSON with limits -------------------------------------------------------------------------------------------

_LIMITS = safe_json.Limits(
    max_depth=MAX_JSON_DEPTH, max_number_chars=MAX_NUMBER_CHARS, finite_only=True, lone_surrogates=False
)


def load_json(text: str | bytes) -> Any:
    """``json.loads`` with limits (:func:`needlebench.safe_json.loads`): ValueError (its message names the field)
    for nesting deeper than :data:`MAX_JSON_DEPTH`, ``NaN``/``Infinity`` or a number too large for a float, a number
    longer than :data:`MAX_NUMBER_CHARS` characters, a string with a lone surrogate (``"\\ud800"``, which no UTF-8
    file can be written with). Other values are read exactly as ``json.loads`` reads them."""
    try:
        return safe_json.loads(text, _LIMITS)
    except safe_json.JSONLimitError as error:
        raise ValueError(_beyond_limits(error)) from None


def _beyond_limits(error: safe_json.JSONLimitError) -> str:
    """The message of a value beyond :data:`_LIMITS` (callers put it in their one line)."""
    field = safe_json.indexed_path(error.path)
    if error.kind == safe_json.RECURSION:
        return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    if error.kind == safe_json.DEPTH:
        return f"{safe_json.indexed_path(error.path[:8])}... nests deeper than {MAX_JSON_DEPTH} levels"
    if error.kind == safe_json.SURROGATE:
        return f"{field} holds a lone surrogate (\\ud800-\\udfff), which UTF-8 cannot carry"
    if error.kind == safe_json.SURROGATE_KEY:
        return f"a key of {field} holds a lone surrogate, which UTF-8 cannot carry"
    if error.kind == safe_json.CHARS:
        return f"{field} is a {len(error.literal):,}-character number"
    if error.kind == safe_json.RANGE:
        return f"{field} is {error.literal} (not a finite number)"
    return f"{field} is {error.literal}"  # safe_json.CONSTANT: NaN, Infinity, -Infinity


# --- the results folder -----------------------------------------------------------------------------------------


def open_results(results_dir: Path) -> Folder:
    """The results folder the user named (a link they typed is followed; it must be a folder)."""
    results_dir = Path(results_dir)
    try:
        return Folder.open(results_dir)
    except FileNotFoundError:
        problem = "does not exist"
    except (NotADirectoryError, NeedlebenchError):
        problem = "is not a folder"
    raise NeedlebenchError(f"results folder {shown(results_dir)} {problem}; give the --output_path of an lm-eval run")


def find_samples(root: Folder) -> list[tuple[str, ...]]:
    """The ``samples_*.jsonl`` under `root` as name parts relative to it, sorted as paths sort. Folders are opened
    with ``O_NOFOLLOW`` and a link to a folder is not descended into; a samples name that is not a regular file (a
    link, FIFO, device, folder) is a one-line error."""
    found: list[tuple[str, ...]] = []
    stack: list[tuple[str, ...]] = [()]
    while stack:
        parts = stack.pop()
        if len(parts) > MAX_FOLDER_DEPTH:
            raise NeedlebenchError(
                f"{shown(root.path.joinpath(*parts[:4]))}/... nests folders deeper than {MAX_FOLDER_DEPTH} levels; "
                "give the --output_path of an lm-eval run"
            )
        with root.sub("/".join(parts)) if parts else _borrowed(root) as folder:
            for name in folder.listdir():
                info = folder.lstat(name)
                if info is None:
                    continue
                if SAMPLES_RE.match(name):
                    if not stat.S_ISREG(info.st_mode):
                        raise NeedlebenchError(
                            f"{shown(folder.path / name)} is not a regular file (a symbolic link, FIFO, device or "
                            "folder); needlebench judge reads only lm-eval's own samples files"
                        )
                    if len(os.fsencode(JUDGED_PREFIX + name + TAG_SUFFIX)) > NAME_MAX:
                        raise NeedlebenchError(
                            f"{shown(folder.path / name)}: the name is too long to write {JUDGED_PREFIX}<name> and its "
                            f"{TAG_SUFFIX} beside it (at most {NAME_MAX - len(JUDGED_PREFIX) - len(TAG_SUFFIX)} bytes; "
                            "lm-eval's own names are far shorter)"
                        )
                    for written in (JUDGED_PREFIX + name, JUDGED_PREFIX + name + TAG_SUFFIX):
                        judged = folder.lstat(written)
                        if judged is not None and stat.S_ISDIR(judged.st_mode):
                            raise NeedlebenchError(
                                f"{shown(folder.path / written)} is a folder; needlebench judge writes its judged "
                                "samples there (remove it)"
                            )
                    found.append((*parts, name))
                elif stat.S_ISDIR(info.st_mode):
                    stack.append((*parts, name))
    return sorted(found)


class _borrowed:
    """`folder` as a context manager that leaves it open."""

    def __init__(self, folder: Folder) -> None:
        self.folder = folder

    def __enter__(self) -> Folder:
        return self.folder

    def __exit__(self, *exc: object) -> None:
        return None


def read_lines(handle, where: str, digest: Any = None) -> Iterator[bytes]:
    """The lines of the binary `handle`, each read with a cap (:data:`MAX_SAMPLES_LINE`; a longer line is a one-line
    error naming `where`, never held whole); every byte read is fed to `digest` (a hashlib object) when given."""
    number = 0
    while True:
        raw = handle.readline(MAX_SAMPLES_LINE + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_SAMPLES_LINE:
            raise NeedlebenchError(
                f"{where} line {number} is longer than {MAX_SAMPLES_LINE >> 20} MiB; lm-eval --log_samples rows are "
                "a few MB at most"
            )
        if digest is not None:
            digest.update(raw)
        yield raw


def read_samples(root: Folder, parts: tuple[str, ...], digest: Any = None) -> list[dict]:
    """The rows of the samples file `parts` as a list (see :func:`iter_samples`)."""
    return list(iter_samples(root, parts, digest))


def iter_samples(root: Folder, parts: tuple[str, ...], digest: Any = None) -> Iterator[dict]:
    """The rows of the samples file `parts` (regular file only), one at a time, each checked: a JSON object whose
    ``doc`` (when present) is an object with a scalar ``question`` and ``answer``; a bad row is a one-line error
    naming the file, the line and the field. Lines are read with a cap (:func:`read_lines`), every byte fed to
    `digest`; the file is never held whole."""
    where = shown(root.path.joinpath(*parts))
    with root.open_read("/".join(parts)) as handle:
        for number, raw in enumerate(read_lines(handle, where, digest), start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise NeedlebenchError(
                    f"{where} line {number} is not UTF-8 text; expected lm-eval --log_samples output"
                ) from None
            if not line.strip():
                continue
            try:
                row = load_json(line)
            except ValueError as error:
                problem = error.msg if isinstance(error, json.JSONDecodeError) else str(error)
                raise NeedlebenchError(
                    f"{where} line {number} is not JSON lm-eval writes ({problem}); expected lm-eval --log_samples "
                    "output"
                ) from None
            yield _checked_row(row, where, number)


def _checked_row(row: Any, where: str, number: int) -> dict:
    def bad(field: str, value: Any, allowed: str) -> NeedlebenchError:
        return NeedlebenchError(
            f"{where} line {number}: {field} is {_json_kind(value)}; allowed: {allowed} (lm-eval --log_samples output)"
        )

    if not isinstance(row, dict):
        raise bad("the row", row, "a JSON object")
    doc = row.get("doc", {})
    if not isinstance(doc, dict):
        raise bad("doc", doc, "a JSON object")
    for key in ("question", "answer"):
        value = doc.get(key)
        if isinstance(value, (dict, list)):
            raise bad(f"doc.{key}", value, "a string")
    return row


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return "a number"


def judged_tag(samples_name: str, samples_sha256: bytes, judged_sha256: bytes) -> str:
    """The tag of a judged file: HMAC-SHA256 (this user's secret) over the samples file's name (its bytes, length
    first) and sha256 and the judged file's sha256."""
    name = os.fsencode(samples_name)
    payload = _JUDGED_DOMAIN + len(name).to_bytes(4, "big") + name + samples_sha256 + judged_sha256
    return sign(payload).hex()


def write_judged(root: Folder, parts: tuple[str, ...], lines: Iterable[str], mode: int, samples_digest: Any) -> None:
    """``judged_<samples name>`` beside the samples file `parts` (the `lines`, each ended by a line break, written as
    they come) and its tag ``judged_<samples name>.tag``, each replaced atomically (never written through).
    `samples_digest` (a hashlib sha256) has seen every byte of the samples file once `lines` is exhausted. The tag is
    written last: an interrupted run leaves a judged file whose (old or missing) tag does not verify, which the
    report ignores."""
    judged = hashlib.sha256()
    with root.sub("/".join(parts[:-1])) if len(parts) > 1 else _borrowed(root) as folder:
        with folder.atomic(JUDGED_PREFIX + parts[-1], mode=mode) as handle:
            empty = True
            for line in lines:
                data = (line + "\n").encode("utf-8")
                judged.update(data)
                handle.write(data)
                empty = False
            if empty:  # as "\n".join(lines) + "\n" always wrote
                judged.update(b"\n")
                handle.write(b"\n")
        record = {"samples": parts[-1], "tag": judged_tag(parts[-1], samples_digest.digest(), judged.digest())}
        folder.write_text(JUDGED_PREFIX + parts[-1] + TAG_SUFFIX, json.dumps(record) + "\n", mode=mode)


def remove_judged(root: Folder, parts: tuple[str, ...]) -> bool:
    """Remove ``judged_<samples name>`` and its tag beside the samples file `parts` (a run that could not judge every
    row: an older judged file, or one a sender planted, must not stand for this run's); whether one was there."""
    removed = False
    with root.sub("/".join(parts[:-1])) if len(parts) > 1 else _borrowed(root) as folder:
        for name in (JUDGED_PREFIX + parts[-1] + TAG_SUFFIX, JUDGED_PREFIX + parts[-1]):
            if folder.lstat(name) is not None:
                folder.unlink(name)
                removed = True
    return removed


def file_sha256(folder: Folder, name: str) -> bytes:
    """The sha256 of the regular file `name` of `folder`, read in blocks (never held whole) up to its size when
    opened (a file another process keeps appending to is not read for as long as the writer goes on)."""
    digest = hashlib.sha256()
    with folder.open_read(name) as handle:
        left = os.fstat(handle.fileno()).st_size
        while left > 0 and (block := handle.read(min(1 << 20, left))):
            digest.update(block)
            left -= len(block)
    return digest.digest()


def verified_judged(folder: Folder, samples_name: str) -> bytes | None:
    """The sha256 of ``judged_<samples_name>`` in `folder` when its tag (``.tag`` beside it) verifies: written by this
    user's needlebench judge for exactly the samples file `samples_name` now beside it; else None (no judged file,
    no tag, a tag that does not verify: planted, stale or from another machine). A judged name or tag that is not a
    regular file is a one-line error (safe_fs refuses it)."""
    judged, tag_name = JUDGED_PREFIX + samples_name, JUDGED_PREFIX + samples_name + TAG_SUFFIX
    if folder.lstat(judged) is None or folder.lstat(tag_name) is None or folder.lstat(samples_name) is None:
        return None
    try:
        record = load_json(folder.read_bytes(tag_name, limit=MAX_TAG_BYTES))
    except (ValueError, UnicodeDecodeError, NeedlebenchError):
        return None
    tag = record.get("tag") if isinstance(record, dict) else None
    if not isinstance(tag, str):
        return None
    judged_sha256 = file_sha256(folder, judged)
    expected = judged_tag(samples_name, file_sha256(folder, samples_name), judged_sha256)
    return judged_sha256 if same_tag(tag, expected) else None


def new_file_mode() -> int:
    """The mode a file created by path gets under the current umask (0644 under umask 022), given to the files
    written through the layer so that they keep the modes the judge's files always had."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


# --- the signed cache -------------------------------------------------------------------------------------------


def _tag(entry: dict) -> str:
    payload = json.dumps({field: entry.get(field) for field in _ENTRY_FIELDS}, sort_keys=True, ensure_ascii=False)
    return sign(_TAG_DOMAIN + payload.encode("utf-8")).hex()


def _valid_entry(entry: Any) -> bool:
    if not isinstance(entry, dict) or set(entry) != {*_ENTRY_FIELDS, "tag"}:
        return False
    score = entry["score"]
    return (
        isinstance(entry["key"], str)
        and _KEY_RE.match(entry["key"]) is not None
        and isinstance(entry["model"], str)
        and (score is None or (type(score) is int and 1 <= score <= 10))
        and isinstance(entry["reply"], str)
        and (entry["endpoint"] is None or isinstance(entry["endpoint"], str))
        and isinstance(entry["tag"], str)
        and same_tag(entry["tag"], _tag(entry))
    )


class JudgeCache:
    """Verdicts by key, one signed JSON line each in ``.needlebench-judge-cache.jsonl``, appended as they come (an
    interrupted run keeps what it got).

    Read once: lines whose tag does not verify (written by someone else, on another machine, by needlebench
    before signed caches, or cut by an interruption) are ignored and counted in one warning line, and the file is
    rewritten with the verified entries only (atomically; a link or other non-file at the name is replaced, never
    followed). Appends go through :meth:`Folder.append_bytes`, which refuses a link."""

    def __init__(self, folder: Folder) -> None:
        self.folder = folder
        self.path = folder.path / CACHE_NAME
        self.entries: dict[str, dict] = {}
        ignored = 0
        info = folder.lstat(CACHE_NAME)
        if info is None:
            return
        if stat.S_ISDIR(info.st_mode):
            raise NeedlebenchError(
                f"{shown(self.path)} is a folder; needlebench judge keeps its cache in a file of that name"
            )
        if not stat.S_ISREG(info.st_mode):
            warn(
                f"{shown(self.path)} is not a regular file (a symbolic link, FIFO or device); it is not read, and is "
                "replaced by this run's cache"
            )
            self._rewrite()
            return
        lines = 0
        ended = True  # the last line ends with a line break (else the next append would join it)
        with folder.open_read(CACHE_NAME) as handle:
            for line in self._lines(handle):
                lines += 1
                ended = line is None or line.endswith(b"\n")
                entry = None
                if line is not None:
                    try:
                        entry = load_json(line)
                    except (ValueError, UnicodeDecodeError):
                        entry = None
                if _valid_entry(entry):
                    self.entries[entry["key"]] = entry
                elif line is None or line.strip():
                    ignored += 1
        if ignored:
            warn(
                f"{ignored:,} of {lines:,} lines of {shown(self.path)} were not written by this user's needlebench "
                "(unsigned, forged, damaged, or from another machine or needlebench 0.3 and earlier); they are "
                "ignored and removed, and their rows are asked again"
            )
        # a hard link to a file elsewhere is rewritten (a new file), never appended to
        if ignored or not ended or info.st_nlink > 1:
            self._rewrite()

    @staticmethod
    def _lines(handle) -> Iterator[bytes | None]:
        """The lines of `handle`; None for each longer than :data:`MAX_CACHE_LINE` (skipped, never held whole)."""
        while True:
            line = handle.readline(MAX_CACHE_LINE + 1)
            if not line:
                return
            if len(line) > MAX_CACHE_LINE and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):
                    line = handle.readline(MAX_CACHE_LINE)
                yield None
                continue
            yield line

    def _rewrite(self) -> None:
        text = "".join(json.dumps(entry, ensure_ascii=False) + "\n" for entry in self.entries.values())
        self.folder.write_text(CACHE_NAME, text, mode=new_file_mode())

    def add(self, key: str, model: str, score: int | None, reply: str, endpoint: str | None) -> None:
        entry = {"key": key, "model": model, "score": score, "reply": reply, "endpoint": endpoint}
        entry["tag"] = _tag(entry)
        self.entries[key] = entry
        self.folder.append_bytes(CACHE_NAME, (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"), mode=0o666)
