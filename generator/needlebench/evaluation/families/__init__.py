"""The registry of the evaluation half of every benchmark family (the build half: :mod:`needlebench.tasks.families`).

Adding a family: a module here subclassing :class:`EvalFamily`, listed in :data:`EVAL_FAMILIES`. Every stage
reaches a config's evaluation half through :func:`eval_family`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from needlebench.evaluation.families import atc, counting_stars, multi_reasoning, multi_retrieval, single
from needlebench.evaluation.families.base import EvalFamily
from needlebench.evaluation.families.hooks import REFERENCE_SUFFIX
from needlebench.tasks.grid import registry

if TYPE_CHECKING:
    from needlebench.tasks.grid import ConfigSpec

#: Family key -> its evaluation object, in the order tables and task folders list them.
EVAL_FAMILIES: dict[str, EvalFamily] = {
    module.FAMILY.key: module.FAMILY for module in (single, multi_retrieval, multi_reasoning, atc, counting_stars)
}


def eval_family(spec: ConfigSpec) -> EvalFamily:
    """The evaluation half of a config's family (the build half is ``spec.family_object``)."""
    return EVAL_FAMILIES[spec.family]


def metric_shape(name: str) -> str | None:
    """How a logged metric's value looks when it is not one number (``EvalFamily.value_shapes``; a
    ``_reference`` twin as its metric), else None."""
    return _value_shapes().get(name.removesuffix(REFERENCE_SUFFIX))


@functools.cache
def _value_shapes() -> dict[str, str]:
    return {name: shape for entry in EVAL_FAMILIES.values() for name, shape in entry.value_shapes.items()}


@functools.cache
def per_needle_metrics() -> frozenset[str]:
    """Metrics a row may log up to 100 per needle (``EvalFamily.per_needle_ceiling``)."""
    return frozenset(name for entry in EVAL_FAMILIES.values() for name in entry.per_needle_ceiling)


@functools.cache
def _rule_labels() -> frozenset[str]:
    """Task labels of the families whose rows keep their rule scores in a judged file (ATC, Counting-Stars)."""
    return frozenset(spec.task_label for spec in registry().values() if not eval_family(spec).haystack)


def scored_by_rule(doc: Mapping[str, Any]) -> bool:
    """Whether a logged row keeps its rule score whatever a judge says of it: a row of an ATC or Counting-Stars
    config (built in, or labelled so in its ``task`` column). ``needlebench judge`` never sends these rows and
    ``needlebench report`` never applies a judge rating to them."""
    spec = registry().get(str(doc.get("config")))
    if spec is not None:
        return not eval_family(spec).haystack
    return str(doc.get("task")) in _rule_labels()
