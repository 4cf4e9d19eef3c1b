"""The benchmark families, build half: one registered object per family (:class:`~.base.Family`).

:data:`FAMILIES` maps each family key to its object in registry order (v1 families, ATC, Counting-Stars); a
config's grid, columns, build modes and generators are asked of ``family_of(spec)``. Adding a family: a module
here defining ``FAMILY``, its entry below, its evaluation half in ``needlebench.evaluation.families`` and its data.
"""

from __future__ import annotations

from needlebench.tasks.families import atc, counting_stars, multi_reasoning, multi_retrieval, single
from needlebench.tasks.families.base import FAMILIES, ConfigSpec, Family, Grid, family_of

FAMILIES.update(
    (entry.key, entry)
    for entry in (single.FAMILY, multi_retrieval.FAMILY, multi_reasoning.FAMILY, atc.FAMILY, counting_stars.FAMILY)
)

__all__ = ["FAMILIES", "ConfigSpec", "Family", "Grid", "family_of"]
