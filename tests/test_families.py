"""The build half of the family registry: one object per family answers for its configs, grid, modes and rows."""

from __future__ import annotations

import pytest

from needlebench import compat
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.rows import iter_rows
from needlebench.errors import NeedlebenchError
from needlebench.tasks.families import FAMILIES, ConfigSpec, Grid, family_of
from needlebench.tasks.grid import COMPAT_MODES_BY_FAMILY, registry


def test_every_config_belongs_to_a_registered_family_in_registry_order():
    specs = list(registry().values())
    assert {spec.family for spec in specs} == set(FAMILIES)
    # v1 configs first, families in registry order within each edition
    order = [(spec.edition, list(FAMILIES).index(spec.family)) for spec in specs]
    assert order == sorted(order)
    assert all(family_of(spec) is FAMILIES[spec.family] for spec in specs)


def test_every_declared_compat_mode_has_a_generator_and_every_other_is_refused():
    for spec in registry().values():
        for mode in spec.compat_modes:
            assert (spec.family, mode, spec.edition) in compat.GENERATORS, spec.name
        assert callable(compat.generator(spec, None))
        for mode in {m for modes in COMPAT_MODES_BY_FAMILY.values() for m in modes} - set(spec.compat_modes):
            with pytest.raises(NeedlebenchError, match=f"compat mode {mode} does not apply to {spec.name}; "):
                spec.check_mode(mode)


def test_an_unknown_family_is_a_one_line_error():
    with pytest.raises(NeedlebenchError, match="unknown family 'needles'; allowed: single, multi_retrieval"):
        family_of("needles")


def test_an_explicit_grid_replaces_the_family_tables():
    """An observed grid (a config known only from its samples): its own lengths, depths and repeats, the family's
    row formula, no compat mode, any tokenizer, nothing to build."""
    grid = Grid(lengths=(1000, 2000), depths=(0.0, 50.0, 100.0), repeats=2, needle_counts=(2, 3))
    rows = {"single": 2 * 3 * 2, "multi_retrieval": 2 * 2, "multi_reasoning": 2 * 3 * 2 * 2}
    for family, count in rows.items():
        spec = ConfigSpec("observed", family, "en", "custom", grid=grid)
        assert (spec.lengths, spec.depths, spec.repeats, spec.buffer) == ((1000, 2000), (0.0, 50.0, 100.0), 2, 0)
        assert spec.num_rows == count and spec.compat_modes == () and spec.accepts_hf_tokenizer
    explicit = ConfigSpec("observed", "single", "en", "custom", grid=Grid(lengths=(1000,), num_rows=7))
    assert explicit.num_rows == 7
    with pytest.raises(NeedlebenchError, match="compat mode opencompass does not apply to observed; build it without"):
        list(iter_rows(explicit, BuildOptions(compat="opencompass")))
