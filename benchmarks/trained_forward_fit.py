"""Fit the trained forward's per-id floor (``polyrec.perfmodel.tbe_step.TRAINED_FORWARD_SM_CYCLES_PER_ID``) and its
per-launch device time (``tbe_lookup.FORWARD_LAUNCH_DEVICE_S``) on the pooled-lookup kernels that ``tbe_device_times``
runs recorded on an H200 and an H100, offline (CPU).

Each row is one ``tbe_shapes`` case: the device ms of its ``pooled_forward`` kernels in a training step (the
trained forward: it also stores the backward's sort keys). The case is re-drawn from its seed and its forward
priced as the planner prices it (``shard_cost.tbe_group_seconds`` at the device's committed calibration) without the
floor and with ``launch_s`` per launch; the floor is the expected ids times ``cycles`` SM cycles over the device's
compute units, and the forward the longer of the two. The H100 and the H200 share SM count and clock and differ
1.41x in copy rate: small-dim lookups of many ids ran at ~9-11 cycles per id on both. The two constants minimising
the rms log error over every case are printed, with the error under them and under the model before (no floor,
each launch at the calibrated launch latency), per device and over the forwards of more than 0.1 ms.

    PYTHONPATH=.:benchmarks python3 benchmarks/trained_forward_fit.py [--tag T]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from unittest import mock

from sort_model_fit import CALIBRATIONS, RESULTS, device_ceilings, device_of, mean_log, rms_log
from tbe_groups_model_check import FORWARD_KERNELS, kernels_ms, shard_loads
from tbe_shapes import seed_cases

from polyrec.hardware.catalog import get_device
from polyrec.perfmodel import tbe_lookup, tbe_step
from polyrec.planner import shard_cost
from polyrec.results import write_results

#: The ``tbe_device_times`` runs fitted on: those whose forward kernel is today's (the H200 runs of 2026-12-01 ran
#: the forward before e098ff9).
TIMES = (RESULTS / "tbe_model_check_2026-12-02" / "tbe_device_times_nvidia-h200_2026-12-02.json",
         RESULTS / "tbe_model_check_2026-12-02" / "tbe_device_times_seeds27_28_nvidia-h200_2026-12-02.json",
         RESULTS / "h100_backward_2026-12-06" / "tbe_device_times_nvidia-h100-80gb-hbm3_2026-12-06.json")
CASES_PER_SEED = 16
#: The runs' output gradient (``tbe_shapes_probe.time_config``: fp32), which the planner's price takes.
GRAD_BYTES = 4
#: Grids of the fit: SM cycles per id, and seconds per launch.
GRID_STEP, GRID_MAX = 0.05, 20.0
LAUNCH_STEP, LAUNCH_MAX = 0.5e-6, 10e-6
#: Forwards above this (seconds) are reported apart.
LARGE_S = 1e-4


@dataclasses.dataclass(frozen=True)
class Forward:
    """One measured trained forward: its device, the planner's price without the floor and without its launches'
    time, its launches, the ids expected, the time measured."""

    device: str
    label: str
    unlaunched_s: float
    launches: int
    ids: float  # the expected ids the planner prices (the loads' accesses)
    measured_s: float

    def priced_s(self, cycles: float, launch_s: float) -> float:
        return max(self.unlaunched_s + self.launches * launch_s,
                   tbe_step.sm_seconds(self.ids * cycles, get_device(self.device)))

    def before_s(self) -> float:
        """The model before: no floor, each launch at the calibrated launch latency."""
        return self.priced_s(0.0, device_ceilings(self.device).launch_latency.value)


def run_forwards(path: Path) -> list[Forward]:
    """The cases of one ``tbe_device_times`` run with a forward kernel recorded, as ``Forward`` rows."""
    run = json.loads(path.read_text())
    device = device_of(run["environment"]["gpu"])
    spec, ceil = get_device(device), device_ceilings(device)
    out = []
    for row in run["results"]["rows"]:
        measured = kernels_ms(row.get("kernels", []), FORWARD_KERNELS) * 1e-3
        if measured <= 0:
            continue
        loads = shard_loads(seed_cases(row["seed"], CASES_PER_SEED)[row["case"]])
        with mock.patch.object(tbe_step, "TRAINED_FORWARD_SM_CYCLES_PER_ID", 0.0):
            fwd_s, _, _, label = shard_cost.tbe_group_seconds(loads, spec, ceil, GRAD_BYTES)
        launches = label.split(";")[0].count(" + ") + 1  # "fwd bags=.. hots=.. warps=.. + bags=.. ..; update .."
        out.append(Forward(device=device, label=f"seed {row['seed']} case {row['case']}",
                           unlaunched_s=fwd_s - launches * tbe_lookup.FORWARD_LAUNCH_DEVICE_S, launches=launches,
                           ids=sum(s.accesses for s in loads), measured_s=measured))
    return out


def fit(forwards: list[Forward]) -> tuple[float, float]:
    """(cycles per id, seconds per launch) on the grids with the least rms log error over ``forwards``."""
    grid = [(i * GRID_STEP, j * LAUNCH_STEP) for i in range(round(GRID_MAX / GRID_STEP) + 1)
            for j in range(round(LAUNCH_MAX / LAUNCH_STEP) + 1)]
    return min(grid, key=lambda g: rms_log([(f.priced_s(*g), f.measured_s) for f in forwards]))


def errors(forwards: list[Forward], priced) -> dict:
    """Rms and mean log error of ``forwards`` priced by ``priced(forward)``."""
    pairs = [(priced(f), f.measured_s) for f in forwards]
    return {"rms_log": rms_log(pairs), "mean_log": mean_log(pairs), "cases": len(pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="", help="suffix of the results name")
    args = parser.parse_args()
    forwards = [f for path in TIMES for f in run_forwards(path)]
    cycles, launch_s = fit(forwards)
    summary = {"cases": len(forwards), "cycles_per_id": cycles, "launch_us": launch_s * 1e6,
               "committed_cycles_per_id": tbe_step.TRAINED_FORWARD_SM_CYCLES_PER_ID,
               "committed_launch_us": tbe_lookup.FORWARD_LAUNCH_DEVICE_S * 1e6}
    print(f"fit on {len(forwards)} trained forwards: {cycles:.2f} SM cycles per id, {launch_s * 1e6:.1f} us per "
          "launch")
    for device in (None, *CALIBRATIONS):
        for large in (False, True):
            on = [f for f in forwards if device in (None, f.device) and (not large or f.measured_s > LARGE_S)]
            if not on:
                continue
            key = f"{device or 'all'}{'_large' if large else ''}"
            summary[key + "_fit"] = errors(on, lambda f: f.priced_s(cycles, launch_s))
            summary[key + "_before"] = errors(on, Forward.before_s)
            print(f"  {key}: {len(on)} cases, rms log error {summary[key + '_before']['rms_log']:.3f} "
                  f"(mean {summary[key + '_before']['mean_log']:+.3f}) before, "
                  f"{summary[key + '_fit']['rms_log']:.3f} (mean {summary[key + '_fit']['mean_log']:+.3f}) fitted")
    rows = [{"device": f.device, "case": f.label, "ids": f.ids, "measured_ms": f.measured_s * 1e3,
             "launches": f.launches, "before_ms": f.before_s() * 1e3,
             "fit_ms": f.priced_s(cycles, launch_s) * 1e3} for f in forwards]
    write_results("trained_forward_fit" + (f"_{args.tag}" if args.tag else ""), {"rows": rows}, rows=rows,
                  summary=summary)


if __name__ == "__main__":
    main()
