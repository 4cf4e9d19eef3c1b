"""``needlebench tasks DIR --out TASKDIR``: lm-eval tasks for the configs of a dataset folder, no YAML editing.

TASKDIR gets, for ``lm_eval --include_path TASKDIR``: the families' base templates and hooks (the same files as
``harness_tasks/needlebench``), one ``<config>.yaml`` per config of the folder (task ``needlebench_<config>``, its
``data_dir`` pointing at the folder), and one group ``needlebench_experiment_<name>`` per experiment of the folder.
Only files this command writes are replaced; a TASKDIR holding other files is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from needlebench.dataset.build import register_experiments
from needlebench.dataset.verify import read_manifest
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness import (
    base_template_config,
    base_template_filename,
    family_group_metrics,
    group_config,
    task_config,
    task_name,
    template_of,
)
from needlebench.evaluation.task_yaml import dump_yaml
from needlebench.tasks.grid import get_config


def utils_py() -> str:
    """The hooks module every task YAML refers to: a thin wrapper of the library (each ``!function utils.<name>``
    is :func:`needlebench.evaluation.harness.hooks`' function of that name)."""
    return (
        '"""lm-eval hooks of the NeedleBench / Counting-Stars tasks (written by `needlebench tasks`)."""\n\n'
        "from needlebench.evaluation import harness\n\n"
        "globals().update(harness.hooks())\n"
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
    return write_generated_folder(out, task_files_for_folder(folder), _ours, "needlebench")


def write_generated_folder(
    out: Path, files: Mapping[str, str], ours: Callable[[Path], bool], writer: str
) -> Mapping[str, str]:
    """Write generated `files` into the folder `out`, which must be new, empty or hold only files `ours` recognises
    (else a one-line refusal naming one, nothing written). Each file is replaced atomically; files of an earlier
    generation that are not written again are removed afterwards, so the folder never lacks a current file."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise NeedlebenchError(f"--out {out} exists and is not a folder; choose a new or empty folder")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if not ours(p))
        if foreign:
            raise NeedlebenchError(
                f"--out {out} holds files {writer} did not write (e.g. {foreign[0]}); choose a new or empty folder"
            )
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        handle, temp = tempfile.mkstemp(dir=out, prefix=f".{name}.")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, out / name)
    for stale in [p for p in out.iterdir() if p.name not in files and ours(p)]:
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink()
    return files


def _ours(path: Path) -> bool:
    if path.name == "__pycache__":
        return True
    if not path.is_file():
        return False
    try:
        head = path.read_text(encoding="utf-8")[:200]
    except (OSError, UnicodeDecodeError):
        return False
    return head.startswith("# Written by `needlebench tasks`") or head.startswith(
        '"""lm-eval hooks of the NeedleBench / Counting-Stars tasks (written by'
    )


__all__ = ["experiment_group", "task_files_for_folder", "task_name", "write_task_folder"]
