"""Build hook: ship the repository's ``dataset_cards/`` and ``harness_tasks/`` inside the package.

Both folders stay at the top of the repository (their source of truth, edited and regenerated there). A regular
build copies them as package data to ``needlebench/bundled/`` so that an installed wheel finds the card template
and the lm-eval task folder (``needlebench.resources``); an editable install reads the repository folders
directly. Everything else is configured in ``pyproject.toml``.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PACKAGE = "needlebench"
BUNDLED_DIR = "bundled"  # needlebench.resources.BUNDLED_DIR
SHIPPED_DIRS = ("dataset_cards", "harness_tasks")  # needlebench.resources.SHIPPED_DIRS
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def shipped_files(root: Path = ROOT) -> list[str]:
    """Files of the shipped folders, as sorted POSIX paths relative to ``root`` (no caches or bytecode)."""
    found = []
    for folder in SHIPPED_DIRS:
        base = root / folder
        if not base.is_dir():
            raise FileNotFoundError(f"{base} is missing: needlebench is built from a repository checkout or sdist")
        for directory, subdirs, files in os.walk(base):
            subdirs[:] = sorted(name for name in subdirs if name not in _SKIPPED_DIRS)
            for name in files:
                if not name.endswith(_SKIPPED_SUFFIXES):
                    found.append((Path(directory) / name).relative_to(root).as_posix())
    return sorted(found)


class BuildPyWithResources(build_py):
    """``build_py`` whose package data also holds the shipped folders under ``needlebench/bundled/``.

    Adding them to ``data_files`` (rather than copying in ``run``) keeps ``get_outputs`` and
    ``get_output_mapping`` complete, so wheels, sdists-turned-wheels and strict editable installs all see them.
    """

    def _get_data_files(self):
        data_files = list(super()._get_data_files())
        if PACKAGE in (self.packages or ()):
            build_dir = os.path.join(self.build_lib, *PACKAGE.split("."), BUNDLED_DIR)
            data_files.append((PACKAGE, str(ROOT), build_dir, shipped_files()))
        return data_files


setup(cmdclass={"build_py": BuildPyWithResources})
