"""Each rank's GPU timeline, from the Chrome traces `multi_gpu.py --profile --trace DIR` writes
(``DIR/rank<r>.json``), on one clock: the kernels, copies and memsets that start in a window, the
short ones left out except on side streams (where the exchanges, barriers and collectives run).

    python3 benchmarks/trace_timeline.py DIR --start 22 --end 45.5 [--min-us 60] [--side-min-us 20]

Times are ms from the first GPU event of rank 0 (the ranks' traces share the host clock). The
excerpts in ``benchmarks/results/exchange_order_ab_2026-11-30/`` were printed this way.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

#: Trace categories of GPU work (torch profiler's Chrome export).
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def gpu_events(trace: Path) -> list[dict]:
    """The GPU events of one trace, by start time."""
    return gpu_events_of(json.loads(trace.read_text())["traceEvents"])


def gpu_events_of(events: list[dict]) -> list[dict]:
    """The GPU events among a trace's ``traceEvents``, by start time."""
    return sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES), key=lambda e: e["ts"])


def main_stream(events: list[dict]) -> object:
    """The stream with the most events (the compute stream of a training step)."""
    return Counter(e["args"].get("stream") for e in events).most_common(1)[0][0]


def window(events: list[dict], origin_us: float, start_ms: float, end_ms: float, min_us: float,
           side_min_us: float) -> list[tuple[object, float, float, str]]:
    """(stream, start ms, duration ms, name) of the events starting in [start_ms, end_ms]: those on the
    main stream lasting at least ``min_us``, those on other streams at least ``side_min_us``."""
    main = main_stream(events) if events else None
    out = []
    for e in events:
        t = (e["ts"] - origin_us) / 1e3
        stream = e["args"].get("stream")
        if start_ms <= t <= end_ms and e["dur"] >= (min_us if stream == main else side_min_us):
            out.append((stream, t, e["dur"] / 1e3, e["name"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace_dir", type=Path, help="the --trace DIR of a multi_gpu.py --profile run")
    parser.add_argument("--start", type=float, required=True, help="window start, ms")
    parser.add_argument("--end", type=float, required=True, help="window end, ms")
    parser.add_argument("--min-us", type=float, default=60.0, help="shortest main-stream event shown, us")
    parser.add_argument("--side-min-us", type=float, default=20.0, help="shortest other-stream event shown, us")
    args = parser.parse_args()
    traces = sorted(args.trace_dir.glob("rank*.json"), key=lambda p: int(p.stem[4:]))
    if not traces:
        raise SystemExit(f"no rank<r>.json in {args.trace_dir}: run multi_gpu.py --profile --trace {args.trace_dir}")
    ranks = [gpu_events(t) for t in traces]
    if not ranks[0]:
        raise SystemExit(f"{traces[0]} holds no GPU events")
    origin = ranks[0][0]["ts"]
    for path, events in zip(traces, ranks):
        print(f"== {path.stem} (main stream {main_stream(events)}; ms from rank 0's first GPU event)")
        for stream, t, dur, name in window(events, origin, args.start, args.end, args.min_us, args.side_min_us):
            print(f"  s{stream!s:>3} {t:8.3f} +{dur:6.3f}  {name[:70]}")


if __name__ == "__main__":
    main()
