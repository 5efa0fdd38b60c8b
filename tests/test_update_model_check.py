"""benchmarks/update_model_check.py: the update's price against committed kernel rows (pure Python)."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark


@pytest.fixture(scope="module")
def check():
    return load_benchmark("update_model_check")


def test_lane_only_rows_take_the_permute_and_merge_of_their_call(check):
    lane_ab = "tbe_lane_ab_2026-11-30/"
    lane = check.kernel_ms(lane_ab + "s16ab_E_fp32_1", ("lane_update_kernel",))
    rest = check.kernel_ms(lane_ab + "s16c_A_fp32_1", ("permute_kernel", "merge_level_kernel"))
    assert lane > 4.0 and 0.2 < rest < 0.5
    assert check.measured_ms(lane_ab + "s16ab_E_fp32_1") == pytest.approx(lane + rest)
    assert check.measured_ms(lane_ab + "s16c_F128_bf16_1") == pytest.approx(3.539 + 0.148 + 0.129, abs=0.002)


def test_the_fitted_row_is_priced_as_fitted(check):
    """The one-dim bf16-gradient row is one of ONE_DIM_UPDATE_COPY_FRACTION's two fits: priced within 1%."""
    measured = check.measured_ms("tbe_lane_ab_2026-11-30/s16c_F128_bf16_1")
    assert check.priced_ms("rowwise_adagrad", 2, 0, "uniform", True) == pytest.approx(measured, rel=0.01)
