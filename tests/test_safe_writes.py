"""Safe by construction: no module of the package writes, renames, links or removes by path; every such operation
goes through ``needlebench/safe_fs.py`` (directory descriptors, ``O_NOFOLLOW``, ``O_EXCL`` temporaries under
unpredictable names), which cannot write through a name a folder from someone else planted.

The scan reads the package's source (``ast``): a new ``open(path, "w")``, ``Path.write_text``, ``os.replace(a, b)``
without descriptors, ``shutil.copy``/``rmtree`` by path or a temporary file with a predictable name fails here with
the file and line, whoever adds it. The few writes left by path are listed in :data:`ALLOWED` with the reason each
cannot reach a folder from someone else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import needlebench

ROOT = Path(needlebench.__file__).parent

#: Method names that write, rename or remove by path (pathlib), whatever the receiver.
PATH_METHODS = {"write_text", "write_bytes", "touch", "mkdir", "unlink", "rmdir", "symlink_to", "hardlink_to", "chmod"}
#: os functions that act on a path; with ``dir_fd=`` (and ``src_dir_fd``/``dst_dir_fd``) they act on a descriptor.
OS_FUNCTIONS = {
    "replace",
    "rename",
    "link",
    "unlink",
    "remove",
    "rmdir",
    "mkdir",
    "makedirs",
    "symlink",
    "chmod",
    "truncate",
    "mkfifo",
}
SHUTIL_FUNCTIONS = {"copy", "copy2", "copyfile", "copytree", "move", "rmtree", "copymode", "copystat"}
TEMPFILE_FUNCTIONS = {"mkstemp", "mkdtemp", "NamedTemporaryFile", "TemporaryDirectory", "TemporaryFile"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}

#: (module, what) -> why this write by path cannot reach a folder from someone else.
ALLOWED: dict[tuple[str, str], str] = {
    ("safe_fs.py", "*"): "the layer itself",
    ("dataset/build.py", "tempfile.TemporaryFile(dir=...)"): (
        "probes that --out's first existing folder is writable: O_TMPFILE, a file with no name at all"
    ),
    ("sources/inputs.py", ".symlink_to()"): (
        "a link to the user's own input inside a new private temporary folder (mkdtemp: 0700, unpredictable name)"
    ),
}


def _keywords(call: ast.Call) -> set[str]:
    return {keyword.arg for keyword in call.keywords if keyword.arg}


def _mode(call: ast.Call, position: int) -> str | None:
    """The mode string of an ``open`` call (positional `position` or ``mode=``), None when not a constant."""
    for keyword in call.keywords:
        if keyword.arg == "mode":
            return keyword.value.value if isinstance(keyword.value, ast.Constant) else "?"
    if len(call.args) > position:
        node = call.args[position]
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else "?"
    return "r"


def _names_in(node: ast.AST) -> set[str]:
    return {child.attr for child in ast.walk(node) if isinstance(child, ast.Attribute)} | {
        child.id for child in ast.walk(node) if isinstance(child, ast.Name)
    }


#: Calls that give a :class:`needlebench.safe_fs.Folder` (its methods act on a descriptor, not a path).
_FOLDER_CALL = re.compile(r"(\bFolder\.open\(|\.sub\(|\bprivate_folder\(|\bcache_folder\(|\bopened\(|\bmake_staging\()")


def _folder_names(tree: ast.AST) -> set[str]:
    """Names and attributes that hold a Folder in this module: annotated ``Folder``, or bound (assignment, ``with ...
    as``) to a call that gives one. Per module, not per scope: a name is a Folder wherever the module makes it one."""
    names: set[str] = set()

    def bind(target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)

    makers = {  # this module's functions and methods that return a Folder
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.returns is not None
        and "Folder" in ast.unparse(node.returns)
    }
    maker_call = re.compile(r"\b(" + "|".join(map(re.escape, sorted(makers))) + r")\(") if makers else None

    def gives_folder(expression: ast.AST) -> bool:
        text = ast.unparse(expression)
        return bool(_FOLDER_CALL.search(text) or (maker_call and maker_call.search(text)))

    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None and "Folder" in ast.unparse(node.annotation):
            names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and "Folder" in ast.unparse(node.annotation):
            bind(node.target)
        elif isinstance(node, ast.Assign) and gives_folder(node.value):
            for target in node.targets:
                bind(target)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            if gives_folder(node.context_expr):
                bind(node.optional_vars)
    return names


def _receiver(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def findings(source: str) -> list[tuple[int, str]]:
    """(line, what) for each write, rename, link or removal by path in `source`."""
    found = []
    tree = ast.parse(source)
    folders = _folder_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        keywords = _keywords(node)
        if isinstance(func, ast.Name) and func.id == "open":
            mode = _mode(node, 1)
            if mode is None or any(flag in mode for flag in "wax+?"):
                found.append((node.lineno, f"open(..., {mode!r})"))
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if _receiver(func.value) in folders or (
                isinstance(func.value, ast.Call) and _FOLDER_CALL.search(ast.unparse(func.value))
            ):
                continue  # a Folder's method: relative to its descriptor
            if owner == "os" and func.attr in OS_FUNCTIONS:
                if not keywords & {"dir_fd", "src_dir_fd", "dst_dir_fd"}:
                    found.append((node.lineno, f"os.{func.attr}"))
            elif owner == "os" and func.attr == "open":
                if node.args[1:] and _names_in(node.args[1]) & WRITE_FLAGS and "dir_fd" not in keywords:
                    found.append((node.lineno, "os.open for writing"))
            elif owner == "shutil" and func.attr in SHUTIL_FUNCTIONS:
                if not (func.attr == "rmtree" and "dir_fd" in keywords):
                    found.append((node.lineno, f"shutil.{func.attr}"))
            elif owner == "tempfile" and func.attr in TEMPFILE_FUNCTIONS:
                if "dir" in keywords:
                    found.append((node.lineno, f"tempfile.{func.attr}(dir=...)"))
            elif func.attr in PATH_METHODS and owner not in ("os", "shutil"):
                found.append((node.lineno, f".{func.attr}()"))
            elif func.attr == "open" and owner not in ("os", "io", "gzip", "bz2", "lzma", "tarfile", "zipfile"):
                mode = _mode(node, 0)  # Path.open(mode): a name that is not a constant is not a mode
                if mode is not None and any(flag in mode for flag in "wax+"):
                    found.append((node.lineno, f".open({mode!r})"))
    return sorted(found)


def scan() -> list[str]:
    problems = []
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if (module, "*") in ALLOWED:
            continue
        for line, what in findings(path.read_text(encoding="utf-8")):
            if (module, what) not in ALLOWED:
                problems.append(f"{module}:{line}: {what}")
    return problems


@pytest.mark.slow
def test_no_module_writes_by_path():
    problems = scan()
    assert problems == [], "writes by path (use needlebench.safe_fs):\n" + "\n".join(problems)


def test_every_allowance_is_still_needed():
    used = set()
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        used |= {(module, what) for _, what in findings(path.read_text(encoding="utf-8"))}
    stale = [key for key in ALLOWED if key[1] != "*" and key not in used]
    assert stale == []


def test_the_scan_finds_each_kind_of_write_by_path():
    """The scan itself: each form it must catch is caught, the descriptor forms are not."""
    caught = """
open(p, "w"); open(p, mode="ab"); Path(p).write_text("x"); p.unlink(); p.mkdir(parents=True)
os.replace(a, b); os.link(a, b); shutil.rmtree(p); shutil.copyfile(a, b); tempfile.mkstemp(dir=d)
os.open(p, os.O_WRONLY | os.O_CREAT); p.open("w")
"""
    assert sorted(what for _, what in findings(caught)) == sorted(
        [
            "open(..., 'w')",
            "open(..., 'ab')",
            ".write_text()",
            ".unlink()",
            ".mkdir()",
            "os.replace",
            "os.link",
            "shutil.rmtree",
            "shutil.copyfile",
            "tempfile.mkstemp(dir=...)",
            "os.open for writing",
            ".open('w')",
        ]
    )
    fine = """
open(p); open(p, "rb"); os.replace(a, b, src_dir_fd=f, dst_dir_fd=f); os.unlink(n, dir_fd=f)
shutil.rmtree(n, dir_fd=f); tempfile.mkdtemp(); os.open(p, os.O_RDONLY | os.O_NOFOLLOW); text.replace("a", "b")
def f(out: Folder, path: Path):
    out.write_text("x", "y"); out.unlink("x")
    with Folder.open(path) as handle, handle.sub("data") as data:
        handle.write_bytes("a", b""); data.rmdir("b")
"""
    assert findings(fine) == []
