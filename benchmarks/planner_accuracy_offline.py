"""Re-predict a committed planner_accuracy run with the planner in this tree (CPU, no GPU).

A model change priced against measurements already taken: the rows of a ``planner_accuracy`` results
file are predicted again, on the device the run names (its summary's ``device``; H200 for runs that
name none) under the calibration that run used (the device's stored ``hw calibrate`` file with its host
scale, copied beside the results), and compared with the same measured steps.
Nothing is measured; the results name the run they re-read and the code that predicted.

    PYTHONPATH=.:benchmarks python3 benchmarks/planner_accuracy_offline.py RESULTS.json CALIBRATION.json [--tag T]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from planner_accuracy import FP8, FULL, cases, geomean_abs_error, predict, summary_line


#: The device of the planner_accuracy runs made before their summaries named one (all on H200s).
DEFAULT_DEVICE = "H200"


@contextlib.contextmanager
def calibrated(device: str, calibration: Path) -> Iterator[None]:
    """Within: ``calibration`` (a ``hw calibrate`` file) is ``device``'s stored calibration, in a cache of its own
    (``POLYREC_CACHE_DIR`` set to a temporary folder, and back after), so the planner prices at its rates."""
    before = os.environ.get("POLYREC_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache:
        stored = Path(cache) / "polyrec" / "calibration" / f"{device.lower()}.json"
        stored.parent.mkdir(parents=True)
        stored.write_text(calibration.read_text())
        os.environ["POLYREC_CACHE_DIR"] = cache
        try:
            yield
        finally:
            if before is None:
                del os.environ["POLYREC_CACHE_DIR"]
            else:
                os.environ["POLYREC_CACHE_DIR"] = before


def repredict(rows: list[dict], device: str = DEFAULT_DEVICE) -> list[dict]:
    """Each row with this tree's prediction on ``device`` beside the run's (the calibration must be in the cache)."""
    known = {(c.model_label, c.batch): c for c in cases(FULL + FP8)}
    out = []
    for r in rows:
        case = known.get((r["model"], r["batch"]))
        if case is None:
            raise SystemExit(f"row {r['model']} batch {r['batch']} is not a configuration of planner_accuracy.FULL or FP8")
        plan = predict(case, device)
        step = plan.step
        row = {"model": r["model"], "batch": r["batch"], "measured_ms": r["measured_ms"],
               "predicted_then_ms": r["predicted_ms"], "predicted_now_ms": step.total_ms,
               "error_then": r["error"], "error_now": step.total_ms / r["measured_ms"] - 1,
               "host_bound_now": step.host_ms >= step.total_ms - step.host_excess_ms}
        if "meas_emb_ms" in r:  # the embedding phase alone (forward + backward + update)
            row |= {"emb_measured_ms": r["meas_emb_ms"], "emb_then_ms": r["pred_emb_ms"],
                    "emb_now_ms": step.embedding_fwd_ms + step.embedding_bwd_ms}
        if "measured_gb" in r:  # the peak the planner predicts does not depend on the calibration
            now_gb = plan.memory[0].used / 1e9 + r["harness_gb"]
            row |= {"measured_gb": r["measured_gb"], "predicted_then_gb": r["predicted_gb"], "predicted_now_gb": now_gb,
                    "memory_error_now": now_gb / r["measured_gb"] - 1}
        out.append(row)
    return out


def summary(rows: list[dict]) -> dict:
    def geomean(key: str, keep=lambda r: True) -> float:
        return geomean_abs_error([(r[key], r["measured_ms"]) for r in rows if keep(r)])

    device = lambda r: not r["host_bound_now"]  # noqa: E731
    result = {"step_geomean_then": geomean("predicted_then_ms"), "step_geomean_now": geomean("predicted_now_ms"),
              "device_bound_rows_then": geomean("predicted_then_ms", device),
              "device_bound_rows_now": geomean("predicted_now_ms", device),
              "host_bound_rows_now": geomean("predicted_now_ms", lambda r: r["host_bound_now"]),
              "device_bound_rows": sum(device(r) for r in rows)}
    phase = [r for r in rows if "emb_measured_ms" in r and not r["host_bound_now"]]
    if phase:
        result |= {f"embedding_device_bound_{when}": geomean_abs_error([(r[f"emb_{when}_ms"], r["emb_measured_ms"])
                                                                         for r in phase]) for when in ("then", "now")}
    memory = [r for r in rows if "measured_gb" in r]
    if memory:
        result |= {f"memory_max_{when}": max(abs(r[f"predicted_{when}_gb"] / r["measured_gb"] - 1) for r in memory)
                   for when in ("then", "now")}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a planner_accuracy results JSON")
    parser.add_argument("calibration", type=Path, help="the calibration that run used (hw calibrate's file)")
    parser.add_argument("--tag", default="", help="suffix of the results name")
    args = parser.parse_args()
    run = json.loads(args.results.read_text())
    device = run["summary"].get("device", DEFAULT_DEVICE)
    with calibrated(device, args.calibration):
        rows = repredict(run["results"]["rows"], device)
    from polyrec.results import write_results

    result = summary(rows) | {"run_commit": run["environment"]["commit"], "calibration": args.calibration.name,
                              "device": device}
    write_results("planner_accuracy_offline" + (f"_{args.tag}" if args.tag else ""), {}, rows=rows, summary=result)
    for r in rows:
        print(f"{r['model'][:52]:<52} {r['batch']:>6} meas {r['measured_ms']:6.2f} then {r['predicted_then_ms']:6.2f} "
              f"({r['error_then']:+.1%}) now {r['predicted_now_ms']:6.2f} ({r['error_now']:+.1%})")
    print(summary_line(result))


if __name__ == "__main__":
    main()
