"""A rank that dies or hangs surfaces as an error on the others within the timeout, not a hang."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from distributed_util import free_port

WORKER = textwrap.dedent("""
    import os, sys, time
    import torch, torch.distributed as dist
    from polyrec.runtime.dist import init_distributed
    ctx = init_distributed(timeout_s=float(sys.argv[2]))
    if ctx.rank == 1:
        if sys.argv[1] == "die":
            os._exit(3)
        time.sleep(60)  # hang
    t = torch.ones(4)
    try:
        dist.all_reduce(t)
    except Exception as exc:  # the behaviour under test: the error reaches rank 0
        print(f"RANK0-ERROR {type(exc).__name__}", flush=True)
        os._exit(7)
    print("RANK0-NO-ERROR", flush=True)
""")


def _launch(mode: str, timeout_s: float) -> tuple[str, float]:
    port = free_port()
    procs = []
    start = time.monotonic()
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                   LOCAL_RANK=str(rank), CUDA_VISIBLE_DEVICES="")
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, mode, str(timeout_s)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    out0, _ = procs[0].communicate(timeout=120)
    elapsed = time.monotonic() - start
    procs[1].kill()
    procs[1].wait()
    return out0, elapsed


def test_dead_rank_is_reported():
    out, elapsed = _launch("die", 30.0)
    assert "RANK0-ERROR" in out, out
    assert elapsed < 60


def test_hung_rank_times_out():
    out, elapsed = _launch("hang", 5.0)
    assert "RANK0-ERROR" in out, out
    assert elapsed < 50  # well before the hung rank's 60 s sleep ends
