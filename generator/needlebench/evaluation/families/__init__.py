"""The registry of the evaluation half of every benchmark family (the build half: :mod:`needlebench.tasks.families`).

Adding a family: a module here subclassing :class:`EvalFamily`, listed in :data:`EVAL_FAMILIES`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from needlebench.evaluation.families import atc, counting_stars, multi_reasoning, multi_retrieval, single
from needlebench.evaluation.families.base import EvalFamily
from needlebench.tasks.grid import registry

#: Family key -> its evaluation object, in the order tables and task folders list them.
EVAL_FAMILIES: dict[str, EvalFamily] = {
    module.FAMILY.key: module.FAMILY for module in (single, multi_retrieval, multi_reasoning, atc, counting_stars)
}


def eval_family(key: str) -> EvalFamily:
    """The evaluation object of a family key (a :class:`ConfigSpec`'s ``family``)."""
    return EVAL_FAMILIES[key]


@functools.cache
def _rule_labels() -> frozenset[str]:
    """Task labels of the families whose rows keep their rule scores in a judged file (ATC, Counting-Stars)."""
    return frozenset(spec.task_label for spec in registry().values() if not eval_family(spec.family).haystack)


def scored_by_rule(doc: Mapping[str, Any]) -> bool:
    """Whether a logged row keeps its rule score whatever a judge says of it: a row of an ATC or Counting-Stars
    config (built in, or labelled so in its ``task`` column). ``needlebench judge`` never sends these rows and
    ``needlebench report`` never applies a judge rating to them."""
    spec = registry().get(str(doc.get("config")))
    if spec is not None:
        return not eval_family(spec.family).haystack
    return str(doc.get("task")) in _rule_labels()
