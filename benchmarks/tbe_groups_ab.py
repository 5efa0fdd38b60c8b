"""Tables of mixed dims: one update launch per BLOCK_D group against one launch at the widest BLOCK_D,
side by side in one process (``TableBatchedEmbedding(group_dims=True / False)``), on ``tbe_shapes``
cases. Rounds alternate the two modules; each round times forward + backward + update by ``do_bench``
(median), and one profiler pass per module gives the device time of the step's kernels; ``auto`` is
what the default (``group_dims=None``: ``tbe_select.groups_pay``) chooses for the case. Writes
``tbe_groups_ab_seed<N>_<gpu>_<date>.json``.

    PYTHONPATH=.:benchmarks python3 benchmarks/tbe_groups_ab.py --seed 1 --case 1 --case 4 [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import triton
from profiling import kernel_table
from tbe_shapes import DTYPES, make_batch, seed_cases

from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.results import write_results


def build(case: dict, grouped: bool | None) -> TableBatchedEmbedding:
    tables = [TableSpec(name=f"t{i}", rows=r, dim=d, pooling=p)
              for i, (r, d, p) in enumerate(zip(case["rows"], case["dims"], case["pooling"]))]
    return TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind=case["optimizer"], lr=0.01),
                                 weight_dtype=DTYPES[case["dtype"]], device="cuda", group_dims=grouped)


def compare(case: dict, rounds: int, gen: torch.Generator) -> dict:
    """Step times (ms, one list per module) over alternating rounds, and each module's kernel ms per step."""
    batches = [make_batch(case, gen) for _ in range(3)]
    modules = {g: build(case, g) for g in (True, False)}
    grad = torch.randn(case["batch"], modules[True].output_dim, device="cuda", generator=gen)
    turn = iter(range(10**9))

    def step(module: TableBatchedEmbedding):
        return lambda: module(batches[next(turn) % 3]).backward(grad)

    times = {g: [] for g in modules}
    for _ in range(rounds):
        for g, module in modules.items():
            times[g].append(triton.testing.do_bench(step(module), warmup=10, rep=200, return_mode="median"))
    device = {g: sum(k["ms_per_step"] for k in kernel_table(step(m), reps=3)) for g, m in modules.items()}
    nnz = batches[0].nnz
    modules[False].group_dims = None  # timed already: now the default's choice for this batch
    auto = modules[False].key_plan(nnz).grouped
    grouped_ms, single_ms = statistics.median(times[True]), statistics.median(times[False])
    return {"nnz": nnz, "groups": len(modules[True].dim_blocks), "auto": "grouped" if auto else "single",
            "auto_right": auto == (grouped_ms < single_ms), "grouped_ms": grouped_ms,
            "single_ms": single_ms, "grouped_rounds": times[True],
            "single_rounds": times[False], "grouped_device_ms": device[True], "single_device_ms": device[False]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--case", type=int, action="append", default=[], help="tbe_shapes case index (repeatable)")
    parser.add_argument("--cases", type=int, default=16, help="cases drawn (as tbe_shapes --cases)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cases = seed_cases(args.seed, args.cases)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    rows = []
    for index in args.case:
        if len(set(cases[index]["dims"])) < 2:
            raise SystemExit(f"case {index} of seed {args.seed} has tables of one dim: nothing to group")
        row = {"seed": args.seed, "case": index, "dims": "/".join(str(d) for d in sorted(set(cases[index]["dims"]))),
               "batch": cases[index]["batch"], "dtype": cases[index]["dtype"],
               "optimizer": cases[index]["optimizer"], **compare(cases[index], args.rounds, gen)}
        row["ratio"] = row["grouped_ms"] / row["single_ms"]
        rows.append(row)
        print(f"seed {args.seed} case {index:>2} nnz {row['nnz']:>9} groups {row['groups']}: grouped "
              f"{row['grouped_ms']:.3f} ms (device {row['grouped_device_ms']:.3f}) single {row['single_ms']:.3f} ms "
              f"(device {row['single_device_ms']:.3f}) = {row['ratio']:.3f}; auto {row['auto']}", flush=True)
        torch.cuda.empty_cache()
    write_results(f"tbe_groups_ab_seed{args.seed}", {"rows": rows},
                  rows=[{k: v for k, v in r.items() if not k.endswith("_rounds")} for r in rows])


if __name__ == "__main__":
    main()
