"""A rank that dies or hangs surfaces as an error on the others within the timeout, not a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

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


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="polyrec's tables run on the CPU only through Triton's interpreter")
def test_a_rank_whose_peer_failed_says_so_in_one_line():
    """`polyrec train` on 2 ranks, rank 1 killed mid-run: rank 0, in a collective that fails, says so in one line
    and exits 3 (it printed gloo's "Connection closed by peer" traceback, ~190 lines), and its --json output ends
    with a ``result`` line of status ``peer_failed`` (it ended without one). (A bad row of one rank, this test's
    trigger before, now stops every rank: tests/test_user_audit_dist.py.)"""
    args = ["--preset", "dcnv2-small", "--row-cap", "64", "--batch-size", "4", "--device", "cpu", "--embedding-backend",
            "polyrec", "--dense-backend", "torch", "--steps", "100000", "--log-every", "1", "--json"]
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "polyrec", "train", *args],
                              env=dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                                       WORLD_SIZE="2", LOCAL_RANK=str(rank), CUDA_VISIBLE_DEVICES="",
                                       OMP_NUM_THREADS="1"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(2)]
    for line in procs[0].stdout:  # rank 0 logs the first step: both ranks are training
        if '"event": "train"' in line:
            break
    procs[1].kill()
    out0, err0 = procs[0].communicate(timeout=240)
    procs[1].communicate()
    assert procs[0].returncode == 3, err0
    assert "error: rank 0: a peer rank failed or stopped answering (gloo: " in err0, err0  # Connection closed, reset...
    assert "); its own message says why" in err0 and "Traceback" not in err0 and "╭" not in err0, err0
    last = json.loads(out0.splitlines()[-1])
    assert (last["event"], last["status"]) == ("result", "peer_failed"), last
