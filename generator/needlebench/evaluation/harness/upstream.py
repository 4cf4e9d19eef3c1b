"""``needlebench export-tasks``: an lm-eval task folder in the in-tree form, needing no needlebench install.

lm-eval finds tasks only in its own ``lm_eval/tasks/`` tree or an ``--include_path``, and the long-context
benchmarks users run by name there (``ruler``, ``babilong``, ``longbench``) are folders that read a Hub dataset and
carry their own ``utils.py``. This module writes such a folder for NeedleBench and Counting-Stars:

* the YAMLs are those of ``harness_tasks/needlebench`` (:func:`needlebench.evaluation.harness.tasks.task_files`, the
  same functions), with the data source replaced: ``dataset_path: ORG/NAME`` and ``dataset_kwargs: {revision:
  ...}`` (the pinned release) in the base templates, ``dataset_name: <config>`` in every task, no
  ``custom_dataset``;
* ``utils.py`` holds every hook and aggregation the YAMLs name (``!function utils.X``), bundled by source from the
  modules defining them (the family modules, see :func:`needlebench.evaluation.harness.tasks.hooks`;
  :mod:`needlebench.evaluation.harness.bundle`): scorers, aggregations and ``<think>`` handling, importing nothing of
  needlebench;
* ``README.md`` in the form of lm-eval's task READMEs (paper, homepage, citation, groups and tasks, checklist).

Whatever hooks or metrics the package's task templates gain appear in the export with no change here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from needlebench import __version__
from needlebench.dataset.publish import parse_version, tag_for
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.bundle import bundle, bundled_modules
from needlebench.evaluation.harness.task_export import write_generated_folder
from needlebench.evaluation.harness.task_yaml import FunctionRef, dump_yaml, function_refs, load_yaml
from needlebench.evaluation.harness.tasks import hooks, task_files
from needlebench.evaluation.harness.upstream_readme import NOTE, TASK_REQUIREMENTS, render_readme, requirement_names

__all__ = [
    "NOTE",
    "TASK_REQUIREMENTS",
    "FunctionRef",
    "export_files",
    "hook_names",
    "load_yaml",
    "requirement_names",
    "utils_source",
    "write_export",
]

#: Module whose names the YAMLs' ``!function utils.X`` refer to (the project folder's ``utils.py`` re-exports it).
HOOKS_MODULE = "needlebench.evaluation.harness.tasks"
#: Libraries (top-level modules) the bundled code may import beyond the standard library, because lm-eval 0.4.13
#: depends on them: ``numpy`` directly, ``regex`` through ``sacrebleu`` and ``nltk`` (via ``rouge-score``).
LM_EVAL_PROVIDES = ("numpy", "regex")
#: Name of the folder inside ``lm_eval/tasks`` when proposed upstream.
UPSTREAM_FOLDER = "needlebench"

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


# --------------------------------------------------------------------------------------------- arguments


def check_repo(repo: str) -> str:
    if not isinstance(repo, str) or not _REPO_ID.match(repo) or ".." in repo:
        raise NeedlebenchError(f"--repo {repo!r} is not a Hub dataset id; allowed: ORG/NAME, e.g. my-org/needlebench")
    return repo


def check_revision(revision: str) -> str:
    """A release tag (``vX.Y.Z[-PRE]``, as ``needlebench publish`` creates) or a full commit id."""
    value = (revision or "").strip()
    if _COMMIT.match(value):
        return value
    if value.startswith("v"):
        try:
            return tag_for(parse_version(value))
        except NeedlebenchError:
            pass
    raise NeedlebenchError(
        f"--revision {revision!r} does not pin a release; allowed: a tag vX.Y.Z written by `needlebench publish` "
        "(e.g. v1.0.0) or a 40-character commit id"
    )


# --------------------------------------------------------------------------------------------- files


def export_yamls(repo: str, revision: str) -> dict[str, str]:
    """The task folder's YAMLs: ``harness_tasks/needlebench``'s, reading ``repo`` at ``revision``."""
    note = f"{NOTE} (needlebench {__version__}) from {HOOKS_MODULE}; regenerate it instead of editing."
    files: dict[str, str] = {}
    for name, text in task_files().items():
        data = load_yaml(text)
        if "custom_dataset" in data:  # a base template: the data source
            data.pop("custom_dataset")
            data = {
                "dataset_path": repo,
                "dataset_kwargs": {"revision": revision},
                **data,
            }
        metadata = data.get("metadata")
        if isinstance(metadata, dict):
            metadata.pop("needlebench_config", None)  # read only by the package's custom_dataset
        if "task" in data and "group" not in data and "include" not in data and "dataset_path" not in data:
            raise NeedlebenchError(f"task file {name} includes no base template; cannot point it at {repo}")
        files[name] = dump_yaml(data, note)
    return files


def hook_names(yamls: Mapping[str, str]) -> list[str]:
    """The ``utils`` functions the YAMLs name, sorted."""
    names: set[str] = set()
    for name, text in yamls.items():
        for ref in function_refs(load_yaml(text)):
            module, _, function = ref.rpartition(".")
            if module != "utils":
                raise NeedlebenchError(f"{name} names !function {ref}; the export bundles only utils.<name>")
            names.add(function)
    return sorted(names)


def utils_source(names: list[str]) -> str:
    """``utils.py``: the hooks bundled from the package's source (each from the module defining it), importing
    nothing of needlebench."""
    functions = hooks()
    entries = [(functions[name].__module__, name) for name in names]
    allowed = [*LM_EVAL_PROVIDES, *TASK_REQUIREMENTS]
    modules = bundled_modules(entries, allowed)
    pip_names = " ".join(f"'{requirement}'" for requirement in TASK_REQUIREMENTS.values())
    header = (
        f'"""Hooks of the NeedleBench / Counting-Stars tasks: process_results, aggregations, reasoning handling.\n\n'
        f"{NOTE} (needlebench {__version__}) by copying, from the needlebench package's own source, the\n"
        "definitions these hooks use, from the modules:\n\n"
        + "".join(f"* ``{module}``\n" for module in modules)
        + "\nEdit the package, not this file, and export again. Needs the standard library, numpy and regex (lm-eval\n"
        f"dependencies) and {' and '.join(requirement_names())} (``pip install {pip_names}``).\n"
        '"""'
    )
    message = f"the needlebench tasks need {' and '.join(requirement_names())} for scoring: pip install {pip_names}"
    return bundle(
        entries,
        header=header,
        allowed_external=LM_EVAL_PROVIDES,
        optional=TASK_REQUIREMENTS,
        optional_message=message,
    )


def export_files(repo: str, revision: str) -> dict[str, str]:
    """File name -> text of the whole exported folder."""
    repo, revision = check_repo(repo), check_revision(revision)
    yamls = export_yamls(repo, revision)
    files = {**yamls, "utils.py": utils_source(hook_names(yamls))}
    files["README.md"] = render_readme(repo, revision, {name: load_yaml(text) for name, text in yamls.items()})
    return files


def write_export(out: Path, repo: str, revision: str) -> dict[str, str]:
    """Write the folder; refuses a folder holding files this command did not write. Nothing is written when the
    export fails; an existing export is replaced file by file (atomically) and its stale files removed."""
    return dict(write_generated_folder(out, export_files(repo, revision), "needlebench export-tasks"))
