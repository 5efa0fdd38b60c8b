"""benchmarks/planner_accuracy.py's split of the step error by the bound the plan predicts, on the
committed H200 run: its device-bound rows and host-bound rows apart."""

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
