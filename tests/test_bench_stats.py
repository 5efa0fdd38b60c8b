"""benchmarks/stats.py: the round orders and medians the A/B scripts share."""

from __future__ import annotations

from benchmark_util import load_benchmark

stats = load_benchmark("stats")


def test_rotated_starts_each_round_one_later_and_keeps_every_variant():
    variants = ("a", "b", "c")
    orders = [stats.rotated(variants, r) for r in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert stats.rotated((), 3) == []


def test_median_where_matches_every_field_and_skips_failed_rows():
    rows = [{"case": "x", "graphs": True, "ms_per_step": 3.0},
            {"case": "x", "graphs": True, "ms_per_step": 1.0},
            {"case": "x", "graphs": True, "error": "OutOfMemoryError"},
            {"case": "x", "graphs": False, "ms_per_step": 9.0},
            {"case": "y", "graphs": True, "ms_per_step": 7.0}]
    assert stats.median_where(rows, "ms_per_step", case="x", graphs=True) == 2.0
    assert stats.median_where(rows, "ms_per_step", case="x") == 3.0
    assert stats.median_where(rows, "ms_per_step", case="z") is None
    assert stats.median_where([rows[2]], "ms_per_step", case="x") is None
