"""What a step's embedding forward runs on the GPU before its lookups, from a profiler trace.

``benchmarks/e2e_profile.py --trace FILE`` writes the Chrome trace of a few training steps. This takes the last
step's lookup (its ``pooled_forward_kernel`` launches, one per module, and the events between them) and the GPU
events since the previous step's dense optimizer (``adagrad_kernel``, its last launch): with tables of
several row dtypes, the split of the batch between them (``polyrec.models.mixed_embeddings``). Prints each event
with the idle gap before it, and the sums: the events before the lookup, their gaps, the lookup's kernels. The
last step, since the first profiled step starts on an idle device and waits on the host.

    python3 benchmarks/lookup_window.py TRACE[.gz] [--after adagrad_kernel]
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from trace_timeline import gpu_events_of

#: The lookup kernel; the events after a lookup's first launch that may still be its own (a second module's launch
#: after the first's offsets' end check, flags' copy and output fill).
LOOKUP = "pooled_forward_kernel"
LOOKUP_SPAN = 8


def read_events(path: Path) -> list[dict]:
    """The GPU events of a trace file (gzipped or not), by start time."""
    text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return gpu_events_of(json.loads(text)["traceEvents"])


def last_lookup(events: list[dict], after: str) -> tuple[dict, list[dict], list[dict]]:
    """(the last ``after`` event before the trace's last lookup, the events between it and that lookup's first
    launch, the lookup's events: through its last ``LOOKUP`` launch within ``LOOKUP_SPAN`` events)."""
    launches = [i for i, e in enumerate(events) if LOOKUP in e["name"]]
    marks = [i for i, e in enumerate(events[:launches[-1]] if launches else []) if after in e["name"]]
    if not marks:
        raise SystemExit(f"no {after} before a {LOOKUP}: pass --after with a kernel the step runs before its lookup")
    mark = marks[-1]
    first = next(i for i in launches if i > mark)
    last = max(i for i in launches if i < first + LOOKUP_SPAN)
    return events[mark], events[mark + 1:first], events[first:last + 1]


def gap_rows(events: list[dict], previous_end: float) -> list[tuple[float, float, str]]:
    """(idle us before it, duration us, name) of each event, the first's gap from ``previous_end``."""
    rows = []
    for e in events:
        rows.append((e["ts"] - previous_end, e["dur"], e["name"]))
        previous_end = e["ts"] + e["dur"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path, help="a Chrome trace of e2e_profile.py --trace (.json or .json.gz)")
    parser.add_argument("--after", default="adagrad_kernel", help="the kernel the window starts after")
    args = parser.parse_args()
    events = read_events(args.trace)
    mark, split, lookup = last_lookup(events, args.after)
    rows = gap_rows(split + lookup, mark["ts"] + mark["dur"])
    for gap, dur, name in rows:
        print(f"{gap:8.1f} {dur:9.1f}  {name[:90]}")
    head = rows[:len(split)]
    print(f"before the lookup: {len(head)} events, {sum(r[1] for r in head):.1f} us running, "
          f"{sum(r[0] for r in head):.1f} us idle between them")
    print(f"lookup kernels: {sum(e['dur'] for e in lookup if LOOKUP in e['name']):.1f} us")


if __name__ == "__main__":
    main()
