"""YAML data files read with libyaml's C loader when PyYAML has it (the same objects as `yaml.safe_load`, ~10x
faster: the needle bank and frames are read at the start of every build).

:func:`load_user_yaml` reads a user's file (an experiment) strictly: no aliases (``*name``, which let a small file
expand to gigabytes, the "billion laughs"), no key given twice in one mapping (YAML 1.2 forbids it; PyYAML
silently keeps the last), no explicit tag (``!!binary``, ``!!python/...``, ``!local``: plain YAML values only), no
nesting deeper than :data:`MAX_DEPTH` and no integer longer than :data:`MAX_DIGITS` digits (CPython refuses to
convert more than 4,300 digits, ``sys.int_info.default_max_str_digits``) and no more than :data:`MAX_VALUES`
values. Each refusal names the line and the field
(``needles.0.keyword``) in a :class:`UserYamlError`, checked on the parser's events before anything is built."""

from __future__ import annotations

import yaml

#: Deepest nesting of lists and mappings in a user's file (an experiment needs three levels).
MAX_DEPTH = 32
#: Longest integer in a user's file, in characters (digits, sign and ``_``).
MAX_DIGITS = 40
#: Most values (scalars, lists and mappings) in a user's file: an experiment's 10,000 needles of a few fields each
#: are ~200,000; a file of 16 MB of one-line needles (300,000+) would take a minute and a gigabyte to build.
MAX_VALUES = 400_000
_INT_TAG = "tag:yaml.org,2002:int"
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


def _field(path: list) -> str:
    text = ".".join(str(part) for part in path) or "(top)"
    return text if len(text) <= 60 else text[:57] + "..."


def _check_events(text: str) -> None:
    """Refuse aliases, explicit tags, deep nesting and long integers, naming the line and the field."""
    resolver = yaml.resolver.Resolver()
    # each open collection: [kind, path, next index (list) or expecting a key (mapping), last key]
    stack: list[list] = []
    for count, event in enumerate(yaml.parse(text, Loader=_LOADER)):
        if count > MAX_VALUES:
            raise UserYamlError(
                f"line {event.start_mark.line + 1}: more than {MAX_VALUES:,} values; allowed: at most {MAX_VALUES:,} "
                "(an experiment's largest needle list is 10,000 needles; give a long list as needles_file)"
            )
        if isinstance(event, (yaml.CollectionEndEvent, yaml.StreamStartEvent, yaml.StreamEndEvent)) or isinstance(
            event, (yaml.DocumentStartEvent, yaml.DocumentEndEvent)
        ):
            if isinstance(event, yaml.CollectionEndEvent):
                stack.pop()
            continue
        # where this node sits: a key of a mapping, a value under a key, or an item of a list
        path: list = []
        if stack:
            top = stack[-1]
            if top[0] == "seq":
                path = [*top[1], top[2]]
                top[2] += 1
            elif top[2]:  # a key
                path = [*top[1], "(key)"]
                top[2] = False
                top[3] = event.value if isinstance(event, yaml.ScalarEvent) else "(key)"
            else:
                path = [*top[1], top[3]]
                top[2] = True
        line = event.start_mark.line + 1
        where, field = f"line {line}", f"field {_field(path)}"
        if isinstance(event, yaml.AliasEvent):
            raise UserYamlError(
                f"{where}: alias *{event.anchor} is not allowed in {field} (YAML anchors and aliases are refused: a "
                "small file could expand without bound); write the value out"
            )
        if event.tag is not None:  # set only when the file writes a tag (``!!binary``, ``!x``, ``!``)
            shown = event.tag.replace("tag:yaml.org,2002:", "!!")
            raise UserYamlError(
                f"{where}: the tag {shown[:40]!r} is not allowed in {field}; allowed: plain YAML values (strings, "
                "numbers, true/false, lists, mappings) without tags"
            )
        if isinstance(event, yaml.ScalarEvent):
            if (
                event.implicit[0]
                and len(event.value) > MAX_DIGITS
                and resolver.resolve(yaml.ScalarNode, event.value, (True, False)) == _INT_TAG
            ):
                raise UserYamlError(
                    f"{where}: an integer of {len(event.value):,} characters is not allowed in {field}; allowed: "
                    f"at most {MAX_DIGITS} digits"
                )
            continue
        if len(stack) >= MAX_DEPTH:
            raise UserYamlError(
                f"{where}: lists and mappings nested deeper than {MAX_DEPTH} levels are not allowed ({field})"
            )
        kind = "seq" if isinstance(event, yaml.SequenceStartEvent) else "map"
        stack.append([kind, path, 0 if kind == "seq" else True, None])


def load_user_yaml(text: str):
    """`text` parsed like :func:`safe_load`, refusing aliases, tags, deep nesting and long integers
    (:class:`UserYamlError`) before anything is built."""
    _check_events(text)
    return yaml.load(text, Loader=_StrictLoader)
