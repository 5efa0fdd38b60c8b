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


def test_case_rounds_measures_every_case_and_variant_each_round_in_rotated_order():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Config:
        batch: int = 1

    calls = []

    def measure(cfg, variant, label):
        calls.append((label, variant, cfg.batch))
        return {"ms_per_step": float(len(calls))} if variant != "b" else {"error": "OutOfMemoryError"}

    rows = stats.case_rounds(Config(), [("small", {}), ("large", {"batch": 8})], ("a", "b"), 2, measure)
    assert calls == [("small", "a", 1), ("small", "b", 1), ("large", "a", 8), ("large", "b", 8),
                     ("small", "b", 1), ("small", "a", 1), ("large", "b", 8), ("large", "a", 8)]
    assert [(r["case"], r["variant"], r["round"]) for r in rows] == [(c, v, i // 4) for i, (c, v, _) in enumerate(calls)]
    assert rows[1]["error"] == "OutOfMemoryError" and stats.median_where(rows, "ms_per_step", case="large") == 5.5  # calls 3 and 8
