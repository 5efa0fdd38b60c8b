"""The cross network's epilogue passes at other tile shapes: the forward cross pass and CrossGrad over
MLPerf's [65536, 3456] bf16 (also CrossGrad without its bias gradient and without the accumulation),
each timed back to back (``calibrate.steady_ms``) at every (BLOCK_M, BLOCK_N, warps) of a small grid,
against the copy rate measured in the same run; then CrossGrad at today's tile with each program
walking 1-16 row blocks (its bias-gradient column sum once per program). ``--fp8``: both passes also
write the fp8 copies the fp8 dense layers take (e4m3 x_l in the forward, e5m2 g in CrossGrad: a plain
and a transposed copy, one byte an element each), beside the bf16 passes at today's tile; and CrossGrad
writing g's copies only (``epilogue_pass``'s ``fp8_only``, as the fp8 cross network runs it), and the forward
pass writing only its copies (the last layer's, whose output the top MLP reads only as its copies).

``dense_ops_check`` measured the CrossGrad pass at 0.84 of the copy rate inside the step and the
forward pass at 1.05 (both at the shared 32 x 128, 4-warp tile of ``gemm_configs``). The tile is a
module constant of ``polyrec.kernels.gemm``; this probe sets it for each row and restores it.

    PYTHONPATH=.:benchmarks python3 benchmarks/cross_pass_probe.py [--rows 65536] [--dim 3456] [--fp8] \
        [--tiles 32x128x4,32x128x8]
"""

from __future__ import annotations

import argparse
import itertools
from unittest import mock

import torch

from polyrec.hardware import calibrate
from polyrec.kernels import gemm_configs, gemm_epilogue, gemm_launch
from polyrec.kernels.fp8 import FORWARD, GRADIENT, Fp8Out, formats
from polyrec.results import write_results

#: Tiles tried: (BLOCK_M, BLOCK_N, num_warps) (the 256-column and 128-row tiles of a first run spilled
#: and lost up to 13x: cross_pass_probe_2026-12-01).
TILES = tuple(itertools.product((16, 32, 64), (64, 128), (4, 8)))
#: Row blocks per CrossGrad program tried at today's tile (``gemm_configs.PASS_ROW_BLOCKS``).
ROW_BLOCKS = (1, 2, 4, 8, 16)
#: bf16 [M, N] tensors each pass moves: forward reads p, x0, x and writes x_next; CrossGrad reads p,
#: grad, x0, d_x0 and writes g, d_x0 (the column-sum partials apart); without the accumulation d_x0
#: is not read.
TENSORS = {"forward": 4, "cross_grad": 6, "cross_grad_no_bias_grad": 6, "cross_grad_no_accumulate": 5}
#: With ``--fp8`` the passes write two one-byte copies more: one bf16 tensor's bytes; writing g's copies only,
#: CrossGrad moves as many bytes as in bf16.
FP8_TENSORS = {"forward": 4, "cross_grad": 6, "forward_fp8": 5, "cross_grad_fp8": 7, "cross_grad_fp8_only": 6,
               "forward_fp8_only": 4}


def passes(m: int, n: int, fp8: bool = False) -> dict:
    """The passes as callables on fresh tensors, by name: the forward cross pass, CrossGrad as the
    middle layers run it (d_x0 accumulated, bias-gradient partials), and CrossGrad without the bias
    gradient and without the accumulation (each one thing less, to see what it costs); with ``fp8``
    the last two are replaced by both passes writing fp8 copies, and CrossGrad writing only g's."""
    def t():
        return torch.randn(m, n, device="cuda", dtype=torch.bfloat16)

    p, x0, x, grad, d_x0 = t(), t(), t(), t(), t()
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    bias_grad = torch.empty(n, device="cuda", dtype=torch.float32)
    out = torch.empty_like(p)
    def cross_grad(copies=None, only=False, **kw):
        cg = gemm_epilogue.CrossGrad(grad=grad, x0=x0, d_x0=d_x0, **({"accumulate": True, "bias_grad": bias_grad} | kw))
        return lambda: gemm_epilogue.epilogue_pass(p, bias=bias, cross_grad=cg, out=None if only else out,
                                                   fp8=copies, fp8_only=only)

    found = {"forward": lambda: gemm_epilogue.epilogue_pass(p, bias=bias, cross=(x0, x), out=out),
             "cross_grad": cross_grad()}
    if not fp8:
        return found | {"cross_grad_no_bias_grad": cross_grad(bias_grad=None),
                        "cross_grad_no_accumulate": cross_grad(accumulate=False)}
    fmts = formats(p.device)
    forward_copies, grad_copies = (fp8_copies(m, n, fmts[kind]) for kind in (FORWARD, GRADIENT))
    def forward_fp8():
        return gemm_epilogue.epilogue_pass(p, bias=bias, cross=(x0, x), out=out, fp8=forward_copies)

    def forward_fp8_only():
        return gemm_epilogue.epilogue_pass(p, bias=bias, cross=(x0, x), fp8=forward_copies, fp8_only=True)

    return found | {"forward_fp8": forward_fp8, "cross_grad_fp8": cross_grad(grad_copies),
                    "cross_grad_fp8_only": cross_grad(grad_copies, only=True), "forward_fp8_only": forward_fp8_only}


def fp8_copies(m: int, n: int, fmt) -> Fp8Out:
    """Where a pass over [m, n] writes fp8 copies in ``fmt`` (scale 1: the inputs are N(0, 1))."""
    return Fp8Out(q=torch.empty(m, n, dtype=fmt.dtype, device="cuda"),
                  qt=torch.empty(n, m, dtype=fmt.dtype, device="cuda"),
                  scale=torch.ones(1, device="cuda"), recorded=torch.zeros(1, device="cuda"), fmt=fmt)


def timed(fn, tile) -> float:
    """``fn`` timed back to back with the passes' tile (BLOCK_M, BLOCK_N, warps) set to ``tile``."""
    block_m, block_n, warps = tile
    with mock.patch.multiple(gemm_epilogue, REDUCE_BLOCK_M=block_m, REDUCE_NUM_WARPS=warps,
                             FP8_ONLY_PASS_NUM_WARPS=warps), \
            mock.patch.multiple(gemm_launch, REDUCE_BLOCK_M=block_m, REDUCE_BLOCK_N=block_n):
        return calibrate.steady_ms(fn)


def current_tile(name: str) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, warps) the pass ``name`` runs at today (CrossGrad writing only fp8 copies: its own
    warp count, ``gemm_configs.FP8_ONLY_PASS_NUM_WARPS``)."""
    warps = gemm_configs.FP8_ONLY_PASS_NUM_WARPS if name.endswith("fp8_only") else gemm_configs.REDUCE_NUM_WARPS
    return gemm_configs.REDUCE_BLOCK_M, gemm_configs.REDUCE_BLOCK_N, warps


def parse_tiles(text: str) -> tuple[tuple[int, int, int], ...]:
    """"32x128x4,32x128x8" -> ((32, 128, 4), (32, 128, 8))."""
    try:
        tiles = tuple(tuple(int(v) for v in item.split("x")) for item in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"tiles must be BLOCK_MxBLOCK_NxWARPS,..., got {text!r}") from None
    if any(len(t) != 3 for t in tiles):
        raise argparse.ArgumentTypeError(f"tiles must be BLOCK_MxBLOCK_NxWARPS,..., got {text!r}")
    return tiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=65536)
    parser.add_argument("--dim", type=int, default=3456)
    parser.add_argument("--fp8", action="store_true", help="the passes writing fp8 copies, beside bf16")
    parser.add_argument("--tiles", type=parse_tiles, default=TILES,
                        help="BLOCK_MxBLOCK_NxWARPS,... to time (default: the grid of TILES); today's must be among them")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cross_pass_probe times Triton kernels on a GPU; none is visible")
    copy = calibrate.measure_copy_bandwidth(2 << 30)
    fns = passes(args.rows, args.dim, args.fp8)
    missing = sorted({current_tile(k) for k in fns} - set(args.tiles))
    if missing:
        parser.error("--tiles must hold today's tiles of these passes, to compare against: add "
                     + ",".join("x".join(map(str, t)) for t in missing))
    tensors = FP8_TENSORS if args.fp8 else TENSORS
    tensor_bytes = args.rows * args.dim * 2
    rows = []
    for tile in args.tiles:
        row = {"block_m": tile[0], "block_n": tile[1], "warps": tile[2]}
        for name, fn in fns.items():
            ms = timed(fn, tile)
            row |= {f"{name}_ms": ms, f"{name}_of_copy": tensors[name] * tensor_bytes / (ms * 1e-3) / copy}
        rows.append(row)
        print(f"{tile}: " + ", ".join(f"{name} {row[name + '_ms']:.3f} ms ({row[name + '_of_copy']:.3f})"
                                      for name in fns), flush=True)
    current = {k: next(r for r in rows if (r["block_m"], r["block_n"], r["warps"]) == current_tile(k)) for k in fns}
    best = {k: min(rows, key=lambda r: r[f"{k}_ms"]) for k in fns}
    summary = {"rows": args.rows, "dim": args.dim, "copy_bandwidth": copy,
               **{f"current_{k}_tile": list(current_tile(k)) for k in fns},
               **{f"current_{k}_ms": current[k][f"{k}_ms"] for k in fns},
               **{f"best_{k}": [b["block_m"], b["block_n"], b["warps"], b[f"{k}_ms"]] for k, b in best.items()}}
    walked = []
    for blocks in ROW_BLOCKS:
        walked.append({"row_blocks": blocks})
        for name in [k for k in fns if k.startswith("cross_grad") and "_no_" not in k]:
            with mock.patch.multiple(gemm_configs, PASS_ROW_BLOCKS=blocks, PASS_MIN_ROW_PROGRAMS=1):
                ms = calibrate.steady_ms(fns[name])
            walked[-1] |= {f"{name}_ms": ms, f"{name}_of_copy": tensors[name] * tensor_bytes / (ms * 1e-3) / copy}
        print(walked[-1], flush=True)
    for name in [k for k in walked[0] if k.endswith("_ms")]:
        summary[f"{name}_by_row_blocks"] = {w["row_blocks"]: w[name] for w in walked}
    write_results("cross_pass_probe" + ("_fp8" if args.fp8 else ""), {"rows": rows, "row_blocks": walked},
                  rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
