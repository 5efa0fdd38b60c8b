"""How much the calibrated ceilings move between repeats, and against what the MLPerf GEMMs reach.

The stored bf16 matmul rate of the committed planner-accuracy runs' calibrations ranges 730-802 TFLOP/s
(``benchmarks/results/planner_accuracy_runs_2026-12-01/calibration_h200_*``) while the same H200 step's dense
half measured 13.1-13.4 ms in all of them; the planner's GEMM prices scale with that rate. This measures,
in one process, ``--repeats`` times: the bf16 8192^3 matmul and the 2 GiB copy each timed two ways,
``calibrate.median_ms`` (3 warm-up calls, then 10 calls each timed alone after a synchronisation: how
``polyrec hw calibrate`` times the matmul, and timed the copy until the twenty-ninth session) and
``calibrate.steady_ms`` (back-to-back calls, timed in blocks: how it times the copy since), and the MLPerf
top MLP's first GEMM ([65536, 3456] x [3456, 1024] bf16) the steady way, beside; and the matmul per call
with more calls (``LONG_PER_CALL``).

    PYTHONPATH=.:benchmarks python3 benchmarks/calibrate_spread.py [--repeats 6]
"""

from __future__ import annotations

import argparse
import functools
import statistics

import torch

from polyrec.hardware.calibrate import COPY_BYTES, measure_copy_bandwidth, measure_matmul, median_ms, steady_ms
from polyrec.results import write_results

#: Per-call timing with more calls: 10 warm-up, the median of 40.
LONG_PER_CALL = functools.partial(median_ms, warmup=10, reps=40)


def gemm_rate(m: int, n: int, k: int, timing) -> float:
    """FLOP/s of an [m, k] x [k, n] bf16 matmul on random data, timed by ``timing``."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    return 2 * m * n * k / (timing(lambda: a @ b) * 1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    rows = []
    for r in range(args.repeats):
        row = {"repeat": r, "matmul_bf16_per_call": measure_matmul("bf16", timing=median_ms),
               "matmul_bf16_per_call_long": measure_matmul("bf16", timing=LONG_PER_CALL),
               "matmul_bf16_steady": measure_matmul("bf16", timing=steady_ms),
               "top0_gemm_steady": gemm_rate(65536, 1024, 3456, steady_ms),
               "copy_per_call": measure_copy_bandwidth(COPY_BYTES, timing=median_ms),
               "copy_steady": measure_copy_bandwidth(COPY_BYTES, timing=steady_ms)}
        rows.append(row)
        print(", ".join(f"{k} {v / 1e12:.1f}" if k != "repeat" else f"{k} {v}" for k, v in row.items()))
    summary = {}
    for key in rows[0]:
        if key == "repeat":
            continue
        values = [r[key] for r in rows]
        summary[key] = {"min": min(values), "median": statistics.median(values), "max": max(values),
                        "spread": (max(values) - min(values)) / statistics.median(values)}
        print(f"{key}: median {summary[key]['median'] / 1e12:.1f} T/s, spread {summary[key]['spread']:.1%}")
    write_results("calibrate_spread", {}, rows=rows, summary=summary)


if __name__ == "__main__":
    main()
