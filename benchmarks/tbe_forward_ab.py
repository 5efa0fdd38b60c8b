"""Why the pooled lookup reads faster inside training than in benchmarks/tbe.py: one module, both ways.

On MLPerf DLRM-DCNv2 at batch 65536 with fp32 rows, ``pooled_forward_kernel`` took 1.13-1.18 ms per
training step in the kernel profiles (e2e_profile and multi_gpu_world1_profile, 2026-11-30), while
benchmarks/tbe.py timed the forward at 1.85 ms (tbe_nvidia-h200_2026-11-30 at 226a364), and on
world-2 rank 0 the lookup read about 13M uniform rows of a 40M-row table in 0.99 ms, above what the
HBM moves. This diagnostic times one table-batched module, in one process, over:

- the batch: ``tbe.py``'s generator (``torch.randint`` per table) or the trainer's synthetic source
  (``polyrec.data.synthetic``, uniform);
- the output dtype: fp32 (tbe.py) or bf16 (training);
- the timer: ``triton.testing.do_bench`` around the module call (tbe.py's) or the profiler's
  ``pooled_forward_kernel`` time alone (``profiling.kernel_table``);

and reports each batch's unique rows per table, so the bytes each read can be checked.

    PYTHONPATH=. python3 benchmarks/tbe_forward_ab.py [--row-cap N] [--quick]

About 1 minute on an H200 with the full tables (104.5 GB).
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
from tbe import DIM, make_batch

BATCH = 65536


def synthetic_batch(config, batch_size: int) -> JaggedBatch:
    """The trainer's batch: ``SyntheticSource`` with uniform ids, as ``polyrec train`` draws it."""
    source = SyntheticSource(config, batch_size=batch_size, seed=1, device="cuda", distribution="uniform")
    b = source.next_batch()
    return JaggedBatch(values=b.values, offsets=b.offsets, batch_size=batch_size, num_features=config.num_tables)


def unique_per_table(batch: JaggedBatch) -> list[int]:
    bounds = batch.offsets[:: batch.batch_size].tolist()
    return [int(torch.unique(batch.values[a:b]).numel()) for a, b in zip(bounds, bounds[1:])]


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
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("tbe_forward_ab needs a GPU")
    config = preset("mlperf-dcnv2")
    cap = 100_000 if args.quick else args.row_cap
    if cap:
        config = config.with_capped_rows(cap)
    batch_size = 4096 if args.quick else BATCH
    rows, hots = list(config.table_rows), list(config.multi_hot)
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                   device="cuda")
    batches = {"tbe.py": make_batch(rows, hots, batch_size, False, torch.Generator(device="cuda").manual_seed(0)),
               "synthetic": synthetic_batch(config, batch_size)}
    result_rows = []
    for name, batch in batches.items():
        uniq = unique_per_table(batch)
        for dtype in (torch.float32, torch.bfloat16):
            module.output_dtype = dtype
            wall, kernel = time_forward(module, batch)
            result_rows.append({"batch": name, "output": str(dtype).removeprefix("torch."), "do_bench_ms": wall,
                                "kernel_ms": kernel, "nnz": batch.nnz, "unique_rows": sum(uniq),
                                "unique_rows_largest_table": max(uniq)})
            print(f"{name:<10} {result_rows[-1]['output']:<9} do_bench {wall:7.3f} ms  kernel {kernel:7.3f} ms  "
                  f"unique rows {sum(uniq) / 1e6:6.2f} M of {batch.nnz / 1e6:6.2f} M ids", flush=True)
    write_results("tbe_forward_ab" + ("_quick" if args.quick else ""), {"rows": result_rows}, rows=result_rows,
                  summary={"row_cap": cap, "batch": batch_size})


if __name__ == "__main__":
    main()
