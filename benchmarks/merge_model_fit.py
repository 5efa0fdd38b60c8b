"""Fit the merge's per-level device time and its chunked walk (``polyrec.perfmodel.tbe.MERGE_LEVEL_DEVICE_S``,
``MERGE_WALK_TRIPS``) on the merge kernels that ``tbe_device_times`` runs recorded on an H100, offline (CPU).

Each row is one ``tbe_shapes`` case whose update ran as one launch (a module of one dim group): the device ms and
launches of its ``merge_level_kernel`` in a step (one launch per level). The case is re-drawn from its seed and
priced as the planner prices it (``shard_cost.tbe_group_seconds``, at the device's committed calibration), with the
update config the run recorded (variant, tile, chunks, warps; a case whose planner config differs is left out)
and the merge chunks it ran: recorded (``m1`` / ``m8`` in runs since 435f34e) or, in runs before, the one whose
level count is the launches measured. The merge's price is its work (bytes, round trips, rounding) plus per level
MERGE_LEVEL_DEVICE_S and, with 8 tiles per program, MERGE_WALK_TRIPS round trips per tile walked after the first:
least squares on relative errors gives both. The rms log error is printed for the fit and for the model before (each
level at the calibrated launch latency, the walk at MERGE_EMPTY_TRIPS), per device; checks not fitted on: the
full-size MLPerf profiles (``sort_model_fit.PROFILES``) and the H100's A/B of 1 and 8 tiles per merge program on
them (``AB``).

    PYTHONPATH=.:benchmarks python3 benchmarks/merge_model_fit.py [--tag T]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from unittest import mock

import numpy as np
from sort_model_fit import PROFILES, RESULTS, device_ceilings, device_of, mean_log, rms_log
from tbe_groups_model_check import shard_loads
from tbe_shapes import seed_cases

from polyrec.hardware.catalog import get_device
from polyrec.kernels.tbe_select import MERGE_CHUNK_CHOICES
from polyrec.models import preset
from polyrec.perfmodel import tbe, tbe_step
from polyrec.perfmodel.tbe_reads import LOADED_LATENCY_S
from polyrec.planner import shard_cost
from polyrec.planner.types import TablePlan, model_spec_from_config
from polyrec.results import write_results

#: The ``tbe_device_times`` runs fitted on: their merge kernels run today's code (the H200 runs before 2026-12-02
#: ran a merge whose open-run carry came after the scan, ce59424).
TIMES = (RESULTS / "h100_backward_2026-12-06" / "tbe_device_times_nvidia-h100-80gb-hbm3_2026-12-06.json",
         RESULTS / "h100_merge_2026-12-07" / "tbe_device_times_seed29_nvidia-h100-80gb-hbm3_2026-12-07.json",
         RESULTS / "h100_merge_2026-12-07" / "tbe_device_times_seed30_nvidia-h100-80gb-hbm3_2026-12-07.json")
#: ``tbe_breakdown --merge-ab 1,8`` on the full-size MLPerf step with bf16 rows and gradient (an H100).
AB = RESULTS / "h100_merge_2026-12-07" / "tbe_breakdown_bf16_gradbf16_mergeab_nvidia-h100-80gb-hbm3_2026-12-07.json"
#: The cases per seed the runs drew (``tbe_device_times --cases``).
CASES_PER_SEED = 16
#: The output gradient's element size in the runs (``tbe_shapes_probe.time_config``: fp32) and in the MLPerf
#: profiles (bf16).
RUN_GRAD_BYTES, PROFILE_GRAD_BYTES = 4, 2
MERGE_KERNEL = "merge_level_kernel"


@dataclasses.dataclass(frozen=True)
class Merge:
    """One measured merge and what the model needs to price it: the update shape that ran, its merge's inputs."""

    device: str
    label: str
    shape: tbe.UpdateShape
    inputs: dict  # update_merge_seconds' nnz, unique, grad_row_bytes
    levels: int
    measured_s: float

    def walked(self) -> float:
        """Round-trip latencies of the chunked walk per MERGE_WALK_TRIPS: each level's tiles after the first."""
        return self.levels * (self.shape.merge_chunks - 1) * LOADED_LATENCY_S[get_device(self.device).vendor]

    def work_s(self) -> float:
        """The merge's price less its levels' fixed time and its walk."""
        spec = get_device(self.device)
        priced = tbe.update_merge_seconds(self.shape, spec, device_ceilings(self.device), **self.inputs)
        return priced - self.levels * tbe.MERGE_LEVEL_DEVICE_S[spec.vendor] - self.walked() * tbe.MERGE_WALK_TRIPS

    def priced_s(self, level_s: float, walk_trips: float) -> float:
        return self.work_s() + self.levels * level_s + self.walked() * walk_trips

    def before_s(self) -> float:
        """The model before: each level at the calibrated launch latency, the walk at MERGE_EMPTY_TRIPS."""
        return self.priced_s(device_ceilings(self.device).launch_latency.value, tbe.MERGE_EMPTY_TRIPS)


def planned_updates(loads: tuple, device: str, grad_bytes: int) -> list[tuple[tbe.UpdateShape, dict]]:
    """The update shape and ``update_seconds`` keywords of each update launch the planner prices for a module of
    ``loads``."""
    # the planner's calls (through ``tbe_step``), not the selector's
    with mock.patch.object(tbe_step, "update_launch_seconds", wraps=tbe_step.update_launch_seconds) as seen:
        shard_cost.tbe_group_seconds(loads, get_device(device), device_ceilings(device), grad_bytes)
    return [(c.args[0], dict(c.kwargs)) for c in seen.call_args_list]


def merge_inputs(update_kwargs: dict) -> dict:
    """The keywords of ``update_seconds`` that ``update_merge_seconds`` takes too."""
    return {k: update_kwargs[k] for k in ("nnz", "unique", "grad_row_bytes")}


def planned_merges(loads: tuple, device: str, grad_bytes: int) -> list[tuple[tbe.UpdateShape, dict]]:
    """The update shape and merge inputs of each update launch the planner prices for a module of ``loads``."""
    return [(shape, merge_inputs(kw)) for shape, kw in planned_updates(loads, device, grad_bytes)]


def ran_merge_chunks(shape: tbe.UpdateShape, nnz: float, label: str, launches: float) -> int | None:
    """The merge chunks the run took: from its label where recorded, else the choice whose levels are ``launches``
    (None where neither or both fit)."""
    marks = [w for w in label.split() if w[0] == "m" and w[1:].isdigit()]
    if marks:
        return int(marks[0][1:])
    fits = [m for m in MERGE_CHUNK_CHOICES if tbe.update_merge_levels(nnz, shape.tile * shape.chunks, m) == launches]
    return fits[0] if len(fits) == 1 else None


def label_matches(shape: tbe.UpdateShape, label: str) -> bool:
    """Whether the run's config label ("lane t8 c8 [m1] w1") names ``shape``'s variant, tile, chunks and warps."""
    words = set(label.split())
    return {shape.variant, f"t{shape.tile}", f"c{shape.chunks}", f"w{shape.num_warps}"} <= words


def one_launch_updates(path: Path, keep) -> list[tuple[str, dict, dict, tbe.UpdateShape, dict]]:
    """(device, run row, case, update shape, ``update_seconds`` keywords) of each row of one ``tbe_device_times`` run
    whose kernels pass ``keep`` and whose module the planner prices with one update launch of the config the run's
    label names (merge chunks as planned: see ``ran_merge_chunks``)."""
    run = json.loads(path.read_text())
    device = device_of(run["environment"]["gpu"])
    out = []
    for row in run["results"]["rows"]:
        if not keep(row.get("kernels", [])):
            continue
        case = seed_cases(row["seed"], CASES_PER_SEED)[row["case"]]
        planned = planned_updates(shard_loads(case), device, RUN_GRAD_BYTES)
        if len(planned) == 1 and label_matches(planned[0][0], row["update"]):
            out.append((device, row, case, *planned[0]))
    return out


def merge_kernels(kernels: list[dict]) -> list[dict]:
    """The merge-level kernels among a step's ``kernels``."""
    return [k for k in kernels if MERGE_KERNEL in k["kernel"]]


def run_merges(path: Path) -> list[Merge]:
    """The one-launch cases of one ``tbe_device_times`` run with a merge kernel recorded, as ``Merge`` rows."""
    out = []
    for device, row, _, shape, kwargs in one_launch_updates(path, lambda kernels: len(merge_kernels(kernels)) == 1):
        (kernel,) = merge_kernels(row["kernels"])
        launches = kernel["calls_per_step"]
        chunks = ran_merge_chunks(shape, row["nnz"], row["update"], launches)
        if chunks is None:
            continue
        out.append(Merge(device=device, label=f"seed {row['seed']} case {row['case']}",
                         shape=dataclasses.replace(shape, merge_chunks=chunks), inputs=merge_inputs(kwargs),
                         levels=round(launches),
                         measured_s=kernel["ms_per_step"] * 1e-3))
    return out


def profile_merges() -> list[Merge]:
    """The full-size MLPerf step of each profile (bf16 rows, batch 65536, uniform ids), its merge as it ran."""
    model = model_spec_from_config(preset("mlperf-dcnv2"))
    plans = [TablePlan(table=t.name, sharding="table_wise", ranks=(0,), weight_dtype="bf16") for t in model.tables]
    loads = tuple(shard_cost.shard_loads(model, plans, 65536, 1))
    out = []
    for path in PROFILES:
        run = json.loads(path.read_text())
        device = device_of(run["environment"]["gpu"])
        (kernel,) = [k for k in run["results"]["rows"] if MERGE_KERNEL in k["kernel"]]
        ((shape, inputs),) = planned_merges(loads, device, PROFILE_GRAD_BYTES)
        chunks = ran_merge_chunks(shape, inputs["nnz"], "", kernel["calls_per_step"])
        out.append(Merge(device=device, label=path.name, shape=dataclasses.replace(shape, merge_chunks=chunks or 1),
                         inputs=inputs, levels=round(kernel["calls_per_step"]),
                         measured_s=kernel["ms_per_step"] * 1e-3))
    return out


def fit(merges: list[Merge]) -> tuple[float, float]:
    """(MERGE_LEVEL_DEVICE_S, MERGE_WALK_TRIPS) minimising the squared relative error of the merges' prices."""
    a = np.array([[m.levels / m.measured_s, m.walked() / m.measured_s] for m in merges])
    b = np.array([1.0 - m.work_s() / m.measured_s for m in merges])
    (level_s, walk_trips), *_ = np.linalg.lstsq(a, b, rcond=None)
    return float(level_s), float(walk_trips)


def ab_check(profiled: list[Merge], level_s: float, walk_trips: float) -> dict:
    """The A/B's merge with 1 and with 8 tiles per program, measured (median) and priced by the fit and as before;
    ``profiled``: ``profile_merges()``, whose H100 step the A/B ran."""
    run = json.loads(AB.read_text())["summary"]
    (h100,) = [m for m in profiled if m.device == "H100"]
    out = {}
    for chunks in (1, 8):
        shape = dataclasses.replace(h100.shape, merge_chunks=chunks)
        levels = tbe.update_merge_levels(h100.inputs["nnz"], shape.tile * shape.chunks, chunks)
        measured_s = run[f"chunks{chunks}_merge_ms_median"] * 1e-3
        m = dataclasses.replace(h100, shape=shape, levels=levels, measured_s=measured_s)
        out[chunks] = {"levels": levels, "launches_measured": run[f"chunks{chunks}_merge_launches"],
                       "measured_ms": m.measured_s * 1e3, "fit_ms": m.priced_s(level_s, walk_trips) * 1e3,
                       "before_ms": m.before_s() * 1e3}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="", help="suffix of the results name")
    args = parser.parse_args()
    merges = [m for path in TIMES for m in run_merges(path)]
    profiled = profile_merges()
    level_s, walk_trips = fit(merges)
    fitted = [(m.priced_s(level_s, walk_trips), m.measured_s) for m in merges]
    before = [(m.before_s(), m.measured_s) for m in merges]
    summary = {"cases": len(merges), "level_us": level_s * 1e6, "walk_trips": walk_trips,
               "committed_level_us": tbe.MERGE_LEVEL_DEVICE_S["nvidia"] * 1e6,
               "committed_walk_trips": tbe.MERGE_WALK_TRIPS, "fit_rms_log": rms_log(fitted),
               "fit_mean_log": mean_log(fitted), "before_rms_log": rms_log(before), "before_mean_log": mean_log(before),
               "ab": ab_check(profiled, level_s, walk_trips)}
    checks = [{"device": m.device, "file": m.label, "levels": m.levels, "merge_chunks": m.shape.merge_chunks,
               "measured_ms": m.measured_s * 1e3, "fit_ms": m.priced_s(level_s, walk_trips) * 1e3,
               "before_ms": m.before_s() * 1e3} for m in profiled]
    print(f"fit on {len(merges)} merges: {level_s * 1e6:.2f} us per level, {walk_trips:.2f} round trips per tile "
          f"walked; rms log error {summary['fit_rms_log']:.3f} (mean {summary['fit_mean_log']:+.3f}), before "
          f"{summary['before_rms_log']:.3f} (mean {summary['before_mean_log']:+.3f})")
    for c in checks:
        print(f"  check {c['device']} MLPerf full size ({c['levels']} levels, merge chunks {c['merge_chunks']}): "
              f"measured {c['measured_ms']:.3f} ms, fit {c['fit_ms']:.3f}, before {c['before_ms']:.3f}")
    for chunks, c in summary["ab"].items():
        print(f"  check H100 A/B, merge chunks {chunks} ({c['levels']} levels): measured {c['measured_ms']:.3f} ms, "
              f"fit {c['fit_ms']:.3f}, before {c['before_ms']:.3f}")
    rows = [{"device": m.device, "case": m.label, "levels": m.levels, "merge_chunks": m.shape.merge_chunks,
             "measured_ms": m.measured_s * 1e3, "fit_ms": m.priced_s(level_s, walk_trips) * 1e3,
             "before_ms": m.before_s() * 1e3} for m in merges]
    write_results("merge_model_fit" + (f"_{args.tag}" if args.tag else ""), {"rows": rows, "checks": checks},
                  rows=rows, summary=summary)


if __name__ == "__main__":
    main()
