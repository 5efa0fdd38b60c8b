"""The planner's MLPerf DLRM-DCNv2 step on one and two H200s against the committed ``multi_gpu`` runs.

CPU only, no GPU: the planner prices the runtime's default sharding (``default_shardings``, lookups
balanced) at each per-GPU batch that ``benchmarks/multi_gpu.py`` measured, with the committed H200
calibration (CALIBRATION, in a private cache directory) and the trainer's power-law ids priced as
``zipf`` (their exponent); the link is the catalog's NVLink x ``comms.COLLECTIVE_EFFICIENCY`` (no link
calibration). It reads the newest committed world-1 and world-2 results of each batch and writes
``planner_multi_gpu_cpu_<date>``.

    PYTHONPATH=. python3 benchmarks/planner_multi_gpu.py
"""

from __future__ import annotations

import json
import os
import tempfile

from polyrec.hardware.calibrate import save_calibration
from polyrec.models.config import preset
from polyrec.planner.estimate import Estimator
from polyrec.planner.types import TablePlan, model_spec_from_config, parse_fleet
from polyrec.results import RESULTS_DIR, write_results
from polyrec.runtime.distributed_embeddings import default_shardings

#: The H200 calibration the predictions use (committed, measured on the device).
CALIBRATION = RESULTS_DIR / "calibrate_nvidia-h200_2026-11-29.json"
#: Per-GPU batch -> results name (before the device and date) of the world-1 and world-2 runs.
MEASURED = {65536: ("multi_gpu_world1", "multi_gpu_world2"),
            32768: ("multi_gpu_world1_b32768", "multi_gpu_world2_b32768")}
#: The trainer's embedding rows and optimizer (benchmarks/multi_gpu.py).
ROW_DTYPE, ROW_OPTIMIZER = "fp32", "rowwise_adagrad"


def newest(stem: str) -> dict:
    """The newest committed H200 results file named ``<stem>_nvidia-h200_<date>.json``."""
    paths = sorted(RESULTS_DIR.glob(f"{stem}_nvidia-h200_*.json"))
    if not paths:
        raise SystemExit(f"no committed {stem}_nvidia-h200_*.json in {RESULTS_DIR}")
    return json.loads(paths[-1].read_text())


def predicted_ms(world: int, batch: int) -> float:
    """The planner's step time of the runtime's default sharding on ``world`` H200s."""
    config = preset("mlperf-dcnv2")
    spec = model_spec_from_config(config, index_distribution="zipf")
    shardings = default_shardings(config.table_rows, config.embedding_dim, world, lookups=config.multi_hot)
    if any(s.kind != "table" for s in shardings):
        raise SystemExit("default_shardings split a table; this check prices table-wise shards only")
    plans = [TablePlan(table=t.name, sharding="table_wise", ranks=s.ranks, memory="hbm", weight_dtype=ROW_DTYPE,
                       optimizer=ROW_OPTIMIZER) for t, s in zip(spec.tables, shardings, strict=True)]
    return 1e3 * Estimator(spec, parse_fleet(f"H200x{world}")).evaluate(plans, batch).step.total_s


def main() -> None:
    calibration = json.loads(CALIBRATION.read_text())["results"]["measured"]
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["POLYREC_CACHE_DIR"] = cache
        save_calibration(calibration["device"], calibration)
        for batch, stems in MEASURED.items():
            for world, stem in enumerate(stems, start=1):
                run = newest(stem)
                measured = run["summary"]["ms_per_step"]
                pred = predicted_ms(world, batch)
                rows.append({"world_size": world, "batch_per_gpu": batch, "predicted_ms": pred,
                             "measured_ms": measured, "error": pred / measured - 1,
                             "measured_commit": run["environment"]["commit"]})
    for r in rows:
        print(f"world {r['world_size']} batch {r['batch_per_gpu']:>6}: predicted {r['predicted_ms']:6.2f} ms, "
              f"measured {r['measured_ms']:6.2f} ms ({r['measured_commit']}), error {r['error']:+.1%}")
    pred = {(r["world_size"], r["batch_per_gpu"]): r["predicted_ms"] for r in rows}
    scaling = {batch: 2 * pred[1, batch] / pred[2, batch] for batch in MEASURED}
    write_results("planner_multi_gpu", {"calibration": str(CALIBRATION.name)}, rows=rows,
                  summary={"predicted_scaling": scaling, "calibration": CALIBRATION.name})


if __name__ == "__main__":
    main()
