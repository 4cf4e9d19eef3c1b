"""How far a benchmark family's knowledge is spread over the package.

Prints, for the package ``generator/needlebench``:

* the modules naming each family key as a string literal (``"multi_retrieval"``);
* the branches on a family or edition (``family ==``, ``family in``, ``is_v2``, ...) per module;
* the report modules naming a family's metric or another name its tables key on (``perf_4``, ``EN-Direct-CE``), as
  the families declare them (``EvalFamily.report_names``).

A family lives in one place when its key is named by its two family modules (build half in
``tasks/families/``, evaluation half in ``evaluation/families/``), the other stages ask the family object
instead of branching on its name, and the report asks it for its means, tables and series instead of spelling its
metrics. ``tests/test_layout.py`` holds the targets; run this to see where they stand::

    python scripts/family_knowledge.py
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "generator" / "needlebench"
FAMILY_KEYS = ("single", "multi_retrieval", "multi_reasoning", "atc", "counting_stars")
#: The report's modules (relative to the package).
REPORT = "evaluation/report"
#: Words a family's metrics share with the report's own vocabulary, allowed there in their other sense: the
#: ``--scoring reference`` choice (M-RS names its keyword metric ``reference``) and a judge record's ``score``
#: field (S-RT's metric is ``score``).
REPORT_WORDS = frozenset({"reference", "score"})
#: A branch on a family or an edition, as the refactor issue counts them.
BRANCH = re.compile(r"\bfamily\s*(==|!=|\bin\b|\bnot in\b)|\bis_v2\b")


def _string_literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def modules_naming(key: str, package: Path = PACKAGE) -> list[str]:
    """Modules of `package` with ``key`` as a string literal (docstrings aside), as paths relative to it."""
    return sorted(
        path.relative_to(package).as_posix() for path in sorted(package.rglob("*.py")) if key in _string_literals(path)
    )


def report_modules_naming(names: set[str], package: Path = PACKAGE) -> dict[str, list[str]]:
    """Report modules of `package` spelling one of `names` in a string literal (docstrings aside; the words of
    :data:`REPORT_WORDS` allowed), keyed by the module's path relative to the package, each with the names found."""
    # a name that is one word (``acc``) counts as a whole literal; one spelled with ``_`` or ``-`` (``perf_4``,
    # ``EN-Direct-CE``) counts within any text too ("ATC perf_4 by needle count")
    spelled = {name: re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])") for name in names if re.search(r"[_-]", name)}
    found = {}
    for path in sorted((package / REPORT).rglob("*.py")):
        literals = _string_literals(path)
        named = (literals & set(names)) - REPORT_WORDS
        named |= {name for name, pattern in spelled.items() if any(pattern.search(text) for text in literals)}
        if named:
            found[path.relative_to(package).as_posix()] = sorted(named)
    return found


def family_report_names() -> set[str]:
    """Every name the families declare as theirs in a report (``EvalFamily.report_names``)."""
    from needlebench.evaluation.families import EVAL_FAMILIES  # deferred: the other measures only parse the source

    return {name for family in EVAL_FAMILIES.values() for name in family.report_names()}


def branches(package: Path = PACKAGE) -> Counter[str]:
    """Family / edition branches per module of `package` (code lines only: comments and docstrings are not
    counted), keyed by the module's path relative to it."""
    counts: Counter[str] = Counter()
    for path in sorted(package.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        lines = source.splitlines()
        seen: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Compare, ast.Attribute, ast.Name)) and hasattr(node, "lineno"):
                for number in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                    if number in seen:
                        continue
                    text = lines[number - 1].split("#", 1)[0]
                    if BRANCH.search(text):
                        seen.add(number)
                        counts[path.relative_to(package).as_posix()] += len(BRANCH.findall(text))
    return counts


def main() -> int:
    for key in FAMILY_KEYS:
        names = modules_naming(key)
        print(f'modules naming "{key}": {len(names)}  ({", ".join(names)})')
    named = report_modules_naming(family_report_names())
    print(f"report modules naming a family's metric or table key: {len(named)}")
    for module, names in named.items():
        print(f"  {module}: {', '.join(names)}")
    counts = branches()
    print(f"family / edition branches: {sum(counts.values())} in {len(counts)} modules")
    for module, count in counts.most_common():
        print(f"  {count:4d}  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
