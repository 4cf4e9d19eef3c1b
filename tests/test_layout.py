"""The package is grouped by stage and data flows one way: a lower stage never imports a higher one."""

from __future__ import annotations

import ast
from pathlib import Path

import needlebench

#: Stage folders in the order data flows through them.
STAGES = ("sources", "tasks", "compat", "dataset", "evaluation", "cli")
#: Utilities every stage may use (they import no stage): user errors, seeds, interrupts, terminal output,
#: YAML loading, the bundled card template and task folder.
SHARED = ("__init__", "errors", "seeding", "interrupts", "terminal", "yamlload", "resources")
ROOT = Path(needlebench.__file__).parent


def _stage_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "needlebench":
        return None
    if len(parts) > 1 and parts[1] in STAGES:
        return STAGES.index(parts[1])
    return -1  # the package itself (`__version__`), errors, seeding


def _imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "needlebench":
                found += [(f"needlebench.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return found


def test_every_module_belongs_to_a_stage():
    loose = sorted(
        str(path.relative_to(ROOT)) for path in ROOT.glob("*.py") if path.stem not in SHARED and path.stem != "cli"
    )
    assert loose == [], f"modules outside the stage folders: {loose}"
    assert sorted(
        p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_")) and p.name != "data"
    ) == sorted(STAGES[:-1])


def test_no_relative_imports_and_lower_stages_never_import_higher_ones():
    violations = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).with_suffix("")
        own = _stage_of(".".join(("needlebench", *relative.parts)))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree)):
            violations.append(f"{relative}: relative import")
        for module, line in _imports(path):
            target = _stage_of(module)
            if target is not None and own is not None and target > own:
                violations.append(f"{relative}:{line} imports {module}")
    assert violations == []


def test_shared_modules_import_no_stage():
    for name in SHARED:
        for module, line in _imports(ROOT / f"{name}.py"):
            assert _stage_of(module) in (None, -1), f"{name}.py:{line} imports {module}"
