"""The update variants' prices against ``tbe_shapes_probe`` runs, offline (CPU): which variant the model takes and
which ran faster.

``tbe_shapes_probe`` times one case under the module's own update config and under forced ones (``--force``),
recording every kernel of the step. This prices each of those configs as the planner prices the case's update
(``update_launch_seconds``: the update without its merge, plus the per-row work of an optimizer with per-row state, as
``lane_model_check``; the merge by ``update_merge_seconds``) and sets the price beside the update kernels (the lane
update and its permute pass, or the scan update) and the merge levels the step ran; a config timed in several rounds
(``tbe_shapes_probe --rounds``) counts by its medians, and each config's median step is printed beside (small steps
wait on the host). Cases whose module updates with one launch only (one dim group). Nothing is measured here.

    PYTHONPATH=.:benchmarks python3 benchmarks/update_probe_check.py RESULTS.json [RESULTS.json ...] [--tag T]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
from pathlib import Path

from lane_model_check import lane_price_s
from merge_model_fit import CASES_PER_SEED, MERGE_KERNEL, merge_inputs, planned_updates
from sort_model_fit import device_ceilings, device_of
from tbe_groups_model_check import kernels_ms, shard_loads
from tbe_shapes import DTYPES, config_label, seed_cases

from polyrec.hardware.catalog import get_device
from polyrec.kernels import tbe_select
from polyrec.perfmodel import tbe
from polyrec.results import write_results

#: The kernels of each variant's update (the merge levels apart).
UPDATE_KERNELS = {"lane": ("lane_update_kernel", "permute_kernel"), "scan": ("update_kernel",)}
#: ``tbe_shapes.update_text``'s words: the UpdateConfig field each letter names.
LABEL_FIELDS = {"t": "tile", "c": "chunks", "m": "merge_chunks", "w": "num_warps"}


def parse_config(text: str) -> tbe_select.UpdateConfig:
    """The config a probe row names: ``update_text``'s label ("scan t64 c1 m1 w4") or, in runs before 2026-12-07's
    second, a forced config's repr ("UpdateConfig(tile=64, ...)"). One update launch only."""
    if text.startswith("UpdateConfig("):
        fields = dict(re.findall(r"(\w+)='?(\w+)'?", text[len("UpdateConfig("):]))
        fields.pop("max_registers")
    else:
        if "/" in text:
            raise SystemExit(f"update_probe_check: {text!r} names several update launches (dim groups)")
        variant, *words = text.split()
        fields = {"variant": variant, **{LABEL_FIELDS[w[0]]: w[1:] for w in words}}
    return tbe_select.UpdateConfig(variant=fields["variant"], tile=int(fields["tile"]), chunks=int(fields["chunks"]),
                                   merge_chunks=int(fields["merge_chunks"]), num_warps=int(fields["num_warps"]))


def config_shape(planned: tbe.UpdateShape, config: tbe_select.UpdateConfig, device: str) -> tbe.UpdateShape:
    """``planned`` (the planner's shape of the case's update) under ``config``, as the selector prices it."""
    spec = get_device(device)
    block_d = round(planned.block_d(spec.warp_size))
    return dataclasses.replace(planned, variant=config.variant, tile=config.tile, chunks=config.chunks,
                               merge_chunks=config.merge_chunks, num_warps=config.num_warps, max_registers=None,
                               elems_per_thread=tbe_select._elems_per_thread(config, block_d, spec))


def probe_rows(path: Path) -> list[dict]:
    """Each row of one probe run, priced: update and merge, priced and measured (ms)."""
    run = json.loads(path.read_text())
    device = device_of(run["environment"]["gpu"])
    spec, ceil = get_device(device), device_ceilings(device)
    results = run["results"]
    grad_bytes = DTYPES[results["grad_dtype"]].itemsize  # the output gradient the probe handed the backward
    out = []
    for row in results["rows"]:
        case = seed_cases(results["seed"], CASES_PER_SEED)[row["case"]]
        case = case | {"batch": results["batch"] or case["batch"]}
        (planned, kwargs), = planned_updates(shard_loads(case), device, grad_bytes)
        config = parse_config(row["config"])
        shape = config_shape(planned, config, device)
        merge_s = tbe.update_merge_seconds(shape, spec, ceil, **merge_inputs(kwargs))
        out.append({"seed": results["seed"], "case": row["case"], "batch": case["batch"], "nnz": kwargs["nnz"],
                    "round": row.get("round", 0), "forced": row["forced"], "config": row["config"],
                    "step_ms": row["step_ms"],
                    "update_priced_ms": lane_price_s(shape, device, kwargs, case["optimizer"]) * 1e3,
                    "update_ms": kernels_ms(row["kernels"], UPDATE_KERNELS[config.variant]),
                    "merge_priced_ms": merge_s * 1e3, "merge_ms": kernels_ms(row["kernels"], (MERGE_KERNEL,))})
    return out


def by_config(rows: list[dict]) -> dict[tuple, dict[tbe_select.UpdateConfig, dict]]:
    """Per case, per config (its rounds together): the price and the medians of the measured update + merge and
    step (ms)."""
    out: dict[tuple, dict[tbe_select.UpdateConfig, dict]] = {}
    for r in rows:
        config = parse_config(r["config"])
        runs = out.setdefault((r["seed"], r["case"], r["batch"]), {}).setdefault(config, {
            "label": config_label(config), "priced_ms": r["update_priced_ms"] + r["merge_priced_ms"],
            "device": [], "step": []})
        runs["device"].append(r["update_ms"] + r["merge_ms"])
        runs["step"].append(r["step_ms"])
    return out


def verdicts(rows: list[dict]) -> list[dict]:
    """Per case: the config priced fastest and the one measured fastest (update + merge, median over its rounds),
    and each config's median step (it waits on the host in small cases)."""
    out = []
    for (seed, case, batch), configs in by_config(rows).items():
        priced = min(configs, key=lambda c: configs[c]["priced_ms"])
        measured = min(configs, key=lambda c: statistics.median(configs[c]["device"]))
        out.append({"seed": seed, "case": case, "batch": batch, "priced_fastest": configs[priced]["label"],
                    "measured_fastest": configs[measured]["label"], "agree": priced == measured,
                    "step_ms": {v["label"]: statistics.median(v["step"]) for v in configs.values()}})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="tbe_shapes_probe results files")
    parser.add_argument("--tag", default="", help="suffix of the results name")
    args = parser.parse_args()
    rows = [r for path in args.results for r in probe_rows(path)]
    for r in rows:
        print(f"seed {r['seed']} case {r['case']:2d} B={r['batch']:<6d} {r['config'][:48]:48s} update "
              f"{r['update_priced_ms'] * 1e3:6.1f} / {r['update_ms'] * 1e3:6.1f} us, merge "
              f"{r['merge_priced_ms'] * 1e3:6.1f} / {r['merge_ms'] * 1e3:6.1f} us (priced / measured)")
    cases = verdicts(rows)
    for c in cases:
        steps = ", ".join(f"{label} {ms:.3f}" for label, ms in c["step_ms"].items())
        print(f"seed {c['seed']} case {c['case']:2d}: median step ms {steps}")
    print(f"{sum(c['agree'] for c in cases)} of {len(cases)} cases: the config priced fastest ran fastest")
    write_results("update_probe_check" + (f"_{args.tag}" if args.tag else ""), {"rows": rows, "cases": cases},
                  rows=rows, summary={"files": [str(p) for p in args.results], "cases": len(cases),
                                      "agree": sum(c["agree"] for c in cases)})


if __name__ == "__main__":
    main()
