"""The pooled forward of the MLPerf tables under two sets of forward-model constants, side by side.

``tbe_forward_plan.plan_forward`` splits the features into launches by the forward model
(``polyrec.perfmodel.tbe_lookup.forward_seconds``, whose constants ``--a`` and ``--b`` set: setup trips,
trips per iteration, cross-warp trips and, optionally, the L2-hit latency fraction, 1 when left out).
For each case (full MLPerf tables, fp32 or fp16 rows, batch 65536, ``tbe.py``'s uniform ids or the
trainer's power-law ids) this times, in one process:

- every forward candidate as one launch over all 26 features (the sweep the constants are fitted on);
- the launches each constant set plans, in interleaved rounds.

    PYTHONPATH=.:benchmarks python3 benchmarks/forward_plan_ab.py --a 0,1.5,1.5,1 --b 2,2,0.75,0.4 [--rounds 3]

About 2 minutes on an H200 (the fp32 tables are 104.5 GB). Writes ``forward_plan_ab_<gpu>_<date>.json``.
"""

from __future__ import annotations

import argparse

import torch
from forward_model_fit import set_constants
from gather_rate import config_text, launch_plan, sweep_configs
from tbe import bench_ms
from tbe_forward_ab import plan_batches, rowwise_module

from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import TableBatchedEmbedding
from polyrec.models.config import preset
from polyrec.results import write_results

BATCH = 65536


def plan_of(module: TableBatchedEmbedding, batch: JaggedBatch, constants: str) -> list:
    """The module's forward launches for ``batch`` as planned under ``constants`` (planned afresh)."""
    set_constants(*map(float, constants.split(",")))
    module._configs.clear()
    return module.forward_plan(batch)


def plan_text(plan: list) -> str:
    return ", ".join(f"{len(launch.features)} x {config_text(launch.config)}" for launch, _ in plan)


def run_case(module: TableBatchedEmbedding, batch: JaggedBatch, label: str, args) -> dict:
    out = torch.empty(batch.batch_size, module.output_dim, device="cuda")
    sweep = sweep_configs(module, batch, out, torch.arange(len(module.pooled_features), device="cuda",
                                                             dtype=torch.int32))
    plans = {"a": plan_of(module, batch, args.a), "b": plan_of(module, batch, args.b)}
    times = {"a": [], "b": []}
    for _ in range(args.rounds):
        for side in ("a", "b"):
            times[side].append(bench_ms(lambda side=side: launch_plan(module, batch, out, plans[side])))
    row = {"case": label, "sweep_ms": sweep, "plan_a": plan_text(plans["a"]), "plan_b": plan_text(plans["b"]),
           "a_ms": times["a"], "b_ms": times["b"]}
    best = min(sweep, key=sweep.get)
    print(f"{label:<28} fastest one launch {best} {sweep[best]:.3f} ms; a {min(times['a']):.3f} ms "
          f"({row['plan_a']}); b {min(times['b']):.3f} ms ({row['plan_b']})", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="setup,per_iter,cross_warp trips[,L2-hit fraction] of plan a")
    parser.add_argument("--b", required=True, help="the same for plan b")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--row-cap", type=int, default=None, help="cap every table (default: full size)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("forward_plan_ab needs a GPU")
    config = preset("mlperf-dcnv2")
    if args.row_cap:
        config = config.with_capped_rows(args.row_cap)
    batches = plan_batches(config, BATCH)
    result = []
    for dtype in (torch.float32, torch.float16):
        module = rowwise_module(list(config.table_rows), dtype)
        for name, batch in batches.items():
            result.append(run_case(module, batch, f"{str(dtype).removeprefix('torch.')} {name}", args))
        del module
        torch.cuda.empty_cache()
    table = [{k: v for k, v in r.items() if k != "sweep_ms"} | {"a_min_ms": min(r["a_ms"]), "b_min_ms": min(r["b_ms"])}
             for r in result]
    write_results("forward_plan_ab", {"rows": result}, rows=table,
                  summary={"a": args.a, "b": args.b, "rounds": args.rounds, "batch": BATCH, "row_cap": args.row_cap})


if __name__ == "__main__":
    main()
