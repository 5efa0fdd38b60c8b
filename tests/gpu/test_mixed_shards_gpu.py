"""On the GPU machine: a rank's shards of several row dtypes (``polyrec.runtime.mixed_shards``: one TBE per dtype)
look up and train as one process's ``MixedRowEmbeddings`` on the same rows, and `polyrec train` under torchrun
takes a row dtype per table. One GPU: a world of one (the ids split by a read of the offsets; the split by the
input distribution's host counts runs on 2 gloo processes in tests/test_mixed_shards.py). Two GPUs of one host
(skipped on one): NCCL, the tables' update on its own stream with several TBEs a rank, a checkpoint resumed on
one process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from polyrec.kernels.tbe import EmbeddingOptimizer
from polyrec.models.embeddings import EmbeddingOptimConfig, build_embeddings
from polyrec.runtime.distributed_embeddings import DistributedEmbeddings
from polyrec.runtime.mixed_shards import MixedShardTables
from polyrec.runtime.shards import TableSharding

pytestmark = pytest.mark.gpu

ROWS = (100_000, 37, 5_000, 3, 20_000)
DIM, B, STEPS, LR = 64, 2048, 4, 0.05
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = (F16, F32, BF16, F16, F32)
CUDA = torch.device("cuda")
MAX_BAG = 8  # ids per bag at most (``_batch``)


def _ulp(dtype: torch.dtype) -> float:
    """A unit in the last place relative to a value's magnitude (0: fp32 rows round as the reference's do)."""
    return {F32: 0.0, F16: 2.0 ** -10, BF16: 2.0 ** -7}[dtype]


def _batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.randint(0, MAX_BAG + 1, (len(ROWS) * B,), device="cuda", generator=gen)
    high = torch.tensor(ROWS, device="cuda").repeat_interleave(B).repeat_interleave(lengths)
    values = (torch.rand(high.shape, device="cuda", generator=gen) * high).long()  # duplicates in small tables
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device="cuda")
    offsets[1:] = lengths.cumsum(0)
    return values, offsets


def test_one_ranks_mixed_shards_train_as_one_process():
    reference = build_embeddings("polyrec", ROWS, DIM, optimizer=EmbeddingOptimConfig(kind="rowwise_adagrad", lr=LR),
                                 device=CUDA, seed=2, weight_dtype=DTYPES)
    sharded = DistributedEmbeddings(ROWS, DIM, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=LR),
                                    shardings=[TableSharding(kind="table", ranks=(0,))] * len(ROWS), rank=0,
                                    world_size=1, device=CUDA, seed=7, weight_dtype=DTYPES)
    assert isinstance(sharded.local, MixedShardTables) and len(sharded.local.tbes) == 3
    sharded.import_state(reference.export_state())
    gen = torch.Generator(device="cuda").manual_seed(3)
    for step in range(STEPS):
        values, offsets = _batch(gen)
        want, got = reference(values, offsets, B), sharded(values, offsets, B)
        for f, table in enumerate(reference.table_weights()):  # after a step, low-precision rows differ by their
            slack = 0 if step == 0 else MAX_BAG * 2 * _ulp(DTYPES[f]) * float(table.float().abs().max())  # rounding
            torch.testing.assert_close(got[:, f], want[:, f].detach(), rtol=0, atol=1e-5 + slack,
                                       msg=f"step {step}, feature {f}")
        readout = torch.randn(want.shape, device="cuda", generator=gen)
        (want * readout).sum().backward()
        (got * readout).sum().backward()
    sharded.check_errors()
    torch.cuda.synchronize()
    for t, (mine, theirs) in enumerate(zip(sharded.local.table_weights(), reference.table_weights())):
        assert mine.dtype == DTYPES[t]
        slack = STEPS * _ulp(DTYPES[t]) * float(theirs.float().abs().max())
        torch.testing.assert_close(mine.float(), theirs.float(), rtol=0, atol=1e-6 + slack, msg=f"table {t}")


def test_torchrun_one_gpu_trains_a_row_dtype_per_table(tmp_path):
    dtypes = ",".join("fp16" if t % 3 == 1 else "fp32" for t in range(26))  # dcnv2-small's 26 tables
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "-m", "polyrec", "train",
           "--preset", "dcnv2-small", "--batch-size", "4096", "--steps", "20", "--log-every", "10", "--json",
           "--embedding-dtype", dtypes, "--checkpoint-dir", str(tmp_path / "ckpt")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = next(json.loads(line) for line in proc.stdout.splitlines() if '"event": "result"' in line)
    assert result["status"] == "done" and result["step"] == 20, result


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs of one host")
def test_two_gpu_ranks_train_a_row_dtype_per_table_and_resume_on_one_process(tmp_path):
    from distributed_util import train_on_ranks
    from test_data_stop_gpu import NCCL_ENV

    # dcnv2-small's default shardings on 2 ranks give each rank fp32 and fp16 tables
    dtypes = ",".join("fp16" if t % 3 == 1 else "fp32" for t in range(26))
    common = ["--preset", "dcnv2-small", "--batch-size", "4096", "--log-every", "5", "--json", "--embedding-dtype",
              dtypes, "--checkpoint-dir", str(tmp_path / "ckpt")]
    first = train_on_ranks(2, *common, "--steps", "10", env=NCCL_ENV)
    again = train_on_ranks(0, *common, "--steps", "15", "--resume")
    for proc, step in ((first, 10), (again, 15)):
        result = next(json.loads(line) for line in proc.stdout.splitlines() if '"event": "result"' in line)
        assert result["status"] == "done" and result["step"] == step, result
