"""Replacing a dataset folder so that at every instant it is one whole dataset, the old one or the new one.

A build writes the complete new dataset into a staging folder inside the output folder,
``.building-<pid>-<random>/`` (``data/<config>/`` files, the final ``README.md`` and ``needlebench.json``, and
``replaces.json``, the old manifest's files to remove); configs kept from the old dataset are hard-linked in. Then:

1. **commit**: ``README.md`` is atomically replaced by the new card with its ``data_files`` pointing into the
   staging folder. ``load_dataset`` reads the card, so from this rename on it reads the new dataset, whole.
2. the old files listed by the old manifest are removed and the new files are hard-linked (or copied) to their
   final place ``data/<config>/``; nothing the card points at changes meanwhile;
3. ``needlebench.json`` and then ``README.md`` are atomically replaced by the final ones (which point at
   ``data/<config>/``); the staging folder is removed.

A kill before the commit leaves the old dataset (and a staging folder nobody points at); a kill after it leaves the
new one, and :func:`recover` (run by every build into the folder, and by ``verify`` and ``publish`` before they read
it) finishes steps 2-3: a staging folder is finished when the card points into it, else deleted. Files not listed by
the manifest (the user's) are never touched.

Nothing found in the folder is trusted. A staging folder is recovered only when it holds this machine's marker
(:func:`make_staging`: host, boot id and pid, tagged with the user's secret); any other folder of that name (from a
clone, another host, an earlier version) is reported and left untouched. Every name read back (the staging manifest's
files, ``replaces.json``) is checked by :mod:`needlebench.dataset.safe_folder` before anything is removed or placed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from needlebench.dataset import card as dataset_card
from needlebench.dataset.safe_folder import check_manifest, check_targets, manifest_files, open_no_follow, parse_json
from needlebench.errors import NeedlebenchError
from needlebench.interrupts import pid_alive
from needlebench.sources.cache import same_tag, sign
from needlebench.terminal import warn

MANIFEST = "needlebench.json"
CARD = "README.md"
STAGING_PREFIX = ".building-"
REPLACES = "replaces.json"
#: This machine's marker inside a staging folder (see :func:`make_staging`); never in a finished dataset.
MARKER = ".needlebench-build"
#: Largest card, manifest or ``replaces.json`` read back from a staging folder.
_MAX_STAGED_BYTES = 64 * 2**20
#: Temporary files of :func:`write_atomic`: ``.<name>.<pid>.tmp``.
_TEMP = re.compile(r"^\.(README\.md|needlebench\.json)\.(\d+)\.tmp$")
#: ``tempfile.mkdtemp`` adds 8 characters of ``[a-z0-9_]``; earlier versions named the folder ``.building-XXXXXXXX``.
_STAGING = re.compile(r"^\.building-(\d+)-[a-z0-9_]{8}$")
_LEGACY_STAGING = re.compile(r"^\.building-[a-z0-9_]{8}$")

#: Test hook: ``NEEDLEBENCH_TEST_KILL_AT=k`` makes the process exit abruptly (``os._exit``) at the k-th step.
KILL_ENV = "NEEDLEBENCH_TEST_KILL_AT"
KILL_STATUS = 77
_steps = 0


def step() -> None:
    """A point where tests kill the build (see :data:`KILL_ENV`); a no-op otherwise."""
    global _steps
    target = os.environ.get(KILL_ENV)
    if not target:
        return
    _steps += 1
    if str(_steps) == target:
        os._exit(KILL_STATUS)


def staging_name(path: Path) -> bool:
    """Named like a staging folder (of this version, or ``.building-XXXXXXXX`` of earlier ones)."""
    return bool(_STAGING.match(path.name) or _LEGACY_STAGING.match(path.name))


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _marker_record(name: str, pid: int) -> dict:
    import socket

    return {"host": socket.gethostname(), "boot_id": _boot_id(), "pid": pid, "staging": name}


def _marker_tag(record: dict) -> str:

    return sign(json.dumps(record, sort_keys=True).encode("utf-8")).hex()


def make_staging(out_dir: Path) -> Path:
    """A new staging folder in `out_dir` with this machine's marker: host, boot id and pid, tagged with the user's
    secret (:func:`needlebench.sources.cache.sign`), so that only a build of this user on this machine can have
    made it. Nothing else (a folder of the same name from a clone) is ever recovered."""
    import tempfile

    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=out_dir))
    write_marker(staging, os.getpid())
    return staging


def write_marker(staging: Path, pid: int) -> None:
    """Mark `staging` as made by the build `pid` of this user on this machine."""
    record = _marker_record(staging.name, pid)
    (staging / MARKER).write_text(json.dumps({**record, "tag": _marker_tag(record)}), encoding="utf-8")


def staging_state(path: Path) -> tuple[str, str]:
    """("ours" | "running" | "foreign", why) of a folder named like a staging folder: ours is a leftover of a
    build of this user on this machine that no longer runs (recovered), running is such a build still running
    (left alone), foreign is anything else (reported, never used or deleted)."""

    if path.is_symlink() or not path.is_dir():
        return "foreign", "it is not a folder (a symbolic link?)"
    match = _STAGING.match(path.name)
    if not match:
        return "foreign", "it has no marker of this machine (an earlier version's or another's)"
    try:
        marker = parse_json(open_no_follow(path, MARKER, str(path / MARKER), 4096), path / MARKER)
    except FileNotFoundError:
        return "foreign", "it has no marker of this machine"
    except NeedlebenchError:
        return "foreign", "its marker is unreadable"
    if not isinstance(marker, dict) or not isinstance(marker.get("tag"), str):
        return "foreign", "its marker is unreadable"
    pid = int(match.group(1))
    record = {key: marker.get(key) for key in ("host", "boot_id", "pid", "staging")}
    if not same_tag(marker["tag"], _marker_tag(record)) or record["staging"] != path.name or record["pid"] != pid:
        return "foreign", "its marker was not made by this user's needlebench"
    here = _marker_record(path.name, pid)
    if record["host"] != here["host"]:
        return "foreign", f"it was made on the host {record['host']!r}"
    if record["boot_id"] == here["boot_id"] and pid != os.getpid() and pid_alive(pid):
        return "running", "its build is still running"
    return "ours", ""


def _temp_leftover(path: Path) -> bool:
    """A temporary card or manifest file of a build no longer running (a regular file, never a link)."""
    match = _TEMP.match(path.name)
    if not match or path.is_symlink() or not path.is_file():
        return False
    pid = int(match.group(2))
    return pid == os.getpid() or not pid_alive(pid)


def is_leftover(path: Path) -> bool:
    """A staging folder made by a build of this machine that no longer runs, or a temporary card/manifest file of
    such a build. Builds lock the folder (:func:`lock_folder`), so under the lock this process's own names are
    leftovers of an earlier failed build."""
    if staging_name(path):
        return staging_state(path)[0] == "ours"
    return _temp_leftover(path)


def leftovers(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if is_leftover(p)) if folder.is_dir() else []


def foreign_staging(folder: Path) -> list[tuple[Path, str]]:
    """Folders named like staging folders that no build of this machine made: (path, why)."""
    found = []
    for path in sorted(folder.iterdir()) if folder.is_dir() else ():
        if staging_name(path) or (path.is_symlink() and path.name.startswith(STAGING_PREFIX)):
            state, why = staging_state(path)
            if state == "foreign":
                found.append((path, why))
    return found


def report_foreign(folder: Path) -> list[Path]:
    """Warn (one line each) about staging folders this machine did not make; they are left untouched."""

    found = foreign_staging(folder)
    for path, why in found:
        warn(f"{path} is named like a build's staging folder but {why}; left untouched (never used or deleted)")
    return [path for path, _ in found]


def lock_folder(folder: Path) -> int:
    """Lock `folder` against other builds (an advisory lock on the folder itself, no file added); returns the
    descriptor to close. Another build writing into it is a one-line error."""

    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise NeedlebenchError(
            f"another needlebench build is writing into {folder}; wait for it to finish or choose another --out"
        ) from None
    return descriptor


def write_atomic(path: Path, data: bytes) -> None:
    """Write `path` through ``.<name>.<pid>.tmp`` beside it and an atomic rename."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _place(source: Path, target: Path) -> None:
    """Put `source`'s bytes at `target` (a hard link, or a copy where links are not supported)."""
    if target.exists() and os.path.samefile(source, target):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EMLINK, errno.EOPNOTSUPP):
            raise
        shutil.copyfile(source, target)


def files_of(manifest: dict | None) -> list[str]:

    return manifest_files(manifest)


def staging_card(card: str, staging: str, configs: Iterable[str]) -> str:
    """The card with each config's ``data_files`` pointing into the staging folder (YAML header only)."""

    if not card.startswith("---\n"):
        raise RuntimeError("the card has no YAML header")
    end = card.index("\n---\n", 4)
    header, body = card[:end], card[end:]
    for name in configs:
        pattern = dataset_card.data_files_pattern(name)
        old, new = f"path: {pattern}\n", f"path: {staging}/{pattern}\n"
        if header.count(old) != 1:
            raise RuntimeError(f"the card's data_files of {name} not found")
        header = header.replace(old, new)
    return header + body


def prepare(out_dir: Path, staging: Path, manifest: dict, previous: dict | None) -> None:
    """Complete the staging folder: kept configs linked in, the final card and manifest, the files to remove.
    Every name is checked against both folders first (:mod:`.safe_folder`); nothing is placed before."""

    where = str(out_dir / MANIFEST)
    names = files_of(manifest)
    check_targets(out_dir, [*names, *files_of(previous), MANIFEST, CARD], where)
    check_targets(staging, names, where)
    kept = [name for name in names if not (staging / name).exists()]  # configs kept from the previous dataset
    for name in kept:
        if not (out_dir / name).is_file():
            raise NeedlebenchError(
                f"{out_dir / name}, listed by {out_dir / MANIFEST}, is missing; rebuild its config too "
                "or pass --overwrite"
            )
    for name in kept:
        _place(out_dir / name, staging / name)
    step()
    card = dataset_card.render_card(manifest, staging)
    (staging / CARD).write_text(card, encoding="utf-8", newline="\n")
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    (staging / MANIFEST).write_text(text, encoding="utf-8", newline="\n")
    new = set(names)
    replaces = sorted(name for name in files_of(previous) if name not in new)
    (staging / REPLACES).write_text(json.dumps(replaces), encoding="utf-8")
    # the commit's card is checked now, so that the rename below cannot fail on it
    staging_card(card, staging.name, manifest["configs"])
    step()


def commit(out_dir: Path, staging: Path) -> None:
    """Make the new dataset current (one rename), then move it to its final place; see the module docstring."""
    card = (staging / CARD).read_text(encoding="utf-8")
    manifest = json.loads((staging / MANIFEST).read_text(encoding="utf-8"))
    write_atomic(out_dir / CARD, staging_card(card, staging.name, manifest["configs"]).encode("utf-8"))
    step()
    finish(out_dir, staging)


def _card_points_into(out_dir: Path, staging: Path) -> bool:

    try:
        card = open_no_follow(out_dir, CARD, str(out_dir / CARD), _MAX_STAGED_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError, NeedlebenchError):
        return False
    return f"path: {staging.name}/data/" in card


def _finish_plan(out_dir: Path, staging: Path) -> tuple[bytes, dict, list[str], bytes]:
    """Everything :func:`finish` will act on, read from the staging folder and checked first: its manifest (schema,
    files inside the staging folder, regular files, no links), the files to remove (Parquet files of the output
    folder's ``data/``), and the final places of the new files (no links on the way)."""

    where = str(staging / MANIFEST)
    manifest_bytes = open_no_follow(staging, MANIFEST, where, _MAX_STAGED_BYTES)
    manifest = check_manifest(parse_json(manifest_bytes, staging / MANIFEST), where, staging)
    names = files_of(manifest)
    for name in names:
        if not (staging / name).is_file():
            raise NeedlebenchError(f"{where} lists the file {name!r}, which is not a file in {staging}")
    check_targets(staging, names, where)
    replaces_path = staging / REPLACES
    replaces = parse_json(open_no_follow(staging, REPLACES, str(replaces_path), _MAX_STAGED_BYTES), replaces_path)
    if not isinstance(replaces, list):
        raise NeedlebenchError(f"{replaces_path} is not a list of file names")
    for name in replaces:
        parts = PurePosixPath(name).parts if isinstance(name, str) else ()
        if len(parts) < 3 or parts[0] != "data" or not name.endswith(".parquet"):
            raise NeedlebenchError(
                f"{replaces_path} names the file {name!r}; allowed: Parquet files under data/ inside {out_dir}"
            )
    check_targets(out_dir, [*replaces, *names, MANIFEST, CARD], str(replaces_path))
    card = open_no_follow(staging, CARD, str(staging / CARD), _MAX_STAGED_BYTES)
    return manifest_bytes, manifest, replaces, card


def finish(out_dir: Path, staging: Path) -> None:
    """Steps 2-3 of the replace (idempotent: a kill at any point is finished by running it again). Every name is
    checked before anything changes (:func:`_finish_plan`)."""
    manifest_bytes, manifest, replaces, card = _finish_plan(out_dir, staging)
    for name in replaces:
        (out_dir / name).unlink(missing_ok=True)
        _remove_empty_parents(out_dir / name, out_dir)
        step()
    for entry in manifest["configs"].values():
        for name in entry["files"]:
            _place(staging / name, out_dir / name)
        step()
    write_atomic(out_dir / MANIFEST, manifest_bytes)
    step()
    write_atomic(out_dir / CARD, card)
    step()
    shutil.rmtree(staging, ignore_errors=True)


def _remove_empty_parents(path: Path, root: Path) -> None:
    """Remove the now empty folders above a removed file, up to (not including) `root`/data."""
    parent = path.parent
    while parent != root and parent != root / "data" and root in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent


def recover(out_dir: Path) -> list[str]:
    """Finish a replace a killed build of this machine committed, and remove its other leftovers; returns what was
    done. Staging folders this machine did not make are left untouched (callers report them once with
    :func:`report_foreign`)."""
    done = []
    for path in leftovers(out_dir):
        if path.is_dir() and _card_points_into(out_dir, path) and (path / MANIFEST).is_file():
            finish(out_dir, path)
            done.append(f"finished the interrupted build {path.name}")
        elif path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"removed {path.name}")
        else:
            path.unlink(missing_ok=True)
            done.append(f"removed {path.name}")
    return done


def recover_before_reading(folder: Path) -> list[str]:
    """For commands that read a dataset folder (verify, publish): finish a replace a killed build of this machine
    left (under the folder's lock, as a build would), so that the folder reads as one whole dataset."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    report_foreign(folder)
    if not leftovers(folder):
        return []
    lock = lock_folder(folder)
    try:
        return recover(folder)
    finally:
        os.close(lock)
