"""A trained forward's sort keys stored in flat chunks against one segment per bag and iteration
(``pooled_forward_kernel``'s FLAT_KEYS, ``TableBatchedEmbedding.flat_keys``), in one process on one device.

For the MLPerf tables (``forward_shapes.mlperf_cases``) and the random ``tbe_shapes`` cases of the given seeds:
the module's trained forward plan (its launches with the keys stored) and, for the MLPerf cases, the whole
forward + backward + update step, each way in alternating rounds (median of each round by ``do_bench``;
the table reports the least over rounds). The trained forward's key stores cost +0.16-0.20 ms on the MLPerf
tables and 1.13-2.04x on random cases (``benchmarks/results/forward_shapes_2026-12-01/``).

    PYTHONPATH=.:benchmarks python3 benchmarks/flat_keys_ab.py [--mlperf CAP ...] [--seed S ...] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc

import torch
from forward_shapes import draws, mlperf_cases
from tbe import bench_ms
from tbe_shapes import DTYPES, make_batch

from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.results import write_results


def run_case(label: str, case: dict, gen: torch.Generator, rounds: int, step: bool) -> dict:
    tables = [TableSpec(name=f"t{i}", rows=r, dim=d, pooling=p)
              for i, (r, d, p) in enumerate(zip(case["rows"], case["dims"], case["pooling"]))]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind=case["optimizer"], lr=0.01),
                                   weight_dtype=DTYPES[case["dtype"]], device="cuda")
    batch = make_batch(case, gen)
    out = torch.empty(case["batch"], module.output_dim, device="cuda")
    keys = module.new_sort_keys(batch.values, batch.offsets, batch.weights)
    plan = module.forward_plan(batch)
    grad = torch.randn(case["batch"], module.output_dim, device="cuda", generator=gen)
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for flat in (False, True):
            module.flat_keys = flat
            name = "flat" if flat else "segments"
            times.setdefault(f"{name}_fwd_ms", []).append(bench_ms(
                lambda: [module.launch_pooled(batch, out, ids, launch.config, keys) for launch, ids in plan]))
            if step:
                times.setdefault(f"{name}_step_ms", []).append(bench_ms(lambda: module(batch).backward(grad)))
    row = {"case": label, "dtype": case["dtype"], "batch": case["batch"], "nnz": batch.nnz,
           "plan": ", ".join(f"{la.config.bags}x{la.config.hots} w{la.config.num_warps}" for la, _ in plan)}
    row |= {k: min(v) for k, v in times.items()}
    row["fwd_ratio"] = row["flat_fwd_ms"] / row["segments_fwd_ms"]
    if step:
        row["step_ratio"] = row["flat_step_ms"] / row["segments_step_ms"]
    del module, batch, out, keys, grad
    gc.collect()
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlperf", type=int, action="append", default=[], metavar="CAP",
                        help="the MLPerf tables capped at CAP rows (0: full size; repeatable)")
    parser.add_argument("--seed", type=int, action="append", default=[], help="tbe_shapes seed (repeatable)")
    parser.add_argument("--cases", type=int, default=16, help="cases per seed")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (at least 2)")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error(f"--rounds must be >= 2, got {args.rounds}")
    if not args.mlperf and not args.seed:
        parser.error("give --mlperf or --seed")
    if not torch.cuda.is_available():
        raise SystemExit("flat_keys_ab needs a GPU")
    cases = [(f"mlperf cap {cap} {i}", c, True) for cap in args.mlperf for i, c in enumerate(mlperf_cases(cap))]
    cases += [(f"seed {s} case {i}", c, False) for s in args.seed for i, c in enumerate(draws(s, args.cases))]
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for label, case, step in cases:
        rows.append(run_case(label, case, gen, args.rounds, step))
        r = rows[-1]
        print(f"{label:<22} {r['dtype']} nnz {r['nnz'] / 1e6:6.2f}M trained fwd {r['segments_fwd_ms']:7.3f} -> "
              f"{r['flat_fwd_ms']:7.3f} ms ({r['fwd_ratio']:.3f})"
              + (f"  step {r['segments_step_ms']:7.3f} -> {r['flat_step_ms']:7.3f} ms ({r['step_ratio']:.3f})"
                 if step else "") + f"  [{r['plan']}]", flush=True)
    ratios = [r["fwd_ratio"] for r in rows]
    summary = {"fwd_ratio_geomean": float(torch.tensor(ratios).log().mean().exp()), "fwd_ratio_worst": max(ratios),
               "cases": len(rows), "rounds": args.rounds}
    write_results("flat_keys_ab", {"rows": rows}, rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
