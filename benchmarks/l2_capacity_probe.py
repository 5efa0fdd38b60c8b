"""How much of the L2 do random row gathers from every SM get? The effective capacity the TBE models assume.

``polyrec.perfmodel.tbe_reads.l2_hits`` prices the rows that stay in L2 with an ideal frequency cache of the
device's whole ``l2_bytes``. This measures what random gathers actually get: ``gather_kernel`` reads
``--gathers`` rows drawn uniformly from a buffer of S bytes (rows of ``--row-bytes``, every SM issuing, each
program summing its rows, with no write traffic), for S from well inside to far outside the L2. The rate holds
while the buffer stays resident and falls once gathers miss; where it starts to fall brackets the capacity the
gathers get. (The rates themselves do not give the hit fraction: even all hits run far below the L2's bandwidth,
so a two-rate mix under-counts misses.)

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
SIZES_MIB = (4, 8, 16, 24, 32, 36, 40, 44, 48, 52, 56, 60, 64, 80, 96, 128, 256, 2048)
#: Rows per program of ``gather_kernel`` (4 warps; one tile, no loop, so that every program's loads are in
#: flight at once: a loop over tiles ran at the same ~3 TB/s whether its rows were in L2 or not).
ROWS_PER_PROGRAM = 32
#: How far below the smallest buffer's rate a buffer's may be and still count as all hits (two runs of this
#: kernel on fresh H200s agreed within 0.3% at every size up to 128 MiB: results/l2_capacity_probe_2026-12-02).
KNEE_TOLERANCE = 0.01


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


def knee(sizes_mib: list[int], rates: list[float], tolerance: float) -> tuple[int, int | None]:
    """(the largest buffer whose rate is within ``tolerance`` of the smallest buffer's, the next buffer or
    None): the rate only falls once gathers start to miss, so the L2's effective capacity for them lies
    between the two. ``sizes_mib`` ascending."""
    flat = 0
    while flat + 1 < len(sizes_mib) and rates[flat + 1] >= (1 - tolerance) * rates[0]:
        flat += 1
    return sizes_mib[flat], (sizes_mib[flat + 1] if flat + 1 < len(sizes_mib) else None)


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
    """Per row size: the rates of the smallest (all hits) and largest (all misses) buffer and where the rate
    starts to fall (``knee`` within KNEE_TOLERANCE)."""
    summary = {}
    for rb in sorted({r["row_bytes"] for r in rows}):
        mine = sorted((r for r in rows if r["row_bytes"] == rb), key=lambda r: r["buffer_mib"])
        flat, slower = knee([r["buffer_mib"] for r in mine], [r["rows_TBps"] for r in mine], KNEE_TOLERANCE)
        summary[f"row_{rb}B"] = {"resident_TBps": mine[0]["rows_TBps"], "streaming_TBps": mine[-1]["rows_TBps"],
                                 "flat_until_mib": flat, "slower_from_mib": slower}
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
