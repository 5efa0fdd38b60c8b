"""The SM clock a GPU holds under the embedding kernels' loads, read by ``nvidia-smi`` while each runs.

The cost models turn SM cycles into seconds at the catalog's ``boost_clock_hz`` (1.98 GHz for the H100 and the
H200; the H200's was read by nvidia-smi after matrix products, the H100's is the datasheet's). A GPU that runs its
memory-bound kernels at a lower clock makes every cycle-priced term (the trained forward's per-id floor, the lane
update's issue, the sort's passes) cheaper in the model than on the device. Each workload runs for ``--seconds``
while ``nvidia-smi`` samples the SM clock and the board power every ``SAMPLE_MS``:

- ``idle``: nothing launched;
- ``copy``: a 2 GiB device-to-device copy, again and again (bytes-bound);
- ``matmul``: bf16 8192^3 products (tensor cores);
- ``lookup``: the pooled forward of one ``TableBatchedEmbedding`` (4 features of 16-id bags at dim 128, fp32 rows,
  8 GiB of tables, uniform ids, batch 65536), inference;
- ``train``: the same module's forward, backward and row-wise Adagrad update.

    PYTHONPATH=.:benchmarks python3 benchmarks/clock_probe.py [--seconds 3]

About 30 s. Writes ``clock_probe_<gpu>_<date>.json``: per workload the samples' median, 10th and 90th percentile SM
clock (MHz) and median power (W), and the calls it made.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from typing import Callable

import torch
from tbe import make_batch

from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.results import write_results

#: nvidia-smi's sampling period (ms).
SAMPLE_MS = 50
#: Seconds of nvidia-smi's first samples left out: its start-up, before the load's calls begin.
START_S = 0.3
#: The lookup workload: features, ids per bag, row width, batch, table bytes in all.
FEATURES, HOTS, DIM, BATCH, TABLE_BYTES = 4, 16, 128, 65536, 8 << 30


def sampled(work: Callable[[], object], seconds: float) -> tuple[list[tuple[float, float]], int]:
    """(SM clock MHz, power W) samples of nvidia-smi while ``work`` is called again and again for ``seconds``, and
    the calls made. The device is drained before the sampler stops."""
    sampler = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                f"--loop-ms={SAMPLE_MS}"], stdout=subprocess.PIPE, text=True)
    time.sleep(START_S)  # the first samples are nvidia-smi's start-up, not the load's
    calls, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(8):
            work()
        calls += 8
        torch.cuda.synchronize()
    sampler.terminate()
    out, _ = sampler.communicate(timeout=10)
    return samples_of(out, skip=round(START_S * 1e3 / SAMPLE_MS)), calls


def samples_of(out: str, *, skip: int) -> list[tuple[float, float]]:
    """(SM clock MHz, power W) of each line of nvidia-smi's ``clocks.sm,power.draw`` CSV output after the first
    ``skip``; an error naming the line where one is not two numbers (a GPU that reports "[N/A]"), or where none is
    left. A last line without its newline is left out: the sampler was stopped while writing it."""
    samples = []
    for number, line in enumerate(out[:out.rfind("\n") + 1].splitlines(), 1):
        if number <= skip:
            continue
        fields = [field.strip() for field in line.split(",")]
        try:
            clock, power = map(float, fields)
        except ValueError:
            raise SystemExit(f"clock_probe: nvidia-smi line {number} is not 'clock, power': {line!r}") from None
        samples.append((clock, power))
    if not samples:
        raise SystemExit(f"clock_probe: nvidia-smi gave no samples after its first {skip} lines: {out!r}")
    return samples


def workloads() -> dict[str, Callable[[], object]]:
    """The probe's workloads by name (``idle`` sleeps)."""
    src = torch.empty((2 << 30) // 4, device="cuda")
    dst = torch.empty_like(src)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    rows = TABLE_BYTES // (DIM * 4) // FEATURES
    tables = [TableSpec(name=f"t{i}", rows=rows, dim=DIM) for i in range(FEATURES)]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                   device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    batches = [make_batch([rows] * FEATURES, [HOTS] * FEATURES, BATCH, False, gen) for _ in range(4)]
    grad = torch.randn(BATCH, DIM * FEATURES, device="cuda", generator=gen)
    turn = iter(range(10**12))

    def lookup() -> None:
        with torch.no_grad():
            module(batches[next(turn) % len(batches)])

    return {"idle": lambda: time.sleep(0.01), "copy": lambda: dst.copy_(src), "matmul": lambda: a @ a,
            "lookup": lookup, "train": lambda: module(batches[next(turn) % len(batches)]).backward(grad)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds each workload runs")
    args = parser.parse_args()
    rows = []
    for name, work in workloads().items():
        for _ in range(3):  # warm: compiles and first touches outside the samples
            work()
        torch.cuda.synchronize()
        samples, calls = sampled(work, args.seconds)
        clocks = sorted(c for c, _ in samples)
        deciles = statistics.quantiles(clocks, n=10) if len(clocks) > 1 else clocks * 9
        rows.append({"workload": name, "samples": len(samples), "calls": calls,
                     "sm_clock_mhz_median": statistics.median(clocks), "sm_clock_mhz_p10": deciles[0],
                     "sm_clock_mhz_p90": deciles[-1], "power_w_median": statistics.median(p for _, p in samples)})
        r = rows[-1]
        print(f"{name:>7}: SM clock median {r['sm_clock_mhz_median']:.0f} MHz (p10 {r['sm_clock_mhz_p10']:.0f}, "
              f"p90 {r['sm_clock_mhz_p90']:.0f}), power {r['power_w_median']:.0f} W, {len(samples)} samples",
              flush=True)
    write_results("clock_probe", {"rows": rows}, rows=rows,
                  summary={"seconds": args.seconds, "sample_ms": SAMPLE_MS})


if __name__ == "__main__":
    main()
