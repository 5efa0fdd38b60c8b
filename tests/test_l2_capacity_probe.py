"""benchmarks/l2_capacity_probe.py: the gather kernel sums exactly the rows it is given (interpreter), and the
knee is found where the rate first falls."""

from __future__ import annotations

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


def test_knee_is_the_last_size_within_tolerance_of_the_first():
    sizes = [4, 8, 16, 32, 64]
    assert probe.knee(sizes, [5.0, 4.99, 4.97, 4.90, 4.5], 0.01) == (16, 32)
    assert probe.knee(sizes, [5.0, 5.0, 5.0, 5.0, 5.0], 0.01) == (64, None)
    assert probe.knee(sizes, [5.0, 4.0, 5.0, 5.0, 5.0], 0.01) == (4, 8)  # the first fall counts


def test_summary_names_the_plateaus_and_the_knee_per_row_size():
    rows = [{"row_bytes": 512, "buffer_mib": m, "rows_TBps": t}
            for m, t in ((4, 5.0), (48, 4.98), (64, 4.8), (2048, 4.2))]
    rows += [{"row_bytes": 256, "buffer_mib": m, "rows_TBps": t} for m, t in ((4, 4.4), (48, 4.3), (2048, 3.9))]
    got = probe.summarize(rows)
    assert got["row_512B"] == {"resident_TBps": 5.0, "streaming_TBps": 4.2, "flat_until_mib": 48, "slower_from_mib": 64}
    assert got["row_256B"]["flat_until_mib"] == 4 and got["row_256B"]["slower_from_mib"] == 48
