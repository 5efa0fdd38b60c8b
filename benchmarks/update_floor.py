"""The embedding update's memory pattern without its work: how fast can any kernel read and write back
random rows? The floor the fused row-wise Adagrad update is measured against.

The TBE backward's bytes (issue 4's ``bwd frac``) are priced at the copy rate, but the update reads
*and writes* ~10M random 516-byte rows (weights and row-wise state) among 204M and gathers one gradient
slice per id: not a stream. This measures, in one process:

- the copy rate (``tbe.copy_rate``);
- ``ideal_update_kernel``, a minimal Triton kernel over ``--unique`` distinct rows drawn uniformly from
  ``--rows`` rows of ``--dim`` fp32 elements, under each tile of ``TILES``, in three modes: ``read`` (gather
  the rows, no writes), ``rmw`` (read each row and its state, write both back), ``update`` (row-wise
  Adagrad: ``rmw`` plus one gradient slice per row, fp32 or bf16); the rows visited sorted (as the fused
  update visits them) or shuffled, the gradient slices at random or one after another (``CASES``). No
  duplicates, no sort, no scan: what is left is the memory system.

Rates are bytes moved (rows read and written, state, gradient slices) per second, and that as a
fraction of the copy rate. The module's own update is timed by ``tbe.py`` / ``tbe_checkout_ab.py``.

    PYTHONPATH=.:benchmarks python3 benchmarks/update_floor.py [--rows 204184588] [--unique 10205714]

Defaults: the MLPerf tables' rows and the unique rows of one uniform MLPerf step (``tbe.py``'s
``unique_rows``, 2026-12-02). Allocates rows x dim x 4 bytes (105 GB by default). About a minute on an H200.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from tbe import bench_ms, copy_rate

from polyrec.results import write_results

MODES = {"read": 0, "rmw": 1, "update": 2}
#: (rows per program, warps) of ``ideal_update_kernel``.
TILES = ((2, 1), (4, 1), (8, 1), (8, 2), (16, 2), (16, 4), (32, 4), (32, 8))
#: Rows of the gradient matrix a slice is drawn from (MLPerf: batch 65536 x 26 features).
GRAD_SLICES = 65536 * 26


@triton.jit
def ideal_update_kernel(w_ptr, s_ptr, g_ptr, rows_ptr, src_ptr, sink_ptr, n, lr, eps,
                        D: tl.constexpr, R: tl.constexpr, MODE: tl.constexpr):
    """Rows ``rows[i]`` for i in this program's R positions: MODE 0 sums them into ``sink`` (reads only),
    1 writes each row + 1 and its state + 1, 2 applies row-wise Adagrad with gradient slice ``src[i]``."""
    i = tl.program_id(0) * R + tl.arange(0, R)
    ok = i < n
    row = tl.load(rows_ptr + i, mask=ok, other=0)
    d = tl.arange(0, D)
    addr = row[:, None] * D + d[None, :]
    w = tl.load(w_ptr + addr, mask=ok[:, None], other=0.0)
    if MODE == 0:
        tl.store(sink_ptr + tl.program_id(0) * D + d, tl.sum(w, axis=0))
    else:
        s = tl.load(s_ptr + row, mask=ok, other=0.0)
        if MODE == 1:
            w = w + 1.0
            s = s + 1.0
        else:
            src = tl.load(src_ptr + i, mask=ok, other=0)
            g = tl.load(g_ptr + src[:, None] * D + d[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
            s = s + tl.sum(g * g, axis=1) / D
            w = w - g * (lr / (tl.sqrt(s) + eps))[:, None]
        tl.store(w_ptr + addr, w, mask=ok[:, None])
        tl.store(s_ptr + row, s, mask=ok)


def mode_bytes(mode: str, unique: int, dim: int, grad_bytes: int) -> int:
    """Bytes a mode moves: rows read (and written), row-wise state read and written, gradient slices."""
    row = 4 * dim
    if mode == "read":
        return unique * row
    rmw = unique * (2 * row + 2 * 4)
    return rmw if mode == "rmw" else rmw + unique * grad_bytes * dim


#: (mode, gradient dtype, order) of each measured case. Orders: "sorted" = rows ascending, gradient slices at
#: random (the fused update's pattern); "shuffled" = the same rows in random order; "bag-major" = rows in random
#: order, gradient slices read one after another (an update walking the ids in input order, each bag's
#: slice read once: the pattern of the seventeenth session's solo kernel, docs/tbe.md).
CASES = (("read", "float32", "sorted"), ("rmw", "float32", "sorted"), ("update", "float32", "sorted"),
         ("update", "bfloat16", "sorted"), ("rmw", "float32", "shuffled"), ("update", "float32", "shuffled"),
         ("update", "float32", "bag-major"))


def visit_orders(rows: int, unique: int, gen: torch.Generator) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per order of CASES: the rows in the order visited and each visit's gradient slice."""
    dev = gen.device
    chosen = torch.randperm(rows, device=dev, generator=gen)[:unique]  # distinct rows, in random order
    random_slices = torch.randint(0, GRAD_SLICES, (unique,), device=dev, generator=gen)
    in_turn = torch.arange(unique, device=dev) % GRAD_SLICES
    return {"sorted": (chosen.sort().values, random_slices), "shuffled": (chosen, random_slices),
            "bag-major": (chosen, in_turn)}


def measure(args) -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    weights = torch.empty(args.rows * args.dim, device="cuda")
    state = torch.zeros(args.rows, device="cuda")
    orders = visit_orders(args.rows, args.unique, gen)
    grads = {dtype: torch.randn(GRAD_SLICES * args.dim, device="cuda", generator=gen).to(getattr(torch, dtype))
             for dtype in {c[1] for c in CASES}}
    out = []
    for mode, grad_dtype, order in CASES:
        rows, src = orders[order]
        grad = grads[grad_dtype]
        for r, warps in TILES:
            programs = triton.cdiv(args.unique, r)
            sink = torch.empty(programs * args.dim, device="cuda") if mode == "read" else state
            ms = bench_ms(lambda: ideal_update_kernel[(programs,)](
                weights, state, grad, rows, src, sink, args.unique, 0.01, 1e-8, D=args.dim, R=r,
                MODE=MODES[mode], num_warps=warps))
            nbytes = mode_bytes(mode, args.unique, args.dim, grad.element_size())
            out.append({"mode": mode, "grad": grad_dtype, "order": order, "rows_per_program": r, "warps": warps,
                        "ms": ms, "bytes": nbytes, "TBps": nbytes / ms / 1e9})
            print(out[-1], flush=True)
    return out


def summarize(rows: list[dict], copy: float) -> dict:
    """Per case of CASES: the best tile, its rate and its fraction of the copy rate."""
    best = {}
    for r in rows:
        key = f"{r['mode']}_{r['grad']}_{r['order']}"
        if key not in best or r["ms"] < best[key]["ms"]:
            best[key] = r
    return {"copy_TBps": copy / 1e12} | {
        f"{key}_best": {"tile": f"{r['rows_per_program']}x w{r['warps']}", "ms": r["ms"], "TBps": r["TBps"],
                        "frac_of_copy": r["TBps"] * 1e12 / copy} for key, r in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=204_184_588, help="rows of the table (MLPerf: 204184588)")
    parser.add_argument("--unique", type=int, default=10_205_714, help="distinct rows updated")
    parser.add_argument("--dim", type=int, default=128, help="fp32 elements per row")
    args = parser.parse_args()
    if not 0 < args.unique <= args.rows or args.dim < 1 or args.dim & (args.dim - 1):
        raise SystemExit("--unique must be in [1, --rows] and --dim a power of two")
    copy = copy_rate()
    rows = measure(args)
    summary = {"rows": args.rows, "unique": args.unique, "dim": args.dim} | summarize(rows, copy)
    write_results("update_floor", {"rows": rows, "summary": summary}, rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
