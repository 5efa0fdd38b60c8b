"""Where the embedding step's time goes on the MLPerf shapes: every forward launch config timed, and
the forward+backward kernels timed one by one with the torch profiler. A diagnostic for tuning the
TBE cost model; it writes ``tbe_breakdown_<gpu>_<date>.json``.

    PYTHONPATH=. python3 benchmarks/tbe_breakdown.py [--quick] [--dtype fp16] [--skewed] [--skip-sweep] [--optimizer sgd] [--grad-dtype bf16] [--lane-chunks N]
"""

from __future__ import annotations

import argparse

import torch
import triton

from polyrec.kernels import tbe_select
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_optim import OPTIMIZERS
from polyrec.results import write_results
from profiling import kernel_table
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch


def forward_sweep(module: TableBatchedEmbedding, batch, warp_size: int) -> list[dict]:
    """Time the forward with every candidate config (and 2x / 0.5x warps) forced."""
    key = next(iter(module._configs))
    chosen = module._configs[key]
    rows = []
    for cand in tbe_select.forward_candidates(module.block_d, warp_size):
        for warps in sorted({max(1, cand.num_warps // 2), cand.num_warps, min(16, cand.num_warps * 2)}):
            cfg = tbe_select.ForwardConfig(bags=cand.bags, hots=cand.hots, num_warps=warps)
            module._configs[key] = cfg
            with torch.no_grad():
                ms = triton.testing.do_bench(lambda: module(batch), warmup=20, rep=100, return_mode="median")
            rows.append({"bags": cfg.bags, "hots": cfg.hots, "warps": warps, "fwd_ms": ms,
                         "selected": cfg == chosen})
    module._configs[key] = chosen
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32", help="weight precision of the tables")
    parser.add_argument("--skip-sweep", action="store_true", help="only the kernel table (no forward sweep)")
    parser.add_argument("--skewed", action="store_true", help="the benchmark's skewed ids (default uniform)")
    parser.add_argument("--optimizer", default="rowwise_adagrad", choices=OPTIMIZERS,
                        help="the fused optimizer (row-wise Adagrad is MLPerf's)")
    parser.add_argument("--grad-dtype", choices=("fp32", "bf16"), default="fp32",
                        help="the pooled output's (and its gradient's) dtype: bf16 as in training with bf16 dense")
    parser.add_argument("--lane-chunks", type=int, default=None,
                        help="force the lane update's tiles per program for any dtype (default: the selector's)")
    args = parser.parse_args()
    if args.lane_chunks is not None:  # forced for every row and gradient dtype
        tbe_select.LANE_CHUNKS = args.lane_chunks
        tbe_select.lane_chunks = lambda stochastic, grad_bytes=4: args.lane_chunks
    weight_dtype = {"fp32": torch.float32, "fp16": torch.float16}[args.dtype]
    batch_size = 2048 if args.quick else 65536
    rows_per_table = [min(r, 100_000) for r in MLPERF_ROWS] if args.quick else MLPERF_ROWS
    gen = torch.Generator(device="cuda").manual_seed(0)
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows_per_table)]
    out_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.grad_dtype]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind=args.optimizer, lr=0.01),
                                   output_dtype=out_dtype,
                                   weight_dtype=weight_dtype, device="cuda")
    batch = make_batch(rows_per_table, MLPERF_HOTS, batch_size, args.skewed, gen)
    grad = torch.randn(batch_size, DIM * len(tables), device="cuda", generator=gen).to(out_dtype)
    with torch.no_grad():
        module(batch)
    sweep = [] if args.skip_sweep else forward_sweep(module, batch, torch.cuda.get_device_properties(0).warp_size)
    kernels = kernel_table(lambda: module(batch).backward(grad))[:25]
    sort_keys = torch.randint(0, sum(rows_per_table), (batch.nnz,), device="cuda", dtype=torch.int32)
    sort_ms = triton.testing.do_bench(lambda: torch.sort(sort_keys), warmup=10, rep=100, return_mode="median")
    name = (f"tbe_breakdown_{args.dtype}" + ("_skewed" if args.skewed else "")
            + ("" if args.optimizer == "rowwise_adagrad" else f"_{args.optimizer}")
            + ("" if args.grad_dtype == "fp32" else f"_grad{args.grad_dtype}")
            + (f"_chunks{args.lane_chunks}" if args.lane_chunks is not None else ""))
    update = next(c for key, c in module._configs.items() if key[0] == "upd")  # what the backward ran
    summary = {"sort_int32_ms": sort_ms, "update_variant": update.variant, "update_tile": update.tile,
               "lane_chunks": update.chunks}
    write_results(name, {"dtype": args.dtype, "skewed": args.skewed, "optimizer": args.optimizer,
                         "grad_dtype": args.grad_dtype, "forward_sweep": sweep, "kernels": kernels,
                         "nnz": batch.nnz} | summary, rows=kernels, summary=summary)
    print(f"{'bags':>5} {'hots':>5} {'warps':>5} {'fwd ms':>8}")
    for r in sorted(sweep, key=lambda r: r["fwd_ms"]):
        print(f"{r['bags']:>5} {r['hots']:>5} {r['warps']:>5} {r['fwd_ms']:>8.3f}{'  <- selected' if r['selected'] else ''}")
    print(f"torch.sort of {batch.nnz} int32 keys: {sort_ms:.3f} ms")
    for r in kernels:
        print(f"{r['ms_per_step']:8.3f} ms  x{r['calls_per_step']:.0f}  {r['kernel']}")


if __name__ == "__main__":
    main()
