"""The links of a fleet, from the catalog, and the time of its collectives (alpha-beta model).

Inside a host: NVLink through NVSwitch (NVIDIA, ``switch``), Infinity Fabric peer links (AMD,
``mesh``), or PCIe through the host where there is no scale-up link or the host mixes vendors.
Between hosts: one network port per GPU (``switch``). Bandwidths are the catalog's per-direction
numbers times an efficiency; each link carries the origin of its numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from polyrec.hardware.types import DeviceSpec
from polyrec.perfmodel.collectives import (
    Link,
    all_reduce_time,
    all_to_all_time,
    hierarchical_all_reduce_time,
    hierarchical_all_to_all_time,
)
from polyrec.planner.types import Fleet

#: Fraction of a link's datasheet bandwidth that NCCL / RCCL collectives reach with large messages
#: (estimate: nccl-tests on 8-GPU NVLink systems report bus bandwidths around 80% of the per-direction
#: peak without NVLS; the multi-GPU benchmark of issue 7 measures it).
COLLECTIVE_EFFICIENCY = 0.80
#: Seconds of latency per algorithm step over NVLink / Infinity Fabric / PCIe (estimate: a few
#: microseconds per NCCL ring step for small messages, nccl-tests latency columns).
SCALEUP_ALPHA_S = 3e-6
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
                    origin=f"datasheet host_link_bandwidth x {COLLECTIVE_EFFICIENCY} (estimate)")
    name, topology = ("nvlink", "switch") if vendors == {"nvidia"} else ("infinity_fabric", "mesh")
    return Link(name=name, alpha_s=SCALEUP_ALPHA_S, bandwidth=COLLECTIVE_EFFICIENCY * scaleup, topology=topology,
                origin=f"datasheet scaleup_bandwidth x {COLLECTIVE_EFFICIENCY} (estimate)")


def network_link() -> Link:
    return Link(name="network", alpha_s=NETWORK_ALPHA_S, bandwidth=COLLECTIVE_EFFICIENCY * NETWORK_BANDWIDTH,
                topology="switch", origin=f"assumed 400 Gb/s per GPU x {COLLECTIVE_EFFICIENCY} (estimate)")


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
    if links.inter is not None:
        out[f"link.{links.inter.name}"] = (f"{links.inter.bandwidth / 1e9:.0f} GB/s per direction, "
                                           f"{links.inter.origin}")
    return out
