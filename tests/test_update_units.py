"""benchmarks/update_units.py: bytes an update_floor case touches, counted in 32 B sectors and 64 B units."""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_util import load_benchmark

units = load_benchmark("update_units")


def test_distinct_units_counts_each_unit_once():
    """160 B at 0 and 160 touch 64 B units 0-2 and 2-4: five distinct; in 32 B sectors ten; a 4 B access one."""
    starts = np.array([0, 160])
    assert units.distinct_units(starts, 160, 64) == 5
    assert units.distinct_units(starts, 160, 32) == 10
    assert units.distinct_units(np.array([0, 4, 64]), 4, 64) == 2


@pytest.mark.parametrize("dim, sector, unit", [(40, 160, 192), (48, 192, 192), (32, 128, 128)])
def test_sparse_rows_touch_their_units_whole(dim, sector, unit):
    """At the MLPerf step's density (5% of rows) neighbours rarely share a unit: a dim-40 row (160 B) touches five
    sectors and three 64 B units, a row's state (4 B) about a whole sector or unit of its own."""
    row32, state32 = units.touched_per_visit(204_184_588, 10_205_714, dim, 32)
    row64, state64 = units.touched_per_visit(204_184_588, 10_205_714, dim, 64)
    assert row32 == pytest.approx(sector, rel=0.01) and row64 == pytest.approx(unit, rel=0.01)
    assert 25 < state32 <= 32 and 40 < state64 <= 64


def test_dense_rows_share_units():
    """10M of 12M rows sorted: most neighbours are visited, so a dim-40 row touches about its own 160 B."""
    row64, state64 = units.touched_per_visit(12_000_000, 10_000_000, 40, 64)
    assert 160 <= row64 < 170 and state64 < 6
