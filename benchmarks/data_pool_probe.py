"""Does the benchmarks' 4-batch data pool flatter the step? The same step on a memorised pool and a fresh one.

``benchmarks/e2e.py`` and the probes train on ``synthetic_pool=4``: four batches made once and cycled, so
that no step pays for making its data. The model memorises them (loss 0.75 -> ~1e-5 within 15 steps,
docs/training.md), so every timed step runs on a model that has already fit its batch: tiny loss
gradients, saturated logits. A GEMM's speed can follow its operands' values (the tensor cores' power), so
this times ``mlperf-dcnv2`` (tables capped at 4M rows: the dense half is the full model's) on a pool of
``SMALL_POOL`` batches against one of ``LARGE_POOL``, which no timed window sees twice, in interleaved
rounds in one process, after ``WARM_STEPS`` steps each; each round's last loss is printed beside its time.

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
#: Rows per table at most: the dense half and the batch are the full model's, in a fraction of the memory.
ROW_CAP = 4_000_000


def summarize(rows: list[dict]) -> dict:
    """Median ms per step of each pool and the large pool's change against the small one."""
    med = {p: statistics.median(r["ms_per_step"] for r in rows if r["pool"] == p) for p in (SMALL_POOL, LARGE_POOL)}
    return {f"pool_{p}_ms": v for p, v in med.items()} | {"large_vs_small": med[LARGE_POOL] / med[SMALL_POOL] - 1}


def main() -> None:
    from polyrec.results import write_results
    from polyrec.runtime import TrainConfig, Trainer
    from profiling import step_ms

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--batch", type=int, default=65536)
    args = parser.parse_args()
    if WARM_STEPS + args.rounds * (args.steps + 4) > LARGE_POOL:  # step_ms warms 3, the loss takes 1
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
            ms = step_ms(tr, steps=args.steps)
            rows.append({"round": r, "pool": pool, "ms_per_step": ms, "last_loss": float(tr.train_step())})
            print(rows[-1], flush=True)
    summary = summarize(rows) | {"batch": args.batch, "row_cap": ROW_CAP, "warm_steps": WARM_STEPS}
    print(summary, flush=True)
    write_results("data_pool_probe", {"rounds": rows}, rows=rows, summary=summary)


if __name__ == "__main__":
    main()
