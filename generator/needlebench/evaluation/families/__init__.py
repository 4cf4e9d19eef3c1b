"""The registry of the evaluation half of every benchmark family (the build half: :mod:`needlebench.tasks.families`).

Adding a family: a module here subclassing :class:`EvalFamily`, listed in :data:`EVAL_FAMILIES`.
"""

from __future__ import annotations

from needlebench.evaluation.families import atc, counting_stars, multi_reasoning, multi_retrieval, single
from needlebench.evaluation.families.base import EvalFamily

#: Family key -> its evaluation object, in the order tables and task folders list them.
EVAL_FAMILIES: dict[str, EvalFamily] = {
    module.FAMILY.key: module.FAMILY for module in (single, multi_retrieval, multi_reasoning, atc, counting_stars)
}


def eval_family(key: str) -> EvalFamily:
    """The evaluation object of a family key (a :class:`ConfigSpec`'s ``family``)."""
    return EVAL_FAMILIES[key]
