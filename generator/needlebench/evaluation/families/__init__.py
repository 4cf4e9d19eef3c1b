"""The registry of the evaluation half of every benchmark family (the build half: :mod:`needlebench.tasks.families`).

Adding a family: a module here subclassing :class:`EvalFamily`, listed in :data:`EVAL_FAMILIES`. Every stage
reaches a config's evaluation half through :func:`eval_family`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from needlebench.evaluation.families import atc, counting_stars, multi_reasoning, multi_retrieval, single
from needlebench.evaluation.families.base import EvalFamily
from needlebench.evaluation.families.hooks import REFERENCE_SUFFIX

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
