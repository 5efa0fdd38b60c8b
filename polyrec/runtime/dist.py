"""torch.distributed set-up for polyrec: the process group, rank-aware logging, fault timeouts.

Processes are launched by ``torchrun`` (single host: ``torchrun --nproc-per-node N -m polyrec train
...``; several hosts: torchrun's standard rendezvous flags). NCCL on NVIDIA, RCCL on ROCm (which
answers to the "nccl" backend name), gloo on the CPU. No home-made process management.

A rank that dies or hangs must surface as an error, not a silent hang: every collective runs under
the process group's timeout, and NCCL's async error handling tears the job down when one expires.
"""

from __future__ import annotations

import datetime as dt
import gc
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from polyrec.startup import sigterm_default

#: Seconds a collective may wait for the slowest rank before the job fails (the default of `polyrec train
#: --collective-timeout`). Long enough for the first step's compilation on every rank, short enough that a dead
#: peer is reported in minutes.
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class DistContext:
    """Where this process sits in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str  # "nccl" (NVIDIA NCCL / AMD RCCL) or "gloo"
    timeout_s: float = DEFAULT_TIMEOUT_S  # of every collective (the process group's timeout)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


class RankFilter(logging.Filter):
    """Prefixes every log record with the rank, so interleaved logs can be told apart."""

    def __init__(self, rank: int, world_size: int):
        super().__init__()
        self.prefix = f"[rank {rank}/{world_size}]"

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.prefix
        return True


#: The default group's NCCL streams at high priority: its collectives (DDP's all-reduces; the pooled
#: exchanges where they go by NCCL) get the SMs ahead of kernels queued at the default priority on
#: other streams, such as the tables' update on its own stream (polyrec.runtime.sharding).
HIGH_PRIORITY_COLLECTIVES = True


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_distributed(*, backend: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> DistContext:
    """Join the process group described by torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK...).

    Without torchrun's variables this is a world of one with no process group.
    """
    if not launched_by_torchrun():
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        return DistContext(rank=0, world_size=1, local_rank=0, device=device, backend="none")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        kwargs = {"device_id": device} if backend == "nccl" else {}
        if backend == "nccl" and HIGH_PRIORITY_COLLECTIVES:
            options = dist.ProcessGroupNCCL.Options()
            options.is_high_priority_stream = True
            kwargs["pg_options"] = options
        with sigterm_default():  # the rendezvous waits in C++ for every rank: no Python handler runs there
            dist.init_process_group(backend=backend, timeout=dt.timedelta(seconds=timeout_s), **kwargs)
    setup_rank_logging(rank, world)
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=device, backend=backend,
                       timeout_s=timeout_s)


def second_group(ctx: DistContext) -> dist.ProcessGroup | None:
    """Another process group of every rank, under the same timeout: collectives queued on another
    stream (the input distribution, a step ahead) get their own communicator, instead of being ordered
    among the default group's (the pooled rows' exchanges, DDP's all-reduce). Every rank must call it
    at the same point. None in a world of one."""
    if ctx.world_size == 1:
        return None
    return dist.new_group(timeout=dt.timedelta(seconds=ctx.timeout_s))


def setup_rank_logging(rank: int, world_size: int, level: int = logging.INFO) -> None:
    """Log to stderr with a rank prefix on every line."""
    handler = logging.StreamHandler()
    handler.addFilter(RankFilter(rank, world_size))
    handler.setFormatter(logging.Formatter("%(rank)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("polyrec")
    root.handlers[:] = [handler]
    root.setLevel(level)


def shutdown(*, completed: bool) -> None:
    """Destroy the process group. Call it once nothing that holds the group is left (the trainer and
    its DDP module released): collected here, the group's threads stop inside this call rather than
    at interpreter exit. After a run every rank ``completed``, the ranks first meet at a barrier, so
    none closes its connections while a peer is still inside a collective; after a failure they do
    not wait (a peer may never arrive). A rank aborted at exit once in CI (gloo, 2 ranks, after the
    run had finished and reported); the cause was not isolated, this ordering is the defence."""
    if not dist.is_initialized():
        return
    gc.collect()
    if completed:
        dist.barrier()
    dist.destroy_process_group()
