"""Where a full training step's time goes: every GPU kernel of the trainer's step, by the torch profiler.

A diagnostic for the training issue: the dense phase of MLPerf DLRM-DCNv2 measured about 2x its
floor (96 MFLOP per sample over the measured matmul rate). This script runs polyrec's trainer on the
MLPerf model (tables capped: the dense work does not depend on the row counts) and lists the kernels
of a step grouped by name, with their share of the step. It writes ``e2e_profile_<gpu>_<date>.json``
(the preset, row dtype and data other than the default synthetic power-law ids marked in the name, e.g.
``e2e_profile_uniform_...`` for ``--data synthetic:uniform``; all three in the summary).

    PYTHONPATH=. python3 benchmarks/e2e_profile.py [--quick] [--preset P] [--batch 65536] [--row-cap 4000000]

About 1 minute on an H200.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from polyrec.results import write_results
from polyrec.runtime import TrainConfig, Trainer
from profiling import host_profile, kernel_table

DENSE_FLOP_PER_SAMPLE = 96e6  # issue 5: MLPerf DLRM-DCNv2 forward + backward dense work per sample
#: The trainer's timer run before the profile: untimed and timed steps. The synthetic batches are made once,
#: before the first step, as many as the whole script takes (a model memorises a few cycled ones, and then
#: steps faster: benchmarks/data_pool_probe.py).
TIMER_WARMUP, TIMER_STEPS = 3, 5


def data_suffix(data: str) -> str:
    """The results name's mark of ``--data`` other than the default: "_uniform" for synthetic:uniform, else the
    source's kind ("_criteo" for criteo:PATH; no path in a file name)."""
    if data == "synthetic":
        return ""
    kind, _, detail = data.partition(":")
    return f"_{detail}" if kind == "synthetic" and detail else f"_{kind}"


def rows_suffix(embedding_dtype: str) -> str:
    """The results name's mark of ``--embedding-dtype`` other than fp32: "_fp16_rows", or "_mixed_rows" for one
    dtype per table (no list of 26 names in a file name)."""
    if embedding_dtype == "fp32":
        return ""
    return "_mixed_rows" if "," in embedding_dtype else f"_{embedding_dtype}_rows"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="dcnv2-small at batch 1024 (smoke test)")
    parser.add_argument("--preset", default="mlperf-dcnv2", help="model preset (results of others are named after it)")
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--row-cap", type=int, default=4_000_000, help="rows per table at most (0: full size)")
    parser.add_argument("--data", default="synthetic", help="synthetic (power-law ids) or synthetic:uniform")
    parser.add_argument("--embedding-dtype", default="fp32",
                        help="embedding rows: fp32, fp16 or bf16, or one per table")
    parser.add_argument("--precision", default="auto", help="dense matmuls: auto (bf16), bf16 or fp8")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--host", action="store_true",
                        help="also profile the host side (cProfile of the Python calls of a step)")
    parser.add_argument("--cuda-graphs", action="store_true", help="the dense half CUDA-graphed (default: eager)")
    parser.add_argument("--trace", type=Path, help="also write the profiled steps' timeline here (Chrome trace JSON)")
    args = parser.parse_args()
    pool = TIMER_WARMUP + TIMER_STEPS + args.steps * (2 if args.host else 1)  # no step sees a batch twice
    cfg = TrainConfig(preset="dcnv2-small" if args.quick else args.preset, batch_size=1024 if args.quick else args.batch,
                      row_cap=args.row_cap or None, steps=10_000, synthetic_pool=pool, cuda_graphs=args.cuda_graphs,
                      data=args.data, embedding_dtype=args.embedding_dtype, precision=args.precision)
    trainer = Trainer(cfg, progress=False)
    timing = trainer.benchmark(warmup=TIMER_WARMUP, steps=TIMER_STEPS)
    rows = kernel_table(trainer.train_step, reps=args.steps, warmup=0, trace=args.trace)
    host = host_profile(trainer.train_step, args.steps) if args.host else None
    total = sum(r["ms_per_step"] for r in rows)
    for r in rows:
        r["share"] = r["ms_per_step"] / total
    floor_ms = DENSE_FLOP_PER_SAMPLE * cfg.batch_size / 686e12 * 1e3
    summary = {"preset": cfg.preset, "batch": cfg.batch_size, "data": args.data, "row_cap": args.row_cap,
               "embedding_dtype": args.embedding_dtype, "precision": args.precision, "cuda_graphs": args.cuda_graphs,
               "kernel_ms_per_step": total,
               "dense_floor_ms_at_686_tflops": floor_ms, **{f"timer_{k}": v for k, v in timing.items()}}
    name = ("e2e_profile" if cfg.preset == "mlperf-dcnv2" else f"e2e_profile_{cfg.preset}") + (
        rows_suffix(args.embedding_dtype)) + data_suffix(args.data) + (
        "_fp8_dense" if args.precision == "fp8" else "") + ("_graphs" if args.cuda_graphs else "")
    write_results(name, {"rows": rows, "timing": timing, "host_profile": host}, rows=rows[:60],
                  summary=summary)
    print(f"kernel time per step {total:.2f} ms; timer: {timing}")
    for r in rows[:40]:
        print(f"{r['ms_per_step']:8.3f} ms {r['share']:6.1%}  x{r['calls_per_step']:<4.0f} {r['kernel']}")
    if host:
        print(host)


if __name__ == "__main__":
    main()
