"""The host probe's scale from several windows (CPU: the arithmetic; the probe step itself runs in tests/gpu)."""

import pytest

from polyrec.hardware.calibrate import save_calibration
from polyrec.runtime.host_probe import host_scale_entry


def test_scale_is_the_median_window_over_the_prediction_times_the_stored_scale():
    entry = host_scale_entry("H200", [9.0, 30.0, 10.0, 11.0, 8.0], predicted_ms=8.0)
    assert entry["measured_ms"] == 10.0  # the median: one slow window does not move it
    assert entry["value"] == pytest.approx(10.0 / 8.0)
    assert entry["windows_ms"] == [9.0, 30.0, 10.0, 11.0, 8.0]
    save_calibration("H200", {"device": "H200", "host_scale": {"value": 2.0, "date": "2026-11-30"}})
    again = host_scale_entry("H200", [12.0], predicted_ms=8.0)
    assert again["scale_before"] == 2.0 and again["value"] == pytest.approx(3.0)


def test_no_window_is_an_error():
    with pytest.raises(ValueError, match="no window"):
        host_scale_entry("H200", [], predicted_ms=8.0)
