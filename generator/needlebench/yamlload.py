"""YAML data files read with libyaml's C loader when PyYAML has it (the same objects as `yaml.safe_load`, ~10x
faster: the needle bank and frames are read at the start of every build).

:func:`load_user_yaml` reads a user's file (an experiment) strictly: no aliases (``*name``, which let a small file
expand to gigabytes, the "billion laughs") and no key given twice in one mapping (YAML 1.2 forbids it; PyYAML
silently keeps the last)."""

from __future__ import annotations

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str):
    return yaml.load(text, Loader=_LOADER)  # a safe loader (the C one when built)


class UserYamlError(ValueError):
    """A construct refused in a user's YAML file; the message names it and its line."""


class _StrictLoader(_LOADER):
    """The safe loader, refusing a key given twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the constructor reports it
                continue
            if duplicate:
                raise UserYamlError(
                    f"line {key_node.start_mark.line + 1}: key {key!r} is given twice; give each key once"
                )
        return super().construct_mapping(node, deep=deep)


def load_user_yaml(text: str):
    """`text` parsed like :func:`safe_load`, refusing aliases (:class:`UserYamlError`) before anything is built."""
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise UserYamlError(
                f"line {event.start_mark.line + 1}: alias *{event.anchor} is not allowed (YAML anchors and aliases "
                "are refused: a small file could expand without bound); write the value out"
            )
    return yaml.load(text, Loader=_StrictLoader)
