"""Stratified subsets of a split: a quick run that still covers the grid.

``needlebench eval --subset N`` (or ``--metadata '{"subset": N}'`` with plain ``lm_eval``) makes the task's
``custom_dataset`` hook keep N rows per task, chosen here with a fixed seed so that every context length, every
depth and every needle count appears as early as possible:

* rows are grouped into grid cells (length, depth, needle count; ATC by needle count, Counting-Stars by length);
* cells are picked greedily: first a cell not picked yet (fewest picks), then the one whose length, depth and
  needle count have been seen least, ties broken by a seeded shuffle; each pick takes one unit (a row; for
  multiple-choice ATC a whole item of four rotations, so CircularEval can score it) not taken yet.

With N at least the largest of (lengths, depths, needle counts) every length, depth and needle count appears;
with N at least the number of cells every cell does. The chosen rows keep their split order. lm-eval's
``--limit`` takes the first rows instead (the shortest lengths only).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.seeding import rng

#: Metadata key of the subset size (rows per task).
SUBSET_KEY = "subset"
#: Fixed seed part: the same N and config always give the same rows.
SUBSET_SEED = "needlebench-subset-v1"

_AXES = ("context_length", "depth_percent", "num_needles")


def parse_subset(value: Any) -> int | None:
    """The ``subset`` metadata as a positive int (None when not given)."""
    if value in (None, "", 0, "0"):
        return None
    try:  # lm-eval's --metadata key=value parser may give -1 as the float -1.0
        number = int(value) if isinstance(value, float) and value.is_integer() else int(str(value).strip())
    except ValueError:
        raise NeedlebenchError(
            f"subset {value!r} is not a whole number; pass rows per task, e.g. --subset 40"
        ) from None
    if number < 1:
        raise NeedlebenchError(f"subset {value!r} must be a positive number of rows per task")
    return number


def _unit_key(row: Mapping[str, Any], index: int) -> Any:
    """Rows that must stay together: the four rotations of a multiple-choice ATC item, else the row alone."""
    item = row.get("item_id")
    if item and row.get("rotation") and row.get("prompt_style") != "open":
        return ("item", str(item))
    return ("row", index)


def _cell(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(axis) for axis in _AXES)


def stratified_indices(rows: Sequence[Mapping[str, Any]], n: int, config: str = "") -> list[int]:
    """Indices (ascending) of about ``n`` rows stratified over lengths, depths and needle counts.

    ``rows`` needs ``context_length``, ``depth_percent`` and ``num_needles`` where the family has them (missing
    axes count as one value). Multiple-choice ATC items are kept whole, so the count is rounded up to whole
    items. All rows when ``n`` is at least their number.
    """
    if n >= len(rows):
        return list(range(len(rows)))
    units: dict[Any, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        units[_unit_key(row, index)].append(index)
    cells: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for key, members in units.items():
        cells[_cell(rows[members[0]])].append(key)
    generator = rng(SUBSET_SEED, config, n)
    order = sorted(cells, key=repr)
    tiebreak = {cell: int(rank) for cell, rank in zip(order, generator.permutation(len(order)), strict=True)}
    pools = {cell: [cells[cell][int(i)] for i in generator.permutation(len(cells[cell]))] for cell in order}
    picks: dict[tuple[Any, ...], int] = defaultdict(int)
    seen: list[dict[Any, int]] = [defaultdict(int) for _ in _AXES]
    chosen: list[int] = []
    while len(chosen) < n:
        open_cells = [cell for cell in order if pools[cell]]
        if not open_cells:
            break
        cell = min(
            open_cells,
            key=lambda c: (
                picks[c],
                sum(seen[axis][value] for axis, value in enumerate(c)),
                tiebreak[c],
            ),
        )
        chosen += units[pools[cell].pop()]
        picks[cell] += 1
        for axis, value in enumerate(cell):
            seen[axis][value] += 1
    return sorted(chosen)


def select_subset(split: Any, n: int | None, config: str = "") -> Any:
    """``split`` (a ``datasets.Dataset``) reduced to its stratified subset of ``n`` rows (unchanged if None)."""
    if n is None:
        return split
    columns = [column for column in (*_AXES, "item_id", "rotation", "prompt_style") if column in split.column_names]
    rows = _rows(split.select_columns(columns)) if columns else [{} for _ in range(len(split))]
    return split.select(stratified_indices(rows, n, config))


def _rows(split: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return list(split)


def coverage(rows: Iterable[Mapping[str, Any]]) -> dict[str, set[Any]]:
    """The distinct lengths, depths and needle counts of rows (for tests and reports)."""
    values: dict[str, set[Any]] = {axis: set() for axis in _AXES}
    for row in rows:
        for axis in _AXES:
            values[axis].add(row.get(axis))
    return values
