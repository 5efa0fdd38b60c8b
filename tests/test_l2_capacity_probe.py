"""benchmarks/l2_capacity_probe.py: the gather kernel sums exactly the rows it is given (interpreter), and the
hit fraction and capacity come out of the two plateaus as stated."""

from __future__ import annotations

import pytest
import torch

from benchmark_util import load_benchmark

probe = load_benchmark("l2_capacity_probe")


def test_each_program_sums_its_rows_and_writes_only_above_the_threshold():
    gen = torch.Generator().manual_seed(2)
    dim, rows, n, r = 16, 50, 37, 4
    src = torch.randn(rows * dim, generator=gen)
    idx = torch.randint(0, rows, (n,), generator=gen, dtype=torch.int32)
    programs = -(-n // r)
    want = torch.stack([src.view(rows, dim)[idx[p * r:(p + 1) * r].long()].sum(0) for p in range(programs)])
    sink = torch.full((programs * dim,), float("nan"))
    probe.gather_kernel[(programs,)](src, idx, sink, n, float("-inf"), D=dim, R=r, num_warps=1)
    torch.testing.assert_close(sink.view(programs, dim), want)  # the tail program sums its 1 id
    untouched = torch.full((programs * dim,), float("nan"))
    probe.gather_kernel[(programs,)](src, idx, untouched, n, float("inf"), D=dim, R=r, num_warps=1)
    assert bool(untouched.isnan().all())  # as timed: nothing written


def test_hit_fraction_is_the_mix_of_the_plateaus_that_gives_the_rate():
    hit, miss = 8.0, 4.0
    assert probe.hit_fraction(8.0, hit, miss) == 1.0
    assert probe.hit_fraction(4.0, hit, miss) == 0.0
    half = 1 / (0.5 / hit + 0.5 / miss)  # half the bytes at each rate
    assert probe.hit_fraction(half, hit, miss) == pytest.approx(0.5)
    assert probe.hit_fraction(3.0, hit, miss) == 0.0  # slower than all misses: clamped
    with pytest.raises(ValueError, match="hit_rate > miss_rate"):
        probe.hit_fraction(5.0, 4.0, 8.0)


def test_summary_takes_the_ends_as_plateaus_and_prices_the_sizes_between():
    rate_at_half = 1 / (0.5 / 8.0 + 0.5 / 4.0)
    rows = [{"row_bytes": 512, "buffer_mib": m, "rows_TBps": t} for m, t in ((4, 8.0), (64, rate_at_half), (2048, 4.0))]
    got = probe.summarize(rows)["row_512B"]
    assert got["hit_TBps"] == 8.0 and got["miss_TBps"] == 4.0
    assert got["sizes"]["64"]["hit_fraction"] == pytest.approx(0.5)
    assert got["sizes"]["64"]["implied_mib"] == pytest.approx(32.0)
    assert set(got["sizes"]) == {"64"}
