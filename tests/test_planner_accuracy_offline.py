"""benchmarks/planner_accuracy_offline.py: a committed run's rows predicted again by this tree's planner."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark


@pytest.fixture(scope="module")
def offline():
    return load_benchmark("planner_accuracy_offline")


def test_rows_are_predicted_again_beside_the_runs_prediction(offline):
    from planner_accuracy import FULL, cases, predict

    (case,) = cases([FULL[3]])  # MLPerf capped 4M, batch 65536, device-bound
    row = {"model": case.model_label, "batch": case.batch, "measured_ms": 20.0, "predicted_ms": 19.0, "error": -0.05}
    (got,) = offline.repredict([row])
    assert got["predicted_then_ms"] == 19.0 and got["error_then"] == -0.05
    assert got["predicted_now_ms"] == pytest.approx(predict(case, "H200").step.total_ms)
    assert got["error_now"] == pytest.approx(got["predicted_now_ms"] / 20.0 - 1)
    assert not got["host_bound_now"]
    result = offline.summary([got])
    assert result["step_geomean_then"] == pytest.approx(20.0 / 19.0 - 1) and result["device_bound_rows"] == 1


def test_a_row_of_no_known_configuration_is_refused(offline):
    with pytest.raises(SystemExit, match="not a configuration"):
        offline.repredict([{"model": "mlperf-dcnv2 cap 3M sgd bf16 uniform", "batch": 65536, "measured_ms": 1.0,
                            "predicted_ms": 1.0, "error": 0.0}])


def test_the_peak_is_predicted_again_where_the_run_measured_it(offline):
    """Memory columns (independent of the calibration): this tree's peak plus the run's harness bytes,
    against the measured peak; rows without a measured peak keep only the step columns."""
    from planner_accuracy import FULL, cases, predict

    (case,) = cases([FULL[3]])
    base = {"model": case.model_label, "batch": case.batch, "measured_ms": 20.0, "predicted_ms": 19.0, "error": -0.05}
    row = base | {"measured_gb": 18.0, "predicted_gb": 18.9, "harness_gb": 0.03}
    got, bare = offline.repredict([row, base])
    want = predict(case, "H200").memory[0].used / 1e9 + 0.03
    assert got["predicted_now_gb"] == pytest.approx(want) and got["memory_error_now"] == pytest.approx(want / 18.0 - 1)
    assert "predicted_now_gb" not in bare
    result = offline.summary([got, bare])
    assert result["memory_max_then"] == pytest.approx(0.05) and result["memory_max_now"] == pytest.approx(abs(want / 18 - 1))


def test_rows_are_predicted_on_the_device_the_run_names(offline):
    """An H100 run is priced on the H100 (80 GB, its own rates), not on the H200 its calibration would stand in
    for: the two predictions of one configuration differ."""
    from planner_accuracy import FULL, cases, predict

    (case,) = cases([FULL[3]])
    row = {"model": case.model_label, "batch": case.batch, "measured_ms": 20.0, "predicted_ms": 19.0, "error": -0.05}
    (h100,) = offline.repredict([row], "H100")
    assert h100["predicted_now_ms"] == pytest.approx(predict(case, "H100").step.total_ms)
    assert h100["predicted_now_ms"] != pytest.approx(offline.repredict([row])[0]["predicted_now_ms"])


@pytest.mark.parametrize("before", [None, "/somewhere/else"])
def test_a_calibration_is_the_devices_stored_one_within_and_the_cache_after_as_before(offline, monkeypatch,
                                                                                     tmp_path, before):
    """``calibrated``: inside, the file is the device's stored calibration (the planner's ceilings take its copy rate);
    after, ``POLYREC_CACHE_DIR`` is what it was (unset stays unset)."""
    from polyrec.hardware.calibrate import ceilings
    from polyrec.hardware.catalog import get_device

    if before is None:
        monkeypatch.delenv("POLYREC_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("POLYREC_CACHE_DIR", before)
    file = tmp_path / "calibration_h100.json"
    file.write_text('{"device": "H100", "copy_bandwidth": 3.0e12}')
    with offline.calibrated("H100", file):
        assert ceilings(get_device("H100")).copy_bandwidth.value == 3.0e12
    assert offline.os.environ.get("POLYREC_CACHE_DIR") == before
