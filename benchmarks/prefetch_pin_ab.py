"""Pinned against pageable batches read ahead from an MLPerf multi-hot day, alternated in one process.

``open_source`` wraps a file source in ``Prefetching``, which reads batches on a background thread and, for a CUDA
device, copies each into page-locked memory there (``pin``), so that its copy to the GPU does not wait on the
training thread. Two runs of ``multihot_reader.py`` (session 59) measured pinned / unpinned 1.19 and 1.02 per step,
always pinned first. This alternates the two arms (pinned, unpinned; then unpinned, pinned; ...) on one day of
random rows at MLPerf's widths, ``mlperf-dcnv2`` with tables capped at ``multihot_reader.ROW_CAP`` rows, eager, and
reports each round and the ratio of the medians.

    PYTHONPATH=.:benchmarks python3 benchmarks/prefetch_pin_ab.py [--rounds 3] [--steps 20]

Writes ``prefetch_pin_ab_<gpu>_<date>.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from multihot_reader import time_reader, time_steps, write_day


def arm_order(rounds: int) -> list[bool]:
    """The arms (True: pinned) in the order run: each round both, the first arm alternating between rounds."""
    return [pin for r in range(rounds) for pin in ((True, False) if r % 2 == 0 else (False, True))]


def main() -> None:
    from polyrec.models.config import preset
    from polyrec.results import write_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1 << 20, help="rows in the day written")
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both arms")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per arm and round")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        spec = f"mlperf:{write_day(Path(folder), args.rows, preset('mlperf-dcnv2').multi_hot)}"
        reads = time_reader(spec, args.batch, 8)
        for i, pin in enumerate(arm_order(args.rounds)):
            row = {"round": i // 2, "pinned": pin, **time_steps(spec, args.batch, args.steps, pin=pin)}
            print(row, flush=True)
            rows.append(row)
    pinned = [r["ms_per_step"] for r in rows if r["pinned"]]
    pageable = [r["ms_per_step"] for r in rows if not r["pinned"]]
    summary = {"reader_s_per_batch_median": statistics.median(reads), "rounds": args.rounds,
               "pinned_ms_median": statistics.median(pinned), "unpinned_ms_median": statistics.median(pageable),
               "pinned_over_unpinned": statistics.median(pinned) / statistics.median(pageable),
               "batch": args.batch, "rows": args.rows}
    print(summary, flush=True)
    write_results("prefetch_pin_ab", {"arms": rows, "reader_s": reads}, rows=rows, summary=summary)


if __name__ == "__main__":
    main()
