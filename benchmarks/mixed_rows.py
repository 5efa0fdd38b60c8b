"""What tables of several row dtypes cost a training step: a plan's per-table precisions against one dtype.

``polyrec plan`` may give each table its own row dtype (on one H100: four of the MLPerf model's five 40M-row
tables in fp16, the rest fp32). The trainer keeps each dtype's tables in a TBE of their own
(``polyrec.models.mixed_embeddings``), which adds a split of the ids by dtype (one host sync, one copy of the
ids) and a launch per TBE; the TBEs write their columns of one output in table order (``output_columns``). This
script runs the trainer's steps (MLPerf DLRM-DCNv2, batch 65536, tables capped at 4M rows by default so that any
GPU holds one run's fp32 tables) with all rows fp32, all fp16, the plan's mix, and fp32 again (the drift between
the two fp32 rows is the noise), one after another in one process, and prints ms per step and its phases.

    PYTHONPATH=. python3 benchmarks/mixed_rows.py [--batch 65536] [--row-cap 4000000] [--fleet H100x1] [--profile]

Four trainers one after another, the first compiling the kernels: about a minute on an H100. Results:
``benchmarks/results/mixed_rows_2026-12-06/``.
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

import torch

from polyrec.models import preset
from polyrec.planner.propose import make_plan
from polyrec.planner.types import model_spec_from_config, parse_fleet
from polyrec.results import write_results
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime.plan_apply import plan_fields

#: Untimed steps (compiles, the CUDA graph's capture) and timed ones per row; the synthetic batches are made once
#: for all of them (``TrainConfig.synthetic_pool``), so no timed step waits on the data.
WARMUP, STEPS = 5, 20
#: ``--profile``: steps profiled after the timed ones, and the kernels kept per row.
PROFILED, KERNELS = 5, 14
#: The trainer's timer phases reported per row.
PHASES = ("data", "emb_fwd", "dense", "emb_bwd", "optimizer")


def plan_row_dtypes(model: str, fleet: str) -> str:
    """The ``--embedding-dtype`` that ``polyrec train --plan`` takes from ``polyrec plan --model <model> --fleet
    <fleet>``'s answer (``plan_apply.plan_fields``): one name, or one per table."""
    plan = make_plan(model_spec_from_config(preset(model)), parse_fleet(fleet))
    return str(plan_fields(plan, Path(f"{model} on {fleet}"))["embedding_dtype"])


def device_kernels(trainer: Trainer, steps: int) -> list[dict]:
    """The GPU kernels of ``steps`` more training steps (torch.profiler), the most device time first: name, ms
    and launches per step; the ``KERNELS`` longest."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            trainer.train_step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels.sort(key=lambda e: e.device_time_total, reverse=True)
    return [{"kernel": e.key[:90], "ms_per_step": e.device_time_total / 1e3 / steps, "per_step": e.count / steps}
            for e in kernels[:KERNELS]]


def measure(label: str, row_dtypes: str, args: argparse.Namespace, kernels: dict | None = None) -> dict:
    """One row: ``Trainer.benchmark`` of a fresh trainer with these rows, freed afterwards; with ``kernels``,
    its kernels' device time too (``device_kernels``, under the row's label)."""
    cfg = TrainConfig(preset=args.preset, batch_size=args.batch, row_cap=args.row_cap or None, steps=10_000,
                      synthetic_pool=WARMUP + STEPS + PROFILED, embedding_dtype=row_dtypes,
                      cuda_graphs=args.cuda_graphs)
    trainer = Trainer(cfg, progress=False)
    timing = trainer.benchmark(warmup=WARMUP, steps=STEPS)
    if kernels is not None:
        kernels[label] = device_kernels(trainer, PROFILED)
    tbes = type(trainer.model.embeddings).__name__
    del trainer
    gc.collect()
    torch.cuda.empty_cache()
    return {"rows": label, "module": tbes, "ms_per_step": timing["ms_per_step"],
            "samples_per_s": timing["samples_per_s"], **{f"{p}_ms": timing.get(f"{p}_ms") for p in PHASES},
            "last_loss": timing["last_loss"], "row_dtypes": row_dtypes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mlperf-dcnv2")
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--row-cap", type=int, default=4_000_000, help="rows per table at most (0: full size)")
    parser.add_argument("--fleet", default="H100x1", help="the fleet whose plan's row dtypes make the mixed row")
    parser.add_argument("--cuda-graphs", default="auto", choices=("auto", "on", "off"))
    parser.add_argument("--profile", action="store_true",
                        help="also list the longest GPU kernels of the first fp32 row and the mixed row")
    args = parser.parse_args()
    args.cuda_graphs = {"auto": "auto", "on": True, "off": False}[args.cuda_graphs]
    mix = plan_row_dtypes(args.preset, args.fleet)
    if "," not in mix:
        raise SystemExit(f"the {args.fleet} plan keeps one row dtype ({mix}): pick a fleet whose plan mixes them "
                         "(--fleet)")
    kernels: dict | None = {} if args.profile else None
    rows = [measure("fp32", "fp32", args, kernels), measure("fp16", "fp16", args),
            measure(f"{args.fleet} plan", mix, args, kernels), measure("fp32 again", "fp32", args)]
    base = rows[0]["ms_per_step"]
    for r in rows:
        r["vs_fp32"] = r["ms_per_step"] / base
    summary = {"preset": args.preset, "batch": args.batch, "row_cap": args.row_cap, "fleet": args.fleet,
               "cuda_graphs": str(args.cuda_graphs), "warmup": WARMUP, "steps": STEPS}
    write_results("mixed_rows", {"rows": rows, "kernels": kernels}, rows=rows, summary=summary)
    print(f"{'rows':<14}{'module':<22}{'ms/step':>9}{'vs fp32':>9}" + "".join(f"{p:>11}" for p in PHASES))
    for r in rows:
        print(f"{r['rows']:<14}{r['module']:<22}{r['ms_per_step']:>9.2f}{r['vs_fp32']:>9.3f}"
              + "".join(f"{r[p + '_ms'] or 0:>11.2f}" for p in PHASES))
    for label, listed in (kernels or {}).items():
        print(f"\n{label}: ms/step  launches/step  kernel")
        for k in listed:
            print(f"{k['ms_per_step']:8.3f} {k['per_step']:8.1f}  {k['kernel']}")


if __name__ == "__main__":
    main()
