"""What the sharded input path's offsets check (``input_dist.checked_offsets``) costs per step.

Before the sharded-runtime audit the router read a batch's offsets as given (``offsets.to(int64)``); now
it reads the nearest well-formed ones and flags the features they differ in: a few small device ops
over the ``F * B + 1`` offsets. Times both on one GPU on an MLPerf DLRM-DCNv2 batch (26 features, the
MLPerf multi-hot sizes) at each ``--batch-size``: device time by ``do_bench`` (median) and host time
per call (enqueue, no sync), and each as a share of a world-2 MLPerf step read from a committed
``multi_gpu`` results file. Writes ``offsets_check_cost_<gpu>_<date>.json``.

    PYTHONPATH=.:benchmarks python3 benchmarks/offsets_check_cost.py [--batch-size 65536 ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import triton

from polyrec.kernels.jagged import JaggedBatch
from polyrec.models import preset
from polyrec.results import RESULTS_DIR, write_results
from polyrec.runtime.input_dist import checked_offsets

#: The world-2 MLPerf step the costs are compared with (65536 samples per GPU, full tables).
WORLD2_STEP = RESULTS_DIR / "multi_gpu_world2_nvidia-h200_2026-11-30.json"
#: Calls timed for the host cost (after one warm-up call).
HOST_CALLS = 200


def mlperf_batch(batch_size: int) -> JaggedBatch:
    multi_hot = preset("mlperf-dcnv2").multi_hot
    lengths = torch.tensor(multi_hot, device="cuda").repeat_interleave(batch_size)
    values = torch.randint(0, 1000, (int(lengths.sum()),), device="cuda")
    return JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=batch_size, num_features=len(multi_hot))


def host_ms(call) -> float:
    """Median host milliseconds per call, the device kept busy by the calls themselves."""
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(HOST_CALLS):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def measure(batch_size: int) -> dict:
    batch = mlperf_batch(batch_size)
    bad = torch.zeros(batch.num_features, dtype=torch.bool, device="cuda")
    calls = {"as_given": lambda: batch.offsets.to(torch.int64), "checked": lambda: checked_offsets(batch, bad)}
    row = {"batch_size": batch_size, "offsets": batch.offsets.numel()}
    for name, call in calls.items():
        row[f"{name}_device_ms"] = triton.testing.do_bench(call, warmup=20, rep=200, return_mode="median")
        row[f"{name}_host_ms"] = host_ms(call)
    if bad.any():
        raise SystemExit("a well-formed batch was flagged: the check is wrong")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, action="append", default=[])
    args = parser.parse_args()
    step_ms = json.loads(Path(WORLD2_STEP).read_text())["summary"]["ms_per_step"]
    rows = []
    for b in args.batch_size or [65536, 16384]:
        row = measure(b)
        row["added_device_ms"] = row["checked_device_ms"] - row["as_given_device_ms"]
        row["added_host_ms"] = row["checked_host_ms"] - row["as_given_host_ms"]
        row["added_share_of_world2_step"] = max(row["added_device_ms"], row["added_host_ms"]) / step_ms
        rows.append(row)
        print(f"B={b}: device {row['as_given_device_ms']:.4f} -> {row['checked_device_ms']:.4f} ms, host "
              f"{row['as_given_host_ms']:.4f} -> {row['checked_host_ms']:.4f} ms "
              f"({row['added_share_of_world2_step']:.2%} of a {step_ms:.2f} ms world-2 step)", flush=True)
    write_results("offsets_check_cost", {"rows": rows, "world2_step_ms": step_ms, "world2_step_file": str(WORLD2_STEP)},
                  rows=rows, summary={"world2_step_ms": step_ms})


if __name__ == "__main__":
    main()
