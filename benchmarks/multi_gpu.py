"""Training throughput on N GPUs of one host against 1, per-GPU batch fixed (issue 7's scaling check).

    torchrun --nproc-per-node 1 benchmarks/multi_gpu.py     # writes multi_gpu_world1_<gpu>_<date>.json
    torchrun --nproc-per-node 2 benchmarks/multi_gpu.py     # ... world2 ..., with the ratio to world1

MLPerf DLRM-DCNv2 (tables full size unless ``--row-cap``), batch 65536 per GPU, fp32 rows with
row-wise Adagrad sharded table-wise (lookups balanced, ``default_shardings``) or as ``--plan`` says,
bf16 dense under DDP. The N-rank run reads the newest
1-rank results file of the same model, batch and row cap from the same results directory, when
present, and reports the scaling ratio
(target >= 1.8x at 2 GPUs). Keep NCCL_NVLS_ENABLE=0 set on the device machines.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import torch

from polyrec.kernels import tbe, tbe_select
from polyrec.kernels.tbe_forward_plan import one_launch
from polyrec.results import RESULTS_DIR, write_results
from polyrec.runtime import TrainConfig, Trainer
from polyrec.runtime import dist as dist_module
from polyrec.runtime import parallel
from polyrec.runtime.dist import shutdown
from polyrec.runtime.distributed_embeddings import DistributedEmbeddings
from polyrec.runtime.input_dist import InputRouter
from polyrec.runtime.sharding import ShardedEmbedding
from profiling import kernel_table
from shard_ids import ids_by_rank


def _ids_as_given() -> None:
    real = InputRouter.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        self.narrow_ids = False
    InputRouter.__init__ = init


def _one_forward_launch() -> None:
    tbe.plan_forward = lambda spec, **shape: [one_launch(spec, **shape)]


#: Overlaps (seventh to ninth sessions), the copy-engine exchange and DDP's bucket views (thirteenth) and the update beside DDP's tail (fifteenth) the A/B can turn off: name -> (what it was before, how to undo it here).
WITHOUT = {
    "early_sort": ("the backward sorts its ids after the gradient arrives",
                   lambda: setattr(ShardedEmbedding, "_backward_prelude", lambda self, batch: None)),
    "optimizer_overlap": ("the dense optimizer steps after the embedding backward",
                          lambda: setattr(DistributedEmbeddings, "backward_overlapping", None)),
    "int32_ids": ("ids cross the all-to-all as int64", _ids_as_given),
    "early_gradient": ("the embedding gradient's all-to-all starts after the dense backward",
                       lambda: setattr(DistributedEmbeddings, "start_backward", None)),
    "inputs_ahead": ("a batch's ids cross at the start of its own step (only its lengths a step ahead)",
                     lambda: setattr(Trainer, "inputs_ahead", 1)),
    "copy_engine": ("the pooled rows and their gradients cross by NCCL's all_to_all_single",
                    lambda: setattr(parallel, "copy_engine_exchange", lambda *args: None)),
    "bucket_view": ("DDP copies each gradient into its bucket and back",
                    lambda: setattr(parallel, "GRADIENT_AS_BUCKET_VIEW", False)),
    "update_beside": ("the tables' update waits for DDP's last all-reduces and the dense optimizer",
                      lambda: setattr(ShardedEmbedding, "update_beside", False)),
    "nccl_priority": ("NCCL's streams at the default priority (where the process group is not made yet)",
                      lambda: setattr(dist_module, "HIGH_PRIORITY_COLLECTIVES", False)),
}
#: Launch plans the A/B can turn off (they change the order of the sums, so --check leaves them on).
PLANS = {"forward_groups": ("the pooled forward is one launch over every feature", _one_forward_launch),
         "staged_loads": ("the pooled forward never stages its loads",
                          lambda: setattr(tbe_select, "staged_loads", lambda cfg: False))}


#: Steps the --check run trains each way, and the largest relative loss difference it accepts (the
#: overlaps reorder work, not arithmetic: the same kernels on the same values).
CHECK_STEPS = 6
CHECK_RTOL = 1e-5


def check_overlaps(cfg: TrainConfig) -> dict:
    """Correctness first: ``CHECK_STEPS`` losses with every overlap of ``WITHOUT`` on, then with all off,
    from the same seed (one trainer at a time, so full-size tables fit)."""
    def losses() -> list[float]:
        trainer = Trainer(cfg, progress=False)
        out = [float(trainer.train_step()) for _ in range(CHECK_STEPS)]
        del trainer
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return out

    on = losses()
    for _, undo in WITHOUT.values():
        undo()
    off = losses()
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(on, off))
    return {"losses_with_overlaps": on, "losses_without": off, "max_rel_diff": worst, "ok": worst <= CHECK_RTOL}


def rank_kernels(trainer: Trainer, trace_dir: Path | None) -> list[list[dict]]:
    """Every rank's kernel table of a training step (``profiling.kernel_table``), gathered on all ranks;
    with ``trace_dir``, each rank's timeline written there as ``rank<r>.json``."""
    trace = trace_dir / f"rank{trainer.ctx.rank}.json" if trace_dir is not None else None
    table = kernel_table(trainer.train_step, trace=trace)[:40]
    tables: list[list[dict]] = [[] for _ in range(trainer.ctx.world_size)]
    torch.distributed.all_gather_object(tables, table)
    return tables


def shard_ids_of(trainer: Trainer, batch_per_gpu: int) -> list[dict]:
    """The ids and distinct rows each rank's shards receive in a step of this run's data
    (``shard_ids.ids_by_rank``; under torchrun the tables are sharded even on one rank)."""
    return ids_by_rank(trainer.model_config, trainer.model.embeddings.sharded.shards, trainer.ctx.world_size,
                       batch_per_gpu, device=trainer.rt.device, distribution=trainer.source.distribution,
                       alpha=trainer.source.alpha)


def same_shape_world1(out_dir: Path, batch: int, row_cap: int | None, preset: str) -> dict | None:
    """The newest 1-GPU results summary in ``out_dir`` of the same model, batch per GPU and row cap
    (the scaling ratio's denominator), or None."""
    found = []
    for path in out_dir.glob("multi_gpu_world1*.json"):
        data = json.loads(path.read_text())
        s = data["summary"]
        if (s.get("batch_per_gpu"), s.get("row_cap"), s.get("preset", "mlperf-dcnv2")) == (batch, row_cap, preset):
            found.append((data["environment"]["date"], s))
    return max(found, key=lambda f: f[0])[1] if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=65536, help="samples per GPU per step")
    parser.add_argument("--row-cap", type=int, default=None, help="cap every table (default: full size)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (after 5 warmup steps)")
    parser.add_argument("--dense-backend", default="polyrec", help="polyrec (GPU) or torch (a CPU smoke run)")
    parser.add_argument("--preset", default="mlperf-dcnv2", help="model preset (dcnv2-small for a smoke run)")
    parser.add_argument("--plan", type=Path, default=None,
                        help="a `polyrec plan` JSON whose table shardings to run (default: lookup-balanced table-wise)")
    parser.add_argument("--tag", default="", help="suffix of the results name (variants of one world size)")
    parser.add_argument("--without", default="",
                        help="A/B: comma-separated overlaps or launch plans to turn off, as they were before: "
                             + ", ".join(f"{k} ({v[0]})" for k, v in (WITHOUT | PLANS).items())
                             + "; results tagged without_...")
    parser.add_argument("--check", action="store_true",
                        help=f"only check that the overlaps train as without them ({CHECK_STEPS} steps each way)")
    parser.add_argument("--profile", action="store_true",
                        help="also every rank's CUDA kernels per step (torch profiler), in the results payload")
    parser.add_argument("--trace", type=Path, default=None,
                        help="with --profile: each rank's profiled timeline as DIR/rank<r>.json (Chrome trace)")
    args = parser.parse_args()
    off = [w for w in args.without.split(",") if w]
    if args.trace is not None and not args.profile:
        raise SystemExit("--trace DIR writes the --profile run's timeline; add --profile")
    if off and args.check:
        raise SystemExit("--check compares with and without every overlap itself; leave out --without")
    for name in off:
        if name not in WITHOUT | PLANS:
            raise SystemExit(f"--without {name}: not one of {', '.join(WITHOUT | PLANS)}")
        (WITHOUT | PLANS)[name][1]()
    if off:
        args.tag = "_".join(t for t in (args.tag, "without", *off) if t)
    cfg = TrainConfig(preset=args.preset, batch_size=args.batch_size, row_cap=args.row_cap, steps=10**6,
                      synthetic_pool=4, embedding_backend="polyrec", dense_backend=args.dense_backend,
                      plan=args.plan)
    if args.check:
        result = check_overlaps(cfg)
        world = torch.distributed.get_world_size()
        if torch.distributed.get_rank() == 0:
            write_results(f"multi_gpu_check_world{world}" + (f"_{args.tag}" if args.tag else ""), result,
                          rows=[{"step": i, "with": a, "without": b} for i, (a, b) in
                                enumerate(zip(result["losses_with_overlaps"], result["losses_without"]))],
                          summary={"max_rel_diff": result["max_rel_diff"], "ok": result["ok"], "preset": args.preset})
            print(json.dumps(result, indent=1))
        shutdown(completed=True)
        if not result["ok"]:
            raise SystemExit(f"overlaps changed the losses: max relative difference {result['max_rel_diff']:.2e}")
        return
    trainer = Trainer(cfg)
    measured = trainer.benchmark(warmup=5, steps=args.steps)
    world = trainer.ctx.world_size
    peak = torch.tensor(torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else 0.0,
                        device=trainer.rt.device)
    torch.distributed.all_reduce(peak, op=torch.distributed.ReduceOp.MAX)
    phases: list[dict] = [{} for _ in range(world)]  # every rank's phase times (the ranks differ)
    torch.distributed.all_gather_object(phases, {k: v for k, v in measured.items() if k.endswith("_ms")})
    kernels = rank_kernels(trainer, args.trace) if args.profile else []
    ids = shard_ids_of(trainer, args.batch_size) if args.profile and trainer.ctx.is_main else []
    if trainer.ctx.is_main:
        row = {"world_size": world, "batch_per_gpu": args.batch_size, "global_samples_per_s": measured["samples_per_s"] * world,
               "samples_per_s_per_gpu": measured["samples_per_s"], "ms_per_step": measured["ms_per_step"],
               "peak_gb_max_rank": float(peak), "row_cap": args.row_cap, "preset": args.preset,
               "shardings": str(args.plan) if args.plan else "default (lookup-balanced table-wise)",
               **{k: v for k, v in measured.items() if k.endswith("_ms") and k != "ms_per_step"}}
        summary = dict(row)
        out_dir = Path(os.environ.get("POLYREC_RESULTS_DIR") or RESULTS_DIR)
        one = same_shape_world1(out_dir, args.batch_size, args.row_cap, args.preset)
        if world > 1 and one is not None:
            summary["scaling_vs_1_gpu"] = row["global_samples_per_s"] / one["global_samples_per_s"]
            summary["efficiency"] = summary["scaling_vs_1_gpu"] / world
        write_results(f"multi_gpu_world{world}" + (f"_{args.tag}" if args.tag else "") + ("_profile" if args.profile else ""),
                      {"measured": measured, "phases_by_rank": phases, "kernels_by_rank": kernels,
                       "ids_by_rank": ids}, rows=[row],
                      summary=summary)
        print(json.dumps(summary, indent=1))
        for rank, table in enumerate(kernels):
            print(f"rank {rank}: " + "; ".join(f"{k['kernel'][:40]} {k['ms_per_step']:.2f}" for k in table[:12]))
        for c in ids:
            print(f"rank {c['rank']}: {c['shards']} shards, {c['ids'] / 1e6:.2f}M ids, {c['unique_rows'] / 1e6:.2f}M distinct rows")
    del trainer  # its DDP module holds the process group
    shutdown(completed=True)


if __name__ == "__main__":
    main()
