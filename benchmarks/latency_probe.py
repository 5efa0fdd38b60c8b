"""The round trip of a dependent DRAM load, alone and under load: the number the TBE models take as one constant.

``polyrec.perfmodel.tbe_reads.LOADED_LATENCY_S`` (1.0 us on NVIDIA) prices every chain of dependent loads of the lookup
and the update, the same on every GPU of a vendor. An H100 ran the pooled lookups of the random modules of seeds 27-28
in 0.78-1.36x an H200's time (median 1.05) where their copy rates differ 1.41x
(``results/h100_update_floor_2026-12-07/bytes_share.txt``): mostly round trips, a few percent slower on the H100. This
measures the round trip itself: ``chase_kernel`` follows chains of dependent loads through a random cycle over a buffer
far larger than the L2 (each hop reads one 32-byte sector whose first word is the next hop), ``LANES`` chains per
program, for a rising number of programs. With few chains in flight a hop takes the unloaded latency; as they grow the
memory system fills and each hop waits longer, while the sectors per second approach what random 32-byte reads can
reach. The rows: chains in flight, ns per hop, and the sectors' bytes per second against the copy rate of the same run.

    PYTHONPATH=.:benchmarks python3 benchmarks/latency_probe.py [--buffer-gib 8] [--hops 1024]

Writes ``latency_probe_<gpu>_<date>.json``. Run on an H100 (``results/latency_probe_2026-12-07/``); not yet on an
H200, nor on AMD (its kernel and arithmetic are tested through the interpreter, tests/test_latency_probe.py).
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from polyrec.perfmodel.tbe_reads import MAX_PROGRAMS_PER_CU
from polyrec.results import write_results

#: Bytes a hop reads: one sector, the DRAM access unit of NVIDIA GPUs (perfmodel.tbe_reads.GATHER_GRANULARITY).
SECTOR_BYTES = 32
#: int32 slots per sector: a hop's next index sits in its sector's first slot.
SLOTS = SECTOR_BYTES // 4
#: Independent chains per program (one per thread of one warp).
LANES = 32
#: Programs launched, rising from one warp's chains on the whole device; those past what the device holds at once
#: (``resident_programs``) are left out, so that every row's chains run in one wave and a hop's time is its latency.
PROGRAMS = (1, 4, 16, 66, 132, 264, 528, 1056, 2112, 4224, 8448)


@triton.jit
def chase_kernel(next_ptr, start_ptr, out_ptr, hops, LANES: tl.constexpr, SLOTS: tl.constexpr):
    """Each of the program's LANES chains starts at its ``start`` sector and follows ``hops`` dependent loads
    (sector s holds the next sector at slot s * SLOTS); the sector it ends at is stored to ``out``."""
    lane = tl.program_id(0) * LANES + tl.arange(0, LANES)
    at = tl.load(start_ptr + lane)
    for _ in range(hops):
        at = tl.load(next_ptr + at.to(tl.int64) * SLOTS)
    tl.store(out_ptr + lane, at)


def resident_programs(compute_units: int, vendor: str) -> int:
    """One-warp programs the device runs at once: its compute units times the programs one may hold
    (``perfmodel.tbe_reads.MAX_PROGRAMS_PER_CU``; a one-warp program uses few registers and no shared memory)."""
    return compute_units * MAX_PROGRAMS_PER_CU[vendor]


def chase_reference(nxt: torch.Tensor, start: torch.Tensor, hops: int) -> torch.Tensor:
    """Where each chain of ``chase_kernel`` ends (on the host)."""
    at = start.clone()
    for _ in range(hops):
        at = nxt[at.long() * SLOTS]
    return at


def sector_cycle(sectors: int, gen: torch.Generator) -> torch.Tensor:
    """[sectors * SLOTS] int32: one random cycle through every sector, sector s's first slot holding the sector after
    it (the other slots 0): a chain started anywhere visits every sector before it repeats."""
    if not 1 <= sectors < 2**31:
        raise ValueError(f"sectors must be in [1, 2^31), got {sectors}")
    order = torch.randperm(sectors, generator=gen, device=gen.device)
    nxt = torch.zeros(sectors * SLOTS, dtype=torch.int32, device=gen.device)
    nxt[order * SLOTS] = torch.roll(order, -1).to(torch.int32)
    return nxt


def rows_of(programs: int, hops: int, ms: float, copy_bytes_per_s: float) -> dict:
    """A row of the table: chains in flight, ns per hop, the sectors' rate and its fraction of the copy rate."""
    chains = programs * LANES
    per_s = chains * hops * SECTOR_BYTES / (ms * 1e-3)
    return {"programs": programs, "chains": chains, "ns_per_hop": ms * 1e6 / hops, "sector_GBps": per_s / 1e9,
            "of_copy": per_s / copy_bytes_per_s}


def summarize(rows: list[dict], loaded_fraction: float) -> dict:
    """The unloaded round trip (the fewest chains'), and the round trip at the fewest chains whose sectors reach
    ``loaded_fraction`` of the best rate any row reached (the memory system near full), with that rate."""
    if not rows:
        raise ValueError("no rows to summarize")
    best = max(r["sector_GBps"] for r in rows)
    loaded = next(r for r in sorted(rows, key=lambda r: r["chains"]) if r["sector_GBps"] >= loaded_fraction * best)
    alone = min(rows, key=lambda r: r["chains"])
    return {"unloaded_ns": alone["ns_per_hop"], "loaded_ns": loaded["ns_per_hop"], "loaded_chains": loaded["chains"],
            "best_sector_GBps": best, "best_of_copy": max(r["of_copy"] for r in rows),
            "loaded_fraction": loaded_fraction}


def main() -> None:
    from tbe import bench_ms, copy_rate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buffer-gib", type=float, default=8.0, help="bytes the chains run through (GiB)")
    parser.add_argument("--hops", type=int, default=1024, help="dependent loads per chain")
    parser.add_argument("--loaded-fraction", type=float, default=0.9,
                        help="the summary's loaded round trip: at the fewest chains reaching this fraction of the "
                             "best sector rate")
    args = parser.parse_args()
    if args.buffer_gib <= 0 or args.hops < 1 or not 0 < args.loaded_fraction <= 1:
        raise SystemExit("--buffer-gib must be above 0, --hops at least 1 and --loaded-fraction in (0, 1]")
    if not torch.cuda.is_available():
        raise SystemExit("latency_probe needs a GPU")
    gen = torch.Generator(device="cuda").manual_seed(0)
    copy = copy_rate()
    sectors = int(args.buffer_gib * 2**30) // SECTOR_BYTES
    nxt = sector_cycle(sectors, gen)
    props = torch.cuda.get_device_properties(0)
    resident = resident_programs(props.multi_processor_count, "amd" if torch.version.hip else "nvidia")
    rows = []
    for programs in (p for p in PROGRAMS if p <= resident):
        start = torch.randint(0, sectors, (programs * LANES,), device="cuda", generator=gen, dtype=torch.int32)
        out = torch.empty_like(start)
        ms = bench_ms(lambda: chase_kernel[(programs,)](nxt, start, out, args.hops, LANES=LANES, SLOTS=SLOTS,
                                                        num_warps=1))
        rows.append(rows_of(programs, args.hops, ms, copy))
        r = rows[-1]
        print(f"{r['chains']:7d} chains: {r['ns_per_hop']:8.1f} ns per hop, {r['sector_GBps']:8.1f} GB/s of sectors "
              f"({r['of_copy']:.2f} of copy)", flush=True)
    summary = {"copy_TBps": copy / 1e12, "buffer_gib": args.buffer_gib, "hops": args.hops,
               **summarize(rows, args.loaded_fraction)}
    write_results("latency_probe", {"rows": rows, "summary": summary}, rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
