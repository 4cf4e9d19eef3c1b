"""The package's layout: it is grouped by stage and data flows one way (a lower stage never imports a higher one,
no module imports itself back through others), a function-level import says why it is deferred, and a benchmark
family lives in one place (its two family modules, registered together)."""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

import needlebench

#: Stage folders in the order data flows through them.
STAGES = ("sources", "tasks", "compat", "dataset", "evaluation", "cli")
#: Utilities every stage may use (they import no stage): user errors, seeds, interrupts, terminal output,
#: YAML loading, the bundled card template and task folder, JSON read with limits.
SHARED = (
    "__init__", "errors", "seeding", "interrupts", "terminal", "yamlload", "resources", "safe_fs", "safe_json",
    "markdown",
)  # fmt: skip
ROOT = Path(needlebench.__file__).parent
#: The checkout's ``scripts/`` folder (``scripts/family_knowledge.py`` measures where family knowledge lives).
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
#: The comment a function-level import of the package's own modules carries on its (first) line.
DEFERRED = re.compile(r"#\s*deferred:\s*\S")


def _stage_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "needlebench":
        return None
    if len(parts) > 1 and parts[1] in STAGES:
        return STAGES.index(parts[1])
    if len(parts) > 1 and parts[1] == "__main__":  # `python -m needlebench`: the command itself
        return STAGES.index("cli")
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
        str(path.relative_to(ROOT)) for path in ROOT.glob("*.py") if path.stem not in (*SHARED, "cli", "__main__")
    )
    assert loose == [], f"modules outside the stage folders: {loose}"
    assert sorted(
        p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_")) and p.name != "data"
    ) == sorted(STAGES[:-1])


@pytest.mark.slow
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


#: The evaluation floor by job, in the order data flows through it: scorers; each family's evaluation half; the lm-eval
#: tasks and hooks; the judge's files in a results folder (read by the report); the report; the judge command; the
#: runner (``needlebench eval``/``budget``), which checks lengths and writes health with all of them below it.
EVALUATION_JOBS = (
    "scoring", "families", "harness", "judge.files", "report", "judge", "runner",
)  # fmt: skip


def _job_of(module: str) -> int | None:
    """The rank in :data:`EVALUATION_JOBS` of a module of ``needlebench.evaluation`` (its longest matching job),
    None outside it; the package ``needlebench.evaluation`` itself is -1."""
    if module == "needlebench.evaluation":
        return -1
    rest = module.removeprefix("needlebench.evaluation.")
    if rest == module:
        return None
    matches = [rank for rank, job in enumerate(EVALUATION_JOBS) if rest == job or rest.startswith(job + ".")]
    return max(matches, key=lambda rank: len(EVALUATION_JOBS[rank])) if matches else None


def test_the_evaluation_floor_is_grouped_by_job_and_its_jobs_import_downwards():
    """``evaluation/`` holds its ``__init__`` and one sub-package per job, no loose module; a job imports only jobs
    below it (function-level imports included)."""
    floor = ROOT / "evaluation"
    assert sorted(path.name for path in floor.glob("*.py")) == ["__init__.py"]
    jobs = sorted(path.name for path in floor.iterdir() if path.is_dir() and not path.name.startswith("_"))
    assert jobs == sorted({job.split(".")[0] for job in EVALUATION_JOBS})
    violations = []
    for path in sorted(floor.rglob("*.py")):
        name = _module_name(path)
        own = _job_of(name)
        assert own is not None, name
        for module, line, _ in _internal_imports(path):
            target = _job_of(module)
            if target is not None and target > own:
                violations.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert violations == []


def test_shared_modules_import_no_stage():
    for name in SHARED:
        for module, line in _imports(ROOT / f"{name}.py"):
            assert _stage_of(module) in (None, -1), f"{name}.py:{line} imports {module}"


def _module_name(path: Path) -> str:
    """``needlebench.x.y`` for ``x/y.py``, ``needlebench.x`` for ``x/__init__.py``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("needlebench", *(parts[:-1] if parts[-1] == "__init__" else parts)))


MODULES = {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _internal_imports(path: Path) -> list[tuple[str, int, bool]]:
    """``(module, line, in_function)`` for every import of one of the package's modules in `path`:
    ``from needlebench.x import y`` names the module ``needlebench.x.y`` when `y` is a submodule, else
    ``needlebench.x`` (the packages a module sits in, which Python imports first, are not counted). Imports under
    ``if TYPE_CHECKING:`` never run and are left out."""
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child, in_function)
            return
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in MODULES:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.append((submodule if submodule in MODULES else node.module, node.lineno, in_function))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, in_function) for alias in node.names if alias.name in MODULES)
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def _import_graph() -> dict[str, dict[str, list[int]]]:
    """Module -> the package's modules it imports (at module level or in a function) -> the lines doing it."""
    graph: dict[str, dict[str, list[int]]] = {name: {} for name in MODULES}
    for name, path in MODULES.items():
        for target, line, _ in _internal_imports(path):
            if target != name:
                lines = graph[name].setdefault(target, [])
                lines += [] if line in lines else [line]
    return graph


def _reachable(graph: dict[str, dict[str, list[int]]], start: str) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        for target in graph[stack.pop()]:
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


@pytest.mark.slow
def test_no_import_circle_among_the_package_modules():
    """Imports flow one way, function-level imports included: a circle is a strongly connected component of the
    import graph with more than one module (each reported with the lines of its imports)."""
    graph = _import_graph()
    reach = {name: _reachable(graph, name) for name in graph}
    circles, placed = [], set()
    for name in sorted(graph):
        if name in placed:
            continue
        component = {name} | {other for other in reach[name] if name in reach[other]}
        placed |= component
        if len(component) > 1:
            edges = [
                f"{source} -> {target} ({MODULES[source].relative_to(ROOT)}:{','.join(map(str, lines))})"
                for source in sorted(component)
                for target, lines in sorted(graph[source].items())
                if target in component
            ]
            circles.append(f"{sorted(component)}: " + "; ".join(edges))
    assert circles == [], "import circles:\n" + "\n".join(circles)


def _comments(path: Path) -> dict[int, str]:
    """Line number -> the comment on that line."""
    source = path.read_text(encoding="utf-8")
    return {
        token.start[0]: token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }


def test_function_level_imports_of_the_package_say_why_they_are_deferred():
    """A function-level import of one of the package's modules keeps a quick command quick (``needlebench list``,
    ``--help`` import no heavy library); its first line says so: ``# deferred: <reason>``."""
    undeferred: dict[str, set[str]] = {}
    for path in MODULES.values():
        comments = None
        for module, line, in_function in _internal_imports(path):
            if not in_function:
                continue
            comments = _comments(path) if comments is None else comments
            if not DEFERRED.search(comments.get(line, "")):
                undeferred.setdefault(f"{path.relative_to(ROOT)}:{line}", set()).add(module)
    missing = [f"{where} imports {', '.join(sorted(modules))}" for where, modules in undeferred.items()]
    assert not missing, "function-level imports without a `# deferred: <reason>` comment:\n" + "\n".join(missing)


def _family_knowledge():
    """``scripts/family_knowledge.py``, the measure of where a family's knowledge lives."""
    spec = importlib.util.spec_from_file_location("family_knowledge", SCRIPTS / "family_knowledge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_family_key_is_named_only_by_its_two_family_modules():
    """Other modules reach a family through its registered object, not by spelling its key."""
    from needlebench.evaluation.families import EVAL_FAMILIES

    knowledge = _family_knowledge()
    assert sorted(knowledge.FAMILY_KEYS) == sorted(EVAL_FAMILIES), "the script measures every family"
    outside = {
        key: [
            module
            for module in knowledge.modules_naming(key, ROOT)
            if module not in (f"tasks/families/{key}.py", f"evaluation/families/{key}.py")
        ]
        for key in knowledge.FAMILY_KEYS
    }
    assert not any(outside.values()), "family keys named outside their family modules:\n" + "\n".join(
        f"{key}: {', '.join(modules)}" for key, modules in outside.items() if modules
    )


def test_no_report_module_names_a_family_metric():
    """The report asks a family's object for its means, tables, series and coverage; it spells none of the names the
    families declare as theirs (metrics and their twins, ATC's categories and question types), so a family's
    knowledge cannot creep back into the report."""
    knowledge = _family_knowledge()
    names = knowledge.family_report_names()
    assert {"perf_4", "per_star", "needle_hits", "EN-Direct-CE", "ELDEST_ANCESTOR"} <= names, "the measure sees them"
    assert knowledge.report_modules_naming(names, ROOT) == {}


def test_the_report_asks_a_family_only_what_every_family_answers():
    """What a report module reads of a family object (``family.<name>``, ``eval_family(...).<name>``) is declared by
    the base class ``EvalFamily``, with its default; no attribute only ATC or Counting-Stars have."""
    from needlebench.evaluation.families.base import EvalFamily

    def is_family(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id == "family"
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "eval_family"

    read = {
        f"{path.name}: {node.attr}"
        for path in sorted((ROOT / "evaluation" / "report").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and is_family(node.value)
    }
    assert len(read) > 10, "the report reads its families through `family` / `eval_family(...)`"
    assert [entry for entry in sorted(read) if not hasattr(EvalFamily, entry.split(": ")[1])] == []


@pytest.mark.slow
def test_few_branches_on_a_family_or_an_edition():
    """Branches on a family or an edition (``family ==``, ``family in``, ``is_v2``) in the whole package: at most
    15; a module asks the family object or looks up a table keyed by family or edition instead."""
    counts = _family_knowledge().branches(ROOT)
    assert sum(counts.values()) <= 15, f"{sum(counts.values())} branches:\n" + "\n".join(
        f"{count:4d}  {module}" for module, count in counts.most_common()
    )


def test_both_family_registries_hold_the_same_keys_in_the_same_order():
    """The build half (:mod:`needlebench.tasks.families`) and the evaluation half
    (:mod:`needlebench.evaluation.families`) of every family are registered together."""
    from needlebench.evaluation.families import EVAL_FAMILIES
    from needlebench.tasks.families import FAMILIES

    assert list(FAMILIES) == list(EVAL_FAMILIES)
    assert [family.key for family in FAMILIES.values()] == list(FAMILIES)
    assert [family.key for family in EVAL_FAMILIES.values()] == list(EVAL_FAMILIES)
