"""The cross network's epilogue passes at other tile shapes: the forward cross pass and CrossGrad over
MLPerf's [65536, 3456] bf16, each timed back to back (``calibrate.steady_ms``) at every (BLOCK_M,
BLOCK_N, warps) of a small grid, against the copy rate measured in the same run.

``dense_ops_check`` measured the CrossGrad pass at 0.84 of the copy rate inside the step and the
forward pass at 1.05 (both at the shared 32 x 128, 4-warp tile of ``gemm_configs``). The tile is a
module constant of ``polyrec.kernels.gemm``; this probe sets it for each row and restores it.

    PYTHONPATH=.:benchmarks python3 benchmarks/cross_pass_probe.py [--rows 65536] [--dim 3456]
"""

from __future__ import annotations

import argparse
import itertools

import torch

from polyrec.hardware import calibrate
from polyrec.kernels import gemm
from polyrec.results import write_results

#: Tiles tried: (BLOCK_M, BLOCK_N, num_warps).
TILES = tuple(itertools.product((16, 32, 64, 128), (64, 128, 256), (4, 8)))
#: bf16 [M, N] tensors each pass moves: forward reads p, x0, x and writes x_next; CrossGrad reads p,
#: grad, x0, d_x0 and writes g, d_x0 (the column-sum partials apart).
FORWARD_TENSORS, CROSS_GRAD_TENSORS = 4, 6


def passes(m: int, n: int):
    """(forward pass, CrossGrad pass) as callables on fresh tensors; CrossGrad accumulates into d_x0."""
    def t():
        return torch.randn(m, n, device="cuda", dtype=torch.bfloat16)

    p, x0, x, grad, d_x0 = t(), t(), t(), t(), t()
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    bias_grad = torch.empty(n, device="cuda", dtype=torch.float32)
    out = torch.empty_like(p)
    forward = lambda: gemm.epilogue_pass(p, bias=bias, cross=(x0, x), out=out)  # noqa: E731
    cg = gemm.CrossGrad(grad=grad, x0=x0, d_x0=d_x0, accumulate=True, bias_grad=bias_grad)
    backward = lambda: gemm.epilogue_pass(p, bias=bias, cross_grad=cg, out=out)  # noqa: E731
    return forward, backward


def timed(fn, tile) -> float:
    saved = gemm.REDUCE_BLOCK_M, gemm.REDUCE_BLOCK_N, gemm.REDUCE_NUM_WARPS
    gemm.REDUCE_BLOCK_M, gemm.REDUCE_BLOCK_N, gemm.REDUCE_NUM_WARPS = tile
    try:
        return calibrate.steady_ms(fn)
    finally:
        gemm.REDUCE_BLOCK_M, gemm.REDUCE_BLOCK_N, gemm.REDUCE_NUM_WARPS = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=65536)
    parser.add_argument("--dim", type=int, default=3456)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cross_pass_probe times Triton kernels on a GPU; none is visible")
    copy = calibrate.measure_copy_bandwidth(2 << 30)
    forward, backward = passes(args.rows, args.dim)
    tensor_bytes = args.rows * args.dim * 2
    rows = []
    for tile in TILES:
        fwd_ms, bwd_ms = timed(forward, tile), timed(backward, tile)
        rows.append({"block_m": tile[0], "block_n": tile[1], "warps": tile[2], "forward_ms": fwd_ms,
                     "cross_grad_ms": bwd_ms,
                     "forward_of_copy": FORWARD_TENSORS * tensor_bytes / (fwd_ms * 1e-3) / copy,
                     "cross_grad_of_copy": CROSS_GRAD_TENSORS * tensor_bytes / (bwd_ms * 1e-3) / copy})
        print(f"{tile}: forward {fwd_ms:.3f} ms ({rows[-1]['forward_of_copy']:.3f}), "
              f"CrossGrad {bwd_ms:.3f} ms ({rows[-1]['cross_grad_of_copy']:.3f})", flush=True)
    current = next(r for r in rows if (r["block_m"], r["block_n"], r["warps"]) ==
                   (gemm.REDUCE_BLOCK_M, gemm.REDUCE_BLOCK_N, gemm.REDUCE_NUM_WARPS))
    best = {k: min(rows, key=lambda r: r[f"{k}_ms"]) for k in ("forward", "cross_grad")}
    summary = {"rows": args.rows, "dim": args.dim, "copy_bandwidth": copy,
               "current_tile": [gemm.REDUCE_BLOCK_M, gemm.REDUCE_BLOCK_N, gemm.REDUCE_NUM_WARPS],
               "current_forward_ms": current["forward_ms"], "current_cross_grad_ms": current["cross_grad_ms"],
               **{f"best_{k}": [b["block_m"], b["block_n"], b["warps"], b[f"{k}_ms"]] for k, b in best.items()}}
    write_results("cross_pass_probe", {"rows": rows}, rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
