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

import fcntl
import json
import os
import re
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from needlebench.dataset import card as dataset_card
from needlebench.dataset.safe_folder import check_manifest, check_targets, manifest_files, parse_json
from needlebench.errors import NeedlebenchError
from needlebench.interrupts import pid_alive
from needlebench.safe_fs import Folder, opened
from needlebench.sources.cache import same_tag, sign
from needlebench.terminal import printable, warn

MANIFEST = "needlebench.json"
CARD = "README.md"
STAGING_PREFIX = ".building-"
REPLACES = "replaces.json"
#: This machine's marker inside a staging folder (see :func:`make_staging`); never in a finished dataset.
MARKER = ".needlebench-build"
#: Largest card, manifest or ``replaces.json`` read back from a staging folder.
_MAX_STAGED_BYTES = 64 * 2**20
#: Temporary card and manifest files: ``.<name>.<16 hex digits>.tmp`` (:meth:`Folder.atomic`), or
#: ``.<name>.<pid>.tmp`` of earlier versions.
_TEMP = re.compile(r"^\.(README\.md|needlebench\.json)\.(?:(\d{1,10})|([0-9a-f]{16}))\.tmp$")
#: ``tempfile.mkdtemp`` adds 8 characters of ``[a-z0-9_]``; earlier versions named the folder ``.building-XXXXXXXX``.
_STAGING = re.compile(r"^\.building-(\d+)-[a-z0-9_]{8}$")
_LEGACY_STAGING = re.compile(r"^\.building-[a-z0-9_]{8}$")
_STAGING_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"

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


def staging_name(path: Path | str) -> bool:
    """Named like a staging folder (of this version, or ``.building-XXXXXXXX`` of earlier ones)."""
    name = path if isinstance(path, str) else path.name
    return bool(_STAGING.match(name) or _LEGACY_STAGING.match(name))


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:  # a kernel file, read only
            return handle.read().strip()
    except OSError:
        return ""


def _marker_record(name: str, pid: int) -> dict:
    import socket

    return {"host": socket.gethostname(), "boot_id": _boot_id(), "pid": pid, "staging": name}


def _marker_tag(record: dict) -> str:

    return sign(json.dumps(record, sort_keys=True).encode("utf-8")).hex()


def make_staging(out: Folder) -> Folder:
    """A new staging folder in `out` (created by ``mkdirat`` under an unpredictable name, mode 0700, as
    ``tempfile.mkdtemp`` makes it) with this machine's marker: host, boot id and pid, tagged with the user's secret
    (:func:`needlebench.sources.cache.sign`), so that only a build of this user on this machine can have made it.
    Nothing else (a folder of the same name from a clone) is ever recovered."""
    name = out.new_private(
        lambda: f"{STAGING_PREFIX}{os.getpid()}-{''.join(secrets.choice(_STAGING_CHARS) for _ in range(8))}"
    )
    staging = out.sub(name)
    try:
        write_marker(staging, os.getpid())
    except BaseException:
        staging.close()
        out.rmtree(name)
        raise
    return staging


def write_marker(staging: Folder | Path, pid: int) -> None:
    """Mark `staging` as made by the build `pid` of this user on this machine."""
    with opened(staging) as folder:
        record = _marker_record(folder.path.name, pid)
        folder.write_text(MARKER, json.dumps({**record, "tag": _marker_tag(record)}))


def staging_state(out: Folder, name: str) -> tuple[str, str]:
    """("ours" | "running" | "foreign", why) of the entry `name` of `out` named like a staging folder: ours is a
    leftover of a build of this user on this machine that no longer runs (recovered), running is such a build still
    running (left alone), foreign is anything else (reported, never used or deleted)."""

    if not out.is_dir(name):
        return "foreign", "it is not a folder (a symbolic link?)"
    match = _STAGING.match(name)
    if not match:
        return "foreign", "it has no marker of this machine (an earlier version's or another's)"
    try:
        with out.sub(name) as staging:
            data = staging.read_bytes(MARKER, limit=4096)
        marker = parse_json(data, out.path / name / MARKER)
    except FileNotFoundError:
        return "foreign", "it has no marker of this machine"
    except (NeedlebenchError, OSError):
        return "foreign", "its marker is unreadable"
    if not isinstance(marker, dict) or not isinstance(marker.get("tag"), str):
        return "foreign", "its marker is unreadable"
    pid = int(match.group(1))
    record = {key: marker.get(key) for key in ("host", "boot_id", "pid", "staging")}
    if not same_tag(marker["tag"], _marker_tag(record)) or record["staging"] != name or record["pid"] != pid:
        return "foreign", "its marker was not made by this user's needlebench"
    here = _marker_record(name, pid)
    if record["host"] != here["host"]:
        return "foreign", f"it was made on the host {record['host']!r}"
    if record["boot_id"] == here["boot_id"] and pid != os.getpid() and pid_alive(pid):
        return "running", "its build is still running"
    return "ours", ""


def _temp_leftover(out: Folder, name: str) -> bool:
    """A temporary card or manifest file a build left (a regular file, never a link): of a process no longer
    running (``.<name>.<pid>.tmp``, earlier versions), or under the random names of :meth:`Folder.atomic`, which
    only a build writes here and only under the folder's lock (:func:`lock`)."""
    match = _TEMP.match(name)
    if not match or not out.is_file(name):
        return False
    if match.group(3) is not None:
        return True
    pid = int(match.group(2))
    return pid == os.getpid() or not pid_alive(pid)


def _is_leftover(out: Folder, name: str) -> bool:
    if staging_name(name):
        return staging_state(out, name)[0] == "ours"
    return _temp_leftover(out, name)


def leftover_names(out: Folder) -> list[str]:
    """The names in `out` of staging folders made by builds of this machine that no longer run, and of temporary
    card/manifest files of such builds. Builds lock the folder (:func:`lock`), so under the lock this process's own
    names are leftovers of an earlier failed build."""
    return [name for name in out.listdir() if _is_leftover(out, name)]


def leftovers(folder: Folder | Path) -> list[Path]:
    with opened(folder) as out:
        return [out.path / name for name in leftover_names(out)]


def foreign_staging(folder: Folder | Path) -> list[tuple[Path, str]]:
    """Entries named like staging folders that no build of this machine made: (path, why)."""
    found = []
    with opened(folder) as out:
        for name in out.listdir():
            if staging_name(name) or (name.startswith(STAGING_PREFIX) and _is_link(out, name)):
                state, why = staging_state(out, name)
                if state == "foreign":
                    found.append((out.path / name, why))
    return found


def _is_link(out: Folder, name: str) -> bool:
    info = out.lstat(name)
    return info is not None and stat.S_ISLNK(info.st_mode)


def report_foreign(folder: Folder | Path) -> list[Path]:
    """Warn (one line each) about staging folders this machine did not make; they are left untouched."""

    found = foreign_staging(folder)
    for path, why in found:
        warn(f"{path} is named like a build's staging folder but {why}; left untouched (never used or deleted)")
    return [path for path, _ in found]


def lock(out: Folder) -> None:
    """Lock the open folder `out` against other builds (an advisory ``flock`` on its descriptor, no file added),
    held until `out` is closed. Another build writing into it is a one-line error."""
    try:
        fcntl.flock(out.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise NeedlebenchError(
            f"another needlebench build is writing into {out.path}; wait for it to finish or choose another --out"
        ) from None


def lock_folder(folder: Path) -> int:
    """Lock `folder` against other builds (see :func:`lock`); returns the descriptor to close."""

    out = Folder.open(folder)
    try:
        lock(out)
    except BaseException:
        out.close()
        raise
    return out.fd


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


def _missing(out: Folder, name: str, manifest_path: Path) -> NeedlebenchError:
    return NeedlebenchError(
        f"{out.path / name}, listed by {manifest_path}, is missing; rebuild its config too or pass --overwrite"
    )


def prepare(out: Folder, staging: Folder, manifest: dict, previous: dict | None) -> None:
    """Complete the staging folder: kept configs linked in, the final card and manifest, the files to remove.
    Every name is checked against both folders first (:mod:`.safe_folder`); nothing is placed before. Both folders
    are open descriptors: every file is reached from them, never by a path looked up again."""

    where = str(out.path / MANIFEST)
    names = files_of(manifest)
    check_targets(out.path, [*names, *files_of(previous), MANIFEST, CARD], where)
    check_targets(staging.path, names, where)
    kept = [name for name in names if not staging.exists(name)]  # configs kept from the previous dataset
    for name in kept:
        if not out.is_file(name):
            raise _missing(out, name, out.path / MANIFEST)
    for name in kept:
        try:
            staging.place_from(out, name, name)
        except FileNotFoundError:
            raise _missing(out, name, out.path / MANIFEST) from None
    step()
    card = dataset_card.render_card(manifest, staging)
    staging.write_text(CARD, card)
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    staging.write_text(MANIFEST, text)
    new = set(names)
    replaces = sorted(name for name in files_of(previous) if name not in new)
    staging.write_text(REPLACES, json.dumps(replaces))
    # the commit's card is checked now, so that the rename below cannot fail on it
    staging_card(card, staging.path.name, manifest["configs"])
    step()


def commit(out: Folder, staging: Folder) -> None:
    """Make the new dataset current (one rename), then move it to its final place; see the module docstring."""
    card = staging.read_text(CARD, limit=_MAX_STAGED_BYTES)
    manifest = json.loads(staging.read_text(MANIFEST, limit=_MAX_STAGED_BYTES))
    out.write_bytes(CARD, staging_card(card, staging.path.name, manifest["configs"]).encode("utf-8"))
    step()
    finish(out, staging)


def _card_points_into(out: Folder, name: str) -> bool:

    try:
        card = out.read_text(CARD, limit=_MAX_STAGED_BYTES)
    except (OSError, NeedlebenchError):
        return False
    return f"path: {name}/data/" in card


def _finish_plan(out: Folder, staging: Folder) -> tuple[bytes, dict, list[str], bytes]:
    """Everything :func:`finish` will act on, read from the staging folder and checked first: its manifest (schema,
    files inside the staging folder, regular files, no links), the files to remove (Parquet files of the output
    folder's ``data/``), and the final places of the new files (no links on the way). The actions that follow go
    through the same descriptors, so a link swapped in after these checks is refused, never followed."""

    where = str(staging.path / MANIFEST)
    manifest_bytes = staging.read_bytes(MANIFEST, limit=_MAX_STAGED_BYTES)
    manifest = check_manifest(parse_json(manifest_bytes, staging.path / MANIFEST), where, staging.path)
    names = files_of(manifest)
    for name in names:
        if not staging.is_file(name):
            raise NeedlebenchError(f"{where} lists the file {name!r}, which is not a file in {staging.path}")
    check_targets(staging.path, names, where)
    replaces_path = staging.path / REPLACES
    replaces = parse_json(staging.read_bytes(REPLACES, limit=_MAX_STAGED_BYTES), replaces_path)
    if not isinstance(replaces, list):
        raise NeedlebenchError(f"{replaces_path} is not a list of file names")
    for name in replaces:
        parts = PurePosixPath(name).parts if isinstance(name, str) else ()
        if len(parts) < 3 or parts[0] != "data" or not name.endswith(".parquet"):
            raise NeedlebenchError(
                f"{replaces_path} names the file {name!r}; allowed: Parquet files under data/ inside {out.path}"
            )
    check_targets(out.path, [*replaces, *names, MANIFEST, CARD], str(replaces_path))
    card = staging.read_bytes(CARD, limit=_MAX_STAGED_BYTES)
    return manifest_bytes, manifest, replaces, card


def finish(out: Folder, staging: Folder) -> None:
    """Steps 2-3 of the replace (idempotent: a kill at any point is finished by running it again). Every name is
    checked before anything changes (:func:`_finish_plan`); each file is removed or placed relative to the open
    descriptor of its folder (``data/<config>`` opened without following a link), never by a path."""
    manifest_bytes, manifest, replaces, card = _finish_plan(out, staging)
    for name in replaces:
        _remove(out, name)
        step()
    for entry in manifest["configs"].values():
        for name in entry["files"]:
            parent, leaf = name.rsplit("/", 1)
            with out.sub(parent, create=True) as target, staging.sub(parent) as source:
                target.place_from(source, leaf, leaf)
        step()
    out.write_bytes(MANIFEST, manifest_bytes)
    step()
    out.write_bytes(CARD, card)
    step()
    out.rmtree(staging.path.name)
    _warn_unlisted(out, manifest)


def _warn_unlisted(out: Folder, manifest: dict) -> None:
    """One warning per config folder holding Parquet files its manifest does not list (left there by someone else,
    or by hand): needlebench reads only the listed shards, but a glob over the folder (`datasets`' parquet builder
    given ``data_dir``) would read them too. They are left untouched: the build did not write them."""
    for entry in manifest["configs"].values():
        folders = {name.rsplit("/", 1)[0] for name in entry["files"]}
        listed = set(entry["files"])
        for parent in sorted(folders):
            try:
                with out.sub(parent) as folder:
                    extra = [
                        name
                        for name in folder.listdir()
                        if name.endswith(".parquet") and f"{parent}/{name}" not in listed
                    ]
            except (OSError, NeedlebenchError):
                continue
            if extra:
                warn(
                    printable(
                        f"{out.path / parent} holds {len(extra):,} Parquet file(s) the manifest does not list (first: "
                        f"{extra[0]}); left untouched: needlebench reads only the listed files, a glob over the "
                        "folder would read these too"
                    )
                )


def _remove(out: Folder, name: str) -> None:
    """Remove the file `name` (``data/<config>/...``) of `out` and the folders it leaves empty, up to (not
    including) ``data/``; a link on the way is refused, never followed."""
    parent, leaf = name.rsplit("/", 1)
    try:
        folder = out.sub(parent)
    except FileNotFoundError:
        return
    with folder:
        folder.unlink(leaf)
    parts = parent.split("/")
    while len(parts) > 1 and out.rmdir("/".join(parts)):
        parts.pop()


def recover(folder: Folder | Path) -> list[str]:
    """Finish a replace a killed build of this machine committed, and remove its other leftovers; returns what was
    done. Staging folders this machine did not make are left untouched (callers report them once with
    :func:`report_foreign`)."""
    done = []
    with opened(folder) as out:
        for name in leftover_names(out):
            if out.is_dir(name):
                with out.sub(name) as staging:
                    if _card_points_into(out, name) and staging.is_file(MANIFEST):
                        finish(out, staging)
                        done.append(f"finished the interrupted build {name}")
                        continue
                out.rmtree(name)
            else:
                out.unlink(name)
            done.append(f"removed {name}")
    return done


def recover_before_reading(folder: Path) -> list[str]:
    """For commands that read a dataset folder (verify, publish): finish a replace a killed build of this machine
    left (under the folder's lock, as a build would), so that the folder reads as one whole dataset."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    with Folder.open(folder) as out:
        report_foreign(out)
        if not leftover_names(out):
            return []
        lock(out)
        return recover(out)
