"""The lane update's price against the lane update + permute kernels that ``tbe_device_times`` runs recorded,
offline (CPU), by kind of rows, optimizer and ids.

``tbe_groups_model_check`` compares each module's phases, the update's with its merge; ``merge_model_fit`` the merge
alone. This takes the rest: each case whose update ran as one launch (a module of one dim group) under the config the
planner prices (variant, tile, chunks, warps; the merge's chunks do not enter: its price is taken out), priced as
``tbe_step.estimate`` prices it (``update_launch_seconds``: the update without its merge, plus row-wise Adagrad's
per-row work, ``row_state_seconds``), against the ``lane_update`` + ``permute`` kernels of its step. The log errors are
grouped by the rows' dtype and the constants that price them (fp32 / fp16 / bf16; the one-dim update's,
``tbe.one_dim_priced``, or the mixed-dims update's), by optimizer, and by those constants and the ids' skew. Modules
updated by a launch per dim group, where the run kept each launch's time, are checked launch by launch too
(``run_group_launches``, by group's BLOCK_D). Priced at the device's committed calibration
(``sort_model_fit.CALIBRATIONS``), or with ``--datasheet`` at the catalog's datasheet rates, as
``tbe_groups_model_check`` prices without a calibration. Nothing is measured here.

    PYTHONPATH=.:benchmarks python3 benchmarks/lane_model_check.py [RESULTS.json ...] [--datasheet] [--tag T]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from merge_model_fit import CASES_PER_SEED, RUN_GRAD_BYTES, label_matches, one_launch_updates, planned_updates
from sort_model_fit import RESULTS, device_ceilings, device_of, mean_log, rms_log
from tbe_groups_model_check import kernels_ms, shard_loads
from tbe_shapes import seed_cases

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.catalog import get_device
from polyrec.hardware.types import Ceilings
from polyrec.perfmodel import tbe, tbe_step
from polyrec.planner import memory as mem
from polyrec.results import write_results

#: The runs checked by default: the H100's at today's update kernel (seeds 27-36).
DEFAULT_RUNS = (RESULTS / "h100_backward_2026-12-06" / "tbe_device_times_nvidia-h100-80gb-hbm3_2026-12-06.json",
                *sorted((RESULTS / "h100_merge_2026-12-07").glob("tbe_device_times_seed*.json")),
                *sorted((RESULTS / "h100_seeds31_36_2026-12-07").glob("tbe_device_times_seed*.json")))
#: The kernels the price covers: the update and the permute pass before it.
LANE_KERNELS = ("lane_update_kernel", "permute_kernel")


def datasheet_ceilings(device: str) -> Ceilings:
    """``device``'s ceilings at its catalog's datasheet rates (no calibration)."""
    return ceilings(get_device(device), {})


def lane_price_s(shape: tbe.UpdateShape, device: str, kwargs: dict, optimizer: str,
                 rates: Callable[[str], Ceilings] = device_ceilings) -> float:
    """``estimate``'s price of the update without its merge (``update_launch_seconds``), plus the per-row work of an
    optimizer with per-row state, at the ceilings ``rates`` gives the device."""
    spec, ceil = get_device(device), rates(device)
    row_s = tbe_step.row_state_seconds(kwargs["nnz"], spec) if mem.STATE_PER_ROW[optimizer] > 0 else 0.0
    return tbe.update_launch_seconds(shape, spec, ceil, **kwargs) + row_s


def one_lane_launch(kernels: list[dict]) -> bool:
    """Whether a step's ``kernels`` hold one lane-update launch."""
    lanes = [k for k in kernels if LANE_KERNELS[0] in k["kernel"]]
    return len(lanes) == 1 and lanes[0]["calls_per_step"] == 1


def run_lanes(path: Path, rates: Callable[[str], Ceilings] = device_ceilings) -> list[dict]:
    """The one-launch cases of one ``tbe_device_times`` run, each with its lane price (at ``rates``) and measured ms."""
    out = []
    for device, row, case, shape, kwargs in one_launch_updates(path, one_lane_launch):
        one_dim = tbe.one_dim_priced(shape, kwargs["state_bytes_per_row"], get_device(device).warp_size)
        out.append({"device": device, "case": f"seed {row['seed']} case {row['case']}", "rows": case["dtype"],
                    "priced_as": "one-dim" if one_dim else "mixed-dims", "optimizer": case["optimizer"],
                    "ids": "skewed" if case["skew"] else "uniform", "batch": case["batch"],
                    "priced_ms": lane_price_s(shape, device, kwargs, case["optimizer"], rates) * 1e3,
                    "measured_ms": kernels_ms(row["kernels"], LANE_KERNELS)})
    return out


def run_group_launches(path: Path, rates: Callable[[str], Ceilings] = device_ceilings) -> list[dict]:
    """The modules of one ``tbe_device_times`` run that updated each dim group by a launch of its own, where the run
    kept each launch's time (``call_ms``, runs since the seventy-second session): a row per launch, priced as the
    planner prices it (``lane_price_s`` at the group's ids, plus its programs over the other groups' ids,
    ``tbe.idle_programs_seconds``) against its own launch plus the group's share, by ids, of the module's permute pass
    (one for all the groups). Modules whose launches the planner prices under other configs are left out."""
    run = json.loads(path.read_text())
    device = device_of(run["environment"]["gpu"])
    spec = get_device(device)
    out = []
    for row in run["results"]["rows"]:
        lanes = [k for k in row.get("kernels", []) if k["kernel"] == LANE_KERNELS[0] and k.get("call_ms")]
        if not lanes or len(lanes[0]["call_ms"]) < 2:
            continue
        case = seed_cases(row["seed"], CASES_PER_SEED)[row["case"]]
        # the module's whole estimate first, then each group's launch
        module, *launches = planned_updates(shard_loads(case), device, RUN_GRAD_BYTES)
        labels = row["update"].split(" / ")
        if len(launches) != len(lanes[0]["call_ms"]) or not all(
                shape.variant == "lane" and label_matches(shape, label) for (shape, _), label in zip(launches, labels)):
            continue
        ids, permute_ms = module[1]["nnz"], kernels_ms(row["kernels"], LANE_KERNELS[1:])
        for (shape, kwargs), label, launch_ms in zip(launches, labels, lanes[0]["call_ms"]):
            idle = (ids - kwargs["nnz"]) / (shape.tile * shape.chunks)  # programs over the other groups' ids
            idle_s = tbe.idle_programs_seconds(shape, spec, programs=idle)
            out.append({"device": device, "case": f"seed {row['seed']} case {row['case']}", "group": label.split()[0],
                        "rows": case["dtype"], "optimizer": case["optimizer"], "batch": case["batch"],
                        "priced_ms": (lane_price_s(shape, device, kwargs, case["optimizer"], rates) + idle_s) * 1e3,
                        "idle_ms": idle_s * 1e3, "measured_ms": launch_ms + permute_ms * kwargs["nnz"] / ids})
    return out


def groups(rows: list[dict], key) -> dict[str, dict]:
    """Cases, mean and rms log error of ``rows`` grouped by ``key(row)``."""
    by: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        by.setdefault(key(r), []).append((r["priced_ms"], r["measured_ms"]))
    return {k: {"cases": len(v), "mean_log": mean_log(v), "rms_log": rms_log(v)} for k, v in sorted(by.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="*", type=Path, help="tbe_device_times results (default: DEFAULT_RUNS)")
    parser.add_argument("--tag", default="", help="suffix of the results name")
    parser.add_argument("--datasheet", action="store_true",
                        help="price at the catalog's datasheet rates instead of the committed calibrations")
    args = parser.parse_args()
    paths = args.results or list(DEFAULT_RUNS)
    rates = datasheet_ceilings if args.datasheet else device_ceilings
    rows = [r for path in paths for r in run_lanes(path, rates)]
    summary = {"files": [str(p) for p in paths], "rates": "datasheet" if args.datasheet else "calibration",
               "all": groups(rows, lambda r: "all")["all"],
               "by_rows": groups(rows, lambda r: f"{r['rows']} {r['priced_as']}"),
               "by_optimizer": groups(rows, lambda r: r["optimizer"]),
               "by_ids": groups(rows, lambda r: f"{r['priced_as']} {r['ids']}")}
    launches = [r for path in paths for r in run_group_launches(path, rates)]
    if launches:
        summary["group_launches"] = groups(launches, lambda r: r["group"])
    print(f"{len(rows)} one-launch lane updates: mean log error {summary['all']['mean_log']:+.3f}, "
          f"rms {summary['all']['rms_log']:.3f}")
    for name in ("by_rows", "by_optimizer", "by_ids", "group_launches"):
        for k, g in summary.get(name, {}).items():
            print(f"  {k:>18}: {g['cases']:3d} cases, mean {g['mean_log']:+.3f}, rms {g['rms_log']:.3f}")
    write_results("lane_model_check" + (f"_{args.tag}" if args.tag else ""), {"rows": rows, "group_launches": launches},
                  rows=rows, summary=summary)


if __name__ == "__main__":
    main()
