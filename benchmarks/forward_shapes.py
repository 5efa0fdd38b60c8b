"""Every pooled-forward config on the random TBE shapes of ``tbe_shapes``: ragged bags, small tables, mixed dims.

The forward cost model (``polyrec.perfmodel.tbe_lookup.forward_seconds``) was fitted on lookups of fixed bag
lengths over tables far larger than L2 (``gather_rate``, ``forward_plan_ab``). Priced as the planner prices
them, the forwards of the ``tbe_shapes`` cases measured by ``tbe_device_times`` (ragged bags, tables of
10 to 20M rows whose ids mostly hit L2, mixed dims) came out 27% low in the mean (log), up to 3.6x. This
draws the same cases (``tbe_shapes.draw_case``, by seed) and measures, in one process on one device:

- each forward candidate (``tbe_select.forward_candidates``) as one launch over every feature, without
  the backward's sort keys (inference) and with them (a trained lookup's forward);
- the module's own plan (``forward_plan``), both ways;
- per feature, the ids' mean bag length and, per candidate tile, the mean over its programs of the loop
  iterations the longest of the program's bags takes (``tbe_forward.loop_trips``): what the kernel
  loops over where bags are ragged.

    PYTHONPATH=.:benchmarks python3 benchmarks/forward_shapes.py --seed 21 [--seed 22] [--cases 16]
    PYTHONPATH=.:benchmarks python3 benchmarks/forward_shapes.py --mlperf 4000000 [--mlperf 0]   # MLPerf tables

About 3 minutes per seed of 16 cases on an H200. Writes
``forward_shapes[_seed<S>...][_mlperf<CAP>...]_<gpu>_<date>.json`` (the MLPerf cases' rows carry seed -1 - CAP).
"""

from __future__ import annotations

import argparse
import gc

import torch
from gather_rate import config_text
from tbe import bench_ms
from tbe_shapes import DTYPES, make_batch, seed_cases

from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_forward import loop_trips
from polyrec.models.config import mlperf_dcnv2
from polyrec.results import write_results


def plan_ms(module: TableBatchedEmbedding, batch: JaggedBatch, out: torch.Tensor, keys) -> float:
    plan = module.forward_plan(batch)
    return bench_ms(lambda: [module.launch_pooled(batch, out, ids, launch.config, keys) for launch, ids in plan])


def run_case(seed: int, index: int, case: dict, gen: torch.Generator) -> dict:
    tables = [TableSpec(name=f"t{i}", rows=r, dim=d, pooling=p)
              for i, (r, d, p) in enumerate(zip(case["rows"], case["dims"], case["pooling"]))]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind=case["optimizer"], lr=0.01),
                                   weight_dtype=DTYPES[case["dtype"]], device="cuda")
    batch = make_batch(case, gen)
    features = len(tables)
    out = torch.empty(case["batch"], module.output_dim, device="cuda")
    everything = torch.arange(features, device="cuda", dtype=torch.int32)
    keys = module.new_sort_keys(batch.values, batch.offsets, batch.weights)
    candidates = tbe_select.forward_candidates(module.block_d, 32)
    inference = {config_text(c): bench_ms(lambda c=c: module.launch_pooled(batch, out, everything, c))
                 for c in candidates}
    trained = {config_text(c): bench_ms(lambda c=c: module.launch_pooled(batch, out, everything, c, keys))
               for c in candidates}
    plan = ", ".join(config_text(launch.config) for launch, _ in module.forward_plan(batch))
    lengths = torch.diff(batch.offsets).view(features, -1).double().mean(-1).tolist()
    trips = loop_trips(batch.offsets, batch.batch_size, list(range(features)), [(c.bags, c.hots) for c in candidates])
    row = {"seed": seed, "case": index, "dims": case["dims"], "rows": case["rows"], "batch": case["batch"],
           "dtype": case["dtype"], "skew": case["skew"], "ragged": case["ragged"], "weighted": case["weighted"],
           "pooling": case["pooling"], "block_d": module.block_d, "vec": module.vec, "nnz": batch.nnz,
           "bag_lengths": lengths, "iterations": {f"{bags}x{hots}": t for (bags, hots), t in trips.items()},
           "plan": plan, "plan_ms": plan_ms(module, batch, out, None),
           "plan_trained_ms": plan_ms(module, batch, out, keys), "configs_ms": inference, "configs_trained_ms": trained}
    best = min(inference, key=inference.get)
    row |= {"best": best, "best_ms": inference[best]}
    del module, batch, out, keys
    gc.collect()
    torch.cuda.empty_cache()
    return row


def mlperf_cases(cap: int) -> list[dict]:
    """The MLPerf DLRM-DCNv2 tables (rows capped at ``cap``; 0: full size) at batch 65536, fixed bags,
    sum pooling, unweighted: fp32 rows with uniform and skewed ids, fp16 rows with uniform ids."""
    config = mlperf_dcnv2()
    rows = [min(r, cap) if cap else r for r in config.table_rows]
    base = {"rows": rows, "dims": [config.embedding_dim] * len(rows), "batch": 65536,
            "mean_bag": [float(h) for h in config.multi_hot], "ragged": False, "optimizer": "rowwise_adagrad",
            "weighted": False, "pooling": ["sum"] * len(rows)}
    return [base | {"dtype": dtype, "skew": skew} for dtype, skew in (("fp32", False), ("fp32", True), ("fp16", False))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, action="append", default=[], help="tbe_shapes seed (repeatable)")
    parser.add_argument("--mlperf", type=int, action="append", default=[], metavar="CAP",
                        help="the MLPerf tables with rows capped at CAP (0: full size; repeatable)")
    parser.add_argument("--cases", type=int, default=16, help="cases per seed (default 16, as tbe_shapes)")
    args = parser.parse_args()
    if args.cases < 1:
        parser.error(f"--cases must be >= 1, got {args.cases}")
    if not args.seed and not args.mlperf:
        parser.error("give --seed or --mlperf")
    if not torch.cuda.is_available():
        raise SystemExit("forward_shapes needs a GPU")
    rows = []
    drawn = [(seed, seed_cases(seed, args.cases)) for seed in args.seed]
    drawn += [(-1 - cap, mlperf_cases(cap)) for cap in args.mlperf]  # seed -1 - CAP names the MLPerf cases
    for seed, cases in drawn:
        gen = torch.Generator(device="cuda").manual_seed(seed % 2**31)
        for i, case in enumerate(cases):
            r = run_case(seed, i, case, gen)
            rows.append(r)
            print(f"seed {seed} case {i:>2} D{r['block_d']:<4} {r['dtype']} B={r['batch']:<6} "
                  f"nnz {r['nnz'] / 1e6:6.2f}M {'ragged' if r['ragged'] else 'fixed '} "
                  f"{'skewed ' if r['skew'] else 'uniform'}: best {r['best_ms']:7.3f} ms ({r['best']}), "
                  f"plan {r['plan_ms']:7.3f} / trained {r['plan_trained_ms']:7.3f} ms ({r['plan']})", flush=True)
    table = [{k: v for k, v in r.items() if k not in ("configs_ms", "configs_trained_ms", "iterations", "rows",
                                                       "bag_lengths", "pooling", "dims")} for r in rows]
    name = "forward_shapes" + "".join(f"_seed{s}" for s in args.seed) + "".join(f"_mlperf{c}" for c in args.mlperf)
    write_results(name, {"rows": rows}, rows=table, summary={"seeds": args.seed, "cases_per_seed": args.cases,
                                                              "mlperf_caps": args.mlperf})


if __name__ == "__main__":
    main()
