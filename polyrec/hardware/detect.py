"""Which device is present: map torch's device properties to a catalog entry.

NVIDIA devices match by name (``"NVIDIA H200"``) and SM count; AMD devices by ``gcnArchName``
(``"gfx942:sramecc+:xnack-"``), CU count and, where two SKUs share both (MI300X / MI325X), memory
size or name. A GPU that matches nothing gets a spec built from its properties with a warning;
without a GPU the host CPU gets a spec, so every command works everywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from polyrec.hardware.catalog import catalog
from polyrec.hardware.types import PEAK_DTYPES, DeviceSpec, TritonTarget

#: Relative gap between reported and catalogued memory still taken as the same SKU: the H200's
#: driver reports 143771 MiB (150.8e9 bytes, device KINDS.md) against the datasheet's 141 GB (+7%).
MEMORY_MATCH_TOLERANCE = 0.15


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceProps:
    """The torch device properties detection reads (a plain copy, so tests can fake them)."""

    name: str
    total_memory: int  # bytes
    multi_processor_count: int
    gcn_arch_name: str = ""  # ROCm only
    warp_size: int = 32
    l2_cache_size: int = 0  # bytes
    shared_memory_per_block_optin: int = 0  # bytes
    shared_memory_per_multiprocessor: int = 0  # bytes
    regs_per_multiprocessor: int = 0
    major: int = 0
    minor: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Detection:
    """The spec of the present device and how it was found."""

    spec: DeviceSpec
    how: str  # "catalog", "properties" (unknown GPU) or "cpu"
    props: DeviceProps | None
    warning: str | None = None


def read_props(index: int = 0) -> DeviceProps:
    """Copy the properties of CUDA/ROCm device ``index``."""
    import torch

    p = torch.cuda.get_device_properties(index)
    return DeviceProps(
        name=p.name,
        total_memory=p.total_memory,
        multi_processor_count=p.multi_processor_count,
        gcn_arch_name=getattr(p, "gcnArchName", "") or "",
        warp_size=getattr(p, "warp_size", 64 if torch.version.hip else 32),
        l2_cache_size=getattr(p, "L2_cache_size", 0),
        shared_memory_per_block_optin=getattr(p, "shared_memory_per_block_optin", 0),
        shared_memory_per_multiprocessor=getattr(p, "shared_memory_per_multiprocessor", 0),
        regs_per_multiprocessor=getattr(p, "regs_per_multiprocessor", 0),
        major=p.major,
        minor=p.minor,
    )


def _amd_arch(props: DeviceProps) -> str:
    return props.gcn_arch_name.split(":")[0]


def _memory_close(spec: DeviceSpec, props: DeviceProps) -> bool:
    return abs(props.total_memory - spec.hbm_bytes) <= MEMORY_MATCH_TOLERANCE * spec.hbm_bytes


def match_catalog(props: DeviceProps, specs: dict[str, DeviceSpec] | None = None) -> DeviceSpec | None:
    """The catalog entry these properties describe, or None."""
    specs = catalog() if specs is None else specs
    if props.gcn_arch_name:
        arch = _amd_arch(props)
        same = [s for s in specs.values() if s.vendor == "amd" and s.arch == arch
                and s.compute_units == props.multi_processor_count]
        named = [s for s in same if any(m.lower() in props.name.lower() for m in s.match_names)]
        if len(named) == 1:
            return named[0]
        sized = [s for s in same if _memory_close(s, props)]
        return min(sized, key=lambda s: abs(s.hbm_bytes - props.total_memory)) if sized else None
    named = [s for s in specs.values() if s.vendor == "nvidia"
             and any(m.lower() in props.name.lower() for m in s.match_names)
             and s.compute_units == props.multi_processor_count]
    if len(named) > 1:
        named = [s for s in named if _memory_close(s, props)] or named
    return named[0] if len(named) == 1 else None


def spec_from_props(props: DeviceProps) -> DeviceSpec:
    """A spec for a GPU the catalog lacks: what the properties say, zeros for the rest.

    Rates the properties cannot give (peak FLOP/s, bandwidths) are 0 and marked unknown; run
    ``polyrec hw calibrate`` to measure the ceilings the performance model needs.
    """
    amd = bool(props.gcn_arch_name)
    arch = _amd_arch(props) if amd else f"sm_{props.major}{props.minor}"
    target = (TritonTarget(backend="hip", arch=arch, warp_size=props.warp_size) if amd
              else TritonTarget(backend="cuda", arch=props.major * 10 + props.minor, warp_size=props.warp_size))
    from_props = "torch.cuda.get_device_properties"
    sources = {k: from_props for k in ("compute_units", "warp_size", "registers_per_cu", "smem_per_block",
                                        "smem_per_cu", "l2_bytes", "hbm_bytes")}
    return DeviceSpec(
        name=props.name.replace(" ", "-"),
        full_name=props.name,
        vendor="amd" if amd else "nvidia",
        arch=arch,
        triton=target,
        compute_units=props.multi_processor_count,
        warp_size=props.warp_size,
        registers_per_cu=props.regs_per_multiprocessor,
        max_registers_per_thread=512 if amd else 255,
        smem_per_block=props.shared_memory_per_block_optin,
        smem_per_cu=props.shared_memory_per_multiprocessor,
        l2_bytes=props.l2_cache_size,
        hbm_bytes=props.total_memory,
        hbm_bandwidth=0.0,
        peak_flops={d: 0.0 for d in PEAK_DTYPES},
        boost_clock_hz=0.0,
        scaleup_bandwidth=0.0,
        host_link_bandwidth=0.0,
        tdp_watts=0.0,
        sources=sources,
    )


def cpu_spec() -> DeviceSpec:
    """The host CPU as a device, so that every command works without a GPU."""
    cores = os.cpu_count() or 1
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return DeviceSpec(
        name="cpu",
        full_name=f"host CPU ({cores} cores)",
        vendor="cpu",
        arch="cpu",
        compute_units=cores,
        warp_size=1,
        registers_per_cu=0,
        max_registers_per_thread=0,
        smem_per_block=0,
        smem_per_cu=0,
        l2_bytes=0,
        hbm_bytes=memory,
        hbm_bandwidth=0.0,
        peak_flops={d: 0.0 for d in PEAK_DTYPES},
        boost_clock_hz=0.0,
        scaleup_bandwidth=0.0,
        host_link_bandwidth=0.0,
        tdp_watts=0.0,
        sources={"compute_units": "os.cpu_count()", "hbm_bytes": "os.sysconf (physical memory)"},
    )


def detect_from(props: DeviceProps | None) -> Detection:
    """Detection from given properties (None: no GPU)."""
    if props is None:
        return Detection(spec=cpu_spec(), how="cpu", props=None)
    spec = match_catalog(props)
    if spec is not None:
        return Detection(spec=spec, how="catalog", props=props)
    warning = (f"'{props.name}' ({props.gcn_arch_name or f'sm_{props.major}{props.minor}'}, "
               f"{props.multi_processor_count} CUs, {props.total_memory / 1e9:.0f} GB) is not in the "
               "catalog: using its reported properties; peak rates and bandwidths are unknown until "
               "`polyrec hw calibrate` measures them, or add a data file under polyrec/hardware/devices/")
    return Detection(spec=spec_from_props(props), how="properties", props=props, warning=warning)


def detect(index: int = 0) -> Detection:
    """Detect the present device (GPU ``index``, else the CPU)."""
    import torch

    return detect_from(read_props(index) if torch.cuda.is_available() else None)
