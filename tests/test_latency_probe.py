"""benchmarks/latency_probe.py: the sector cycle visits every sector once, the chase kernel ends where the host's walk
does (interpreter), and the rows and summary are the arithmetic they claim."""

from __future__ import annotations

import pytest
import torch

from benchmark_util import load_benchmark

probe = load_benchmark("latency_probe")


def test_the_cycle_visits_every_sector_once_and_leaves_the_other_slots_zero():
    sectors = 97
    nxt = probe.sector_cycle(sectors, torch.Generator().manual_seed(3))
    assert nxt.dtype == torch.int32 and nxt.numel() == sectors * probe.SLOTS
    seen, at = set(), 0
    for _ in range(sectors):
        seen.add(at)
        at = int(nxt[at * probe.SLOTS])
    assert at == 0 and seen == set(range(sectors))  # one cycle through all of them
    firsts = torch.arange(sectors) * probe.SLOTS
    others = torch.ones(nxt.numel(), dtype=torch.bool)
    others[firsts] = False
    assert bool((nxt[others] == 0).all())


@pytest.mark.parametrize("sectors", [0, 2**31])
def test_a_cycle_of_no_or_too_many_sectors_is_refused(sectors):
    with pytest.raises(ValueError, match=r"sectors must be in \[1, 2\^31\)"):
        probe.sector_cycle(sectors, torch.Generator())


def test_the_kernel_ends_each_chain_where_the_host_walk_does():
    gen = torch.Generator().manual_seed(5)
    sectors, programs, hops = 61, 3, 7
    nxt = probe.sector_cycle(sectors, gen)
    start = torch.randint(0, sectors, (programs * probe.LANES,), generator=gen, dtype=torch.int32)
    out = torch.full_like(start, -1)
    probe.chase_kernel[(programs,)](nxt, start, out, hops, LANES=probe.LANES, SLOTS=probe.SLOTS, num_warps=1)
    torch.testing.assert_close(out, probe.chase_reference(nxt, start, hops))
    assert not torch.equal(out, start)  # they moved


def test_a_row_is_its_chains_hops_and_sectors_over_the_time():
    row = probe.rows_of(programs=2, hops=100, ms=0.064, copy_bytes_per_s=2e12)
    assert row["chains"] == 2 * probe.LANES
    assert row["ns_per_hop"] == pytest.approx(640.0)  # 64 us over 100 dependent hops
    assert row["sector_GBps"] == pytest.approx(64 * 100 * 32 / 64e-6 / 1e9)
    assert row["of_copy"] == pytest.approx(row["sector_GBps"] * 1e9 / 2e12)


def test_summary_takes_the_fewest_chains_for_unloaded_and_the_first_near_the_best_rate_for_loaded():
    rows = [{"chains": c, "ns_per_hop": ns, "sector_GBps": gbps, "of_copy": gbps / 3000}
            for c, ns, gbps in ((32, 600.0, 1.7), (1024, 700.0, 47.0), (65536, 1100.0, 1900.0),
                                (131072, 1900.0, 2200.0), (262144, 3800.0, 2210.0))]
    got = probe.summarize(list(reversed(rows)), loaded_fraction=0.9)
    assert got["unloaded_ns"] == 600.0
    assert (got["loaded_chains"], got["loaded_ns"]) == (131072, 1900.0)  # 2200 >= 0.9 * 2210; 1900 is not
    assert got["best_sector_GBps"] == 2210.0
    with pytest.raises(ValueError, match="no rows"):
        probe.summarize([], 0.9)


@pytest.mark.compile
def test_the_chase_kernel_compiles_for_hopper_without_spills():
    """The kernel as ``main`` launches it builds for sm_90 and fits (CPU: the GPU runs are in
    results/latency_probe_2026-12-07/)."""
    from polyrec.hardware.catalog import get_device
    from polyrec.hardware.compile import CompileJob, compile_for

    job = CompileJob(label="latency probe chase", kernel=probe.chase_kernel,
                     signature={"next_ptr": "*i32", "start_ptr": "*i32", "out_ptr": "*i32", "hops": "i32",
                                "LANES": "constexpr", "SLOTS": "constexpr"},
                     constexprs={"LANES": probe.LANES, "SLOTS": probe.SLOTS}, num_warps=1)
    report = compile_for(job, get_device("H200"))
    assert report.fits, report


def test_the_rows_stop_at_what_the_device_holds_at_once():
    """A row past the resident programs would run in two waves and report twice the latency."""
    assert probe.resident_programs(132, "nvidia") == 132 * 32
    assert max(p for p in probe.PROGRAMS if p <= probe.resident_programs(132, "nvidia")) == 4224
