"""The planner's price of each TBE module's forward against the module's measured lookup, table set by table set.

The full-size H100x1 plan keeps MLPerf's tables in two modules (tables 0, 19, 20, 21 in fp16, the rest in fp32).
Profiled on one H100 (``benchmarks/results/mixed_split_profile_2026-12-06/``), the fp16 module's lookup ran as
priced and the fp32 one 1.5x slower. This times the pooled forward (``pooled_forward_kernel``, by the profiler) of
one module over each of these table sets, full size, the trainer's uniform ids at batch 65536, bf16 output:

- the plan's fp16 tables in fp16, its fp32 tables in fp32, every table in bf16 (one module);
- the fp32 tables without their large ones (over ``LARGE_ROWS`` rows) and those large ones alone, in fp32;
- those small tables split by size: the tiny ones (up to ``TINY_ROWS`` rows: each fits one SM's L1) and the mid ones
  (the rest, resident in L2), the mid ones again in bf16 (half the bytes of the same rows), to tell L1 hits, L2
  hits and the L2's bandwidth apart;

each beside the planner's forward for the same module (``shard_cost.tbe_group_seconds``: the device's stored
calibration where there is one, else its datasheet, as ``polyrec plan`` prices it) and its L2-hit fraction
(``tbe_reads.hit_fraction``). One module at a time, freed after.

    PYTHONPATH=.:benchmarks python3 benchmarks/module_forward_check.py [--batch 65536] [--row-cap 0]
"""

from __future__ import annotations

import argparse
import gc

import torch

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.detect import detect
from polyrec.hardware.types import DeviceSpec
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.models.config import preset
from polyrec.perfmodel.tbe_reads import TableLoad, hit_fraction
from polyrec.planner import memory as mem
from polyrec.planner.shard_cost import ShardLoad, tbe_group_seconds
from polyrec.results import write_results
from polyrec.runtime.config import EMBEDDING_DTYPES
from profiling import kernel_table
from tbe import DIM
from tbe_forward_ab import synthetic_batch
from tbe_forward_groups import feature_subset

#: The H100x1 plan's fp16 tables (``polyrec plan --fleet H100x1``, the 2026-12-06 runs).
PLAN_FP16 = (0, 19, 20, 21)
#: Tables of more rows than this are "large" (over 51 MB of fp32 rows at D=128: more than the 50 MB L2 alone).
LARGE_ROWS = 100_000
#: Tables of at most this many rows are "tiny": 256 KB of fp32 rows at D=128, an H100 / H200 SM's combined L1 and
#: shared memory (CUDA C++ Programming Guide, "Compute Capability 9.0"), so each SM may keep them in its own L1.
TINY_ROWS = 512
#: Profiled forwards per case.
REPS = 10


def cases(rows: tuple[int, ...]) -> list[tuple[str, list[int], str]]:
    """(name, tables, row dtype) of each module timed."""
    every = list(range(len(rows)))
    fp32 = [t for t in every if t not in PLAN_FP16]
    mid = [t for t in fp32 if TINY_ROWS < rows[t] <= LARGE_ROWS]
    return [("plan's fp16 module", list(PLAN_FP16), "fp16"), ("plan's fp32 module", fp32, "fp32"),
            ("every table, bf16", every, "bf16"),
            ("fp32 module, small tables", [t for t in fp32 if rows[t] <= LARGE_ROWS], "fp32"),
            ("fp32 module, large tables", [t for t in fp32 if rows[t] > LARGE_ROWS], "fp32"),
            ("fp32 module, tiny tables", [t for t in fp32 if rows[t] <= TINY_ROWS], "fp32"),
            ("fp32 module, mid tables", mid, "fp32"), ("fp32 module's mid tables, bf16", mid, "bf16")]


def predicted(rows: list[int], hots: list[int], dtype: str, batch: int, spec: DeviceSpec) -> tuple[float, float]:
    """(the planner's forward ms of one module of these tables on ``spec``, its L2-hit fraction)."""
    loads = tuple(ShardLoad(table=f"t{i}", rank=0, rows=r, dim=DIM, accesses=batch * h, bags=batch, weight_dtype=dtype,
                            optimizer="rowwise_adagrad", memory="hbm", cache_rows=0, skew="uniform")
                  for i, (r, h) in enumerate(zip(rows, hots)))
    fwd_s = tbe_group_seconds(loads, spec, ceilings(spec), mem.DENSE_DTYPE_BYTES["bf16"])[0]
    reads = [TableLoad(rows=r, row_bytes=DIM * EMBEDDING_DTYPES[dtype].itemsize, accesses=batch * h, skew="uniform")
             for r, h in zip(rows, hots)]
    return 1e3 * fwd_s, hit_fraction(reads, spec)


def measured_ms(rows: list[int], dtype: str, batch: JaggedBatch) -> float:
    """Profiler ms of the module's ``pooled_forward_kernel`` launches per forward."""
    module = TableBatchedEmbedding([TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)],
                                   optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01), device="cuda",
                                   weight_dtype=EMBEDDING_DTYPES[dtype], output_dtype=torch.bfloat16)

    def forward() -> None:
        with torch.no_grad():
            module(batch)

    for _ in range(3):
        forward()
    kernels = {r["kernel"]: r["ms_per_step"] for r in kernel_table(forward, reps=REPS)}
    del module
    gc.collect()
    torch.cuda.empty_cache()
    return kernels["pooled_forward_kernel"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--row-cap", type=int, default=0, help="rows per table at most (0: full size)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("module_forward_check times GPU kernels: run it on a GPU")
    config = preset("mlperf-dcnv2")
    if args.row_cap:
        config = config.with_capped_rows(args.row_cap)
    full = synthetic_batch(config, args.batch, "uniform", "cuda")
    spec = detect().spec
    out = []
    for name, tables, dtype in cases(config.table_rows):
        rows, hots = [config.table_rows[t] for t in tables], [config.multi_hot[t] for t in tables]
        ms = measured_ms(rows, dtype, feature_subset(full, tables))
        pred_ms, hits = predicted(rows, hots, dtype, args.batch, spec)
        out.append({"case": name, "tables": len(tables), "ids_per_sample": sum(hots), "row_dtype": dtype,
                    "measured_ms": ms, "predicted_ms": pred_ms, "predicted_over_measured": pred_ms / ms,
                    "l2_hit_fraction": hits,
                    "row_gb_per_s": args.batch * sum(hots) * DIM * EMBEDDING_DTYPES[dtype].itemsize / ms / 1e6})
        print(f"{name:28s} {dtype} {len(tables):2d} tables {sum(hots):3d} ids: measured {ms:.3f} ms, predicted "
              f"{pred_ms:.3f} ({pred_ms / ms:.2f}x), L2 hits {hits:.2f}")
    write_results("module_forward_check", {"rows": out}, rows=out,
                  summary={"batch": args.batch, "row_cap": args.row_cap, "device": spec.name,
                           "copy_bandwidth": ceilings(spec).copy_bandwidth.origin})


if __name__ == "__main__":
    main()
