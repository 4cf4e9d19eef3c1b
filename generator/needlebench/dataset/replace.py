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
new one, and :func:`recover` (run by every build into the folder) finishes steps 2-3: a staging folder is finished
when the card points into it, else deleted. Files not listed by the manifest (the user's) are never touched.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from needlebench.interrupts import pid_alive

MANIFEST = "needlebench.json"
CARD = "README.md"
STAGING_PREFIX = ".building-"
REPLACES = "replaces.json"
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
    return bool(_STAGING.match(path.name) or _LEGACY_STAGING.match(path.name))


def _owner_alive(path: Path) -> bool:
    """Whether the build that made `path` may still run. Builds lock the folder (:func:`lock_folder`), so under
    the lock this process's own names are leftovers of an earlier failed build; other live pids are left alone
    (a build of a version without the lock, or a reused pid: a leftover kept is harmless)."""
    match = _STAGING.match(path.name) or _TEMP.match(path.name)
    if not match:
        return False
    pid = int(match.groups()[-1])
    return pid != os.getpid() and pid_alive(pid)


def is_leftover(path: Path) -> bool:
    """A staging folder or temporary card/manifest file of ours whose build is no longer running."""
    ours = (path.is_dir() and not path.is_symlink() and staging_name(path)) or bool(_TEMP.match(path.name))
    return ours and not _owner_alive(path)


def leftovers(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if is_leftover(p)) if folder.is_dir() else []


def lock_folder(folder: Path) -> int:
    """Lock `folder` against other builds (an advisory lock on the folder itself, no file added); returns the
    descriptor to close. Another build writing into it is a one-line error."""
    from needlebench.errors import NeedlebenchError

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
    if not manifest:
        return []
    return [name for entry in manifest.get("configs", {}).values() for name in entry.get("files", [])]


def _safe_relative(name: str) -> bool:
    parts = Path(name).parts
    return bool(parts) and parts[0] == "data" and ".." not in parts and not Path(name).is_absolute()


def staging_card(card: str, staging: str, configs: Iterable[str]) -> str:
    """The card with each config's ``data_files`` pointing into the staging folder (YAML header only)."""
    from needlebench.dataset.card import data_files_pattern

    if not card.startswith("---\n"):
        raise RuntimeError("the card has no YAML header")
    end = card.index("\n---\n", 4)
    header, body = card[:end], card[end:]
    for name in configs:
        pattern = data_files_pattern(name)
        old, new = f"path: {pattern}\n", f"path: {staging}/{pattern}\n"
        if header.count(old) != 1:
            raise RuntimeError(f"the card's data_files of {name} not found")
        header = header.replace(old, new)
    return header + body


def prepare(out_dir: Path, staging: Path, manifest: dict, previous: dict | None) -> None:
    """Complete the staging folder: kept configs linked in, the final card and manifest, the files to remove."""
    from needlebench.dataset.card import render_card
    from needlebench.errors import NeedlebenchError

    for name in files_of(manifest):
        source = staging / name
        if not source.exists():  # a config kept from the previous dataset
            if not (out_dir / name).is_file():
                raise NeedlebenchError(
                    f"{out_dir / name}, listed by {out_dir / MANIFEST}, is missing; rebuild its config too "
                    "or pass --overwrite"
                )
            _place(out_dir / name, source)
    step()
    card = render_card(manifest, staging)
    (staging / CARD).write_text(card, encoding="utf-8", newline="\n")
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    (staging / MANIFEST).write_text(text, encoding="utf-8", newline="\n")
    new = set(files_of(manifest))
    replaces = sorted(name for name in files_of(previous) if name not in new and _safe_relative(name))
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
        card = (out_dir / CARD).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return f"path: {staging.name}/data/" in card


def finish(out_dir: Path, staging: Path) -> None:
    """Steps 2-3 of the replace (idempotent: a kill at any point is finished by running it again)."""
    manifest_bytes = (staging / MANIFEST).read_bytes()
    manifest = json.loads(manifest_bytes)
    replaces = json.loads((staging / REPLACES).read_text(encoding="utf-8"))
    for name in replaces:
        (out_dir / name).unlink(missing_ok=True)
        _remove_empty_parents(out_dir / name, out_dir)
        step()
    for config, entry in manifest["configs"].items():
        for name in entry["files"]:
            _place(staging / name, out_dir / name)
        step()
    write_atomic(out_dir / MANIFEST, manifest_bytes)
    step()
    write_atomic(out_dir / CARD, (staging / CARD).read_bytes())
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
    """Finish a replace a killed build committed, and remove our other leftovers; returns what was done."""
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
