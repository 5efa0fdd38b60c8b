"""Run a test body on N CPU processes over gloo (torch.multiprocessing, no torchrun needed); ``polyrec train`` on N
ranks under torchrun, and the Criteo file such runs read."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
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


def criteo_file(path, rows: int, bad: int | None = None) -> None:
    """``rows`` Criteo TSV rows, row i's label i % 2 and first count i (to tell rows apart); row ``bad`` of
    3 columns."""
    rng = random.Random(0)
    lines = ["\t".join([str(i % 2), str(i)] + [str(rng.randint(0, 9)) for _ in range(12)]
                       + [f"{rng.getrandbits(32):08x}" for _ in range(26)]) for i in range(rows)]
    if bad is not None:
        lines[bad] = "1\t2\t3"
    path.write_text("\n".join(lines) + "\n")


def train_on_ranks(nproc: int, *args: str, ok: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """``polyrec train ARGS`` on ``nproc`` ranks under torchrun (0: one plain process); asserts it succeeded (or,
    with ``ok`` False, failed)."""
    launcher = ([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
                 f"--master-port={free_port()}", "-m", "polyrec"] if nproc else [sys.executable, "-m", "polyrec"])
    proc = subprocess.run([*launcher, "train", *args], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    assert (proc.returncode == 0) == ok, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc
