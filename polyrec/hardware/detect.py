"""Which device is present: map torch's device properties to a catalog entry.

NVIDIA devices match by name (``"NVIDIA H200"``) and SM count; AMD devices by ``gcnArchName``
(``"gfx942:sramecc+:xnack-"``), CU count and, where two SKUs share both (MI300X / MI325X), memory
size or name. A GPU that matches nothing gets a spec built from its properties with a warning;
without a GPU the host CPU gets a spec, so every command works everywhere.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from polyrec.hardware.catalog import NOT_IN_NAMES, catalog, fleet_safe, same_name
from polyrec.hardware.types import PEAK_DTYPES, DeviceSpec, TritonTarget

#: Relative gap between reported and catalogued memory still taken as the same SKU: the H200's
#: driver reports 143771 MiB (150.8e9 bytes, device KINDS.md) against the datasheet's 141 GB (+7%).
MEMORY_MATCH_TOLERANCE = 0.15
#: The name of a GPU the catalog lacks whose reported name holds no character of a device name.
UNNAMED_GPU = "unknown-gpu"
#: The name of the host CPU's spec, which detection gives where torch sees no GPU: no catalog device.
CPU_NAME = "cpu"
#: Put after the fallback name of a GPU the catalog lacks that its driver reports by a catalog device's name
#: (another memory size or SM count): its calibration must not be written as that device's.
UNMATCHED_SUFFIX = "-unmatched"


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
        # CUDA builds of torch 2.11 also fill gcnArchName (with the device name): ROCm only.
        gcn_arch_name=(getattr(p, "gcnArchName", "") or "") if torch.version.hip else "",
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


def _named(spec: DeviceSpec, props: DeviceProps) -> bool:
    """A match name as a whole word of the device name: "H200" matches "NVIDIA H200", not "GH200"."""
    return any(re.search(rf"(?<![A-Za-z0-9]){re.escape(m)}(?![A-Za-z0-9])", props.name, re.IGNORECASE)
               for m in spec.match_names)


def candidates(props: DeviceProps, specs: dict[str, DeviceSpec] | None = None) -> list[DeviceSpec]:
    """Catalog entries these properties fit: same vendor, arch and compute units, close memory.

    Where several fit, those whose name matches are kept; more than one left is ambiguous.
    """
    specs = catalog() if specs is None else specs
    if props.gcn_arch_name:
        fit = [s for s in specs.values() if s.vendor == "amd" and s.arch == _amd_arch(props)]
    else:
        fit = [s for s in specs.values() if s.vendor == "nvidia" and _named(s, props)]
    fit = [s for s in fit if s.compute_units == props.multi_processor_count and _memory_close(s, props)]
    named = [s for s in fit if _named(s, props)]
    return named or fit


def _unknown_rates() -> dict[str, Any]:
    """The DeviceSpec fields no device property gives: 0 (unknown) until a data file or calibration."""
    return {"hbm_bandwidth": 0.0, "peak_flops": {d: 0.0 for d in PEAK_DTYPES}, "boost_clock_hz": 0.0,
            "scaleup_bandwidth": 0.0, "host_link_bandwidth": 0.0, "tdp_watts": 0.0}


def fallback_name(reported: str) -> str:
    """A device name (catalog.DEVICE_NAME, one device in ``--fleet``) for a GPU the catalog lacks, from the name
    torch ``reported``: each run of other characters (spaces, '/', non-ASCII) one '-', the ends' '-', '.' and '_'
    taken off (no '../' left to put its calibration file outside the cache), a count-like ending kept from
    ``--fleet`` (``fleet_safe``); UNNAMED_GPU where nothing is left; UNMATCHED_SUFFIX added where that is a catalog
    device's name, in any case (calibrate.calibration_path lowers it)."""
    name = fleet_safe(NOT_IN_NAMES.sub("-", reported).strip("-._")) or UNNAMED_GPU
    return name + UNMATCHED_SUFFIX if same_name(name, catalog()) is not None else name


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
        name=fallback_name(props.name),
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
        **_unknown_rates(),
        sources=sources,
    )


def cpu_spec() -> DeviceSpec:
    """The host CPU as a device, so that every command works without a GPU."""
    cores = os.cpu_count() or 1
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return DeviceSpec(
        name=CPU_NAME,
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
        **_unknown_rates(),
        sources={"compute_units": "os.cpu_count()", "hbm_bytes": "os.sysconf (physical memory)"},
    )


def detect_from(props: DeviceProps | None) -> Detection:
    """Detection from given properties (None: no GPU)."""
    if props is None:
        return Detection(spec=cpu_spec(), how="cpu", props=None)
    found = candidates(props)
    if len(found) == 1:
        return Detection(spec=found[0], how="catalog", props=props)
    if found:
        slowest = min(found, key=lambda s: s.peak_flops["bf16"])
        names = ", ".join(s.name for s in found)
        return Detection(spec=slowest, how="catalog", props=props,
                         warning=f"'{props.name}' fits {names} equally; using {slowest.name}, the lowest "
                                 "peak rate (run `polyrec hw calibrate` to measure the real ceilings)")
    warning = (f"'{props.name}' ({props.gcn_arch_name or f'sm_{props.major}{props.minor}'}, "
               f"{props.multi_processor_count} CUs, {props.total_memory / 1e9:.0f} GB) is not in the "
               "catalog: using its reported properties; peak rates and bandwidths are unknown until "
               "`polyrec hw calibrate` measures them, or add a data file under polyrec/hardware/devices/")
    return Detection(spec=spec_from_props(props), how="properties", props=props, warning=warning)


def detect(index: int = 0) -> Detection:
    """Detect the present device (GPU ``index``, else the CPU)."""
    import torch

    return detect_from(read_props(index) if torch.cuda.is_available() else None)
