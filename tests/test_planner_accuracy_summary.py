"""benchmarks/planner_accuracy.py's split of the step error by the bound the plan predicts, on the
committed H200 run: its device-bound rows and host-bound rows apart; and the configurations it runs on a GPU
that holds fewer of them."""

from __future__ import annotations

import json
import math
from pathlib import Path

from benchmark_util import load_benchmark

ROOT = Path(__file__).parents[1]


def _load():
    return load_benchmark("planner_accuracy")


def test_bound_errors_split_rows_by_the_predicted_bound():
    acc = _load()
    rows = [{"predicted_ms": 10.0, "measured_ms": 11.0, "pred_host_ms": 2.0, "pred_device_ms": 10.0},
            {"predicted_ms": 10.0, "measured_ms": 8.0, "pred_host_ms": 10.0, "pred_device_ms": 1.0},
            {"predicted_ms": 5.0, "measured_ms": 5.0 * math.e ** 0.5, "pred_host_ms": 5.0, "pred_device_ms": 5.0}]
    got = acc.bound_errors(rows)
    assert got["device_bound_rows"] == 1
    assert math.isclose(got["step_geomean_device_bound_rows"], 11 / 10 - 1)
    # a tie counts as host-bound; the host rows' geomean of |log| is (log 1.25 + 0.5) / 2
    assert math.isclose(got["step_geomean_host_bound_rows"], math.exp((math.log(1.25) + 0.5) / 2) - 1)


def test_the_committed_run_splits_into_both_kinds():
    acc = _load()
    rows = json.loads((ROOT / "benchmarks/results/planner_accuracy_nvidia-h200_2026-11-30.json").read_text())
    got = acc.bound_errors(rows["results"]["rows"])
    assert 0 < got["device_bound_rows"] < len(rows["results"]["rows"])
    assert got["step_geomean_device_bound_rows"] < got["step_geomean_host_bound_rows"]


def test_configurations_that_do_not_fit_the_gpu_are_left_out_by_name_keeping_their_indices():
    """On one H100 (80 GB) the three full-size MLPerf rows (105 GB of fp32 tables and state) are left out with the
    planner's reason; the others keep their index in the list (the host costs were fitted on the even ones)."""
    acc = _load()
    every = acc.cases(acc.FULL)
    kept, left_out = acc.fitting(every, "H100")
    full_size = [i for i, c in enumerate(every) if c.preset == "mlperf-dcnv2" and c.row_cap is None]
    assert len(full_size) == 3 and sorted(kept) == [i for i in range(len(every)) if i not in full_size]
    assert all(kept[i] is every[i] for i in kept)
    assert len(left_out) == 3 and all("does not fit H100x1: its tables need 105.4 GB" in why for why in left_out)
    kept, left_out = acc.fitting(every, "H200")
    assert len(kept) == len(every) and left_out == []
