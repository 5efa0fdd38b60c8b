"""On a machine with 2+ GPUs of one host: a malformed training row of rank 1 stops both ranks after the same step
under NCCL, with that step's state saved (``TrainLoop._stop_on_ranks_data``; the CPU tests run it over gloo,
``tests/test_user_audit_dist.py``), and a resume with --skip-bad-rows trains to the end. Skipped on one GPU."""

from __future__ import annotations

import json

import pytest
import torch

from distributed_util import criteo_file, train_on_ranks

pytestmark = pytest.mark.gpu

#: NVLink multicast off, as the device machines ask (their KINDS.md) and test_peer_exchange_gpu.py runs.
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs of one host")
def test_a_bad_row_of_rank_1_stops_both_gpu_ranks_after_the_same_step(tmp_path):
    data, ckpt = tmp_path / "train.tsv", tmp_path / "ckpt"
    criteo_file(data, 400, bad=148)  # line 149: block 9 of 16 rows, rank 1's 5th batch
    common = ["--data", f"criteo:{data}", "--row-cap", "64", "--batch-size", "16", "--steps", "8", "--log-every", "1",
              "--eval-batches", "1", "--json", "--checkpoint-dir", str(ckpt)]
    proc = train_on_ranks(2, *common, ok=False, env=NCCL_ENV)
    saved = f"the run's state at step 4 is saved in {ckpt / 'checkpoint.pt'}"
    assert f"error: rank 1: {data}:149: expected 40 tab-separated columns, found 3; {saved}" in proc.stderr
    assert f"(rank 1's training data); {saved}" in proc.stderr, proc.stderr[-3000:]
    state = torch.load(ckpt / "checkpoint.pt", weights_only=True)
    assert state["step"] == 4 and [d["stream_line"] for d in state["data_by_rank"]] == [112, 128]
    records = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]
    assert (records[-1]["event"], records[-1]["step"], records[-1]["rank"]) == ("stopped", 4, 1)
    resumed = train_on_ranks(2, *common, "--skip-bad-rows", "--resume", env=NCCL_ENV)
    last = [json.loads(line) for line in resumed.stdout.splitlines() if line.startswith("{")][-1]
    assert (last["event"], last["status"], last["step"]) == ("result", "done", 8), last
