"""The pooled lookup of each world-2 rank's tables (and of all tables on one GPU): one launch over all
features, or one per group of features with like bag lengths, each with its own config.

In the world-2 MLPerf step (multi_gpu_world2_again_profile_nvidia-h200_2026-11-30 at f097e55) rank 1's
``pooled_forward_kernel`` took 1.61 ms and rank 0's 0.92 ms for the same 107 ids per sample: rank 1
holds 20 features (7 of them one-hot, one 27-hot), rank 0 six (one 100-hot). One launch takes one
(BAGS, HOTS) for every feature. This times, on each rank's tables (full size, fp32 rows, bf16 output,
the trainer's power-law ids for 2 x 65536 samples):

- every forward candidate of ``tbe_select.forward_candidates`` as the one launch, with half and twice
  its warps too (``tbe_breakdown.sweep_configs``), each beside what ``forward_seconds`` predicts;
- every candidate again with ``STAGED`` loads (a barrier after the id and after the row loads);
- the module's own forward: the launches ``polyrec.kernels.tbe_forward_plan`` plans;
- the features split by bag length (one-hot; up to ``SHORT_BAGS`` ids; longer), each group launched
  with the candidate fastest on it alone, one launch after another.

``--world1`` adds the same for all 26 tables and 65536 samples (one GPU's step).

Correctness first: every launch plan's output equals the module's own forward (fp32 sums rounded once to bf16: within one bf16 rounding).

    PYTHONPATH=. python3 benchmarks/tbe_forward_groups.py [--quick]

About 2 minutes on an H200 (52 GB of tables per rank, one case at a time; 104 GB with ``--world1``).
"""

from __future__ import annotations

import argparse

import torch
import triton

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.catalog import get_device
from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_forward import vector_width
from polyrec.models.config import preset
from polyrec.perfmodel.tbe_lookup import ForwardTile, forward_seconds
from polyrec.perfmodel.tbe_reads import least_hit_fraction
from polyrec.results import write_results
from polyrec.runtime.distributed_embeddings import default_shardings
from tbe import DIM
from tbe_breakdown import sweep_configs
from tbe_forward_ab import synthetic_batch

WORLD = 2
#: Bag lengths of the middle group (ids per bag): MLPerf's multi-hot sizes run 1-12, then 27 and 100.
SHORT_BAGS = 12


def rank_features(config, rank: int) -> list[int]:
    """Tables (= features) the default world-2 sharding puts on ``rank``, as the trainer shards them."""
    shardings = default_shardings(config.table_rows, DIM, WORLD, lookups=list(config.multi_hot))
    return [t for t, s in enumerate(shardings) if rank in s.ranks]


def feature_subset(batch: JaggedBatch, features: list[int]) -> JaggedBatch:
    """The bags of ``features`` only (feature-major values and offsets, rebased)."""
    b = batch.batch_size
    lengths = (batch.offsets[1:] - batch.offsets[:-1]).view(batch.num_features, b)[features]  # [k, B]
    starts = batch.offsets[torch.tensor(features, device=batch.offsets.device) * b].tolist()
    values = torch.cat([batch.values[s:s + int(n)] for s, n in zip(starts, lengths.sum(1).tolist())])
    return JaggedBatch.from_lengths(values=values, lengths=lengths.reshape(-1), batch_size=b,
                                    num_features=len(features))


def groups_of(hots: list[int]) -> list[list[int]]:
    """Local feature indices grouped by bag length: one-hot, up to SHORT_BAGS, longer (empty ones dropped)."""
    keys = [0 if h == 1 else 1 if h <= SHORT_BAGS else 2 for h in hots]
    return [g for g in ([f for f, k in enumerate(keys) if k == key] for key in range(3)) if g]


def plan_ms(module: TableBatchedEmbedding, batch: JaggedBatch, plan: list[tuple[list[int], tbe_select.ForwardConfig]],
            expected: torch.Tensor) -> float:
    """Check a launch plan [(local features, config)] against ``expected`` on the columns it writes (every
    table is DIM wide, in feature order), then its median ms."""
    out = torch.full_like(expected, float("nan"))
    ids = [(torch.tensor(feats, dtype=torch.int32, device=out.device), cfg) for feats, cfg in plan]

    def run() -> None:
        for feats, cfg in ids:
            module.launch_pooled(batch, out, feats, cfg)

    run()
    cols = torch.cat([torch.arange(f * DIM, (f + 1) * DIM) for feats, _ in plan for f in feats]).to(out.device)
    torch.testing.assert_close(out[:, cols].float(), expected[:, cols].float(), rtol=1.6e-2, atol=1e-4)  # bf16
    return triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")


def predicted_ms(cfg: tbe_select.ForwardConfig, block_d: int, batch_size: int, hots: list[int],
                 rows: list[int]) -> float:
    """``forward_seconds`` of a config as the module's plan prices it (H200 ceilings, the tables'
    least L2 reuse), ms."""
    spec = get_device("H200")
    tile = ForwardTile(bags=cfg.bags, hots=cfg.hots, block_d=block_d, num_warps=cfg.num_warps,
                       vec=vector_width([block_d], 4), elem_bytes=4)
    hit = least_hit_fraction(rows, [batch_size * h for h in hots], 4 * block_d, spec)
    return 1e3 * forward_seconds(tile, spec, ceilings(spec), batch_size=batch_size, bag_lengths=hots,
                                 row_bytes=4 * block_d, out_bytes=4, hit_fraction=hit)


def time_case(config, case: str, features: list[int], full: JaggedBatch) -> list[dict]:
    hots = [config.multi_hot[t] for t in features]
    batch = feature_subset(full, features)
    module = TableBatchedEmbedding([TableSpec(name=f"t{t}", rows=config.table_rows[t], dim=DIM) for t in features],
                                   optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01), device="cuda",
                                   output_dtype=torch.bfloat16)
    with torch.no_grad():
        expected = module(batch)
    every = list(range(len(features)))
    candidates = tbe_select.forward_candidates(module.block_d, 32)
    rows = []
    module.staged_forward = False  # the sweep and the groups as at 8d81b97; staged loads in their own rows
    for cfg in sweep_configs(module.block_d, 32):
        ms = plan_ms(module, batch, [(every, cfg)], expected)
        rows.append({"case": case, "plan": "one launch", "features": len(every), "config": str(cfg), "ms": ms,
                     "candidate": cfg in candidates,
                     "predicted_ms": predicted_ms(cfg, module.block_d, batch.batch_size, hots,
                                                  [config.table_rows[t] for t in features])})
    module.staged_forward = True
    for cfg in candidates:  # the same launches with the loads staged (pooled_forward_kernel's STAGED)
        rows.append({"case": case, "plan": "one launch, staged loads", "features": len(every), "config": str(cfg),
                     "ms": plan_ms(module, batch, [(every, cfg)], expected)})
    module.staged_forward = None  # from here on, as the module runs: staged where tbe_select.staged_loads says
    chosen = module._forward_config(batch, sequence=False)
    rows.append({"case": case, "plan": "one launch, selector's", "features": len(every), "config": str(chosen),
                 "ms": plan_ms(module, batch, [(every, chosen)], expected)})
    module_plan = [(list(launch.features), launch.config) for launch, _ in module.forward_plan(batch)]
    rows.append({"case": case, "plan": "the module's forward (tbe_forward_plan)", "features": len(every),
                 "config": "; ".join(f"{[hots[f] for f in fs]}: {c}" for fs, c in module_plan),
                 "ms": plan_ms(module, batch, module_plan, expected)})
    module.staged_forward = False
    plan = []
    for group in groups_of(hots):
        best = min(candidates, key=lambda c: plan_ms(module, batch, [(group, c)], expected))
        plan.append((group, best))
        rows.append({"case": case, "plan": f"group hots {sorted(hots[f] for f in group)}", "features": len(group),
                     "config": str(best), "ms": plan_ms(module, batch, [(group, best)], expected)})
    rows.append({"case": case, "plan": "groups, one launch each", "features": len(every),
                 "config": "; ".join(str(c) for _, c in plan), "ms": plan_ms(module, batch, plan, expected)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tables capped at 100k rows, 2 x 4096 samples")
    parser.add_argument("--world1", action="store_true", help="also all tables with one GPU's samples")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("tbe_forward_groups needs a GPU")
    config = preset("mlperf-dcnv2")
    if args.quick:
        config = config.with_capped_rows(100_000)
    per_rank = 4096 if args.quick else 65536
    full = synthetic_batch(config, WORLD * per_rank, "zipf", "cuda")
    cases = [(f"world-2 rank {rank}", rank_features(config, rank), full) for rank in range(WORLD)]
    if args.world1:
        cases.append(("world 1", list(range(config.num_tables)), synthetic_batch(config, per_rank, "zipf", "cuda")))
    rows = []
    for case, features, batch in cases:
        rows += time_case(config, case, features, batch)
        torch.cuda.empty_cache()  # the case's tables are gone with its module
    for r in rows:
        print(f"{r['case']:<16} {r['plan']:<48} {r['ms']:7.3f} ms  {r['config']}")
    names = sorted({r["case"] for r in rows})

    def pick(plan: str) -> dict:
        return {c: min(r["ms"] for r in rows if r["case"] == c and r["plan"] == plan) for c in names}

    best_candidate = {c: min(r["ms"] for r in rows if r["case"] == c and r.get("candidate")) for c in names}
    write_results("tbe_forward_groups" + ("_quick" if args.quick else ""), {"rows": rows}, rows=rows,
                  summary={"selector_ms": pick("one launch, selector's"),
                           "module_forward_ms": pick("the module's forward (tbe_forward_plan)"),
                           "best_candidate_ms": best_candidate,
                           "best_of_sweep_ms": pick("one launch"), "grouped_ms": pick("groups, one launch each"),
                           "samples_per_rank": per_rank})


if __name__ == "__main__":
    main()
