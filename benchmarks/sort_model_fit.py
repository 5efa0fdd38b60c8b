"""Fit the id sort's cost model (``polyrec.perfmodel.tbe_step.sort_seconds``) on the sort kernels that
``tbe_device_times`` runs recorded on two devices of one die and different memory (H200, H100), offline (CPU).

Each row is one ``tbe_shapes`` case: n sorted ids and the device ms of the sort's kernels in its step (CUB's
radix sort passes and histogram, the index iota, the keys' copy: ``tbe_groups_model_check.SORT_KERNELS``;
the runs fitted on kept each step's eight heaviest kernels, so a case may miss a memset of a few microseconds;
a case with no sort kernel recorded is left out). The model:
a fixed time, plus the bytes the passes count at ``factor`` over the device's calibrated copy rate, plus
``cycles`` SM cycles per id and pass spread over the compute units. The H100 and the H200 share SM count and
clock (132 x 1.98 GHz) and differ 1.41x in copy rate, so the two terms part. Weighted least squares on
relative errors; the rms log error is printed for the fit, for the model as committed, and on the full-size
MLPerf profiles (``e2e_profile``: every kernel of a step) as a check the fit did not see (their copies and
memsets include the rest of the step's, so the radix passes and index iota are printed alone beside).

    PYTHONPATH=.:benchmarks python3 benchmarks/sort_model_fit.py [--tag T]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from pathlib import Path

import numpy as np

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.catalog import get_device
from polyrec.hardware.types import Ceilings
from polyrec.perfmodel import tbe_step
from polyrec.results import write_results
from tbe_groups_model_check import sort_ms

RESULTS = Path(__file__).resolve().parent / "results"
#: The ``tbe_device_times`` runs fitted on.
TIMES = (RESULTS / "tbe_model_check_2026-12-01" / "tbe_device_times_seeds21_22.json",
         RESULTS / "gather_rate_2026-12-01" / "tbe_device_times_seeds23_24_nvidia-h200_2026-12-01.json",
         RESULTS / "tbe_model_check_2026-12-02" / "tbe_device_times_nvidia-h200_2026-12-02.json",
         RESULTS / "tbe_model_check_2026-12-02" / "tbe_device_times_seeds27_28_nvidia-h200_2026-12-02.json",
         RESULTS / "h100_backward_2026-12-06" / "tbe_device_times_nvidia-h100-80gb-hbm3_2026-12-06.json")
#: Full-size MLPerf steps profiled whole (one module, 14.02M ids): checks.
PROFILES = (RESULTS / "v_transpose_2026-12-04" / "second_machine_profile"
            / "e2e_profile_bf16_rows_uniform_fp8_dense_graphs_nvidia-h200_2026-12-04.json",
            RESULTS / "mixed_split_profile_2026-12-06"
            / "e2e_profile_bf16_rows_uniform_nvidia-h100-80gb-hbm3_2026-12-06.json")
#: Each device's calibration, as stored by ``polyrec hw calibrate`` on machines of its kind.
CALIBRATIONS = {"H200": RESULTS / "planner_accuracy_fp8_2026-12-04" / "run3_after_fit" / "calibration_h200.json",
                "H100": RESULTS / "planner_accuracy_h100_2026-12-06" / "calibration_h100.json"}
#: MLPerf DLRM-DCNv2's ids per step at batch 65536 (sum of the multi-hot sizes, 214, x 65536).
MLPERF_IDS = 214 * 65536
KEY_BYTES = 4


def device_of(gpu: str) -> str:
    """The catalog device a results file's ``gpu`` names."""
    found = [name for name in CALIBRATIONS if name in gpu]
    if len(found) != 1:
        raise SystemExit(f"sort_model_fit: no calibration for the GPU {gpu!r}")
    return found[0]


def rows() -> list[tuple[str, int, float]]:
    """(device, ids, sort seconds) of every case of ``TIMES`` with sort kernels recorded."""
    out = []
    for path in TIMES:
        run = json.loads(path.read_text())
        device = device_of(run["environment"]["gpu"])
        timed = [(r["nnz"], sort_ms(r.get("kernels", [])) * 1e-3) for r in run["results"]["rows"]]
        out += [(device, n, t) for n, t in timed if t > 0]
    return out


@functools.cache
def device_ceilings(device: str) -> Ceilings:
    """``device``'s ceilings under its calibration in ``CALIBRATIONS``, read once."""
    return ceilings(get_device(device), json.loads(CALIBRATIONS[device].read_text()))


def terms(device: str, n: int) -> tuple[float, float, float]:
    """The model's three terms for n ids on ``device`` before their constants: 1, the counted bytes over the copy
    rate (seconds), the passes' id visits over the device's SM cycles per second."""
    spec, ceil = get_device(device), device_ceilings(device)
    passes = tbe_step.sort_passes(KEY_BYTES)
    return (1.0, tbe_step.sort_bytes(n, KEY_BYTES) / ceil.copy_bandwidth.value, tbe_step.sm_seconds(passes * n, spec))


def fit(data: list[tuple[str, int, float]]) -> np.ndarray:
    """(fixed s, bytes factor, cycles per id and pass) minimising the squared relative error."""
    x = np.array([terms(d, n) for d, n, _ in data])
    y = np.array([t for *_, t in data])
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)
    return coef


def rms_log(pairs: list[tuple[float, float]]) -> float:
    return math.sqrt(sum(math.log(p / m) ** 2 for p, m in pairs) / len(pairs))


def mean_log(pairs: list[tuple[float, float]]) -> float:
    return sum(math.log(p / m) for p, m in pairs) / len(pairs)


def committed(device: str, n: int) -> float:
    """``sort_seconds`` as the package has it now."""
    return tbe_step.sort_seconds(n, KEY_BYTES, device_ceilings(device), get_device(device))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="", help="suffix of the results name")
    args = parser.parse_args()
    data = rows()
    coef = fit(data)
    fitted = [(float(np.dot(coef, terms(d, n))), t) for d, n, t in data]
    summary = {"cases": len(data), "fixed_us": coef[0] * 1e6, "bytes_factor": coef[1], "cycles_per_id_pass": coef[2]}
    for device in CALIBRATIONS:
        on = [i for i, (d, *_) in enumerate(data) if d == device]
        summary[f"{device}_cases"] = len(on)
        summary[f"{device}_fit_rms_log"] = rms_log([fitted[i] for i in on])
        summary[f"{device}_committed_rms_log"] = rms_log([(committed(data[i][0], data[i][1]), data[i][2]) for i in on])
        summary[f"{device}_committed_mean_log"] = sum(math.log(committed(data[i][0], data[i][1]) / data[i][2])
                                                      for i in on) / len(on)
    checks = []
    for path in PROFILES:
        run = json.loads(path.read_text())
        device = device_of(run["environment"]["gpu"])
        kernels = run["results"]["rows"]
        own = sum(k["ms_per_step"] for k in kernels if "radix_sort" in k["kernel"] or "fill_reverse" in k["kernel"])
        checks.append({"device": device, "file": path.name, "ids": MLPERF_IDS, "measured_ms": sort_ms(kernels),
                       "passes_and_iota_ms": own,
                       "fit_ms": float(np.dot(coef, terms(device, MLPERF_IDS))) * 1e3,
                       "committed_ms": committed(device, MLPERF_IDS) * 1e3})
    print(f"fit on {len(data)} cases: fixed {coef[0] * 1e6:.1f} us, bytes at {coef[1]:.3f} x / copy rate, "
          f"{coef[2]:.2f} SM cycles per id and pass")
    for device in CALIBRATIONS:
        print(f"  {device}: {summary[device + '_cases']} cases, rms log error fit "
              f"{summary[device + '_fit_rms_log']:.3f}, committed model {summary[device + '_committed_rms_log']:.3f} "
              f"(mean {summary[device + '_committed_mean_log']:+.3f})")
    for c in checks:
        print(f"  check {c['device']} MLPerf full size: measured {c['measured_ms']:.3f} ms "
              f"({c['passes_and_iota_ms']:.3f} the passes and iota alone), fit {c['fit_ms']:.3f}, "
              f"committed {c['committed_ms']:.3f}")
    write_results("sort_model_fit" + (f"_{args.tag}" if args.tag else ""), {"checks": checks}, rows=checks,
                  summary=summary)


if __name__ == "__main__":
    main()
