"""Nothing read from a dataset folder is trusted: one check for every file name, and the manifest's schema.

A dataset folder may come from anyone (a cloned Hub repository, a copied archive). Every file name read from one
(the manifest's files, a staging folder's ``replaces.json`` and manifest, the files a card measures) goes through
:func:`check_name`: a relative, normalised POSIX path inside the folder, with no symbolic link on the way (each
existing component is ``lstat``-ed), else a one-line :class:`~needlebench.errors.NeedlebenchError` naming it. The
manifest is read without following a link, size-limited, and checked field by field (:func:`check_manifest`).
Callers check every name before they change anything, so a refused folder is left exactly as it was.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from needlebench import safe_json
from needlebench.errors import NeedlebenchError

MANIFEST = "needlebench.json"
FORMAT = "needlebench-dataset"
FORMAT_VERSIONS = (1,)
#: A manifest is a few kB per config; anything beyond this is not one of ours.
MAX_MANIFEST_BYTES = 16 * 2**20
#: Config names: the built-in ones and experiment names (``^[a-z][a-z0-9_]*$``).
_CONFIG_NAME = re.compile(r"^[a-z][a-z0-9_]{0,127}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TOP_KEYS = {"format", "format_version", "generator_version", "recipe", "configs", "experiments"}
_ENTRY_INTS = ("rows", "haystack_tokens", "prompt_tokens")


def check_name(root: Path, name: object, what: str) -> str:
    """`name`, read from `what`, as a path inside the folder `root`: a relative, normalised POSIX path (no ``..``,
    ``.``, empty or absolute part) with no symbolic link at any existing component; else a one-line error."""
    if not isinstance(name, str) or not name or "\0" in name or "\\" in name:
        raise NeedlebenchError(f"{what} names the file {name!r}; allowed: a relative path inside {root}")
    path = PurePosixPath(name)
    if path.is_absolute() or str(path) != name or any(part in (".", "..") for part in path.parts):
        raise NeedlebenchError(
            f"{what} names the file {name!r}, outside {root} or not normalised; allowed: a relative path inside it "
            "without '..'"
        )
    check_no_links(root, name, what)
    return name


def check_no_links(root: Path, name: str, what: str) -> None:
    """Refuse a symbolic link at any existing component of `root`/`name` (the folder `root` itself may be one)."""
    current = Path(root)
    for part in PurePosixPath(name).parts:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return  # nothing further exists: whatever is made there is made by us
        except NotADirectoryError:
            raise NeedlebenchError(f"{what} names the file {name!r}, but {current.parent} is not a folder") from None
        if stat.S_ISLNK(info.st_mode):
            raise NeedlebenchError(
                f"{what} names the file {name!r}, which goes through the symbolic link {current}; needlebench never "
                "follows links inside a dataset folder"
            )


def check_config_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not _CONFIG_NAME.match(name):
        raise NeedlebenchError(f"{what} names the config {name!r}; allowed: names matching ^[a-z][a-z0-9_]*$")
    return name


def check_data_file(root: Path | None, config: str, name: object, what: str) -> str:
    """A file of `config` listed in `what`: a Parquet file under ``data/<config>/`` inside `root` (checked for links
    when `root` is given)."""
    if not isinstance(name, str):
        raise NeedlebenchError(
            f"config {config!r} in {what} lists the file {name!r}; expected a path like "
            f"data/{config}/test-00000-of-00001.parquet"
        )
    path = PurePosixPath(name)
    if (
        not name.isprintable()  # a control character would reach a terminal or a log line as it is
        or len(name) > 1024
        or path.is_absolute()
        or ".." in path.parts
        or path.parts[:2] != ("data", config)
        or len(path.parts) < 3
        or path.suffix != ".parquet"
    ):
        raise NeedlebenchError(
            f"config {config!r} in {what} lists the file {name!r}; allowed: Parquet files under data/{config}/ "
            "inside the folder"
        )
    if root is None:
        if str(path) != name or "." in path.parts or "\\" in name or "\0" in name:
            raise NeedlebenchError(f"config {config!r} in {what} lists the file {name!r}, which is not normalised")
        return name
    return check_name(root, name, what)


def check_manifest(manifest: object, where: str, root: Path | None = None) -> dict[str, Any]:
    """The schema of a needlebench manifest, field by field (a one-line error naming the field); with `root`, its
    files are also checked against the folder (:func:`check_name`)."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise NeedlebenchError(f"{where} is not a needlebench manifest (format {FORMAT!r} expected)")
    unknown = sorted(str(key) for key in manifest if key not in _TOP_KEYS)
    if unknown:
        raise NeedlebenchError(f"{where} has the unknown field {unknown[0]!r}; allowed: {', '.join(sorted(_TOP_KEYS))}")
    version = manifest.get("format_version")
    if isinstance(version, bool) or version not in FORMAT_VERSIONS:
        allowed = ", ".join(map(str, FORMAT_VERSIONS))
        raise NeedlebenchError(f"{where} has format_version {version!r}; this needlebench reads {allowed}")
    if not isinstance(manifest.get("generator_version", ""), str):
        raise NeedlebenchError(f'{where} is invalid: its "generator_version" is not a string')
    if not isinstance(manifest.get("recipe", {}), dict):
        raise NeedlebenchError(f'{where} is invalid: its "recipe" is not an object')
    _check_experiments(manifest.get("experiments"), where)
    configs = manifest.get("configs")
    if not isinstance(configs, dict) or not configs:
        raise NeedlebenchError(f'{where} lists no configs; expected a "configs" object with at least one config')
    seen: set[str] = set()
    for name, entry in configs.items():
        check_config_name(name, where)
        if not isinstance(entry, dict):
            raise NeedlebenchError(f"config {name!r} in {where} is {_short(entry)}; expected an object")
        if not isinstance(entry.get("rows"), int) or not _HEX64.match(str(entry.get("fingerprint", ""))):
            raise NeedlebenchError(f'config {name!r} in {where} needs an integer "rows" and a sha256 "fingerprint"')
        for key in _ENTRY_INTS:
            value = entry.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise NeedlebenchError(f'config {name!r} in {where} has "{key}" {_short(value)}; expected a count')
        files = entry.get("files")
        if not isinstance(files, list) or not files:
            raise NeedlebenchError(
                f'config {name!r} in {where} has "files" {_short(files)}; expected a list of its Parquet files '
                f"such as data/{name}/test-00000-of-00001.parquet"
            )
        for file_name in files:
            check_data_file(root, name, file_name, where)
            if file_name in seen:
                raise NeedlebenchError(f"config {name!r} in {where} lists the file {file_name!r} twice")
            seen.add(file_name)
    return manifest


def _check_experiments(experiments: object, where: str) -> None:
    """Each experiment record of a manifest: an object under a config name that parses as an experiment
    (:func:`needlebench.tasks.experiment.experiment_from_record`); else a one-line error naming the field."""
    if experiments is None:
        return
    if not isinstance(experiments, dict):
        raise NeedlebenchError(f"{where} field experiments is {_short(experiments)}; expected an object")
    if not experiments:
        return
    from needlebench.tasks.experiment import experiment_from_record  # deferred: only manifests with experiments

    for name, record in experiments.items():
        check_config_name(name, f"{where} field experiments")
        if not isinstance(record, dict):
            raise NeedlebenchError(
                f"{where} field experiments.{name} is {_short(record)}; expected an experiment record (an object)"
            )
        try:
            experiment_from_record(record)
        except NeedlebenchError as error:
            raise NeedlebenchError(f"{where} field experiments.{name}: {' '.join(str(error).split())[:300]}") from None
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as error:
            reason = " ".join(str(error).split())[:160] or type(error).__name__
            raise NeedlebenchError(
                f"{where} field experiments.{name} is not a valid experiment record: {reason}"
            ) from None


def _short(value: object) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def open_no_follow(root: Path, name: str, what: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file `root`/`name` (checked by :func:`check_name`, opened without following a
    link), at most `limit` bytes; a one-line error otherwise. FileNotFoundError when it does not exist."""
    check_name(root, name, what)
    path = Path(root) / name
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise NeedlebenchError(f"{path} cannot be read: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NeedlebenchError(f"{path} is not a regular file; needlebench reads only files it wrote there")
        if limit is not None and info.st_size > limit:
            raise NeedlebenchError(
                f"{path} holds {info.st_size:,} bytes; a needlebench file there has at most {limit:,}"
            )
        return handle.read() if limit is None else handle.read(limit + 1)


#: Limits of JSON read from a folder: digits of an integer (Python refuses more than 4,300 with a ValueError, see
#: ``sys.set_int_max_str_digits`` in the CPython docs, "Integer string conversion length limitation"), characters of
#: a number, and nesting depth.
MAX_INT_DIGITS = 40
MAX_NUMBER_CHARS = 64
MAX_JSON_DEPTH = 64
_LIMITS = safe_json.Limits(
    max_depth=MAX_JSON_DEPTH, max_int_digits=MAX_INT_DIGITS, max_number_chars=MAX_NUMBER_CHARS, finite_only=True
)


def parse_json(data: bytes, path: Path) -> Any:
    """JSON text of a file read from a folder, parsed with limits (integer digits, number length, no NaN or
    Infinity, nesting depth; :func:`needlebench.safe_json.loads`); any failure is a one-line error naming the file
    (and the field when there is one)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise NeedlebenchError(f"{path} is not a readable needlebench manifest: it is not UTF-8 text") from None
    try:
        return safe_json.loads(text, _LIMITS)
    except safe_json.JSONLimitError as error:
        raise NeedlebenchError(_beyond_limits(error, path)) from None
    except json.JSONDecodeError as error:
        raise NeedlebenchError(f"{path} is not a readable needlebench manifest: {error}") from None
    except ValueError as error:
        reason = " ".join(str(error).split())[:120]
        raise NeedlebenchError(f"{path} is not a readable needlebench manifest: {reason}") from None


def _beyond_limits(error: safe_json.JSONLimitError, path_of_file: Path) -> str:
    """The one-line message of a value of the file `path_of_file` beyond :data:`_LIMITS`."""
    if error.kind == safe_json.RECURSION:
        return f"{path_of_file} is not a readable needlebench manifest: it is nested too deeply"
    if error.kind == safe_json.DEPTH:
        field = safe_json.dotted_path(error.path[:8])
        return f"{path_of_file} field {field}... is nested more than {MAX_JSON_DEPTH} levels deep"
    text = error.literal
    if error.kind == safe_json.DIGITS:
        reason = f"an integer of {len(text.lstrip('-')):,} digits (allowed: at most {MAX_INT_DIGITS})"
    elif error.kind == safe_json.CHARS:
        reason = f"a number of {len(text):,} characters (allowed: at most {MAX_NUMBER_CHARS})"
    elif error.kind == safe_json.RANGE:
        reason = f"the number {text[:20]}... beyond the range of a float"
    else:  # safe_json.CONSTANT (lone surrogates are read)
        reason = f"{text} (allowed: finite numbers only)"
    return f"{path_of_file} field {safe_json.dotted_path(error.path)} holds {reason}"


def read_manifest_file(root: Path, name: str = MANIFEST, *, where: str | None = None) -> dict[str, Any] | None:
    """The schema-checked manifest `root`/`name` (its files checked against `root`), or None when absent."""
    path = Path(root) / name
    try:
        data = open_no_follow(root, name, str(path), MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None
    return check_manifest(parse_json(data, path), where or str(path), Path(root))


def manifest_files(manifest: Mapping[str, Any] | None) -> list[str]:
    if not manifest:
        return []
    return [name for entry in manifest["configs"].values() for name in entry["files"]]


def check_targets(root: Path, names: Iterable[str], what: str) -> None:
    """Each name is a safe place inside `root` (:func:`check_name`) and, when it exists, a regular file."""
    for name in names:
        check_name(root, name, what)
        try:
            info = os.lstat(Path(root) / name)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise NeedlebenchError(f"{what} names the file {name!r}, but {Path(root) / name} is not a regular file")


#: How long a reader waits for a dataset folder another process holds an exclusive lock on (a build writing into it
#: holds one), and after how long it says what it waits for. ``NEEDLEBENCH_LOCK_WAIT`` (seconds) sets the first.
LOCK_WAIT_SECONDS = 30.0
LOCK_NOTICE_SECONDS = 1.0
_LOCK_POLL_SECONDS = 0.1
MAX_LOCK_WAIT_SECONDS = 24 * 3600.0


def lock_wait_seconds() -> float:
    """:data:`LOCK_WAIT_SECONDS`, or ``NEEDLEBENCH_LOCK_WAIT`` when set (a one-line error when it is not a number of
    seconds from 0 to a day)."""
    text = os.environ.get("NEEDLEBENCH_LOCK_WAIT")
    if text is None or text == "":
        return LOCK_WAIT_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_LOCK_WAIT_SECONDS:  # also NaN
        raise NeedlebenchError(
            f"NEEDLEBENCH_LOCK_WAIT {text[:40]!r} is not allowed; give seconds from 0 to {MAX_LOCK_WAIT_SECONDS:.0f}"
        )
    return value


def lock_holder(descriptor: int) -> str | None:
    """Who holds a ``flock`` on the open file `descriptor`, from ``/proc/locks`` (proc(5): ``FLOCK ... PID
    MAJOR:MINOR:INODE``) and ``/proc/PID/comm``: ``process 1234 (flock)``; None when the system does not say."""
    info = os.fstat(descriptor)
    key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open("/proc/locks", "rb") as handle:
            lines = handle.read(4 * 2**20).decode("ascii", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[5] != key:
            continue  # another lock, or a waiter ("N: -> FLOCK ...")
        pid = parts[4]
        if not pid.isdigit() or int(pid) <= 0:
            return None  # a process of another PID namespace
        try:
            with open(f"/proc/{pid}/comm", "rb") as handle:
                name = handle.read(64).decode("utf-8", errors="replace").strip()
        except OSError:
            name = ""
        name = "".join(char for char in name if char.isprintable())[:32]
        return f"process {pid}" + (f" ({name})" if name else "")
    return None


def lock_shared(descriptor: int, path: Path, wait: float | None = None) -> None:
    """A shared ``flock`` on the open folder `descriptor` (released when it is closed), taken without blocking.

    Anyone who can read a folder can hold an exclusive lock on it, so the lock is retried for `wait` seconds
    (:func:`lock_wait_seconds`), with one line after a second saying what it waits for, then refused in one line
    naming the folder and the process holding it when the system says."""
    limit = lock_wait_seconds() if wait is None else wait
    start = time.monotonic()
    noticed = False
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        waited = time.monotonic() - start
        if waited >= limit:
            holder = lock_holder(descriptor) or "another process"
            raise NeedlebenchError(
                f"{path} is locked by {holder} (a needlebench build writing into it holds such a lock); gave up "
                f"after {limit:g} s; try again when it is done (NEEDLEBENCH_LOCK_WAIT sets the wait in seconds)"
            )
        if not noticed and waited >= LOCK_NOTICE_SECONDS:
            from needlebench.terminal import warn  # deferred: only when a folder is locked

            holder = lock_holder(descriptor) or "another process"
            warn(f"waiting for {path}: {holder} holds a lock on it (a build writing into it?); up to {limit:g} s")
            noticed = True
        time.sleep(_LOCK_POLL_SECONDS)
