"""Files that ship with needlebench but live outside the Python sources: the dataset card template and the lm-eval
task folder.

Their source of truth is the repository's top-level ``dataset_cards/`` and ``harness_tasks/`` folders. A wheel
carries a copy of both as package data under ``needlebench/bundled/`` (``setup.py`` copies them at build time),
so an installed package finds them through :mod:`importlib.resources`; an editable install or a checkout on
``PYTHONPATH`` has no copy and uses the repository folders themselves. Either way the same two relative paths
are resolved against one root (:func:`resources_root`).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from needlebench.errors import NeedlebenchError

#: Package-data folder of a built wheel holding copies of the repository folders below.
BUNDLED_DIR = "bundled"
#: The card template, relative to the root.
CARD_TEMPLATE = "dataset_cards/needlebench_card.md"
#: The lm-eval task folder (pass it to ``lm_eval --include_path``), relative to the root.
TASKS_DIR = "harness_tasks/needlebench"
#: Folders (relative to the repository root) copied into the wheel.
SHIPPED_DIRS = ("dataset_cards", "harness_tasks")
#: A file every complete task folder holds (the ATC group), used to recognise a root.
_MARKER = f"{TASKS_DIR}/_needlebench_atc.yaml"


def _repository_root() -> Path:
    """The checkout this module was imported from (``generator/needlebench/`` is two levels below it)."""
    return Path(__file__).resolve().parents[2]


def _bundled_root() -> Path:
    """The package-data copy of a regular install (a folder on disk: wheels install unzipped)."""
    return Path(str(resources.files("needlebench").joinpath(BUNDLED_DIR)))


@cache
def resources_root() -> Path:
    """The folder holding ``dataset_cards/`` and ``harness_tasks/``: the package data, else the repository."""
    for root in (_bundled_root(), _repository_root()):
        if (root / CARD_TEMPLATE).is_file() and (root / _MARKER).is_file():
            return root
    raise NeedlebenchError(
        f"needlebench's data files ({CARD_TEMPLATE}, {TASKS_DIR}) are neither installed with the package "
        f"({_bundled_root()}) nor in a repository checkout ({_repository_root()}); reinstall needlebench"
    )


def card_template() -> Path:
    """The default dataset card template (a Jinja Markdown file)."""
    return resources_root() / CARD_TEMPLATE


def tasks_path() -> Path:
    """The lm-eval task folder: one YAML per config, the groups, the base templates and ``utils.py``."""
    return resources_root() / TASKS_DIR
