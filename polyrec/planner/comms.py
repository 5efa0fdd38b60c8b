"""The links of a fleet, from the catalog, and the time of its collectives (alpha-beta model).

Inside a host: NVLink through NVSwitch (NVIDIA, ``switch``), Infinity Fabric peer links (AMD,
``mesh``), or PCIe through the host where there is no scale-up link or the host mixes vendors.
Between hosts: one network port per GPU (``switch``). A scale-up link of a device kind that has a
link calibration (:func:`fit_link`, stored by ``benchmarks/collectives.py`` as
``<cache>/polyrec/calibration/<device>-<link>.json``) uses its measured bandwidth and per-call
overhead; otherwise the catalog's per-direction bandwidth times an efficiency. Each link carries
the origin of its numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from polyrec.hardware.calibrate import load_calibration
from polyrec.hardware.types import DeviceSpec
from polyrec.perfmodel.collectives import (
    Link,
    SmallMessages,
    all_reduce_time,
    all_to_all_time,
    hierarchical_all_reduce_time,
    hierarchical_all_to_all_time,
)
from polyrec.planner.types import Fleet

#: Fraction of a scale-up link's datasheet bandwidth that NCCL / RCCL collectives reach with large
#: messages when the link is not calibrated: 0.62, measured on 2 H200s over NVLink with NVLS off
#: (all-to-all and all-reduce slopes ~280 GB/s per direction of 450;
#: benchmarks/results/collectives_nvidia-h200_2026-11-29). nccl-tests on 8-GPU NVSwitch systems
#: report more (~0.8 without NVLS); one measured point, hence an estimate elsewhere.
COLLECTIVE_EFFICIENCY = 0.62
#: Seconds of latency per algorithm step over NVLink / Infinity Fabric / PCIe (estimate: a few
#: microseconds per NCCL ring step for small messages, nccl-tests latency columns).
SCALEUP_ALPHA_S = 3e-6
#: Seconds per collective call over the scale-up link when not calibrated: 60 us, the fixed cost of
#: one NCCL call measured on 2 H200s (same results file: all-to-all intercept 69 us, all-reduce 78 us).
SCALEUP_OVERHEAD_S = 60e-6
#: Seconds per collective call over the network (estimate: as over NVLink; not measured).
NETWORK_OVERHEAD_S = 60e-6
#: Seconds of latency per step over the network (estimate: InfiniBand / RoCE ~2 us wire + NCCL proxy).
NETWORK_ALPHA_S = 8e-6
#: Network bandwidth per GPU per direction: one 400 Gb/s port per GPU, as in NVIDIA DGX H100/H200
#: (8x ConnectX-7 400 Gb/s, https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html)
#: and AMD Instinct MI300X platforms (8x 400 GbE NICs). Not in the device catalog: an assumption.
NETWORK_BANDWIDTH = 400e9 / 8


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetLinks:
    """The two link classes of a fleet."""

    intra: Link  # between GPUs of one host
    inter: Link | None  # between hosts (None for one host)
    per_host: int
    hosts: int

    @property
    def world_size(self) -> int:
        return self.per_host * self.hosts


def intra_host_link(specs: list[DeviceSpec]) -> Link:
    """The scale-up link between GPUs of one host (the slowest GPU's, PCIe when vendors mix)."""
    vendors = {s.vendor for s in specs}
    scaleup = min(s.scaleup_bandwidth for s in specs)
    if len(vendors) > 1 or scaleup <= 0:
        pcie = min(s.host_link_bandwidth for s in specs)
        return Link(name="pcie", alpha_s=SCALEUP_ALPHA_S, bandwidth=COLLECTIVE_EFFICIENCY * pcie, topology="switch",
                    overhead_s=SCALEUP_OVERHEAD_S,
                    origin=f"datasheet host_link_bandwidth x {COLLECTIVE_EFFICIENCY} (estimate)")
    name, topology = ("nvlink", "switch") if vendors == {"nvidia"} else ("infinity_fabric", "mesh")
    measured = [load_calibration(link_calibration_name(s.name, name)) for s in specs]
    if all(measured):
        slowest = min(measured, key=lambda m: m["bandwidth"])
        small = {kind: SmallMessages(floor_s=float(entry["floor_s"]), up_to_bytes=float(entry["up_to_bytes"]),
                                     ranks=int(slowest["ranks"]))
                 for kind, entry in slowest.get("small", {}).items()}
        return Link(name=name, alpha_s=float(slowest["alpha_s"]), bandwidth=float(slowest["bandwidth"]),
                    overhead_s=float(slowest["overhead_s"]), topology=topology,
                    all_to_all_small=small.get("all_to_all"), all_reduce_small=small.get("all_reduce"),
                    origin=f"calibrated {slowest.get('date', '?')} ({slowest.get('method', '?')})")
    return Link(name=name, alpha_s=SCALEUP_ALPHA_S, bandwidth=COLLECTIVE_EFFICIENCY * scaleup, topology=topology,
                overhead_s=SCALEUP_OVERHEAD_S,
                origin=f"datasheet scaleup_bandwidth x {COLLECTIVE_EFFICIENCY}, {SCALEUP_OVERHEAD_S * 1e6:.0f} us per "
                       "call (measured on 2 H200s; estimate elsewhere)")


def network_link() -> Link:
    return Link(name="network", alpha_s=NETWORK_ALPHA_S, bandwidth=COLLECTIVE_EFFICIENCY * NETWORK_BANDWIDTH,
                topology="switch", overhead_s=NETWORK_OVERHEAD_S, origin=f"assumed 400 Gb/s per GPU x {COLLECTIVE_EFFICIENCY} (estimate)")


def fleet_links(fleet: Fleet) -> FleetLinks:
    specs = list(fleet.specs().values())
    return FleetLinks(intra=intra_host_link(specs), inter=network_link() if fleet.hosts > 1 else None,
                      per_host=fleet.per_host, hosts=fleet.hosts)


def all_to_all_seconds(bytes_per_rank: float, links: FleetLinks) -> float:
    """All-to-all over the whole fleet, each rank sending ``bytes_per_rank`` (its own part stays)."""
    if links.inter is None:
        return all_to_all_time(bytes_per_rank, links.per_host, links.intra)
    return hierarchical_all_to_all_time(bytes_per_rank, links.per_host, links.hosts, links.intra, links.inter)


def all_reduce_seconds(total_bytes: float, links: FleetLinks) -> float:
    """All-reduce of ``total_bytes`` over the whole fleet (hierarchical across hosts)."""
    if links.inter is None:
        return all_reduce_time(total_bytes, links.per_host, links.intra)
    return hierarchical_all_reduce_time(total_bytes, links.per_host, links.hosts, links.intra, links.inter)


def link_origins(links: FleetLinks) -> dict[str, str]:
    out = {f"link.{links.intra.name}": f"{links.intra.bandwidth / 1e9:.0f} GB/s per direction, {links.intra.origin}"}
    for kind, small in (("all_to_all", links.intra.all_to_all_small), ("all_reduce", links.intra.all_reduce_small)):
        if small is not None:
            out[f"link.{links.intra.name}.{kind}_small"] = (
                f"calibrated: {small.floor_s * 1e6:.0f} us per call below {small.up_to_bytes / 2**20:.2f} MiB "
                f"on {small.ranks} GPUs ({links.intra.origin})")
    if links.inter is not None:
        out[f"link.{links.inter.name}"] = (f"{links.inter.bandwidth / 1e9:.0f} GB/s per direction, "
                                           f"{links.inter.origin}")
    return out


#: The size term of a link fit must explain at least this fraction of its largest sample's time, else
#: the samples cannot tell the bandwidth (all about as fast: messages too small to see it).
GROWTH_FRACTION = 0.05


def link_calibration_name(device: str, link: str) -> str:
    return f"{device}-{link}"


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveSample:
    """One measured collective for a link calibration."""

    collective: str  # "all_to_all" or "all_reduce"
    nbytes: float  # bytes per rank (all-to-all) or of the buffer (all-reduce)
    seconds: float


def _solve3(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve a 3x3 linear system (Gaussian elimination with partial pivoting)."""
    m = [row[:] + [v] for row, v in zip(a, b)]
    for c in range(3):
        p = max(range(c, 3), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        if abs(m[c][c]) < 1e-30:
            raise ValueError("link calibration: the samples do not determine overhead, latency and bandwidth")
        for r in range(c + 1, 3):
            f = m[r][c] / m[c][c]
            m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    out = [0.0, 0.0, 0.0]
    for r in (2, 1, 0):
        out[r] = (m[r][3] - sum(m[r][j] * out[j] for j in range(r + 1, 3))) / m[r][r]
    return out


def fit_link(samples: Sequence[CollectiveSample], ranks: int) -> dict[str, Any]:
    """Least-squares (overhead, alpha per step, bandwidth) of a switch link from measured all-to-alls
    and all-reduces on ``ranks`` GPUs, under the models of ``perfmodel.collectives``: all-to-all
    ``o + (n-1) alpha + (n-1)/n b / beta``, ring all-reduce ``o + 2(n-1) alpha + 2(n-1)/n b / beta``.
    Needs both kinds (they separate the per-call overhead from the per-step latency) and two sizes.
    The residuals are relative (each sample weighted by 1 / its time), as the predictions are judged:
    in absolute seconds the largest messages would set the per-call overhead, which the small ones
    pay almost alone (2 H200s: a 110 us overhead fitted, ~60 us measured below 16 MB;
    collectives_nvidia-h200_2026-11-30 at 98fab2d)."""
    if ranks < 2:
        raise ValueError("link calibration needs at least 2 ranks")
    kinds = {s.collective for s in samples}
    if kinds != {"all_to_all", "all_reduce"} or len({s.nbytes for s in samples}) < 2:
        raise ValueError("link calibration needs all-to-all and all-reduce samples at two sizes or more")
    terms = []  # (1, steps, volume) of each sample: its time is their dot product with (o, alpha, 1 / beta)
    for s in samples:
        if not s.seconds > 0:
            raise ValueError(f"link calibration: a {s.collective} of {s.nbytes:.0f} bytes took {s.seconds} s")
        steps = ranks - 1 if s.collective == "all_to_all" else 2 * (ranks - 1)
        volume = (ranks - 1) / ranks * s.nbytes * (1 if s.collective == "all_to_all" else 2)
        terms.append((1.0, float(steps), volume))
    scale = [max(t[j] for t in terms) for j in range(3)]  # columns to ~1: seconds and bytes differ by 1e14
    rows = [[t[j] / scale[j] / s.seconds for j in range(3)] for t, s in zip(terms, samples)]
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    aty = [sum(r[i] for r in rows) for i in range(3)]
    overhead, alpha, inv_bw = (x / k for x, k in zip(_solve3(ata, aty), scale))
    largest = max(range(len(samples)), key=lambda i: terms[i][2])
    if inv_bw * terms[largest][2] < GROWTH_FRACTION * samples[largest].seconds:
        raise ValueError("link calibration: time does not grow with size; use larger messages")
    return {"overhead_s": max(overhead, 0.0), "alpha_s": max(alpha, 0.0), "bandwidth": 1.0 / inv_bw, "ranks": ranks}


#: A small-message sample belongs to the floor while it takes at most this much longer than the floor:
#: the low-latency sizes spread 29-34 us (all-reduce) and 33-37 us (all-to-all) on 2 H200s; the
#: all-reduce's next protocol took 45 us at 2 MiB (+40%), the all-to-all 43 us at 6 MiB (+27%)
#: (collectives sweep, benchmarks/results/collectives_nvidia-h200_2026-11-30 at fbc3a5c; the sweep at
#: 74b6996, timed on the slowest rank, read 49-52 us flat and +25% / +19% at the same sizes).
SMALL_TOLERANCE = 0.15
#: The floor is the median of this many of the smallest samples.
FLOOR_SAMPLES = 2


def fit_small_messages(samples: Sequence[CollectiveSample], collective: str) -> dict[str, float] | None:
    """The flat small-message regime of ``collective`` from samples at ascending small sizes: its floor
    (the median of the ``FLOOR_SAMPLES`` smallest), and the size where it ends, between the last sample
    within ``SMALL_TOLERANCE`` of the floor and the first beyond it (their geometric mean; the largest
    sample where none is beyond). None where fewer than ``FLOOR_SAMPLES`` + 1 samples of it are given."""
    points = sorted((s.nbytes, s.seconds) for s in samples if s.collective == collective)
    if len(points) <= FLOOR_SAMPLES:
        return None
    floor = statistics.median(t for _, t in points[:FLOOR_SAMPLES])
    last_flat = points[0][0]
    for nbytes, seconds in points:
        if seconds > floor * (1 + SMALL_TOLERANCE):
            return {"floor_s": floor, "up_to_bytes": math.sqrt(last_flat * nbytes)}
        last_flat = nbytes
    return {"floor_s": floor, "up_to_bytes": last_flat}
