"""Does the benchmarks' 4-batch data pool flatter the step? The same step on a memorised pool and a fresh one.

``benchmarks/e2e.py`` and the probes trained on ``synthetic_pool=4`` (until the thirty-eighth and forty-fourth
sessions): four batches made once and cycled, so that no step pays for making its data. The model memorises
them (loss 0.75 -> ~1e-5 within 15 steps, docs/training.md), so every timed step runs on a model that has
already fit its batch: tiny loss
gradients, saturated logits. A GEMM's speed can follow its operands' values (the tensor cores' power), so
this times ``mlperf-dcnv2`` (tables capped at 4M rows: the dense half is the full model's) on a pool of
``SMALL_POOL`` batches against one of ``LARGE_POOL``, which no timed window sees twice, in interleaved
rounds in one process, after ``WARM_STEPS`` steps each (``Trainer.benchmark``: each round's step time, its
phases by the trainer's timer and its last loss).

    PYTHONPATH=.:benchmarks python3 benchmarks/data_pool_probe.py [--rounds 4] [--steps 20]

Writes ``data_pool_probe_<gpu>_<date>.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics

#: The benchmarks' pool, and one larger than WARM_STEPS + rounds x steps per trainer (no batch seen twice).
SMALL_POOL, LARGE_POOL = 4, 128
#: Steps each trainer runs before the timed rounds (the small pool is memorised by then).
WARM_STEPS = 30
#: Untimed steps before each round's timed ones.
ROUND_WARMUP = 3
#: Rows per table at most: the dense half and the batch are the full model's, in a fraction of the memory.
ROW_CAP = 4_000_000


#: The trainer's phases reported per pool (``Trainer.benchmark``'s ``<phase>_ms``).
PHASES = ("ms_per_step", "data_ms", "emb_fwd_ms", "dense_ms", "emb_bwd_ms", "optimizer_ms")


def summarize(rows: list[dict]) -> dict:
    """Median of each pool's step and phases (ms), and the large pool's step change against the small one."""
    med = {(p, k): statistics.median(r[k] for r in rows if r["pool"] == p)
           for p in (SMALL_POOL, LARGE_POOL) for k in PHASES}
    out = {f"pool_{p}_{k}": v for (p, k), v in med.items()}
    change = med[LARGE_POOL, "ms_per_step"] / med[SMALL_POOL, "ms_per_step"] - 1
    return out | {"large_vs_small": change}


def main() -> None:
    from polyrec.results import write_results
    from polyrec.runtime import TrainConfig, Trainer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--batch", type=int, default=65536)
    args = parser.parse_args()
    if WARM_STEPS + args.rounds * (args.steps + ROUND_WARMUP) > LARGE_POOL:
        raise SystemExit(f"data_pool_probe: {args.rounds} rounds of {args.steps} steps would repeat the "
                         f"{LARGE_POOL}-batch pool")
    trainers = {p: Trainer(TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=args.batch,
                                       steps=10**9, synthetic_pool=p, device="cuda", cuda_graphs=False,
                                       row_cap=ROW_CAP), progress=False)
                for p in (SMALL_POOL, LARGE_POOL)}
    for tr in trainers.values():
        for _ in range(WARM_STEPS):
            tr.train_step()
        tr.sync()
    rows = []
    for r in range(args.rounds):
        for pool, tr in trainers.items():
            timed = tr.benchmark(warmup=ROUND_WARMUP, steps=args.steps)
            rows.append({"round": r, "pool": pool} | {k: timed[k] for k in (*PHASES, "last_loss")})
            print(rows[-1], flush=True)
    summary = summarize(rows) | {"batch": args.batch, "row_cap": ROW_CAP, "warm_steps": WARM_STEPS}
    print(summary, flush=True)
    write_results("data_pool_probe", {"rounds": rows}, rows=rows, summary=summary)


if __name__ == "__main__":
    main()
