"""The pooled rows' all-to-alls over the GPUs' copy engines, for ranks of one host (symmetric memory).

NCCL moves an all-to-all with CTAs on the SMs, and the GEMMs running beside it slow down. Measured on
two H200s (``benchmarks/peer_exchange.py``, ``peer_exchange_nvidia-h200_2026-11-30``): 218 MB sent per
rank, NCCL's ``all_to_all_single`` 0.79 ms alone, and three ``[3456 x 65536] x [65536 x 512]`` GEMMs
(0.99 ms alone) beside it took 0.60 ms longer; pushed by ``cudaMemcpyAsync`` into the peers' memory
(copy engines, no SM) with the two barriers below, 0.81 ms alone and 0.27 ms longer beside the GEMMs.

Each rank holds one receive buffer per direction in symmetric memory
(``torch.distributed._symmetric_memory``: every rank maps every peer's buffer). An exchange, on a side
stream that first waits for the caller's stream: a barrier (every rank's receive buffer is free: its
consumers, earlier on that rank's stream, are done), one copy per destination into that rank's buffer
at this rank's place, a barrier (every block has landed), an event the caller's stream waits on. The
receive buffer is reused by the next exchange of the same direction, so what ``wait`` returns is
valid until then (the sharded embeddings consume it at once: the placement, the tables' backward).
"""

from __future__ import annotations

import importlib.util
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

log = logging.getLogger(__name__)

#: Barrier channels (slots of the symmetric memory's signal pad) of each direction: one before the
#: copies, one after; the two directions may be in flight at once, so they use their own.
CHANNELS = {"rows": (0, 1), "grads": (2, 3)}


@dataclass(kw_only=True, slots=True)
class _Buffer:
    tensor: Tensor
    handle: object  # the rendezvous' SymmetricMemory
    peers: dict[tuple[int, int, int], Tensor] = field(default_factory=dict)  # (rank, numel, offset) -> view


class CopiesLanded:
    """The ``dist.Work`` of a copy-engine exchange: ``wait`` makes the current stream wait for it."""

    def __init__(self, event: torch.cuda.Event):
        self.event = event

    def wait(self) -> bool:
        torch.cuda.current_stream(self.event.device).wait_event(self.event)
        return True


class CopyEngineExchange:
    """All-to-alls whose blocks every rank pushes into its peers' receive buffers (the module
    docstring). Built by ``copy_engine_exchange`` on every rank."""

    def __init__(self, group: dist.ProcessGroup, device: torch.device, timeout_s: float):
        self.group_name = group.group_name
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.device = device
        self.timeout_ms = int(1e3 * timeout_s)
        self.stream = torch.cuda.Stream(device)
        self._buffers: dict[str, _Buffer] = {}

    def _buffer(self, direction: str, dtype: torch.dtype, numel: int) -> _Buffer:
        """This direction's receive buffer, at least ``numel`` elements of ``dtype`` (the same on every
        rank: allocating one is a collective, and every rank asks for the same size at the same call)."""
        from torch.distributed import _symmetric_memory as symm_mem

        have = self._buffers.get(direction)
        if have is not None and have.tensor.dtype == dtype and have.tensor.numel() >= numel:
            return have
        self._buffers.pop(direction, None)
        tensor = symm_mem.empty(numel, dtype=dtype, device=self.device)
        self._buffers[direction] = _Buffer(tensor=tensor, handle=symm_mem.rendezvous(tensor, self.group_name))
        return self._buffers[direction]

    def start(self, src: Tensor, send: Sequence[int], recv: Sequence[int], *, at_dest: Sequence[int],
              capacity: int, direction: str) -> tuple[CopiesLanded, Tensor]:
        """Send ``src``'s consecutive blocks of ``send[d]`` elements to every rank ``d``, where they land
        at element ``at_dest[d]`` of its buffer; this rank receives ``recv`` (its blocks, in rank order)
        into the start of its own. ``capacity``: the buffer size every rank asks for. Returns the work
        and the received elements (a view of the buffer)."""
        buf = self._buffer(direction, src.dtype, capacity)
        before, after = CHANNELS[direction]
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            buf.handle.barrier(channel=before, timeout_ms=self.timeout_ms)
            start = 0
            for d, (n, offset) in enumerate(zip(send, at_dest)):
                if n:
                    key = (d, n, offset)
                    if key not in buf.peers:
                        buf.peers[key] = buf.handle.get_buffer(d, (n,), src.dtype, storage_offset=offset)
                    buf.peers[key].copy_(src[start:start + n])
                start += n
            buf.handle.barrier(channel=after, timeout_ms=self.timeout_ms)
            landed = torch.cuda.Event()
            landed.record(self.stream)
        src.record_stream(self.stream)
        return CopiesLanded(landed), buf.tensor[:sum(recv)]


def copy_engine_exchange(group: dist.ProcessGroup | None, device: torch.device,
                         timeout_s: float) -> CopyEngineExchange | None:
    """The copy-engine exchange when every rank of ``group`` can use it (CUDA, one host, peer access,
    symmetric memory in this torch); None otherwise, the same answer on every rank (a collective)."""
    if group is None or device.type != "cuda" or torch.version.hip or dist.get_world_size(group) == 1:
        return None
    usable = _local_peers_reachable(group, device)
    flag = torch.tensor([1 if usable else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    if not int(flag.item()):
        log.info("pooled exchanges over NCCL: not every rank can map its peers' memory")
        return None
    log.info("pooled exchanges over copy engines (symmetric memory)")
    return CopyEngineExchange(group, device, timeout_s)


def _local_peers_reachable(group: dist.ProcessGroup, device: torch.device) -> bool:
    """Every rank of ``group`` on this host and reachable by peer access, and symmetric memory present.
    Every rank takes part in the host-name gather before answering (no rank may leave it early)."""
    world = dist.get_world_size(group)
    names: list[str | None] = [None] * world
    dist.all_gather_object(names, socket.gethostname(), group=group)
    return (importlib.util.find_spec("torch.distributed._symmetric_memory") is not None
            and len(set(names)) == 1 and world <= torch.cuda.device_count()
            and all(torch.cuda.can_device_access_peer(device.index, d)
                    for d in range(torch.cuda.device_count()) if d != device.index))
