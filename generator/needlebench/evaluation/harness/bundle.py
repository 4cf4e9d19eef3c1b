"""Bundle functions of needlebench modules into one self-contained Python source.

``needlebench export-tasks`` writes an lm-eval task folder whose ``utils.py`` must not import ``needlebench``: its
hooks, scorers and aggregations are copied from the package's own modules, by source, so there is one source of
truth and no hand-kept copy. :func:`bundle` starts from entry names (``module``, ``name``), follows every
module-level name they use (through ``from needlebench.x import y`` and ``module.attribute`` references) and emits
the module-level statements that define them, in module dependency order, with their comments. Imports of other
libraries are kept (the caller says which are allowed); ``needlebench`` imports disappear because what they name is
in the bundle. Names that two modules define differently are renamed (``_<module>_<name>``) where that is provably
safe: the name is never local in any function of its module (checked with :mod:`symtable`).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import symtable
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from needlebench.errors import NeedlebenchError

PACKAGE = "needlebench"

Key = tuple[str, str]  # (module, name) of a definition, or ("<import>", "module:attr") of an external import


@dataclass(frozen=True)
class External:
    """An import of another library: ``import module`` (attr None) or ``from module import attr``."""

    module: str
    attr: str | None

    @property
    def key(self) -> Key:
        return ("<import>", f"{self.module}:{self.attr or ''}")

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


@dataclass
class _Module:
    name: str
    path: Path
    source: bytes
    tree: ast.Module
    table: symtable.SymbolTable
    #: top-level name -> statement indices that bind it
    bindings: dict[str, list[int]] = field(default_factory=dict)
    #: top-level name -> what an import binds it to: ("module", needlebench module), ("name", (module, name)) or
    #: ("external", External)
    imports: dict[str, tuple[str, object]] = field(default_factory=dict)


def _in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _module_path(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise NeedlebenchError(f"cannot bundle module {name!r}: its Python source is not installed")
    return Path(spec.origin)


def _is_submodule(package: str, attr: str) -> bool:
    try:
        return importlib.util.find_spec(f"{package}.{attr}") is not None
    except ModuleNotFoundError:
        return False


def _stmt_bound_names(stmt: ast.stmt) -> list[str]:
    """Names a module-level statement binds (imports are handled separately)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    names: list[str] = []
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.append(node.id)
    return names


class _Bundler:
    def __init__(self, allowed_external: Iterable[str], package: str = PACKAGE) -> None:
        self.package = package
        self.allowed_external = set(allowed_external) | set(sys.stdlib_module_names)
        self.modules: dict[str, _Module] = {}
        self.needed: set[Key] = set()
        self.statements: dict[str, set[int]] = {}  # module -> included statement indices
        self.module_deps: dict[str, set[str]] = {}  # module -> modules its included statements use
        self.externals: dict[Key, External] = {}

    # ------------------------------------------------------------------------------------------ parsing

    def _ours(self, name: str) -> bool:
        return _in_package(name, self.package)

    def module(self, name: str) -> _Module:
        if name not in self.modules:
            path = _module_path(name)
            source = path.read_bytes()
            tree = ast.parse(source, filename=str(path))
            table = symtable.symtable(source.decode("utf-8"), str(path), "exec")
            mod = _Module(name, path, source, tree, table)
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for index, stmt in enumerate(tree.body):
                if isinstance(stmt, ast.Import):
                    for alias in stmt.names:
                        if self._ours(alias.name):
                            if alias.asname is None:
                                raise NeedlebenchError(f"cannot bundle {name}: use `import {alias.name} as X`")
                            mod.imports[alias.asname] = ("module", alias.name)
                        else:
                            mod.imports[alias.asname or alias.name.split(".")[0]] = (
                                "external",
                                External(
                                    alias.name if alias.asname else alias.name.split(".")[0],
                                    None,
                                ),
                            )
                elif isinstance(stmt, ast.ImportFrom):
                    if stmt.module == "__future__":
                        continue
                    source_module = stmt.module or ""
                    if stmt.level:
                        base = package.split(".")
                        base = base[: len(base) - stmt.level + 1]
                        source_module = ".".join([*base, *([stmt.module] if stmt.module else [])])
                    for alias in stmt.names:
                        bound = alias.asname or alias.name
                        if self._ours(source_module):
                            if _is_submodule(source_module, alias.name):
                                mod.imports[bound] = (
                                    "module",
                                    f"{source_module}.{alias.name}",
                                )
                            else:
                                mod.imports[bound] = (
                                    "name",
                                    (source_module, alias.name),
                                )
                        else:
                            mod.imports[bound] = (
                                "external",
                                External(source_module, alias.name),
                            )
                else:
                    for bound in _stmt_bound_names(stmt):
                        mod.bindings.setdefault(bound, []).append(index)
            self.modules[name] = mod
        return self.modules[name]

    # ------------------------------------------------------------------------------------------ closure

    def resolve(self, module: str, name: str) -> Key:
        """The definition a module-level name of ``module`` stands for (following re-exports)."""
        seen: set[Key] = set()
        while True:
            if (module, name) in seen:
                raise NeedlebenchError(f"cannot bundle: import cycle at {module}.{name}")
            seen.add((module, name))
            mod = self.module(module)
            if name in mod.imports:
                kind, target = mod.imports[name]
                if kind == "name":
                    module, name = target  # type: ignore[misc]
                    continue
                if kind == "external":
                    external = target
                    assert isinstance(external, External)
                    if external.top not in self.allowed_external:
                        others = sorted(self.allowed_external - set(sys.stdlib_module_names))
                        raise NeedlebenchError(
                            f"cannot bundle {module}: it imports {external.module!r}, which lm-eval does not bring; "
                            f"allowed: the standard library and {', '.join(others)}"
                        )
                    self.externals[external.key] = external
                    return external.key
                raise NeedlebenchError(f"cannot bundle: {module}.{name} is a module, not a definition")
            if name in mod.bindings:
                return (module, name)
            raise NeedlebenchError(f"cannot bundle: {module} has no module-level name {name!r}")

    def references(self, mod: _Module, stmt: ast.stmt) -> list[tuple[ast.AST, Key]]:
        """(node, definition) for every module-level name (or ``alias.attr`` of an imported needlebench module) the
        statement uses."""
        refs: list[tuple[ast.AST, Key]] = []
        attribute_bases: set[int] = set()
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if any(self._ours(n) for n in names):
                    raise NeedlebenchError(
                        f"cannot bundle {mod.name}: a function imports {names[0]} inside its body (line {node.lineno})"
                    )
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and mod.imports.get(node.value.id, ("", None))[0] == "module"
            ):
                target = mod.imports[node.value.id][1]
                assert isinstance(target, str)
                if _is_submodule(target, node.attr):
                    raise NeedlebenchError(f"cannot bundle {mod.name}: nested module reference {target}.{node.attr}")
                refs.append((node, self.resolve(target, node.attr)))
                attribute_bases.add(id(node.value))
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and id(node) not in attribute_bases:
                if node.id in mod.imports and mod.imports[node.id][0] == "module":
                    raise NeedlebenchError(
                        f"cannot bundle {mod.name}: module {node.id!r} used other than as {node.id}.NAME "
                        f"(line {node.lineno})"
                    )
                if node.id in mod.imports or node.id in mod.bindings:
                    refs.append((node, self.resolve(mod.name, node.id)))
        return refs

    def close(self, entries: Iterable[Key]) -> None:
        work = [self.resolve(module, name) for module, name in entries]
        while True:
            while work:
                key = work.pop()
                if key in self.needed:
                    continue
                self.needed.add(key)
                if key[0] == "<import>":
                    continue
                module, name = key
                for index in self.module(module).bindings[name]:
                    work.extend(self._include(module, index))
            # module-level statements that bind nothing but change a needed name (``TABLE[i] = 1``)
            for module, mod in list(self.modules.items()):
                for index, stmt in enumerate(mod.tree.body):
                    if index in self.statements.get(module, set()) or _stmt_bound_names(stmt):
                        continue
                    if isinstance(
                        stmt,
                        (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef),
                    ):
                        continue
                    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                        continue  # docstring
                    names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
                    if any((module, name) in self.needed for name in names):
                        work.extend(self._include(module, index))
            if not work:
                return

    def _include(self, module: str, index: int) -> list[Key]:
        if index in self.statements.setdefault(module, set()):
            return []
        self.statements[module].add(index)
        mod = self.module(module)
        keys = [key for _node, key in self.references(mod, mod.tree.body[index])]
        self.module_deps.setdefault(module, set()).update(key[0] for key in keys if key[0] not in ("<import>",))
        return keys

    # ------------------------------------------------------------------------------------------ naming

    def output_names(self, entries: Iterable[Key]) -> dict[Key, str]:
        """The name every needed definition gets in the bundle: its own, unless two definitions want the same."""
        entry_keys = {self.resolve(m, n) for m, n in entries}
        wanted: dict[str, list[Key]] = {}
        for key in self.needed:
            if key[0] == "<import>":
                external = self.externals[key]
                name = external.attr or external.module.split(".")[0]
                # keep the local alias of the first module that imports it this way
                name = self._import_alias(external) or name
            else:
                name = key[1]
            wanted.setdefault(name, []).append(key)
        names: dict[Key, str] = {}
        for name, keys in wanted.items():
            keys.sort(key=lambda k: (k not in entry_keys, k[0] == "<import>", k))
            for position, key in enumerate(keys):
                if position == 0:
                    names[key] = name
                    continue
                if key in entry_keys or key[0] == "<import>":
                    raise NeedlebenchError(f"cannot bundle: two definitions of {name!r} ({keys[0]}, {key})")
                short = key[0].rsplit(".", 1)[-1]
                names[key] = f"_{short}_{name.lstrip('_')}"
        return names

    def _import_alias(self, external: External) -> str | None:
        for mod in self.modules.values():
            for bound, (kind, target) in mod.imports.items():
                if kind == "external" and target == external:
                    return bound
        return None

    def _check_renamable(self, mod: _Module, name: str) -> None:
        """A module-level name may be rewritten in place only if no function of the module uses it as a local."""

        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
                raise NeedlebenchError(
                    f"cannot bundle {mod.name}: {name!r} must be renamed but a function declares it global"
                )

        def visit(table: symtable.SymbolTable) -> None:
            for child in table.get_children():
                if child.get_type() != "module":
                    try:
                        symbol = child.lookup(name)
                    except KeyError:
                        symbol = None
                    if symbol is not None and (symbol.is_local() or symbol.is_parameter()) and not symbol.is_global():
                        raise NeedlebenchError(
                            f"cannot bundle {mod.name}: {name!r} must be renamed but is also a local name"
                        )
                visit(child)

        visit(mod.table)

    # ------------------------------------------------------------------------------------------ output

    def render(
        self,
        entries: list[Key],
        header: str,
        optional: Mapping[str, str],
        optional_message: str,
    ) -> str:
        names = self.output_names(entries)
        plain, guarded = self._import_lines(names, optional)
        head = header.rstrip("\n") + "\n\nfrom __future__ import annotations\n\n" + "\n".join(plain) + "\n"
        if guarded:
            body = "\n".join("    " + line for line in guarded)
            head += (
                f"\ntry:\n{body}\nexcept ImportError as error:  # pragma: no cover - depends on the environment\n"
                "    raise ImportError(\n"
                f"        {json.dumps(optional_message, ensure_ascii=False)}\n"
                "    ) from error\n"
            )
        parts = [head]
        for module in self._module_order():
            mod = self.modules[module]
            edits = self._edits(mod, names)
            text = f"# {'-' * 20} from {module}\n"
            previous: int | None = None
            for index in sorted(self.statements[module]):
                stmt = mod.tree.body[index]
                definition = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                adjacent = previous is not None and previous == index - 1 and not definition
                text += ("\n" if adjacent else "\n\n") + self._segment(mod, index, edits) + "\n"
                previous = None if definition else index
            parts.append(text)
        text = "\n\n".join(parts)
        compile(text, "<bundle>", "exec")
        return text

    def _import_lines(self, names: dict[Key, str], optional: Mapping[str, str]) -> tuple[list[str], list[str]]:
        """Import lines in isort's order (standard library, then others; ``import`` before ``from``); those of
        ``optional`` modules separately."""
        plain: dict[str, list[str]] = {}
        froms: dict[tuple[bool, str], list[str]] = {}
        for key in (k for k in self.needed if k[0] == "<import>"):
            external = self.externals[key]
            alias = names[key]
            group = external.top in optional
            if external.attr is None:
                line = f"import {external.module}" + ("" if alias == external.module else f" as {alias}")
                plain.setdefault(
                    f"{int(group)}{int(external.top not in sys.stdlib_module_names)}",
                    [],
                ).append(line)
            else:
                item = external.attr + ("" if alias == external.attr else f" as {alias}")
                froms.setdefault((group, external.module), []).append(item)
        blocks: dict[tuple[bool, bool], list[str]] = {}
        for code, lines in plain.items():
            blocks.setdefault((code[0] == "1", code[1] == "1"), []).extend(sorted(lines))
        for (group, module), items in sorted(froms.items()):
            third = module.split(".")[0] not in sys.stdlib_module_names
            blocks.setdefault((group, third), []).append(f"from {module} import {', '.join(sorted(items))}")
        for lines in blocks.values():
            lines.sort(key=lambda line: (line.startswith("from"), line.split()[1].lower()))

        def joined(group: bool) -> list[str]:
            out: list[str] = []
            for third in (False, True):
                if blocks.get((group, third)):
                    out += ([""] if out else []) + blocks[(group, third)]
            return out

        return joined(False), joined(True)

    def _module_order(self) -> list[str]:
        order: list[str] = []
        visiting: set[str] = set()

        def visit(module: str) -> None:
            if module in order or module in visiting:
                return
            visiting.add(module)
            for dep in sorted(self.module_deps.get(module, set())):
                if dep != module and dep in self.statements:
                    visit(dep)
            visiting.discard(module)
            order.append(module)

        for module in sorted(self.statements):
            visit(module)
        return order

    def _edits(self, mod: _Module, names: dict[Key, str]) -> list[tuple[int, int, str]]:
        """(start, end, replacement) byte spans in the module source for renamed names and module attributes."""
        lines = mod.source.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        edits: list[tuple[int, int, str]] = []
        checked: set[str] = set()
        for index in self.statements[mod.name]:
            for node, key in self.references(mod, mod.tree.body[index]):
                new = names[key]
                old = node.id if isinstance(node, ast.Name) else None
                if old == new:
                    continue
                if old is not None and old not in checked:
                    self._check_renamable(mod, old)
                    checked.add(old)
                start = offsets[node.lineno - 1] + node.col_offset
                end = offsets[node.end_lineno - 1] + node.end_col_offset
                edits.append((start, end, new))
            stmt = mod.tree.body[index]
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                new = names.get((mod.name, stmt.name), stmt.name)
                if new != stmt.name:  # the defining name itself (not an ast.Name node)
                    self._check_renamable(mod, stmt.name)
                    line = lines[stmt.lineno - 1]
                    match = re.compile(rb"(?:async\s+)?(?:def|class)\s+(\w+)").match(line, stmt.col_offset)
                    assert match is not None and match.group(1) == stmt.name.encode()
                    start = offsets[stmt.lineno - 1]
                    edits.append((start + match.start(1), start + match.end(1), new))
        return edits

    def _segment(self, mod: _Module, index: int, edits: list[tuple[int, int, str]]) -> str:
        stmt = mod.tree.body[index]
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", []))])
        lines = mod.source.splitlines(keepends=True)
        while first > 1 and lines[first - 2].lstrip().startswith(b"#"):
            first -= 1  # the comment block right above the statement
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        start, end = offsets[first - 1], offsets[stmt.end_lineno]
        text = mod.source[start:end]
        for edit_start, edit_end, new in sorted(edits, reverse=True):
            if start <= edit_start and edit_end <= end:
                text = text[: edit_start - start] + new.encode("utf-8") + text[edit_end - start :]
        return text.decode("utf-8").rstrip("\n")


def bundle(
    entries: list[Key],
    *,
    header: str,
    allowed_external: Iterable[str],
    optional: Mapping[str, str] | None = None,
    optional_message: str = "",
    package: str = PACKAGE,
) -> str:
    """Python source defining every entry ``(module, name)`` of the package and what it uses, importing no needlebench.

    ``allowed_external``: top-level modules other than the standard library the bundle may import; those also in
    ``optional`` (module -> pip name) are imported in a ``try`` that raises ``ImportError(optional_message)``.
    """
    bundler = _Bundler([*allowed_external, *(optional or {})], package)
    bundler.close(entries)
    return bundler.render(entries, header, optional or {}, optional_message)


def bundled_modules(entries: list[Key], allowed_external: Iterable[str]) -> list[str]:
    """The package modules a bundle of ``entries`` copies statements from, in dependency order."""
    bundler = _Bundler(allowed_external)
    bundler.close(entries)
    return bundler._module_order()
