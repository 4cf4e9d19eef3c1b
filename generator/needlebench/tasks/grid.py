"""The registry of dataset configs, and the grid names other stages import.

Every config of the dataset is a :class:`ConfigSpec`; its name is the Hub config name and, prefixed with
``needlebench_``, the lm-eval task name. Each family's grid (the reference v1 table of lengths, depth lists, buffers
and repeats, the v2 grid of configs named ``v2_*``, the Counting-Stars paper's lengths), configs and build modes
live in its family object (:mod:`needlebench.tasks.families`); the names below are derived from those objects or
re-exported from them.
"""

from __future__ import annotations

import fnmatch
import re
from functools import cache

from needlebench.errors import NeedlebenchError
from needlebench.tasks.families import FAMILIES as FAMILY_OBJECTS
from needlebench.tasks.families.atc import ATC_ROTATIONS, V2_ATC_QUESTION_TYPES
from needlebench.tasks.families.base import EDITIONS, SIZES, ConfigSpec, Grid
from needlebench.tasks.families.counting_stars import STAR_COUNTS

__all__ = [
    "ATC_ROTATIONS",
    "COMPAT_MODES",
    "COMPAT_MODES_BY_FAMILY",
    "EDITIONS",
    "FAMILIES",
    "SIZES",
    "STAR_COUNTS",
    "V2_ATC_QUESTION_TYPES",
    "ConfigSpec",
    "Grid",
    "get_config",
    "match_configs",
    "register_config",
    "registry",
]

#: Families and the task label used in tables (derived from the family objects).
FAMILIES = {key: entry.label for key, entry in FAMILY_OBJECTS.items()}
#: The build modes of each family beside the default, as the command line spells them: ``--compat MODE``
#: (the reference construction, byte for byte; Counting-Stars only for the paper's M=32, whose star lists are
#: fixed) and ``--tokenizer hf:...`` (lengths counted in a model's own tokens: the families with a tokenised
#: haystack). `needlebench build` refuses every other combination in one line (:meth:`ConfigSpec.check_mode`),
#: and ``tests/test_front_door.py`` builds, verifies and evaluates every combination declared here: a family or
#: mode joins that matrix by being declared (``Family.compat``, ``Family.hf_tokenizer``).
COMPAT_MODES_BY_FAMILY = {key: entry.compat for key, entry in FAMILY_OBJECTS.items()}
#: Every ``--compat`` mode, in the order they are listed.
COMPAT_MODES = tuple(dict.fromkeys(mode for modes in COMPAT_MODES_BY_FAMILY.values() for mode in modes))


def _build_registry() -> dict[str, ConfigSpec]:
    """Every built-in config: each edition in turn (v1 first, so v1 listings and builds keep their order), each
    family, in registry order, within it."""
    specs = [spec for edition in EDITIONS for entry in FAMILY_OBJECTS.values() for spec in entry.configs(edition)]
    return {spec.name: spec for spec in specs}


@cache
def registry() -> dict[str, ConfigSpec]:
    """All configs by name, in a stable order."""
    return _build_registry()


#: Configs registered at run time (experiment files), looked up by name after the built-in ones; they are not
#: part of :func:`registry` (so the shipped task files, `list` and globs only see built-in configs).
_REGISTERED: dict[str, ConfigSpec] = {}


def register_config(spec: ConfigSpec) -> None:
    """Make a run-time config (an experiment) resolvable by :func:`get_config`; a built-in name is refused."""
    if spec.name in registry():
        raise NeedlebenchError(f"config name {spec.name!r} is a built-in config; choose another name")
    _REGISTERED[spec.name] = spec


def get_config(name: str) -> ConfigSpec:
    if name in _REGISTERED:
        return _REGISTERED[name]
    try:
        return registry()[name]
    except KeyError:
        suggestion = _closest(name)
        hint = f"did you mean {suggestion}? " if suggestion else ""
        raise NeedlebenchError(
            f"unknown config {name!r}; {hint}run `needlebench list` for the allowed names "
            "(e.g. single_en_4k, multi_retrieval_zh_128k, atc_en, counting_stars_acquisition_en_128k, v2_single_en_4k)"
        ) from None


def _closest(name: str) -> str | None:
    """The registered config name closest to a mistyped one (rapidfuzz ratio >= 80), or None."""
    from rapidfuzz import fuzz, process

    match = process.extractOne(str(name), list(registry()), scorer=fuzz.ratio, score_cutoff=80)
    return match[0] if match else None


_GLOB_CHARS = re.compile(r"[*?\[]")


def match_configs(patterns: list[str] | tuple[str, ...]) -> list[ConfigSpec]:
    """Configs matching names or shell globs, in registry order, then the run-time configs (experiments) named
    exactly, in the order given; an unmatched pattern is an error."""
    names = list(registry())
    chosen: set[str] = set()
    registered: dict[str, ConfigSpec] = {}
    for pattern in patterns:
        hits = fnmatch.filter(names, pattern)
        if not hits and _GLOB_CHARS.search(pattern):
            raise NeedlebenchError(
                f"glob {pattern!r} matches no config; run `needlebench list` for the names "
                "(globs use * and ?, e.g. 'single_*_4k')"
            )
        if not hits:
            spec = get_config(pattern)  # raises the one-line error (with a did-you-mean)
            registered.setdefault(spec.name, spec)
        chosen.update(hits)
    return [registry()[name] for name in names if name in chosen] + list(registered.values())
