"""Detect the present GPU, calibrate its ceilings and record them against the datasheet.

Run on the GPU machine: ``PYTHONPATH=. python3 benchmarks/calibrate.py``. Writes
``benchmarks/results/calibrate_<gpu>_<date>.json`` (+ ``.md``) and stores the calibration in the
cache directory like ``polyrec hw calibrate``.
"""

from __future__ import annotations

import argparse
import time

from polyrec.hardware.calibrate import calibrate, save_calibration
from polyrec.hardware.detect import detect
from polyrec.hardware.types import MATMUL_DTYPES
from polyrec.results import write_results


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    found = detect()
    if found.how == "cpu":
        raise SystemExit("calibrate needs a GPU")
    spec = found.spec
    start = time.perf_counter()
    measured = calibrate(spec)
    seconds = time.perf_counter() - start
    save_calibration(spec.name, measured)
    rows = [{"ceiling": "copy bandwidth (TB/s)", "measured": measured["copy_bandwidth"] / 1e12,
             "datasheet": spec.hbm_bandwidth / 1e12, "ratio": measured["copy_bandwidth"] / spec.hbm_bandwidth},
            {"ceiling": "L2 bandwidth (TB/s)", "measured": measured["l2_bandwidth"] / 1e12,
             "datasheet": None, "ratio": None}]
    for dtype in MATMUL_DTYPES:
        peak = spec.peak_flops[dtype]
        value = measured.get(f"matmul_{dtype}")
        if value is None:  # no matrix rate for it on this device (calibrate skips it)
            continue
        rows.append({"ceiling": f"matmul {dtype} (TFLOP/s)", "measured": value / 1e12, "datasheet": peak / 1e12,
                     "ratio": value / peak if peak else None})
    rows.append({"ceiling": "launch latency (us)", "measured": measured["launch_latency"] * 1e6,
                 "datasheet": None, "ratio": None})
    summary = {"device": spec.name, "detected_as": found.how, "torch_name": found.props.name,
               "sms": found.props.multi_processor_count, "l2_bytes_reported": found.props.l2_cache_size,
               "total_memory_reported": found.props.total_memory, "calibration_seconds": seconds}
    json_path, _ = write_results("calibrate", {"measured": measured}, rows=rows, summary=summary)
    print(f"detected {spec.name} ({found.how}); calibration took {seconds:.1f} s")
    for row in rows:
        ratio = f"{row['ratio']:.2f}" if row["ratio"] else "-"
        print(f"{row['ceiling']:<26} {row['measured']:>10.2f}  datasheet {row['datasheet'] or '-':>8}  ratio {ratio}")
    print(f"wrote {json_path}")


if __name__ == "__main__":
    main()
