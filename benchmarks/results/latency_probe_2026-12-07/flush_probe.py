"""Why a lookup that fills the L2 holds more of ``do_bench``'s timer (``timer_check``'s third row): each of
``gather_rate.TIMER_CHECK_LOOKUPS`` timed between two events after the L2 is emptied three ways, and by the profiler:

- ``zeroed``: ``do_bench``'s own way, a 256 MB buffer zeroed (the L2 left full of dirty lines);
- ``read``: the same buffer summed (the L2 left full of clean lines);
- ``none``: nothing between launches (not a kernel time: the GPU then waits on the host's launch of the lookup);
- ``kernels``: the profiler's mean kernel time over back-to-back launches (``timer_check``'s ``kernels_ms``).

Median of ``REPS`` event-timed launches each. ``zeroed`` - ``read`` is what the dirty lines' write-back costs the
lookup: on an H100 7.1-7.2 us for the third (L2-filling) lookup, 1.3-1.4 us for the short ones (the README).

    PYTHONPATH=.:benchmarks python3 benchmarks/results/latency_probe_2026-12-07/flush_probe.py
"""

import statistics

import torch
from gather_rate import TIMER_CHECK_LOOKUPS, timer_check_launch
from profiling import kernel_table

from polyrec.results import write_results

#: Bytes of the buffer that empties the L2 (``do_bench``'s).
FLUSH_BYTES = 256 << 20
REPS = 200


def event_ms(launch, flush) -> float:
    """Median ms between two events around ``launch``, ``flush`` run before each."""
    times = []
    for _ in range(REPS):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    sink = torch.empty((), dtype=torch.int64, device="cuda")
    flushes = {"zeroed": buffer.zero_, "read": lambda: sink.copy_(buffer.sum()), "none": lambda: None}
    rows = []
    for dim, batch_size, bag in TIMER_CHECK_LOOKUPS:
        launch = timer_check_launch(dim, batch_size, bag, gen)
        for _ in range(10):
            launch()
        row = {"dim": dim, "batch": batch_size, "bags": [bag]}
        row.update({f"{name}_ms": event_ms(launch, flush) for name, flush in flushes.items()})
        row["kernels_ms"] = sum(r["ms_per_step"] for r in kernel_table(launch, reps=50, warmup=5))
        rows.append(row)
        print("D{dim} B={batch}: zeroed {zeroed_ms:.4f} read {read_ms:.4f} none {none_ms:.4f} kernels {kernels_ms:.4f} "
              "ms".format(**row), flush=True)
    write_results("flush_probe", {}, rows=rows, summary={"reps": REPS, "flush_bytes": FLUSH_BYTES})


if __name__ == "__main__":
    main()
