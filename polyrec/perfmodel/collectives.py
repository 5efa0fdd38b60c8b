"""Alpha-beta time of the collectives a sharded training step runs.

A collective call costs a fixed ``overhead`` (the library's launch and proxy start, paid once per
call) and, per algorithm step, a message of ``b`` bytes costs ``alpha + b / beta`` (Hockney's model; the collective
algorithms and their costs follow Thakur, Rabenseifner & Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 2005). ``beta`` is the bandwidth one GPU drives per
direction; topologies:

- ``switch``: every GPU reaches any peer at its full bandwidth (NVLink through NVSwitch; a
  non-blocking network fabric);
- ``mesh``: direct links to every peer (AMD Infinity Fabric on an 8-GPU platform); an all-to-all
  uses all links at once, so a GPU's aggregate bandwidth applies as with a switch;
- ``ring``: each GPU has one link to each neighbour (bandwidth ``beta`` per direction, split over
  both neighbours): a message to a peer ``d`` hops away crosses ``d`` links (shortest way round).

Below the size where the library switches protocol a call costs about the same whatever its size
(NCCL's low-latency protocols): a link may carry, per collective, that flat ``SmallMessages`` floor,
measured by its calibration (``polyrec.planner.comms.fit_small_messages``); the alpha-beta terms
price the sizes above it. On 2 H200s over NVLink the all-reduce took 29-34 us from 64 KiB to 1.5 MiB
and 45 us at 2 MiB, the all-to-all 33-37 us up to 4 MiB, then both grew with size
(benchmarks/results/collectives_nvidia-h200_2026-11-30 at fbc3a5c, section "sweep"); an affine fit
through 2-256 MiB puts the small all-reduces 20% and more too high.

All functions are pure; bytes and seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

TOPOLOGIES: tuple[str, ...] = ("switch", "mesh", "ring")


@dataclass(frozen=True, kw_only=True, slots=True)
class SmallMessages:
    """One collective's calls below ``up_to_bytes``: ``floor_s`` each, as measured on ``ranks`` GPUs."""

    floor_s: float  # seconds per call (library launch, proxy and the protocol's latency together)
    up_to_bytes: float  # bytes per rank (all-to-all) or of the buffer (all-reduce) where it stops
    ranks: int  # GPUs of the calibration; each algorithm step more (or fewer) adds (removes) one alpha


@dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    """One class of link between GPUs, as the alpha-beta model sees it."""

    name: str  # "nvlink", "infinity_fabric", "pcie", "network"
    alpha_s: float  # seconds of latency per message (per algorithm step)
    bandwidth: float  # bytes/s one GPU sends per direction (effective: peak x efficiency)
    topology: str  # one of TOPOLOGIES
    origin: str = "datasheet"  # where the bandwidth came from
    overhead_s: float = 0.0  # seconds per collective call, paid once (NCCL / RCCL launch and proxy)
    all_to_all_small: SmallMessages | None = None  # the small-message floor of all-to-alls (calibrated)
    all_reduce_small: SmallMessages | None = None  # the small-message floor of all-reduces (calibrated)

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"link {self.name}: topology must be one of {TOPOLOGIES}, got {self.topology!r}")
        if self.bandwidth <= 0 or self.alpha_s < 0 or self.overhead_s < 0:
            raise ValueError(f"link {self.name}: bandwidth must be > 0, alpha and overhead >= 0")


def ring_hops(ranks: int) -> int:
    """Sum over peers of the shortest hop count on a bidirectional ring of ``ranks``."""
    return sum(min(d, ranks - d) for d in range(1, ranks))


def small_message_time(small: SmallMessages | None, nbytes: float, ranks: int, steps_per_rank: int,
                       link: Link) -> float | None:
    """The floor of a call of ``nbytes`` below the link's small-message size, with one ``alpha`` per
    algorithm step (``steps_per_rank`` x (n-1)) more or fewer than at the calibration's rank count;
    None at or above that size (or without a floor)."""
    if small is None or nbytes >= small.up_to_bytes:
        return None
    return max(0.0, small.floor_s + steps_per_rank * (ranks - small.ranks) * link.alpha_s)


def all_to_all_time(bytes_per_rank: float, ranks: int, link: Link) -> float:
    """Each rank holds ``bytes_per_rank`` split evenly over all ranks and keeps its own part.

    switch / mesh: ``(n-1) alpha + (n-1)/n * bytes / beta``. ring: the busiest link direction carries
    ``bytes/n * ring_hops(n) / 2`` (each rank's traffic, both directions used), plus ``(n-1) alpha``.
    Plus the link's per-call overhead. Below the link's small-message size: its floor.
    """
    if ranks <= 1 or bytes_per_rank <= 0:
        return 0.0
    small = small_message_time(link.all_to_all_small, bytes_per_rank, ranks, 1, link)
    if small is not None:
        return small
    latency = link.overhead_s + (ranks - 1) * link.alpha_s
    if link.topology == "ring":
        return latency + bytes_per_rank / ranks * ring_hops(ranks) / 2 / link.bandwidth
    return latency + (ranks - 1) / ranks * bytes_per_rank / link.bandwidth


def reduce_scatter_time(total_bytes: float, ranks: int, link: Link) -> float:
    """Ring reduce-scatter of a ``total_bytes`` buffer: ``(n-1) alpha + (n-1)/n * bytes / beta``."""
    if ranks <= 1 or total_bytes <= 0:
        return 0.0
    return (ranks - 1) * link.alpha_s + (ranks - 1) / ranks * total_bytes / link.bandwidth


def all_gather_time(total_bytes: float, ranks: int, link: Link) -> float:
    """Ring all-gather into a ``total_bytes`` buffer: same cost as the reduce-scatter."""
    return reduce_scatter_time(total_bytes, ranks, link)


def all_reduce_time(total_bytes: float, ranks: int, link: Link) -> float:
    """Ring all-reduce (reduce-scatter then all-gather): ``2(n-1) alpha + 2(n-1)/n * bytes / beta``,
    plus the per-call overhead once. Below the link's small-message size: its floor."""
    if ranks <= 1 or total_bytes <= 0:
        return 0.0
    small = small_message_time(link.all_reduce_small, total_bytes, ranks, 2, link)
    if small is not None:
        return small
    return link.overhead_s + 2 * (ranks - 1) * link.alpha_s + 2 * (ranks - 1) / ranks * total_bytes / link.bandwidth


def hierarchical_all_reduce_time(total_bytes: float, per_host: int, hosts: int, intra: Link, inter: Link) -> float:
    """Reduce-scatter inside each host, all-reduce of each GPU's 1/per_host slice across hosts over
    its own NIC, all-gather inside the host (NCCL's tree/ring hybrid, to first order)."""
    inside = reduce_scatter_time(total_bytes, per_host, intra) + all_gather_time(total_bytes, per_host, intra)
    return inside + all_reduce_time(total_bytes / per_host, hosts, inter)


def hierarchical_all_to_all_time(bytes_per_rank: float, per_host: int, hosts: int, intra: Link,
                                 inter: Link) -> float:
    """All-to-all over ``per_host`` x ``hosts`` ranks: the parts for peers on the same host go over the
    scale-up link, the rest over each GPU's network link, concurrently (the slower one bounds)."""
    ranks = per_host * hosts
    if ranks <= 1 or bytes_per_rank <= 0:
        return 0.0
    if hosts == 1:
        return all_to_all_time(bytes_per_rank, per_host, intra)
    local = bytes_per_rank * (per_host - 1) / ranks / intra.bandwidth + (per_host - 1) * intra.alpha_s
    remote = bytes_per_rank * (ranks - per_host) / ranks / inter.bandwidth + (ranks - per_host) * inter.alpha_s
    return max(intra.overhead_s, inter.overhead_s) + max(local, remote)
