"""On a machine with 2+ GPUs of one host: the copy-engine exchange delivers the blocks NCCL's
all-to-all delivers (``benchmarks/peer_exchange.py`` exits non-zero otherwise). Skipped on one GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs of one host")
def test_copy_engine_blocks_equal_nccl_blocks(tmp_path):
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'benchmarks'}", POLYREC_RESULTS_DIR=str(tmp_path),
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          str(ROOT / "benchmarks" / "peer_exchange.py"), "--batch", "4096"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "'same_blocks_as_nccl': True" in run.stdout
