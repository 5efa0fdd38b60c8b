"""How much of the L2 do random row gathers from every SM get? The effective capacity the TBE models assume.

``polyrec.perfmodel.tbe_reads.l2_hits`` prices the rows that stay in L2 with an ideal frequency cache of the
device's whole ``l2_bytes``. This measures what random gathers actually get: ``gather_kernel`` reads
``--gathers`` rows drawn uniformly from a buffer of S bytes (rows of ``--row-bytes``, every SM issuing, each
program summing its rows, with no write traffic), for S from well inside to far outside the L2. Each size's rate
gives its L2 hit fraction against the two plateaus measured in the same run (the smallest buffer: all hits;
the largest: all misses), ``h = (1/rate - 1/miss_rate) / (1/hit_rate - 1/miss_rate)``, and the capacity that
fraction implies for a cache holding a uniform random subset, ``h x S``.

    PYTHONPATH=.:benchmarks python3 benchmarks/l2_capacity_probe.py [--row-bytes 512,256] [--gathers 16777216]

About half a minute on an H200.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from tbe import bench_ms

from polyrec.results import write_results

MIB = 2**20
#: Buffer sizes (MiB): from a few MiB, all resident, to far past any L2 (the H200 reports 60 MiB).
SIZES_MIB = (4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 128, 256, 2048)
#: Rows per program of ``gather_kernel`` (4 warps; one tile, no loop, so that every program's loads are in
#: flight at once: a loop over tiles ran at the same ~3 TB/s whether its rows were in L2 or not).
ROWS_PER_PROGRAM = 32


@triton.jit
def gather_kernel(src_ptr, idx_ptr, sink_ptr, n, threshold, D: tl.constexpr, R: tl.constexpr):
    """The sum of rows ``idx[i]`` of ``src`` ([*, D] fp32) over the program's R ids, stored to its sink row
    only where it exceeds ``threshold`` (+inf when timed: no write traffic, yet nothing to optimise away).
    The ids load evict-first, so that only the rows compete for L2."""
    d = tl.arange(0, D)
    i = tl.program_id(0) * R + tl.arange(0, R)
    ok = i < n
    row = tl.load(idx_ptr + i, mask=ok, other=0, eviction_policy="evict_first").to(tl.int64)
    acc = tl.sum(tl.load(src_ptr + row[:, None] * D + d[None, :], mask=ok[:, None], other=0.0), axis=0)
    tl.store(sink_ptr + tl.program_id(0) * D + d, acc, mask=acc > threshold)


def hit_fraction(rate: float, hit_rate: float, miss_rate: float) -> float:
    """The fraction of gathers served by L2 that makes a mix of the two plateaus run at ``rate`` (clamped to
    [0, 1]); time per byte is the mix of each plateau's."""
    if not hit_rate > miss_rate > 0:
        raise ValueError(f"need hit_rate > miss_rate > 0, got {hit_rate}, {miss_rate}")
    h = (1 / rate - 1 / miss_rate) / (1 / hit_rate - 1 / miss_rate)
    return min(max(h, 0.0), 1.0)


def measure(row_bytes: int, gathers: int, gen: torch.Generator) -> list[dict]:
    dim = row_bytes // 4
    programs = triton.cdiv(gathers, ROWS_PER_PROGRAM)
    sink = torch.empty(programs * dim, device="cuda")
    out = []
    for mib in SIZES_MIB:
        rows = mib * MIB // row_bytes
        src = torch.rand(rows * dim, device="cuda", generator=gen)
        idx = torch.randint(0, rows, (gathers,), device="cuda", generator=gen, dtype=torch.int32)
        ms = bench_ms(lambda: gather_kernel[(programs,)](src, idx, sink, gathers, float("inf"), D=dim,
                                                          R=ROWS_PER_PROGRAM, num_warps=4))
        out.append({"row_bytes": row_bytes, "buffer_mib": mib, "ms": ms,
                    "rows_TBps": gathers * row_bytes / ms / 1e9})
        print(out[-1], flush=True)
        del src, idx
    return out


def summarize(rows: list[dict]) -> dict:
    """Per row size: the plateaus (smallest and largest buffer) and each buffer's hit fraction and implied
    capacity (MiB)."""
    summary = {}
    for rb in sorted({r["row_bytes"] for r in rows}):
        mine = sorted((r for r in rows if r["row_bytes"] == rb), key=lambda r: r["buffer_mib"])
        hit_rate, miss_rate = mine[0]["rows_TBps"], mine[-1]["rows_TBps"]
        per_size = {}
        for r in mine[1:-1]:
            h = hit_fraction(r["rows_TBps"], hit_rate, miss_rate)
            per_size[str(r["buffer_mib"])] = {"hit_fraction": h, "implied_mib": h * r["buffer_mib"]}
        summary[f"row_{rb}B"] = {"hit_TBps": hit_rate, "miss_TBps": miss_rate, "sizes": per_size}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row-bytes", default="512,256", help="row sizes in bytes, comma-separated (multiples of 64)")
    parser.add_argument("--gathers", type=int, default=1 << 24, help="rows gathered per timed launch")
    args = parser.parse_args()
    try:
        sizes = [int(x) for x in args.row_bytes.split(",")]
    except ValueError:
        raise SystemExit(f"--row-bytes: not a list of integers: {args.row_bytes!r}") from None
    if any(s < 64 or s % 64 or (s // 4) & (s // 4 - 1) for s in sizes) or args.gathers < 1:
        raise SystemExit("--row-bytes: each a power of two of at least 64 bytes; --gathers >= 1")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = [r for rb in sizes for r in measure(rb, args.gathers, gen)]
    summary = summarize(rows)
    write_results("l2_capacity_probe", {"rows": rows, "summary": summary}, rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
