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


def test_host_probes_fit_the_launch_scale_and_the_fixed_part():
    """Both probes are host-bound (their own check); their launches are priced at the fitted costs
    whatever scale is stored; the fit goes through both medians (or falls back to one scale); the
    planner then prices host costs with it."""
    from polyrec.hardware.calibrate import save_calibration
    from polyrec.hardware.detect import detect
    from polyrec.planner.host import host_costs
    from polyrec.runtime.host_probe import measure_host_scale, probe_launches_ms

    name = detect().spec.name
    save_calibration(name, {"device": name, "host_scale": {"value": 2.0, "date": "2026-11-30"}})
    probe = measure_host_scale(name, windows=2)
    save_calibration(name, {"device": name})
    for preset, got in probe["probes"].items():
        assert got["launches_ms"] == pytest.approx(probe_launches_ms(name, preset))
        if probe["fit"] == "two probes":
            assert probe["fixed_ms"] + probe["value"] * got["launches_ms"] == pytest.approx(got["measured_ms"])
    assert 0.2 < probe["value"] < 5.0  # the fitted costs are within 5x of any host polyrec runs on
    save_calibration(name, {"device": name, "host_scale": probe})
    assert "measured on this host" in host_costs(name).origin