"""What the output-gradient slices cost the embedding update on the MLPerf shapes: an upper bound, probed.

The lane update (``lane_update_kernel``) reads, for each sorted id position, its bag's gradient slice
(``dim`` elements at ``g_off``) at random: 14.02M slices per MLPerf step where the gradient holds 1.70M
(65536 bags x 26 features), and 512 B each for an fp32 gradient. The benchmark's byte count takes the
gradient once. This times the fused backward's update + merge (the sort and the gradient offsets made
beforehand, ``prepare_backward``) on one module and batch two ways, in alternating rounds:

- ``sorted slices``: the gradient offsets as the backward computes them;
- ``slices folded``: each offset moved to the same column of one of the first FOLD_ROWS gradient rows,
  so that every slice read hits L2: the update's time without the slices' DRAM traffic (its result is
  wrong, and the tables are overwritten: a probe, not a step).

Their difference bounds what any reordering of the slice reads (e.g. updating the rows that occur once
in the batch in bag order) could save.

    PYTHONPATH=.:benchmarks python3 benchmarks/grad_slice_probe.py [--row-cap N] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics

import torch
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, bench_ms, make_batch

from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.results import write_results

#: Gradient rows the folded offsets fall into: 64 rows x 26 x 128 fp32 elements = 852 KB, far inside L2.
FOLD_ROWS = 64
GRAD_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def folded(g_off: torch.Tensor, stride: int) -> torch.Tensor:
    """``g_off`` with each offset's row taken modulo FOLD_ROWS (its column kept)."""
    return (g_off // stride % FOLD_ROWS) * stride + g_off % stride


def measure(rows: list[int], grad_name: str, rounds: int, gen: torch.Generator) -> list[dict]:
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                   device="cuda")
    batch = make_batch(rows, MLPERF_HOTS, 65536, False, gen)
    grad = torch.randn(batch.batch_size, module.output_dim, device="cuda", generator=gen).to(GRAD_DTYPES[grad_name])
    module.prepare_backward(batch)
    ids = module._prepared
    offsets = {"sorted slices": ids.g_off, "slices folded": folded(ids.g_off, module.output_dim)}

    def update() -> None:
        module._prepared = ids
        module._fused_backward(grad, batch.values, batch.offsets, batch.weights, batch.batch_size, None)

    out = []
    for r in range(rounds):
        for label, g_off in offsets.items():
            ids.g_off = g_off
            out.append({"grad": grad_name, "round": r, "slices": label, "update_ms": bench_ms(update)})
    del module, batch, grad, ids, offsets
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row-cap", type=int, default=None, help="cap every table's rows (default: full size)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per gradient dtype")
    args = parser.parse_args()
    rows = [min(r, args.row_cap) for r in MLPERF_ROWS] if args.row_cap else list(MLPERF_ROWS)
    gen = torch.Generator(device="cuda").manual_seed(0)
    results = [row for name in GRAD_DTYPES for row in measure(rows, name, args.rounds, gen)]
    summary = {"row_cap": args.row_cap or 0, "fold_rows": FOLD_ROWS}
    for name in GRAD_DTYPES:
        med = {label: statistics.median(r["update_ms"] for r in results if r["grad"] == name and r["slices"] == label)
               for label in ("sorted slices", "slices folded")}
        summary[f"{name}_sorted_ms"], summary[f"{name}_folded_ms"] = med["sorted slices"], med["slices folded"]
        print(f"{name} gradient: update + merge {med['sorted slices']:.3f} ms with its slices, "
              f"{med['slices folded']:.3f} ms with them folded into {FOLD_ROWS} rows")
    write_results("grad_slice_probe" + (f"_cap{args.row_cap}" if args.row_cap else ""), {}, rows=results,
                  summary=summary)


if __name__ == "__main__":
    main()
