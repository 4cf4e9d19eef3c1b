"""``needlebench tasks DIR --out TASKDIR``: lm-eval tasks for the configs of a dataset folder, no YAML editing.

TASKDIR gets, for ``lm_eval --include_path TASKDIR``: the families' base templates and hooks (the same files as
``harness_tasks/needlebench``), one ``<config>.yaml`` per config of the folder (task ``needlebench_<config>``, its
``data_dir`` pointing at the folder), and one group ``needlebench_experiment_<name>`` per experiment of the folder.
Only files this command wrote are replaced or removed (recorded by name and sha256); a TASKDIR holding other files
is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from needlebench.dataset.build import register_experiments
from needlebench.dataset.manifest import read_manifest
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.task_yaml import dump_yaml
from needlebench.evaluation.harness.tasks import (
    base_template_config,
    base_template_filename,
    family_group_metrics,
    group_config,
    task_config,
    task_name,
    template_of,
)
from needlebench.safe_fs import Folder
from needlebench.sources.cache import same_tag, sign
from needlebench.tasks.grid import get_config


def utils_py() -> str:
    """The hooks module every task YAML refers to: a thin wrapper of the library (each ``!function utils.<name>``
    is :func:`needlebench.evaluation.harness.tasks.hooks`' function of that name)."""
    return (
        '"""lm-eval hooks of the NeedleBench / Counting-Stars tasks (written by `needlebench tasks`)."""\n\n'
        "from needlebench.evaluation.harness import tasks\n\n"
        "globals().update(tasks.hooks())\n"
    )


NOTE = "Written by `needlebench tasks` for the dataset folder {folder}; rerun it instead of editing."
GROUP_PREFIX = "needlebench_experiment_"


def experiment_group(name: str) -> str:
    return f"{GROUP_PREFIX}{name}"


def task_files_for_folder(folder: Path) -> dict[str, str]:
    """File name -> text of the task folder for the dataset `folder` (absolute ``data_dir`` in every task)."""
    folder = Path(folder).resolve()
    manifest = read_manifest(folder)
    register_experiments(manifest)  # its experiment configs are looked up by name
    note = NOTE.format(folder=folder)
    files = {"utils.py": utils_py()}
    specs = [get_config(name) for name in manifest["configs"]]
    templates = {template.key: template for template in sorted(map(template_of, specs), key=lambda t: t.key)}
    for key, template in templates.items():
        files[base_template_filename(key)] = dump_yaml(
            base_template_config(template), note, f"Base of the {template.label} tasks."
        )
    for spec in specs:
        config = task_config(spec)
        config["metadata"]["data_dir"] = str(folder)
        files[f"{spec.name}.yaml"] = dump_yaml(config, note)
    for name in manifest.get("experiments") or {}:
        metrics = family_group_metrics(get_config(name))
        group = group_config(experiment_group(name), f"experiment {name}", [name], metrics)
        files[f"_{experiment_group(name)}.yaml"] = dump_yaml(group, note)
    return files


def write_task_folder(folder: Path, out: Path) -> dict[str, str]:
    """Write the task folder; returns what was written. Each file is replaced atomically."""
    return dict(write_generated_folder(out, task_files_for_folder(folder), "needlebench"))


#: The record of what a generated folder's files are: name -> sha256 of the bytes written (written last).
RECORD = ".needlebench-written.json"
#: Largest file of a generated folder read back to recognise it.
_MAX_OURS = 16 * 1024 * 1024
#: What Python itself writes beside a module lm-eval imports (``utils.py``): kept, never removed or refused.
_PYCACHE = "__pycache__"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _record_payload(writer: str, files: Mapping[str, str]) -> bytes:
    return json.dumps({"writer": writer, "files": dict(files)}, sort_keys=True).encode("utf-8")


def record_text(writer: str, files: Mapping[str, str]) -> str:
    """The record of a generation: the files written (name -> sha256) and an HMAC of them keyed by this user's
    secret (:func:`needlebench.sources.cache.sign`), so that a record someone else wrote into a folder they hand
    over can never make their files pass for ours (they would be removed as stale, or kept if the run stopped)."""
    tag = sign(_record_payload(writer, files)).hex()
    return json.dumps({"writer": writer, "files": dict(files), "tag": tag}, indent=1, sort_keys=True) + "\n"


def _read_record(handle: Folder) -> dict[str, str] | None:
    """The files of an earlier generation by this user (None when there is no record, it is not one, or its tag is
    not this user's)."""
    try:
        data = json.loads(handle.read_text(RECORD, limit=_MAX_OURS))
    except (FileNotFoundError, NeedlebenchError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    files, writer, tag = data.get("files"), data.get("writer"), data.get("tag")
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return None
    if not isinstance(writer, str) or not isinstance(tag, str):
        return None
    return files if same_tag(tag, sign(_record_payload(writer, files)).hex()) else None


def _written_by_us(handle: Folder, name: str, record: dict[str, str] | None) -> bool:
    """Whether the entry `name` of the folder is a file an earlier run of this user wrote and nobody changed since:
    its bytes have the sha256 the (signed) record holds. A link, a folder or any other kind of file never is (read
    without following a link); without a record of ours, no file is."""
    if record is None or name not in record or not handle.is_file(name):
        return False
    try:
        data = handle.read_bytes(name, limit=_MAX_OURS)
    except (OSError, NeedlebenchError):
        return False
    return record[name] == _digest(data)


#: Most entries of an ``--include_path`` folder looked at; a folder with more is not one needlebench wrote.
_INCLUDE_ENTRIES = 20_000
#: Names lm-eval opens as task files when it indexes an ``--include_path`` folder (``lm_eval/tasks/__init__.py``).
_TASK_SUFFIXES = (".yaml", ".yml")


def foreign_files(folder: Path) -> list[str]:
    """The entries of the task folder `folder` (every level) that this user's ``needlebench tasks`` /
    ``export-tasks`` did not write: not covered by a record signed with this user's secret, changed since, a link
    (lm-eval follows it), or anything but ``.pyc`` files in a ``__pycache__`` (a ``!function __pycache__.x.f``
    imports a module from there; ``needlebench eval`` keeps Python's own bytecode elsewhere,
    ``sys.pycache_prefix``, so a planted ``.pyc`` is never read). lm-eval imports the Python a task YAML names and
    reads the files it names (``dataset_kwargs``), so a folder with any such entry is code and reads of someone
    else's. A task file (``.yaml``) that is a FIFO, socket or device, or a link to one, is a one-line error: lm-eval
    would wait on it forever. Empty when the folder cannot be opened (lm-eval then says why)."""
    found: list[str] = []
    budget = [_INCLUDE_ENTRIES]

    def refuse_special(handle: Folder, name: str, inside: str, info: os.stat_result) -> None:
        if name.endswith(_TASK_SUFFIXES) and not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            raise NeedlebenchError(
                f"--include_path {folder}: {inside}{name} is not a regular file (a FIFO, socket or device, or a link "
                "to one), which lm-eval would wait on when it indexes the folder; allowed: task YAML files"
            )

    def walk(handle: Folder, inside: str, pycache: bool) -> None:
        record = None if pycache else _read_record(handle)
        for name in sorted(handle.listdir()):
            budget[0] -= 1
            if budget[0] < 0:
                found.append(f"{inside}(more than {_INCLUDE_ENTRIES:,} entries)")
                return
            info = handle.lstat(name)
            if info is None:
                continue
            if stat.S_ISLNK(info.st_mode):
                with contextlib.suppress(OSError):
                    refuse_special(handle, name, inside, os.stat(name, dir_fd=handle.fd))
                found.append(f"{inside}{name}")
            elif stat.S_ISDIR(info.st_mode):
                try:
                    with handle.sub(name) as sub:
                        walk(sub, f"{inside}{name}/", name == _PYCACHE)
                except (OSError, NeedlebenchError):
                    found.append(f"{inside}{name}/")
            elif pycache:
                if not (stat.S_ISREG(info.st_mode) and name.endswith(".pyc")):
                    found.append(f"{inside}{name}")
            else:
                refuse_special(handle, name, inside, info)
                if name != RECORD and not _written_by_us(handle, name, record):
                    found.append(f"{inside}{name}")

    with contextlib.suppress(OSError), Folder.open(folder) as root:
        walk(root, "", False)
    return found


def write_generated_folder(out: Path, files: Mapping[str, str], writer: str) -> Mapping[str, str]:
    """Write generated `files` into the folder `out`, which must be new, empty or hold only files an earlier run
    of this user wrote (recorded by name and sha256 in :data:`RECORD`, signed with the user's secret;
    ``__pycache__`` that Python adds is left alone), else a one-line refusal naming one, nothing written. Every
    write goes through :class:`~needlebench.safe_fs.Folder` (a link planted in `out` is replaced, never written
    through); each file is replaced atomically; files of the earlier generation that are not written again are
    removed afterwards (only those: never a folder, never a file that changed since), so the folder never lacks a
    current file."""
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise NeedlebenchError(f"--out {out} is a link to nothing; choose a new or empty folder")
    if out.exists() and not out.is_dir():
        raise NeedlebenchError(f"--out {out} exists and is not a folder; choose a new or empty folder")
    with Folder.open(out, create=True) as handle:
        record = _read_record(handle)
        earlier = [name for name in handle.listdir() if name not in (RECORD, _PYCACHE)]
        if handle.lstat(_PYCACHE) is not None and not handle.is_dir(_PYCACHE):
            raise NeedlebenchError(
                f"--out {out}: {out / _PYCACHE} is a symbolic link or a file, not a folder (Python would read the "
                "bytecode of the modules written here through it); remove it or choose a new or empty folder"
            )
        foreign = [name for name in earlier if not _written_by_us(handle, name, record)]
        if foreign:
            raise NeedlebenchError(
                f"--out {out} holds files {writer} did not write or that changed since (e.g. {foreign[0]}); "
                "choose a new or empty folder"
            )
        modules = [name.removesuffix(".py") for name in files if name.endswith(".py")]
        _check_bytecode(handle, out, modules)
        written = {}
        for name, text in files.items():
            data = text.encode("utf-8")
            handle.write_bytes(name, data)
            written[name] = _digest(data)
        _remove_stale_bytecode(handle, modules)
        handle.write_text(RECORD, record_text(writer, written))
        for stale in earlier:
            if stale not in files:
                handle.unlink(stale)
    return files


def _stale_bytecode(cache: Folder, modules: list[str]) -> list[str]:
    return [
        name
        for name in cache.listdir()
        if name.endswith(".pyc") and any(name.startswith(f"{module}.") for module in modules)
    ]


def _check_bytecode(handle: Folder, out: Path, modules: list[str]) -> None:
    """Before anything is written: each ``__pycache__/<module>.*.pyc`` to remove is an entry a file removal can
    remove (a folder planted under that name would stop the run half-way, with the new files written and the
    earlier generation's not yet removed)."""
    if not modules or handle.lstat(_PYCACHE) is None:
        return
    with handle.sub(_PYCACHE) as cache:
        for name in _stale_bytecode(cache, modules):
            if cache.is_dir(name):
                raise NeedlebenchError(
                    f"--out {out}: {out / _PYCACHE / name} is a folder where Python keeps a module's bytecode "
                    "file; remove it or choose a new or empty folder"
                )


def _remove_stale_bytecode(handle: Folder, modules: list[str]) -> None:
    """Remove ``__pycache__/<module>.*.pyc`` of exactly the modules just written, by descriptors (the folder opened
    with ``O_NOFOLLOW``; every other file in it is left alone). Python imports a cached module without looking at
    its source when the ``.pyc`` is hash-based and unchecked (PEP 552; ``importlib._bootstrap_external``,
    ``SourceLoader.get_code``), so a ``.pyc`` planted beside the ``utils.py`` written here would run instead of it."""
    if not modules or handle.lstat(_PYCACHE) is None:
        return
    with handle.sub(_PYCACHE) as cache:
        for name in _stale_bytecode(cache, modules):
            cache.unlink(name)


__all__ = ["experiment_group", "task_files_for_folder", "task_name", "write_task_folder"]
