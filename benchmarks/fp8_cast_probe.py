"""The fp8 cast kernel's tile: ``cast_fp8`` (plain and transposed copies of a bf16 tensor) at several tiles.

Over batch-sized tensors of the fp8 step at MLPerf's batch 65536 (the cross network's width 3456 and the
top MLP's 1024 and 512), each timed back to back (``calibrate.steady_ms``) at every (BLOCK_M, BLOCK_N,
warps) of ``TILES``, with the rows per program ``select_config``'s rule gives that tile; fractions of the
copy rate measured in the same run (bytes: the bf16 read, two one-byte copies written). ``--best-tile``
prints only the tile with the least summed time (for a step timed at it afterwards).

    PYTHONPATH=.:benchmarks python3 benchmarks/fp8_cast_probe.py [--quick]
"""

from __future__ import annotations

import argparse
from unittest import mock

import torch

from polyrec.hardware import calibrate
from polyrec.kernels import fp8
from polyrec.results import write_results

#: [M, N] bf16 tensors cast (MLPerf DLRM-DCNv2 at batch 65536).
SHAPES = ((65536, 3456), (65536, 1024), (65536, 512))
#: (BLOCK_M, BLOCK_N, warps) tried, each once; the first is today's (``fp8.BLOCK_M``, ``BLOCK_N``, ``NUM_WARPS``).
TILES = tuple(dict.fromkeys(((fp8.BLOCK_M, fp8.BLOCK_N, fp8.NUM_WARPS), (64, 64, 4), (64, 128, 4), (32, 128, 4),
                             (128, 128, 8), (128, 32, 4), (256, 64, 8))))


def cast_ms(x: torch.Tensor, tile: tuple[int, int, int]) -> float:
    """ms per plain + transposed ``cast_fp8`` of x at ``tile``, for a role with a history."""
    scaling = fp8.Fp8Scaling([fp8.FORWARD]).to(x.device)
    scaling.begin(True)
    fp8.cast_fp8(x, scaling, 0, transposed=True)
    block_m, block_n, warps = tile
    units = torch.cuda.get_device_properties(x.device).multi_processor_count
    with mock.patch.multiple(fp8, BLOCK_M=block_m, BLOCK_N=block_n, NUM_WARPS=warps):
        fp8.select_config.cache_clear()
        config = fp8.select_config(*x.shape, units)
    fp8.select_config.cache_clear()
    return calibrate.steady_ms(lambda: fp8.cast_fp8(x, scaling, 0, transposed=True, config=config))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small shape (smoke test)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("fp8_cast_probe times Triton kernels on a GPU; none is visible")
    copy = calibrate.measure_copy_bandwidth(2 << 30)
    rows = []
    for m, n in ((4096, 512),) if args.quick else SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        for tile in TILES:
            ms = cast_ms(x, tile)
            rows.append({"m": m, "n": n, "block_m": tile[0], "block_n": tile[1], "warps": tile[2], "ms": ms,
                         "of_copy": 4 * m * n / (ms * 1e-3) / copy})
            print(rows[-1], flush=True)
    totals = {tile: sum(r["ms"] for r in rows if (r["block_m"], r["block_n"], r["warps"]) == tile) for tile in TILES}
    best = min(totals, key=totals.get)
    write_results("fp8_cast_probe" + ("_quick" if args.quick else ""), {"rows": rows}, rows=rows,
                  summary={"copy_bandwidth": copy, "best_tile": list(best), "best_total_ms": totals[best],
                           "current_total_ms": totals[TILES[0]]})
    print("best tile", *best)


if __name__ == "__main__":
    main()
