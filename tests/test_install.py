"""Packaging: the wheel ships the card template and the lm-eval task folder, an installed wheel finds them outside
the repository, ``needlebench tasks-path`` resolves the task folder, and every runtime import is declared.

The full fresh-venv proof (the README's first command and the wheel with all dependencies from PyPI) is
``scripts/ci_fresh_install.sh``, run by ``.ci/run``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from needlebench import resources
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.tasks import task_files
from needlebench.evaluation.runner.evaluate import default_include_path

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parent.parent
TASKS = REPO / "harness_tasks" / "needlebench"
CARD = REPO / "dataset_cards" / "needlebench_card.md"
BUNDLED = "needlebench/bundled"
#: What a build needs from the checkout (setup.py reads dataset_cards/ and harness_tasks/).
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "generator", "dataset_cards", "harness_tasks")


def _shipped_names() -> list[str]:
    """Files of the task folder as the repository holds them (no bytecode caches)."""
    return sorted(path.name for path in TASKS.iterdir() if path.is_file() and path.suffix != ".pyc")


def _cli(*args: str, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    env.pop("NEEDLEBENCH_CARD_TEMPLATE", None)
    code = "import sys; from needlebench.cli import main; sys.argv[0] = 'needlebench'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout (no network: the running interpreter's setuptools)."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(path, source / name)
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        str(base / "dist"),
        str(source),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (built,) = (base / "dist").glob("needlebench-*.whl")
    return built


@pytest.mark.slow
def test_wheel_ships_card_template_and_task_folder(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert archive.read(f"{BUNDLED}/dataset_cards/needlebench_card.md") == CARD.read_bytes()
        shipped = sorted(
            name.removeprefix(f"{BUNDLED}/harness_tasks/needlebench/")
            for name in names
            if name.startswith(f"{BUNDLED}/harness_tasks/needlebench/")
        )
        assert shipped == _shipped_names()
        for name in ("_needlebench_atc.yaml", "atc_en.yaml", "utils.py", "_default_single_template_yaml"):
            assert archive.read(f"{BUNDLED}/harness_tasks/needlebench/{name}") == (TASKS / name).read_bytes()
        metadata = archive.read(next(name for name in names if name.endswith(".dist-info/METADATA"))).decode()
    # every generated task file is in the wheel (the folder is complete, not a stale subset)
    assert set(task_files()) <= set(shipped)
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    assert "needlebench/resources.py" in names and "needlebench/data/atc.yaml" in names
    requires = {
        re.split(r"[\s<>=;\[]", line.removeprefix("Requires-Dist: "))[0].lower()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ")
    }
    assert "jinja2" in requires  # huggingface_hub's DatasetCard.from_template needs it and does not require it


@pytest.mark.slow
def test_installed_wheel_builds_and_finds_its_tasks_outside_the_repository(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:  # a pure-Python wheel installs by unpacking into site-packages
        archive.extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    done = _cli("tasks-path", cwd=elsewhere, pythonpath=site)
    assert done.returncode == 0, done.stderr
    tasks = Path(done.stdout.strip())
    assert tasks == site / BUNDLED / "harness_tasks" / "needlebench"
    assert sorted(path.name for path in tasks.iterdir()) == _shipped_names()

    done = _cli("build", "atc_en", "--out", "atc-data", cwd=elsewhere, pythonpath=site)
    assert done.returncode == 0, done.stderr[-3000:]
    card = (elsewhere / "atc-data" / "README.md").read_text(encoding="utf-8")
    manifest = json.loads((elsewhere / "atc-data" / "needlebench.json").read_text(encoding="utf-8"))
    assert card.startswith("---\n") and "config_name: atc_en" in card
    assert list(manifest["configs"]) == ["atc_en"] and manifest["configs"]["atc_en"]["rows"] > 0


@pytest.mark.slow
def test_tasks_path_in_a_checkout_is_the_repository_folder(tmp_path):
    done = _cli("tasks-path", cwd=tmp_path, pythonpath=REPO / "generator")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{TASKS}\n"
    for name in ("_needlebench_atc.yaml", "_needlebench_4k.yaml", "atc_en.yaml", "single_en_4k.yaml", "utils.py"):
        assert (TASKS / name).is_file()
    assert resources.card_template() == CARD
    # `needlebench eval` adds the same folder when no --include_path is given
    assert default_include_path() == TASKS


def test_missing_data_files_are_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(resources, "_bundled_root", lambda: tmp_path / "site" / BUNDLED)
    monkeypatch.setattr(resources, "_repository_root", lambda: tmp_path / "checkout")
    resources.resources_root.cache_clear()
    try:
        with pytest.raises(NeedlebenchError, match="reinstall needlebench"):
            resources.tasks_path()
    finally:
        resources.resources_root.cache_clear()


def _imported_top_level(folders: list[Path]) -> set[str]:
    """Top-level names of absolute imports in the Python files of ``folders``."""
    found = set()
    for folder in folders:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.slow
def test_every_third_party_import_is_a_declared_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = project["dependencies"] + [req for reqs in project["optional-dependencies"].values() for req in reqs]
    declared = {_canonical(re.split(r"[\s<>=!~;\[]", requirement)[0]) for requirement in requirements}
    providers = packages_distributions()
    modules = (
        _imported_top_level([REPO / "generator" / "needlebench", TASKS])
        - set(sys.stdlib_module_names)
        - {"needlebench"}
    )
    undeclared = {}
    for module in sorted(modules):
        distributions = {_canonical(name) for name in providers.get(module, [])}
        assert distributions or importlib.util.find_spec(module) is None, f"cannot tell which package provides {module}"
        if not distributions & declared:
            undeclared[module] = sorted(distributions) or "not installed"
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    # the two tested here must stay in the list the scan relies on
    assert {"jinja2", "huggingface-hub", "datasets"} <= declared


def test_readme_set_up_is_what_ci_runs():
    spec = importlib.util.spec_from_file_location("readme_commands", REPO / "scripts" / "readme_commands.py")
    readme_commands = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(readme_commands)
    commands = readme_commands.setup_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(commands) == 2
    assert commands[0].startswith("pip install torch==2.13.0 -e '.[eval]' && needlebench build ")
    assert commands[1].startswith("pip install -e '.[test]' && bash scripts/install_test_deps.sh && ")
    assert commands[1].endswith("python -m pytest -q")
    # CI runs both commands, as read from the README, in brand-new venvs; the suite runs once, there
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash scripts/ci_fresh_install.sh\n" in ci and "pytest" not in ci and "--no-tests" not in ci
    fresh = (REPO / "scripts" / "ci_fresh_install.sh").read_text(encoding="utf-8")
    assert 'readme_commands.py" 0' in fresh and 'readme_commands.py" 1' in fresh and "tasks-path" in fresh
    # the test set-up installs the vLLM environment tests/test_vllm.py needs (it fails, never skips, without it)
    deps = (REPO / "scripts" / "install_test_deps.sh").read_text(encoding="utf-8")
    assert "install_vllm_env.sh" in deps
    # .ci/run's ruff is the `test` extra's pin
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (ruff,) = [req for req in pyproject["project"]["optional-dependencies"]["test"] if req.startswith("ruff")]
    assert f"pip install '{ruff}'" in ci
