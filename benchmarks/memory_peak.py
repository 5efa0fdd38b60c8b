"""What is alive at a training step's memory peak, against the planner's memory parts.

A diagnostic for the planner's memory model (issue 6): ``planner_accuracy`` found dcnv2-small at
batch 65536 using 8% more than predicted. This script builds polyrec's trainer for one
configuration, runs warm-up steps, then records the CUDA caching allocator's history
(``torch.cuda.memory._record_memory_history``) over one step. It replays the trace to the step's
highest allocated bytes and groups the blocks alive there by the polyrec source lines that allocated
them (bytes per sample beside). Blocks allocated before the recorded step (weights, optimizer state)
are the baseline. It writes ``memory_peak_<preset>_<gpu>_<date>.json``.

    PYTHONPATH=. python3 benchmarks/memory_peak.py [--preset dcnv2-small] [--batch 65536] [--row-cap N]

About 30 s per configuration on an H200.
"""

from __future__ import annotations

import argparse

import torch

from planner_accuracy import Case, predict
from polyrec.results import write_results

#: Allocation events kept by the recorder: one step of the MLPerf model makes a few thousand.
MAX_TRACE_ENTRIES = 200_000
#: Source frames naming an allocation: the first frames inside polyrec (the caller chain).
FRAMES_PER_SITE = 3


def _site(frames: list[dict]) -> str:
    """The allocating polyrec frames, innermost first (``file:line function``)."""
    ours = [f for f in frames if "polyrec/" in f.get("filename", "")]
    picked = (ours or frames)[:FRAMES_PER_SITE]
    return " < ".join(f"{f['filename'].rsplit('polyrec/', 1)[-1]}:{f['line']} {f['name']}" for f in picked)


def live_at_peak(trace: list[dict]) -> tuple[int, list[dict]]:
    """(peak bytes above the trace's start, the blocks alive at that peak) from one device's events."""
    live: dict[int, dict] = {}
    current = peak = 0
    peak_index = -1
    for index, event in enumerate(trace):
        if event["action"] == "alloc":
            live[event["addr"]] = event
            current += event["size"]
            if current > peak:
                peak, peak_index = current, index
        elif event["action"] == "free_requested" and event["addr"] in live:
            current -= live.pop(event["addr"])["size"]
    alive: dict[int, dict] = {}
    for event in trace[: peak_index + 1]:
        if event["action"] == "alloc":
            alive[event["addr"]] = event
        elif event["action"] == "free_requested":
            alive.pop(event["addr"], None)
    return peak, list(alive.values())


def by_site(blocks: list[dict], batch: int) -> list[dict]:
    """Alive bytes grouped by allocating site, largest first."""
    sites: dict[str, dict] = {}
    for block in blocks:
        site = sites.setdefault(_site(block.get("frames", [])), {"bytes": 0, "blocks": 0})
        site["bytes"] += block["size"]
        site["blocks"] += 1
    rows = [{"site": name, "mb": s["bytes"] / 1e6, "bytes_per_sample": s["bytes"] / batch, "blocks": s["blocks"]}
            for name, s in sites.items()]
    return sorted(rows, key=lambda r: -r["mb"])


def predicted_parts(preset: str, row_cap: int | None, batch: int, device_name: str) -> dict[str, float]:
    """The planner's memory parts (GB) for the one-GPU plan planner_accuracy makes."""
    case = Case(preset=preset, row_cap=row_cap, batch=batch, optimizer="rowwise_adagrad", precision="bf16",
                distribution="uniform")
    memory = predict(case, device_name).memory[0]
    return {part: getattr(memory, part) / 1e9 for part in ("weights", "optimizer_state", "activations", "workspace")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="dcnv2-small")
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--row-cap", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("memory_peak needs a GPU")

    from polyrec.hardware.detect import detect
    from polyrec.runtime import TrainConfig, Trainer

    cfg = TrainConfig(preset=args.preset, data="synthetic:uniform", batch_size=args.batch, steps=args.warmup + 1,
                      device="cuda", precision="bf16", embedding_optimizer="rowwise_adagrad", row_cap=args.row_cap,
                      log_every=10**9, cuda_graphs=False)
    trainer = Trainer(cfg, progress=False)
    for _ in range(args.warmup):
        trainer.train_step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=MAX_TRACE_ENTRIES)
    trainer.train_step()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snapshot["device_traces"][torch.cuda.current_device()]
    peak, alive = live_at_peak(trace)
    sites = by_site(alive, args.batch)
    predicted = predicted_parts(args.preset, args.row_cap, args.batch, detect().spec.name)
    summary = {"preset": args.preset, "batch": args.batch, "row_cap": args.row_cap,
               "baseline_gb": baseline / 1e9, "step_peak_above_baseline_gb": peak / 1e9,
               "max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 1e9,
               "trace_events": len(trace), **{f"predicted_{k}_gb": v for k, v in predicted.items()}}
    write_results(f"memory_peak_{args.preset}", {"sites": sites}, rows=sites[:40], summary=summary)
    print(f"{'MB':>9} {'B/sample':>9} {'blocks':>6}  site")
    for row in sites[:25]:
        print(f"{row['mb']:9.2f} {row['bytes_per_sample']:9.1f} {row['blocks']:6d}  {row['site']}")
    print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
