"""benchmarks/sort_model_fit.py: the id sort's model against the sort kernels measured on an H200 and an H100."""

from __future__ import annotations

import math

import pytest

from benchmark_util import load_benchmark
from polyrec.perfmodel import tbe_step


@pytest.fixture(scope="module")
def fit():
    return load_benchmark("sort_model_fit")


@pytest.fixture(scope="module")
def data(fit):
    return fit.rows()


@pytest.mark.parametrize("device", ["H200", "H100"])
def test_the_committed_model_prices_each_devices_sorts_within_ten_percent_rms(fit, data, device):
    """Regression check on both devices: the copy rate alone (the model before the sixty-seventh session) had
    0.14 (H200) and 0.26 (H100, every large sort priced ~30% high) rms log error."""
    pairs = [(fit.committed(d, n), t) for d, n, t in data if d == device]
    assert len(pairs) >= 30
    assert fit.rms_log(pairs) < 0.10
    assert abs(sum(math.log(p / m) for p, m in pairs) / len(pairs)) < 0.03  # no bias either way


def test_the_committed_constants_are_the_fits(fit, data):
    coef = fit.fit(data)
    assert coef[0] == pytest.approx(tbe_step.SORT_FIXED_S, rel=0.05)
    assert 1 / coef[1] == pytest.approx(tbe_step.SORT_COPY_FRACTION, rel=0.05)
    assert coef[2] == pytest.approx(tbe_step.SORT_SM_CYCLES_PER_ID_PASS, rel=0.05)


def test_a_device_the_fit_has_no_calibration_for_is_refused(fit):
    with pytest.raises(SystemExit, match="no calibration"):
        fit.device_of("AMD Instinct MI300X")
