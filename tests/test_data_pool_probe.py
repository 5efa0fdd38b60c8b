"""benchmarks/data_pool_probe.py's summary (pure Python)."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark

probe = load_benchmark("data_pool_probe")


def test_summary_takes_each_pools_median_and_the_change():
    small, large = probe.SMALL_POOL, probe.LARGE_POOL
    rows = [{"pool": small, "dense_ms": v - 1} | {k: v for k in probe.PHASES if k != "dense_ms"}
            for v in (10.0, 10.2, 30.0)]
    rows += [{"pool": large, "dense_ms": v - 1} | {k: v for k in probe.PHASES if k != "dense_ms"}
             for v in (10.5, 10.6, 10.7)]
    got = probe.summarize(rows)
    assert got[f"pool_{small}_ms_per_step"] == 10.2  # the outlier round does not move the median
    assert got[f"pool_{large}_ms_per_step"] == 10.6
    assert got[f"pool_{large}_dense_ms"] == pytest.approx(9.6)
    assert got["large_vs_small"] == pytest.approx(10.6 / 10.2 - 1)


def test_default_rounds_fit_the_large_pool_without_repeats():
    assert probe.WARM_STEPS + 4 * (20 + probe.ROUND_WARMUP) <= probe.LARGE_POOL
