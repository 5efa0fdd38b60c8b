"""Run a test body on N CPU processes over gloo (torch.multiprocessing, no torchrun needed)."""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, fn: Callable, args: tuple, errors) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        fn(rank, world, *args)
    except BaseException:
        errors.put((rank, traceback.format_exc()))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    # The body passed and the group is gone: leave without the interpreter's C++ teardown, where a
    # one-rank gloo + DDP child once aborted ("terminate called without an active exception", 1 run
    # in ~18, after its assertions had passed).
    os._exit(0)


def run_on_ranks(fn: Callable, world: int = 2, *args) -> None:
    """Call ``fn(rank, world, *args)`` in ``world`` processes; re-raise the first failure here."""
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(world, free_port(), fn, args, errors), nprocs=world, join=True,
                       start_method="spawn")
    if not errors.empty():
        rank, trace = errors.get()
        raise AssertionError(f"rank {rank} failed:\n{trace}")
