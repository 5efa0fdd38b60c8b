"""Detection from faked torch device properties."""

from __future__ import annotations

import pytest

from polyrec.hardware.detect import DeviceProps, cpu_spec, detect, detect_from

GIB = 2**30


@pytest.mark.parametrize(
    "props, expected",
    [
        (DeviceProps(name="NVIDIA H200", total_memory=143771 * 2**20, multi_processor_count=132, major=9), "H200"),
        (DeviceProps(name="NVIDIA H100 80GB HBM3", total_memory=80 * GIB, multi_processor_count=132, major=9), "H100"),
        (DeviceProps(name="NVIDIA A100-SXM4-80GB", total_memory=80 * GIB, multi_processor_count=108, major=8), "A100"),
        (DeviceProps(name="NVIDIA B200", total_memory=179 * GIB, multi_processor_count=148, major=10), "B200"),
        (DeviceProps(name="AMD Instinct MI300X", total_memory=192 * GIB, multi_processor_count=304,
                     gcn_arch_name="gfx942:sramecc+:xnack-", warp_size=64), "MI300X"),
        # Same arch and CU count as the MI300X: told apart by memory even without a telling name.
        (DeviceProps(name="AMD Radeon Graphics", total_memory=256 * GIB, multi_processor_count=304,
                     gcn_arch_name="gfx942:sramecc+:xnack-", warp_size=64), "MI325X"),
        (DeviceProps(name="AMD Instinct MI355X", total_memory=288 * GIB, multi_processor_count=256,
                     gcn_arch_name="gfx950:sramecc+:xnack-", warp_size=64), "MI355X"),
        (DeviceProps(name="AMD Instinct MI350X", total_memory=288 * GIB, multi_processor_count=256,
                     gcn_arch_name="gfx950", warp_size=64), "MI350X"),
    ],
)
def test_known_devices_match_catalog(props, expected):
    found = detect_from(props)
    assert found.how == "catalog" and found.warning is None
    assert found.spec.name == expected


def test_h100_pcie_is_not_taken_for_sxm():
    props = DeviceProps(name="NVIDIA H100 PCIe", total_memory=80 * GIB, multi_processor_count=114, major=9,
                        l2_cache_size=50 * 2**20, shared_memory_per_block_optin=227 * 1024,
                        shared_memory_per_multiprocessor=228 * 1024, regs_per_multiprocessor=65536)
    found = detect_from(props)
    assert found.how == "properties"
    assert "not in the catalog" in found.warning and "calibrate" in found.warning
    spec = found.spec
    assert spec.compute_units == 114 and spec.triton.arch == 90 and spec.vendor == "nvidia"
    assert spec.smem_per_block == 227 * 1024 and spec.peak_flops["bf16"] == 0.0


@pytest.mark.parametrize("name, sms, memory", [("NVIDIA GH200 480GB", 132, 96 * GIB),
                                               ("NVIDIA A100-SXM4-40GB", 108, 40 * GIB),
                                               ("NVIDIA GB200", 152, 186 * GIB)])
def test_look_alikes_are_not_taken_for_catalog_entries(name, sms, memory):
    found = detect_from(DeviceProps(name=name, total_memory=memory, multi_processor_count=sms, major=9))
    assert found.how == "properties", found.spec.name


def test_ambiguous_amd_device_warns_and_takes_the_slower():
    props = DeviceProps(name="AMD Radeon Graphics", total_memory=288 * GIB, multi_processor_count=256,
                        gcn_arch_name="gfx950:sramecc+:xnack-", warp_size=64)
    found = detect_from(props)
    assert found.spec.name == "MI350X"
    assert "MI350X" in found.warning and "MI355X" in found.warning


def test_unknown_amd_gpu_gets_hip_target():
    props = DeviceProps(name="AMD Instinct MI210", total_memory=64 * GIB, multi_processor_count=104,
                        gcn_arch_name="gfx90a:sramecc+:xnack-", warp_size=64)
    found = detect_from(props)
    assert found.how == "properties"
    assert found.spec.triton.backend == "hip" and found.spec.triton.arch == "gfx90a"
    assert found.spec.warp_size == 64


def test_no_gpu_gives_cpu_spec():
    found = detect_from(None)
    assert found.how == "cpu" and found.spec.vendor == "cpu" and found.spec.triton is None
    assert found.spec.compute_units >= 1 and found.spec.hbm_bytes > 0
    assert cpu_spec().name == "cpu"


def test_detect_without_gpu_is_cpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert detect().how == "cpu"
