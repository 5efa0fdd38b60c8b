"""Where a training step's device sits idle: the gaps between its GPU events, from a profiler trace.

``e2e_profile`` found the MLPerf step's kernels taking 17.41 ms of an 18.01 ms step (device timeline,
tables capped at 4M rows, batch 65536): 0.6 ms per step in which no kernel runs. This runs the trainer
the same way under the torch profiler (``profiling.kernel_table`` with a Chrome trace), takes the GPU
events of every stream, and reports the time in which none runs: in all, per step, and the longest
gaps with the events on either side (a host synchronisation shows as a gap before the next step's first
kernels; back-to-back launches as a few microseconds each). The profiler slows the host's launches; the
device-timeline step of the same trainer without it is reported beside (``Trainer.benchmark``).

    PYTHONPATH=.:benchmarks python3 benchmarks/step_gaps.py [--row-cap 4000000] [--batch 65536] [--steps 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from polyrec.results import write_results
from profiling import kernel_table
from trace_timeline import gpu_events

#: Gaps shorter than this (us) are counted as launch-to-launch spacing, not listed one by one.
LISTED_GAP_US = 20.0


def idle_gaps(events: list[dict]) -> list[tuple[float, float, str, str]]:
    """(start us, length us, event before, event after) of each interval in which no event of ``events``
    (GPU events with "ts" and "dur" in us, any stream, sorted by start) runs."""
    gaps = []
    busy_until, last = None, ""
    for e in events:
        if busy_until is not None and e["ts"] > busy_until:
            gaps.append((busy_until, e["ts"] - busy_until, last, e["name"]))
        if busy_until is None or e["ts"] + e["dur"] >= busy_until:
            busy_until, last = e["ts"] + e["dur"], e["name"]
    return gaps


def summarize(events: list[dict], steps: int) -> tuple[dict, list[dict]]:
    """Per step: the span of the events, the idle time, and how much of it lies in gaps of at least
    LISTED_GAP_US; and the longest gaps (up to 30) as rows."""
    gaps = idle_gaps(events)
    span = events[-1]["ts"] + events[-1]["dur"] - events[0]["ts"] if events else 0.0
    idle = sum(g[1] for g in gaps)
    long = [g for g in gaps if g[1] >= LISTED_GAP_US]
    summary = {"steps": steps, "events_per_step": len(events) / steps, "span_ms_per_step": span / 1e3 / steps,
               "idle_ms_per_step": idle / 1e3 / steps, "gaps_per_step": len(gaps) / steps,
               f"idle_ms_per_step_in_gaps_over_{LISTED_GAP_US:.0f}us": sum(g[1] for g in long) / 1e3 / steps,
               "short_gap_mean_us": (idle - sum(g[1] for g in long)) / max(len(gaps) - len(long), 1)}
    rows = [{"at_ms": (start - events[0]["ts"]) / 1e3, "gap_us": length, "before": before[:90], "after": after[:90]}
            for start, length, before, after in sorted(long, key=lambda g: -g[1])[:30]]
    return summary, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mlperf-dcnv2")
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--row-cap", type=int, default=4_000_000, help="0: full-size tables")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    from polyrec.runtime import TrainConfig, Trainer

    cfg = TrainConfig(preset=args.preset, batch_size=args.batch, row_cap=args.row_cap or None, steps=10_000,
                      synthetic_pool=4, cuda_graphs=False)
    trainer = Trainer(cfg, progress=False)
    timing = trainer.benchmark(warmup=3, steps=5)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "step.json"
        kernel_table(trainer.train_step, reps=args.steps, warmup=2, trace=trace)
        events = gpu_events(trace)
    summary, rows = summarize(events, args.steps)
    summary |= {"preset": args.preset, "batch": args.batch, "row_cap": args.row_cap,
                "timer_median_step_ms": timing.get("median_step_ms")}
    write_results("step_gaps" + ("_full" if not args.row_cap else ""), {"rows": rows}, rows=rows, summary=summary)
    print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()))
    for r in rows[:15]:
        print(f"  {r['at_ms']:8.3f} ms  gap {r['gap_us']:7.1f} us  after {r['before'][:50]:<50}  before {r['after'][:50]}")


if __name__ == "__main__":
    main()
