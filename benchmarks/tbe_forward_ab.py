"""The pooled lookup's speed by id distribution: one table-batched module, several batches.

On MLPerf DLRM-DCNv2 at batch 65536 with fp32 rows, ``pooled_forward_kernel`` took 1.13-1.18 ms per
training step in the kernel profiles (e2e_profile and multi_gpu_world1_profile, 2026-11-30), while
benchmarks/tbe.py timed the forward at 1.85 ms with uniform ids (tbe_nvidia-h200_2026-11-30 at
226a364). Those profiles ran the trainer's default data, ``synthetic`` = power-law ids (alpha 1.05),
not uniform ones: far fewer distinct rows per batch, most repeats served from L2. ``--ids-only``
counts the distinct rows of each batch on any device (no GPU); the full run also times, in one
process:

- the batch: ``tbe.py``'s uniform and skewed generators, or the trainer's synthetic source
  (``polyrec.data.synthetic``) with uniform or power-law ids;
- the output dtype: fp32 (tbe.py) or bf16 (training);
- the timer: ``triton.testing.do_bench`` around the module call (tbe.py's) or the profiler's
  ``pooled_forward_kernel`` time alone (``profiling.kernel_table``).

    PYTHONPATH=. python3 benchmarks/tbe_forward_ab.py [--row-cap N] [--quick] [--ids-only]

About 1 minute on an H200 with the full tables (104.5 GB); ``--ids-only`` about 1 minute on a CPU.
"""

from __future__ import annotations

import argparse

import torch
import triton

from polyrec.data.synthetic import SyntheticSource
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.models.config import preset
from polyrec.results import write_results
from profiling import kernel_table
from tbe import DIM, make_batch, unique_per_table

BATCH = 65536


def synthetic_batch(config, batch_size: int, distribution: str, device: str) -> JaggedBatch:
    """The trainer's batch, as ``polyrec train --data synthetic:<distribution>`` draws it."""
    source = SyntheticSource(config, batch_size=batch_size, seed=1, device=device, distribution=distribution)
    b = source.next_batch()
    return JaggedBatch(values=b.values, offsets=b.offsets, batch_size=batch_size, num_features=config.num_tables)


def plan_batches(config, batch_size: int) -> dict[str, JaggedBatch]:
    """The two id sets the forward plan A/Bs time on a GPU: ``tbe.py``'s uniform ids (seed 3) and the trainer's
    power-law ones."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    return {"uniform": make_batch(list(config.table_rows), list(config.multi_hot), batch_size, False, gen),
            "power-law": synthetic_batch(config, batch_size, "zipf", "cuda")}


def rowwise_module(rows: list[int], weight_dtype: torch.dtype) -> TableBatchedEmbedding:
    """A GPU module of tables of ``rows`` (dim ``tbe.DIM``) with row-wise Adagrad, as the forward A/Bs build it."""
    return TableBatchedEmbedding([TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)],
                                 optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                 weight_dtype=weight_dtype, device="cuda")


def make_batches(config, batch_size: int, device: str) -> dict[str, JaggedBatch]:
    rows, hots = list(config.table_rows), list(config.multi_hot)
    gen = torch.Generator(device=device).manual_seed(0)
    return {"tbe.py uniform": make_batch(rows, hots, batch_size, False, gen),
            "tbe.py skewed": make_batch(rows, hots, batch_size, True, gen),
            "synthetic uniform": synthetic_batch(config, batch_size, "uniform", device),
            "synthetic zipf": synthetic_batch(config, batch_size, "zipf", device)}


def id_row(name: str, batch: JaggedBatch) -> dict:
    uniq = unique_per_table(batch)
    return {"batch": name, "nnz": batch.nnz, "unique_rows": sum(uniq), "unique_rows_largest_table": max(uniq)}


def time_forward(module: TableBatchedEmbedding, batch: JaggedBatch) -> tuple[float, float]:
    """(do_bench ms of the module call, profiler ms of pooled_forward_kernel alone)."""
    def fwd() -> None:
        with torch.no_grad():
            module(batch)

    wall = triton.testing.do_bench(fwd, warmup=25, rep=200, return_mode="median")
    kernels = {r["kernel"]: r["ms_per_step"] for r in kernel_table(fwd, reps=5)}
    return wall, kernels.get("pooled_forward_kernel", float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row-cap", type=int, default=None, help="cap every table (default: full size)")
    parser.add_argument("--quick", action="store_true", help="tables capped at 100k rows, batch 4096")
    parser.add_argument("--ids-only", action="store_true", help="count distinct rows per batch only (CPU is fine)")
    args = parser.parse_args()
    if not args.ids_only and not torch.cuda.is_available():
        raise SystemExit("tbe_forward_ab needs a GPU (or --ids-only)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = preset("mlperf-dcnv2")
    cap = 100_000 if args.quick else args.row_cap
    if cap:
        config = config.with_capped_rows(cap)
    batch_size = 4096 if args.quick else BATCH
    batches = make_batches(config, batch_size, device)
    module = None if args.ids_only else TableBatchedEmbedding(
        [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(config.table_rows)],
        optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01), device="cuda")
    result_rows = []
    for name, batch in batches.items():
        ids = id_row(name, batch)
        print(f"{name:<18} unique rows {ids['unique_rows'] / 1e6:6.2f} M of {batch.nnz / 1e6:6.2f} M ids", flush=True)
        if module is None:
            result_rows.append(ids)
            continue
        for dtype in (torch.float32, torch.bfloat16):
            module.output_dtype = dtype
            wall, kernel = time_forward(module, batch)
            result_rows.append(ids | {"output": str(dtype).removeprefix("torch."), "do_bench_ms": wall,
                                      "kernel_ms": kernel})
            print(f"  {result_rows[-1]['output']:<9} do_bench {wall:7.3f} ms  kernel {kernel:7.3f} ms", flush=True)
    name = "tbe_forward_ab" + ("_ids" if args.ids_only else "") + ("_quick" if args.quick else "")
    write_results(name, {"rows": result_rows}, rows=result_rows, summary={"row_cap": cap, "batch": batch_size})


if __name__ == "__main__":
    main()
