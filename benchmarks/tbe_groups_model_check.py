"""The planner's price of TBE modules against steps already measured (CPU, no GPU).

``tbe_groups_ab`` timed each mixed-dims ``tbe_shapes`` case both ways on an H200 (one update launch per
BLOCK_D group, and one at the widest BLOCK_D) and recorded the device time of each step's kernels;
``tbe_device_times`` recorded it for every case under the module's default. This re-draws those cases
from their seeds, prices each as the planner does (``Estimator.tbe_seconds``: forward + backward +
update of one module, grouped where ``tbe_select.groups_pay`` says the module groups, on the catalog
device ``--device``, default H200, at its stored calibration where ``polyrec hw calibrate`` left one, or at
``--calibration``'s rates; the summary names the copy rate it took) and compares the price with the measured
device time (of the form the planner prices, where both were timed)
and, where the run recorded the step's kernels (``tbe_device_times``), each phase's price with its kernels:
the lookup, the id sort and the rest (update, permute, merge). Nothing is measured here.

    PYTHONPATH=.:benchmarks python3 benchmarks/tbe_groups_model_check.py RESULTS.json [RESULTS.json ...] \
        [--device H100] [--calibration CALIBRATION.json] [--tag T]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
from pathlib import Path

from planner_accuracy import geomean_abs_error
from planner_accuracy_offline import calibrated
from tbe_shapes import seed_cases

from polyrec.models import preset
from polyrec.planner.estimate import Estimator
from polyrec.planner.shard_cost import ShardLoad
from polyrec.planner.types import model_spec_from_config, parse_fleet
from polyrec.results import write_results

#: The A/B's output gradient: ``torch.randn`` of the module's output, fp32.
GRADIENT_DTYPE = "fp32"
#: Kernels of ``torch.sort`` on the TBE's keys as the profiler names them (CUB's radix sort passes, the
#: int64 index iota, the keys' copy and fills): what ``tbe_step.sort_seconds`` prices.
SORT_KERNELS = ("radix_sort", "fill_reverse_indices", "Memcpy DtoD", "Memset")
#: The pooled lookup's kernel: what ``tbe_step.estimate``'s forward prices (with the trained forward's keys).
FORWARD_KERNELS = ("pooled_forward",)
PHASES = ("fwd", "sort", "update")


def expected_bag(mean: float, ragged: bool) -> float:
    """``tbe_shapes.make_batch``'s mean bag length: fixed ``max(1, round(mean))``, or ragged uniform
    over 0 .. 2 * ceil(mean)."""
    return float(math.ceil(mean)) if ragged else float(max(1, round(mean)))


def shard_loads(case: dict) -> tuple[ShardLoad, ...]:
    """The case's tables as one module's shard loads (one rank, rows in HBM)."""
    skew = "log_uniform" if case["skew"] else "uniform"
    return tuple(ShardLoad(table=f"t{i}", rank=0, rows=rows, dim=dim, accesses=case["batch"] * expected_bag(mean, case["ragged"]),
                           bags=case["batch"], weight_dtype=case["dtype"], optimizer=case["optimizer"], memory="hbm",
                           cache_rows=rows, skew=skew)
                 for i, (rows, dim, mean) in enumerate(zip(case["rows"], case["dims"], case["mean_bag"])))


def kernels_ms(kernels: list[dict], names: tuple[str, ...]) -> float:
    """Device ms a step of the kernels among ``kernels`` (a run's heaviest: a light one may be missing) whose
    name holds one of ``names``."""
    return sum(k["ms_per_step"] for k in kernels if any(name in k["kernel"] for name in names))


def sort_ms(kernels: list[dict]) -> float:
    """Device ms a step of the sort's kernels among ``kernels``."""
    return kernels_ms(kernels, SORT_KERNELS)


def phases(row: dict, fwd_s: float, bwd_s: float, sort_s: float) -> dict:
    """The price and the measured device ms of the forward, the sort and the rest of the backward (update,
    permute, merge: the step's device time less the other two) of a row whose kernels were recorded; {} if none."""
    kernels = row.get("kernels")
    if not kernels:
        return {}
    fwd, srt = kernels_ms(kernels, FORWARD_KERNELS), sort_ms(kernels)
    return {"fwd_predicted_ms": fwd_s * 1e3, "fwd_measured_ms": fwd, "sort_predicted_ms": sort_s * 1e3,
            "sort_measured_ms": srt, "update_predicted_ms": (bwd_s - sort_s) * 1e3,
            "update_measured_ms": row["device_ms"] - fwd - srt}


def check(rows: list[dict], estimator: Estimator, cases_per_seed: int, device: str = "H200") -> list[dict]:
    """Each measured row with the planner's price of its case and the measured device time of the form
    the planner prices (grouped or not: the module's default takes the same ``groups_pay``; the rows
    measured after the rule was in place say what the module chose, ``module_auto``)."""
    out = []
    for row in rows:
        case = seed_cases(row["seed"], cases_per_seed)[row["case"]]
        loads = shard_loads(case)
        fwd_s, bwd_s, sort_s, label = estimator.tbe_seconds(device, loads)
        grouped = len(estimator.tbe_update_configs(device, loads)) > 1
        if "device_ms" in row:  # tbe_device_times: the module's default form
            measured = row["device_ms"]
        else:
            measured = row["grouped_device_ms"] if grouped else row["single_device_ms"]
        out.append({"seed": row["seed"], "case": row["case"], "dims": row["dims"], "batch": row["batch"],
                    "dtype": row["dtype"], "optimizer": row["optimizer"], "module_auto": row.get("auto", "-"),
                    "planner_groups": grouped, "predicted_ms": (fwd_s + bwd_s) * 1e3, "measured_device_ms": measured,
                    "error": (fwd_s + bwd_s) * 1e3 / measured - 1, "label": label} | phases(row, fwd_s, bwd_s, sort_s))
    return out


def phase_errors(rows: list[dict]) -> dict:
    """Geomean |error| of each phase's price over the rows that measured it."""
    out = {}
    for p in PHASES:
        pairs = [(r[p + "_predicted_ms"], r[p + "_measured_ms"]) for r in rows if r.get(p + "_measured_ms", 0) > 0]
        if pairs:
            out[p + "_geomean_abs_error"] = geomean_abs_error(pairs)
    return out


def update_form(row: dict) -> str:
    """How the planner prices a row's update: "one dim", "mixed dims, one launch" or "dim groups"."""
    if len(set(row["dims"].split("/"))) == 1:
        return "one dim"
    return "dim groups" if row["planner_groups"] else "mixed dims, one launch"


def update_log_errors(rows: list[dict]) -> dict:
    """Modules, mean and rms log error (priced over measured) of the update phase by row dtype and ``update_form``,
    over the rows that measured it."""
    by: dict[str, list[float]] = {}
    for r in rows:
        if r.get("update_measured_ms", 0) > 0:
            by.setdefault(f"{r['dtype']} {update_form(r)}", []).append(
                math.log(r["update_predicted_ms"] / r["update_measured_ms"]))
    return {k: {"modules": len(v), "mean_log": statistics.mean(v), "rms_log": math.sqrt(statistics.mean(
        e * e for e in v))} for k, v in sorted(by.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="tbe_groups_ab or tbe_device_times results files")
    parser.add_argument("--cases", type=int, default=16, help="cases drawn per seed (as the A/B's --cases)")
    parser.add_argument("--device", default="H200", help="catalog device the cases are priced on (default H200)")
    parser.add_argument("--tag", default="", help="suffix of the results name")
    parser.add_argument("--calibration", type=Path, default=None,
                        help="price at this `hw calibrate` file's rates (default: the device's stored calibration, "
                             "else its datasheet)")
    args = parser.parse_args()
    measured = [r for path in args.results for r in json.loads(path.read_text())["results"]["rows"]]
    model = model_spec_from_config(preset("dcnv2-small"))  # only its tables' module is priced, not the model's
    with calibrated(args.device, args.calibration) if args.calibration else contextlib.nullcontext():
        estimator = Estimator(model, parse_fleet(args.device), dense_dtype=GRADIENT_DTYPE)
        rows = check(measured, estimator, args.cases, args.device)
    rates = {"copy_bandwidth": estimator.ceilings[args.device].copy_bandwidth.value,
             "origin": estimator.ceilings[args.device].copy_bandwidth.origin}
    for r in rows:
        print(f"seed {r['seed']:>2} case {r['case']:>2} {r['dims']:>16} B={r['batch']:>5} {r['dtype']} "
              f"{r['optimizer']:>15} module {r['module_auto']:>7} planner {'grouped' if r['planner_groups'] else 'single':>7}: "
              f"predicted {r['predicted_ms']:7.3f} ms measured {r['measured_device_ms']:7.3f} ({r['error']:+.1%})"
              + "".join(f"; {p} {r[p + '_predicted_ms']:.3f} / {r[p + '_measured_ms']:.3f}" for p in PHASES
                        if p + "_measured_ms" in r))
    after_rule = [r for r in rows if r["module_auto"] != "-"]
    summary = {"rows": len(rows), "rows_with_module_choice": len(after_rule),
               "planner_form_matches_module": sum(r["planner_groups"] == (r["module_auto"] == "grouped")
                                                  for r in after_rule),
               "geomean_abs_error": geomean_abs_error([(r["predicted_ms"], r["measured_device_ms"]) for r in rows]),
               "max_abs_error": max(abs(r["error"]) for r in rows), "files": [str(p) for p in args.results],
               "device": args.device, "copy_rate": rates,
               "calibration": str(args.calibration) if args.calibration else None, **phase_errors(rows),
               "mean_error_by_optimizer": {o: statistics.mean(r["error"] for r in rows if r["optimizer"] == o)
                                           for o in sorted({r["optimizer"] for r in rows})},
               "update_log_error_by_form": update_log_errors(rows)}
    print(summary)
    write_results("tbe_groups_model_check" + (f"_{args.tag}" if args.tag else ""), {"rows": rows}, rows=rows,
                  summary=summary)


if __name__ == "__main__":
    main()
