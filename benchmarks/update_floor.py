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
  update visits them) or shuffled, the gradient slices at random or one after another, or grouped by window of
  the gradient with the rows sorted within each (``chunked-K``) (``CASES``). No duplicates, no sort, no scan:
  what is left is the memory system.

Each case names where the row-wise state lives (``LAYOUTS``): in its own fp32 array, as the module keeps it
(``separate``), nowhere (``no-state``: the rows alone, what any layout costs at least), or inline, in the
padding of a row of 528 or 544 bytes (``inline-528`` / ``inline-544``): the state's 32-byte sector then lies
next to its row instead of in an array of its own. ``padded-544`` keeps no state in 544-byte rows: what
the rows' lost 512-byte alignment costs by itself.

Rates are bytes moved (rows read and written, state, gradient slices) per second, and that as a
fraction of the copy rate. The module's own update is timed by ``tbe.py`` / ``tbe_checkout_ab.py``.

    PYTHONPATH=.:benchmarks python3 benchmarks/update_floor.py [--rows 204184588] [--unique 10205714] \
        [--layouts separate,no-state,inline-528,inline-544,padded-544] [--orders sorted,chunked-32]

Defaults: the MLPerf tables' rows and the unique rows of one uniform MLPerf step (``tbe.py``'s
``unique_rows``, 2026-12-02). Allocates rows x (dim + padding) x 4 bytes, one layout's table at a time (at
most 111 GB by default). About two minutes on an H200.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from tbe import bench_ms, copy_rate

from polyrec.results import write_results

MODES = {"read": 0, "rmw": 1, "update": 2}
#: ``ideal_update_kernel``'s STATE: none, its own array ``s_ptr[row]``, inline at element ``dim`` of the padded row.
STATE_NONE, STATE_SEPARATE, STATE_INLINE = 0, 1, 2
#: Where the row-wise state lives: (padding fp32 elements per stored row, state kind) per layout (a layout's
#: stride is ``dim`` + its padding; the padding is given for dim 128, ``row_stride`` scales it).
LAYOUTS = {"separate": (0, STATE_SEPARATE), "no-state": (0, STATE_NONE), "inline-528": (4, STATE_INLINE),
           "inline-544": (8, STATE_INLINE), "padded-544": (8, STATE_NONE)}
#: (rows per program, warps) of ``ideal_update_kernel``.
TILES = ((2, 1), (4, 1), (8, 1), (8, 2), (16, 2), (16, 4), (32, 4), (32, 8))
#: Rows of the gradient matrix a slice is drawn from (MLPerf: batch 65536 x 26 features).
GRAD_SLICES = 65536 * 26
#: Windows of the gradient of the ``chunked-K`` orders (0.87 GB of fp32 slices: 109 / 27 / 6.8 MB each).
CHUNKS = (8, 32, 128)


@triton.jit
def ideal_update_kernel(w_ptr, s_ptr, g_ptr, rows_ptr, src_ptr, sink_ptr, n, lr, eps,
                        D: tl.constexpr, BLOCK: tl.constexpr, R: tl.constexpr, MODE: tl.constexpr,
                        STRIDE: tl.constexpr, STATE: tl.constexpr):
    """Rows ``rows[i]`` (``D`` elements every ``STRIDE``, read as BLOCK >= D lanes with those past D masked off, as
    the fused update reads rows of such dims) for i in this program's R positions: MODE 0 sums them into ``sink``
    (reads only), 1 writes each row + 1 and its state + 1, 2 applies row-wise Adagrad with gradient slice ``src[i]``.
    The state (``STATE``): none, ``s_ptr[row]``, or element D of the row."""
    i = tl.program_id(0) * R + tl.arange(0, R)
    ok = i < n
    row = tl.load(rows_ptr + i, mask=ok, other=0)
    d = tl.arange(0, BLOCK)
    in_row = d < D
    cell = ok[:, None] & in_row[None, :]
    addr = row[:, None] * STRIDE + d[None, :]
    w = tl.load(w_ptr + addr, mask=cell, other=0.0)
    if MODE == 0:
        tl.store(sink_ptr + tl.program_id(0) * D + d, tl.sum(w, axis=0), mask=in_row)
    else:
        if STATE == 1:
            s_ptrs = s_ptr + row
        else:
            s_ptrs = w_ptr + row * STRIDE + D
        s = tl.zeros((R,), tl.float32)
        if STATE != 0:
            s = tl.load(s_ptrs, mask=ok, other=0.0)
        if MODE == 1:
            w = w + 1.0
            s = s + 1.0
        else:
            src = tl.load(src_ptr + i, mask=ok, other=0)
            g = tl.load(g_ptr + src[:, None] * D + d[None, :], mask=cell, other=0.0).to(tl.float32)
            s = s + tl.sum(g * g, axis=1) / D
            w = w - g * (lr / (tl.sqrt(s) + eps))[:, None]
        tl.store(w_ptr + addr, w, mask=cell)
        if STATE != 0:
            tl.store(s_ptrs, s, mask=ok)


def row_stride(layout: str, dim: int) -> int:
    """fp32 elements per stored row under ``layout`` (the padding scaled from dim 128, at least 1 element
    where the state is inline)."""
    pad, state = LAYOUTS[layout]
    return dim + max(int(state == STATE_INLINE), pad * dim // 128)


def mode_bytes(mode: str, unique: int, dim: int, grad_bytes: int, layout: str = "separate") -> int:
    """Bytes a mode moves: rows read (and written), row-wise state read and written (where the layout has
    one), gradient slices; a row's padding is not counted."""
    row = 4 * dim
    if mode == "read":
        return unique * row
    rmw = unique * (2 * row + (2 * 4 if LAYOUTS[layout][1] != STATE_NONE else 0))
    return rmw if mode == "rmw" else rmw + unique * grad_bytes * dim


#: (mode, gradient dtype, order, layout) of each measured case. Orders: "sorted" = rows ascending, gradient slices at
#: random (the fused update's pattern); "shuffled" = the same rows in random order; "bag-major" = rows in random
#: order, gradient slices read one after another (an update walking the ids in input order, each bag's
#: slice read once: the pattern of the seventeenth session's solo kernel, docs/tbe.md).
CASES = (("read", "float32", "sorted", "separate"), ("rmw", "float32", "sorted", "separate"),
         ("update", "float32", "sorted", "separate"), ("update", "bfloat16", "sorted", "separate"),
         ("rmw", "float32", "shuffled", "separate"), ("update", "float32", "shuffled", "separate"),
         ("update", "float32", "bag-major", "separate"), ("rmw", "float32", "sorted", "no-state"),
         ("update", "float32", "sorted", "no-state"), ("rmw", "float32", "sorted", "inline-528"),
         ("update", "float32", "sorted", "inline-528"), ("rmw", "float32", "sorted", "inline-544"),
         ("update", "float32", "sorted", "inline-544"), ("update", "bfloat16", "sorted", "inline-544"),
         ("read", "float32", "sorted", "padded-544"), ("rmw", "float32", "sorted", "padded-544"),
         *(("update", "float32", f"chunked-{k}", "separate") for k in CHUNKS),
         ("rmw", "float32", "chunked-32", "separate"), ("update", "bfloat16", "chunked-32", "separate"))


def visit_orders(rows: int, unique: int, gen: torch.Generator) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per order of CASES: the rows in the order visited and each visit's gradient slice."""
    dev = gen.device
    chosen = torch.randperm(rows, device=dev, generator=gen)[:unique]  # distinct rows, in random order
    random_slices = torch.randint(0, GRAD_SLICES, (unique,), device=dev, generator=gen)
    in_turn = torch.arange(unique, device=dev) % GRAD_SLICES
    orders = {"sorted": (chosen.sort().values, random_slices), "shuffled": (chosen, random_slices),
              "bag-major": (chosen, in_turn)}
    for chunks in CHUNKS:
        orders[f"chunked-{chunks}"] = chunked(chosen, random_slices, chunks, rows)
    return orders


def chunked(rows_visited: torch.Tensor, slices: torch.Tensor, chunks: int,
            rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The visits grouped by which of ``chunks`` equal ranges of the gradient their slice lies in, each group's
    rows ascending: an update that takes the bags a window at a time, so that a window's slices stay in L2
    while its rows are visited in order."""
    window = -(-GRAD_SLICES // chunks)
    order = torch.argsort((slices // window) * rows + rows_visited)
    return rows_visited[order], slices[order]


def measure(args) -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    state = torch.zeros(args.rows, device="cuda")
    orders = visit_orders(args.rows, args.unique, gen)
    cases = [c for c in CASES if c[3] in args.layouts and (not args.orders or c[2] in args.orders)]
    grads = {dtype: torch.randn(GRAD_SLICES * args.dim, device="cuda", generator=gen).to(getattr(torch, dtype))
             for dtype in {c[1] for c in cases}}
    out = []
    for stride in sorted({row_stride(c[3], args.dim) for c in cases}):  # one table buffer alive at a time
        weights = torch.empty(args.rows * stride, device="cuda")
        for mode, grad_dtype, order, layout in (c for c in cases if row_stride(c[3], args.dim) == stride):
            rows, src = orders[order]
            grad = grads[grad_dtype]
            for r, warps in TILES:
                programs = triton.cdiv(args.unique, r)
                sink = torch.empty(programs * args.dim, device="cuda") if mode == "read" else state
                ms = bench_ms(lambda: ideal_update_kernel[(programs,)](
                    weights, state, grad, rows, src, sink, args.unique, 0.01, 1e-8, D=args.dim,
                    BLOCK=triton.next_power_of_2(args.dim), R=r, MODE=MODES[mode], STRIDE=stride,
                    STATE=LAYOUTS[layout][1], num_warps=warps))
                nbytes = mode_bytes(mode, args.unique, args.dim, grad.element_size(), layout)
                out.append({"mode": mode, "grad": grad_dtype, "order": order, "layout": layout,
                            "rows_per_program": r, "warps": warps, "ms": ms, "bytes": nbytes,
                            "TBps": nbytes / ms / 1e9})
                print(out[-1], flush=True)
        del weights
        torch.cuda.empty_cache()
    return out


def summarize(rows: list[dict], copy: float) -> dict:
    """Per case of CASES: the best tile, its rate and its fraction of the copy rate."""
    best = {}
    for r in rows:
        layout = r.get("layout", "separate")
        key = f"{r['mode']}_{r['grad']}_{r['order']}" + ("" if layout == "separate" else f"_{layout}")
        if key not in best or r["ms"] < best[key]["ms"]:
            best[key] = r
    return {"copy_TBps": copy / 1e12} | {
        f"{key}_best": {"tile": f"{r['rows_per_program']}x w{r['warps']}", "ms": r["ms"], "TBps": r["TBps"],
                        "frac_of_copy": r["TBps"] * 1e12 / copy} for key, r in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=204_184_588, help="rows of the table (MLPerf: 204184588)")
    parser.add_argument("--unique", type=int, default=10_205_714, help="distinct rows updated")
    parser.add_argument("--dim", type=int, default=128,
                        help="fp32 elements per row (any: a dim between powers of two is read masked, as the update "
                             "reads it)")
    parser.add_argument("--layouts", default=",".join(LAYOUTS),
                        help=f"comma-separated state layouts to measure, of {', '.join(LAYOUTS)} (default: all)")
    parser.add_argument("--orders", default="", help="comma-separated visit orders to measure (default: all)")
    args = parser.parse_args()
    if not 0 < args.unique <= args.rows or args.dim < 1:
        raise SystemExit("--unique must be in [1, --rows] and --dim at least 1")
    args.layouts = args.layouts.split(",")
    args.orders = args.orders.split(",") if args.orders else []
    known = sorted({c[2] for c in CASES})
    if unknown := [name for name in args.orders if name not in known]:
        raise SystemExit(f"--orders: unknown order(s) {unknown}; choose from {known}")
    if unknown := [name for name in args.layouts if name not in LAYOUTS]:
        raise SystemExit(f"--layouts: unknown layout(s) {unknown}; choose from {', '.join(LAYOUTS)}")
    copy = copy_rate()
    rows = measure(args)
    summary = {"rows": args.rows, "unique": args.unique, "dim": args.dim} | summarize(rows, copy)
    write_results("update_floor", {"rows": rows, "summary": summary}, rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
