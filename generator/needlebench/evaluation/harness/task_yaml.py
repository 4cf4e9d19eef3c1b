"""lm-eval task YAML read and written as data: ``!function module.name`` tags kept as :class:`FunctionRef`.

Every task file the project writes (``harness_tasks/needlebench``, ``needlebench tasks``, ``needlebench
export-tasks``, the ``--reasoning`` overrides) is a dict dumped here, with the comment lines it starts with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from needlebench.terminal import printable


class FunctionRef(str):
    """A ``!function module.name`` scalar of an lm-eval YAML."""


def function(name: str, module: str = "utils") -> FunctionRef:
    """``!function utils.<name>``: a hook of the task folder's ``utils.py``."""
    return FunctionRef(f"{module}.{name}")


class _Loader(yaml.SafeLoader):
    pass


class _Dumper(yaml.SafeDumper):
    def choose_scalar_style(self) -> str:
        # ``!function utils.name`` unquoted, as lm-eval's own YAMLs write it (PyYAML quotes tagged scalars)
        if self.event.tag == "!function" and re.fullmatch(r"[A-Za-z_][\w.]*", self.event.value):
            return ""
        # a control character or a YAML line break other than a newline (U+0085, U+2028, U+2029, a CR) in a
        # single-quoted or plain scalar is folded into a space when read back (YAML 1.1 sections 5.4 and 9.1.3):
        # double quotes write each as an escape (\N, \L, \r), so the value reads back as it was
        if isinstance(self.event.value, str) and not self.event.value.replace("\n", "").isprintable():
            return '"'
        return super().choose_scalar_style()

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # block sequences indented under their key, as lm-eval's YAMLs write them
        super().increase_indent(flow, False)


_Loader.add_constructor("!function", lambda loader, node: FunctionRef(loader.construct_scalar(node)))
_Dumper.add_representer(FunctionRef, lambda dumper, data: dumper.represent_scalar("!function", str(data)))


def load_yaml(text: str) -> dict[str, Any]:
    """An lm-eval YAML (``!function`` tags kept as :class:`FunctionRef`)."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects


def dump_yaml(data: Mapping[str, Any], *comments: str) -> str:
    """``data`` as YAML in insertion order, after ``comments`` (one ``# `` line each).

    Every value goes through PyYAML's safe dumper, which quotes and escapes what a plain scalar cannot hold (a
    newline, ``: ``, a quote, a control character: YAML 1.1 section 5.7), so a value never adds a key. A comment
    holds names too (a folder's path): its control characters (newlines and the YAML line breaks U+0085, U+2028,
    U+2029 among them) are written as escapes, so it stays one comment line."""
    body = yaml.dump(dict(data), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 16)
    return "".join(f"# {printable(comment)}\n" for comment in comments) + body


def function_refs(data: Any) -> list[str]:
    """Every ``!function`` target in a loaded YAML, in order."""
    if isinstance(data, FunctionRef):
        return [str(data)]
    if isinstance(data, Mapping):
        return [ref for value in data.values() for ref in function_refs(value)]
    if isinstance(data, list):
        return [ref for value in data for ref in function_refs(value)]
    return []
