"""Ceilings: measured values win over datasheet values, and each says where it came from."""

from __future__ import annotations

import json

import pytest

from polyrec.hardware import get_device
from polyrec.hardware.calibrate import (DEFAULT_L2_OVER_HBM, calibration_path, ceilings, load_calibration,
                                        save_calibration)


def test_datasheet_when_not_calibrated():
    spec = get_device("H200")
    c = ceilings(spec)
    assert c.copy_bandwidth.value == spec.hbm_bandwidth and c.copy_bandwidth.origin == "datasheet"
    assert c.matmul_flops["bf16"].value == spec.peak_flops["bf16"]
    assert c.l2_bandwidth.value == pytest.approx(DEFAULT_L2_OVER_HBM * spec.hbm_bandwidth)
    assert c.l2_bandwidth.origin.startswith("estimate") and c.launch_latency.origin.startswith("estimate")


def test_calibrated_values_are_preferred_and_labelled():
    spec = get_device("H200")
    measured = {"date": "2026-11-29", "copy_bandwidth": 4.25e12, "matmul_bf16": 686e12, "launch_latency": 4e-6}
    save_calibration(spec.name, measured)
    c = ceilings(spec)
    assert c.copy_bandwidth.value == 4.25e12 and c.copy_bandwidth.origin == "calibrated 2026-11-29"
    assert c.matmul_flops["bf16"].value == 686e12
    assert c.matmul_flops["fp16"].origin == "datasheet"  # not measured: falls back per value
    assert c.launch_latency.value == 4e-6


def test_save_is_atomic_and_round_trips(tmp_path):
    save_calibration("MI350X", {"copy_bandwidth": 1.0})
    save_calibration("MI350X", {"copy_bandwidth": 2.0})
    path = calibration_path("MI350X")
    assert json.loads(path.read_text()) == {"copy_bandwidth": 2.0}
    assert load_calibration("MI350X") == {"copy_bandwidth": 2.0}
    assert not list(path.parent.glob("*.tmp"))
    assert load_calibration("H100") is None


def test_a_plan_on_datasheet_peaks_says_so_and_a_calibrated_one_does_not():
    """``polyrec plan`` without a stored calibration predicts from datasheet peaks, which no measured H200
    reached: its notes say so and how to measure; with the device calibrated the note is gone."""
    from polyrec.models import preset
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet

    model = model_spec_from_config(preset("dcnv2-small"))
    constraints = PlanConstraints(batch_per_gpu=4096)
    plain = make_plan(model, parse_fleet("H200x1"), constraints)
    assert any(n.startswith("H200: datasheet peaks, not measured") and "polyrec hw calibrate" in n for n in plain.notes)
    save_calibration("H200", {"date": "2026-12-02", "copy_bandwidth": 4.2e12, "matmul_bf16": 780e12})
    calibrated = make_plan(model, parse_fleet("H200x1"), constraints)
    assert not any("datasheet peaks" in n for n in calibrated.notes)


def test_a_calibration_file_that_is_not_utf8_names_the_file():
    """Was "'utf-8' codec can't decode byte 0xff ...", naming no file (`polyrec plan` printed only that)."""
    path = calibration_path("H200")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=f"calibration file {path} is not valid JSON"):
        load_calibration("H200")


def test_a_gpu_the_catalog_lacks_gets_every_matmul_rate_it_can_run_measured(monkeypatch):
    """Its peaks are unknown (0): calibration timed no matmul at all (the ceilings stayed 0 FLOP/s, labelled
    datasheet), though detection's warning sends the user to it for them. A dtype the GPU cannot run (fp8
    before Hopper) is left unmeasured; a catalog device's zero peak is still not timed."""
    import torch

    import polyrec.hardware.calibrate as calibrate
    from polyrec.hardware.detect import DeviceProps, spec_from_props
    from polyrec.hardware.types import MATMUL_DTYPES

    def matmul(dtype):
        if dtype == "fp8":
            raise RuntimeError("torch._scaled_mm is only supported on compute capability >= 8.9")
        return 1e14

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA A40")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(calibrate, "measure_copy_bandwidth", lambda n: 6e11)
    monkeypatch.setattr(calibrate, "measure_l2_bandwidth", lambda spec: 2e12)
    monkeypatch.setattr(calibrate, "measure_launch_latency", lambda: 5e-6)
    monkeypatch.setattr(calibrate, "measure_matmul", matmul)
    unknown = spec_from_props(DeviceProps(name="NVIDIA A40", total_memory=48 * 2**30, multi_processor_count=84,
                                          major=8, minor=6))
    measured = calibrate.calibrate(unknown)
    assert {d: measured.get(f"matmul_{d}") for d in MATMUL_DTYPES} == {
        d: (None if d == "fp8" else 1e14) for d in MATMUL_DTYPES}
    assert ceilings(unknown, measured).matmul_flops["bf16"].value == 1e14
    a100 = calibrate.calibrate(get_device("A100"))
    assert "matmul_fp8" not in a100 and a100["matmul_bf16"] == 1e14


@pytest.mark.parametrize("value", [1e300, 1e-300, 2.5 * 989.4e12])
def test_a_calibrated_rate_no_device_measures_is_refused_naming_it(value):
    """1e300 FLOP/s overflowed the GEMM models and 1e-300 priced every kernel at infinity (the planner then
    crashed on a missing config); a rate past twice the datasheet's is not a measurement either."""
    spec = get_device("H200")
    with pytest.raises(ValueError, match=r"calibration of H200: 'matmul_bf16' .* the datasheet's 9\.894e\+14"):
        ceilings(spec, {"matmul_bf16": value})
    assert ceilings(spec, {"matmul_bf16": 779.5e12}).matmul_flops["bf16"].value == 779.5e12


@pytest.mark.parametrize("hip", [None, "7.0"])
def test_tf32_matmuls_set_rocms_variable_and_put_everything_back(monkeypatch, hip):
    """On ROCm torch reads HIPBLASLT_ALLOW_TF32 beside its flag: without it the "tf32" rate was fp32's."""
    import os

    import torch

    from polyrec.hardware.calibrate import HIPBLASLT_TF32_VARIABLE, tf32_matmuls

    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.delenv(HIPBLASLT_TF32_VARIABLE, raising=False)
    before = torch.backends.cuda.matmul.allow_tf32
    with tf32_matmuls(True):
        assert torch.backends.cuda.matmul.allow_tf32
        assert os.environ.get(HIPBLASLT_TF32_VARIABLE) == (None if hip is None else "1")
    with tf32_matmuls(False):
        assert not torch.backends.cuda.matmul.allow_tf32
        assert os.environ.get(HIPBLASLT_TF32_VARIABLE) == (None if hip is None else "0")
    assert torch.backends.cuda.matmul.allow_tf32 == before and HIPBLASLT_TF32_VARIABLE not in os.environ
