"""benchmarks/tbe_groups_model_check.py: the sort's kernels it sums and the device it prices on."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark


@pytest.fixture(scope="module")
def mc():
    return load_benchmark("tbe_groups_model_check")


def test_the_sort_sums_its_kernels_alone(mc):
    kernels = [{"kernel": "lane_update_kernel", "ms_per_step": 1.5},
               {"kernel": "void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<x>",
                "ms_per_step": 0.5},
               {"kernel": "at::native::(anonymous namespace)::fill_reverse_indices_kernel(long*)", "ms_per_step": 0.05},
               {"kernel": "pooled_forward_kernel", "ms_per_step": 0.4},
               {"kernel": "Memset (Device)", "ms_per_step": 0.01}]
    assert mc.sort_ms(kernels) == pytest.approx(0.56)
    assert mc.sort_ms([]) == 0.0


def test_a_case_is_priced_on_the_named_device(mc):
    from polyrec.models import preset
    from polyrec.planner.estimate import Estimator
    from polyrec.planner.types import model_spec_from_config, parse_fleet

    model = model_spec_from_config(preset("dcnv2-small"))
    row = {"seed": 27, "case": 1, "dims": "32", "batch": 65536, "dtype": "fp32", "optimizer": "adam",
           "device_ms": 2.93, "kernels": [{"kernel": "DeviceRadixSortOnesweepKernel radix_sort", "ms_per_step": 0.49}]}
    priced = {device: mc.check([row], Estimator(model, parse_fleet(device), dense_dtype=mc.GRADIENT_DTYPE), 16,
                               device)[0] for device in ("H100", "H200")}
    # the H100's copy rate is the lower: its price of the same case is the higher, sort included
    assert priced["H100"]["predicted_ms"] > priced["H200"]["predicted_ms"]
    assert priced["H100"]["sort_predicted_ms"] > priced["H200"]["sort_predicted_ms"]
    assert priced["H200"]["sort_measured_ms"] == pytest.approx(0.49)


def test_the_phases_split_the_measured_step_by_its_kernels(mc):
    row = {"device_ms": 3.0, "kernels": [{"kernel": "pooled_forward_kernel", "ms_per_step": 0.5},
                                         {"kernel": "radix_sort::DeviceRadixSortOnesweepKernel", "ms_per_step": 0.6},
                                         {"kernel": "lane_update_kernel", "ms_per_step": 1.7}]}
    got = mc.phases(row, fwd_s=0.4e-3, bwd_s=2.5e-3, sort_s=0.7e-3)
    assert got["fwd_measured_ms"] == pytest.approx(0.5) and got["sort_measured_ms"] == pytest.approx(0.6)
    assert got["update_measured_ms"] == pytest.approx(1.9)  # the rest of the step: update, permute, merge
    assert got["update_predicted_ms"] == pytest.approx(1.8) and got["fwd_predicted_ms"] == pytest.approx(0.4)
    assert mc.phases({"device_ms": 3.0}, 0.4e-3, 2.5e-3, 0.7e-3) == {}
    errors = mc.phase_errors([got | {"x": 1}, {"fwd_measured_ms": 0.0, "fwd_predicted_ms": 1.0}])
    assert errors["fwd_geomean_abs_error"] == pytest.approx(0.25)  # the unmeasured row left out


def test_the_update_phase_is_split_by_row_dtype_and_form(mc):
    """One dim, several dims in one launch, a launch per dim group: each its own mean and rms log error; rows that
    did not measure the phase are left out."""
    import math

    def row(dims, groups, priced, measured, dtype="fp16"):
        return {"dims": dims, "planner_groups": groups, "dtype": dtype, "update_predicted_ms": priced,
                "update_measured_ms": measured}

    rows = [row("128", False, 2.0, 1.0), row("16/128", False, 1.0, 1.0), row("16/128", True, 1.0, 2.0),
            row("16/128", True, 2.0, 2.0), row("64", False, 1.0, 0.0), {"dims": "64", "dtype": "fp16"}]
    out = mc.update_log_errors(rows)
    assert set(out) == {"fp16 one dim", "fp16 mixed dims, one launch", "fp16 dim groups"}
    assert out["fp16 one dim"] == {"modules": 1, "mean_log": math.log(2), "rms_log": math.log(2)}
    assert out["fp16 dim groups"]["modules"] == 2
    assert out["fp16 dim groups"]["mean_log"] == -math.log(2) / 2
    assert out["fp16 dim groups"]["rms_log"] == math.sqrt(math.log(2) ** 2 / 2)
