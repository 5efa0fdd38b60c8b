"""The host probes' fit (CPU: the arithmetic and how the planner uses it; the probe steps themselves run
in tests/gpu)."""

import pytest

from polyrec.hardware.calibrate import save_calibration
from polyrec.planner.host import DEFAULT_STEP_FIXED_S, FITTED_TORCH_OP_S, FITTED_TRITON_LAUNCH_S, host_costs
from polyrec.runtime.host_probe import host_scale_entry


def test_two_probes_fit_the_fixed_part_and_the_launch_scale():
    """host = fixed + scale x launches through both probes' medians; one slow window moves neither."""
    entry = host_scale_entry({"mlperf-dcnv2": ([9.0, 30.0, 9.0], 10.0), "dlrm-criteo-kaggle": ([6.0, 6.0, 1.0], 6.0)})
    assert entry["fit"] == "two probes"
    assert entry["value"] == pytest.approx(0.75) and entry["fixed_ms"] == pytest.approx(1.5)
    assert entry["probes"]["mlperf-dcnv2"]["measured_ms"] == 9.0


def test_a_fit_below_zero_falls_back_to_one_scale_from_the_first_probe():
    # the smaller model measured slower: no positive scale; the first probe alone sets the scale
    entry = host_scale_entry({"mlperf-dcnv2": ([8.0], 10.0), "dlrm-criteo-kaggle": ([9.0], 6.0)})
    fixed = 1e3 * DEFAULT_STEP_FIXED_S
    assert entry["fit"].startswith("one probe")
    assert entry["value"] == pytest.approx(8.0 / (10.0 + fixed))
    assert entry["fixed_ms"] == pytest.approx(fixed * entry["value"])


def test_the_planner_prices_launches_at_the_scale_and_the_step_at_the_fixed_part():
    save_calibration("H200", {"device": "H200", "host_scale": host_scale_entry(
        {"mlperf-dcnv2": ([9.0], 10.0), "dlrm-criteo-kaggle": ([6.0], 6.0)})})
    costs = host_costs("H200")
    assert costs.triton_launch_s == pytest.approx(0.75 * FITTED_TRITON_LAUNCH_S)
    assert costs.torch_op_s == pytest.approx(0.75 * FITTED_TORCH_OP_S)
    assert costs.step_fixed_s == pytest.approx(1.5e-3)
    assert "1.50 ms per step" in costs.origin


def test_an_entry_of_one_scale_scales_the_fixed_part_too():
    save_calibration("H200", {"device": "H200", "host_scale": {"value": 2.0, "date": "2026-11-30"}})
    assert host_costs("H200").step_fixed_s == pytest.approx(2.0 * DEFAULT_STEP_FIXED_S)


@pytest.mark.parametrize("entry, says", [
    ({"value": 1.0}, r"'host_scale' has no date"),  # was a KeyError
    ({"value": -1.0, "fixed_ms": 5, "date": "x"}, r"'host_scale'\.value must be a positive number, got -1\.0"),
    ({"value": 1.0, "fixed_ms": -5, "date": "x"}, r"'host_scale'\.fixed_ms must be a number >= 0, got -5"),
    ({"value": float("nan"), "date": "x"}, r"'host_scale'\.value must be a positive number, got nan"),
    ([1.0], r"'host_scale' must be a table"),
])
def test_a_damaged_host_scale_is_an_error_naming_it(entry, says):
    """Was: a KeyError, or negative host times planned (a hand-edited calibration file)."""
    save_calibration("H200", {"device": "H200", "host_scale": entry})
    with pytest.raises(ValueError, match=rf"calibration of H200: {says}"):
        host_costs("H200")


def test_no_window_is_an_error():
    with pytest.raises(ValueError, match="no window"):
        host_scale_entry({"mlperf-dcnv2": ([], 10.0)})
