"""On the GPU machine: detection names the device and calibration measures sane ceilings."""

from __future__ import annotations

import pytest
import torch

from polyrec.hardware.calibrate import measure_copy_bandwidth, measure_launch_latency, measure_matmul
from polyrec.hardware.detect import detect, read_props

pytestmark = pytest.mark.gpu


def test_detect_finds_catalog_entry():
    found = detect()
    assert found.how == "catalog", found.warning
    assert found.spec.compute_units == read_props().multi_processor_count


def test_copy_bandwidth_is_within_datasheet():
    spec = detect().spec
    measured = measure_copy_bandwidth(1 << 30)
    assert 0.5 * spec.hbm_bandwidth < measured <= 1.05 * spec.hbm_bandwidth


def test_matmul_rate_is_within_datasheet():
    spec = detect().spec
    measured = measure_matmul("bf16", 4096)
    assert 0.3 * spec.peak_flops["bf16"] < measured <= 1.05 * spec.peak_flops["bf16"]


def test_launch_latency_is_microseconds():
    assert 1e-7 < measure_launch_latency(200) < 1e-4
    assert torch.cuda.is_available()
