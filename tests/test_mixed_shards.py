"""Sharded tables of several row dtypes (``polyrec.runtime.mixed_shards``: one TBE per dtype on a rank that holds
several) against one process's ``MixedRowEmbeddings``, on 2 gloo processes through the Triton interpreter: the
lookup, training steps, the ids split by the input distribution's host counts, checkpoints both ways."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from distributed_util import run_on_ranks
from polyrec.kernels.jagged import JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding
from polyrec.models.embeddings import EmbeddingOptimConfig, build_embeddings
from polyrec.runtime.distributed_embeddings import DistributedEmbeddings
from polyrec.runtime.mixed_shards import MixedShardTables
from polyrec.runtime.sharded_checkpoint import full_tables, load_sharded, save_sharded
from polyrec.runtime.shards import TableSharding

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="polyrec's TBE runs on the CPU only through Triton's interpreter: set "
                                       "TRITON_INTERPRET=1 (make test does)")

ROWS = (13, 6, 19, 8, 10)
DIM = 8
F32, F16 = torch.float32, torch.float16
DTYPES = (F32, F16, F32, F16, F32)
#: (shardings, embedding optimizer). Table-wise: rank 0 tables 0 (fp32) and 1 (fp16), rank 1 tables 2 (fp32) and 3
#: (fp16); table 4 (fp32) split by rows: each rank holds both dtypes, a row shard among them. Column-wise: tables 0
#: (fp32) and 3 (fp16) split by columns, table 1 (fp16) by rows, with full Adagrad (row-wise Adagrad's accumulator
#: of a column shard is its columns' mean, not one process's: docs/distributed.md).
PLANS = {"table_row": ([TableSharding(kind="table", ranks=(0,)), TableSharding(kind="table", ranks=(0,)),
                        TableSharding(kind="table", ranks=(1,)), TableSharding(kind="table", ranks=(1,)),
                        TableSharding(kind="row", ranks=(0, 1))], "rowwise_adagrad"),
         "column": ([TableSharding(kind="column", ranks=(0, 1)), TableSharding(kind="row", ranks=(1, 0)),
                     TableSharding(kind="table", ranks=(1,)), TableSharding(kind="column", ranks=(1, 0)),
                     TableSharding(kind="table", ranks=(0,))], "adagrad")}
B, STEPS, LR = 4, 3, 0.05
#: A bag of up to 3 fp16 rows, each off by up to two units in the last place of values below 0.5 (2**-12 each)
FP16_BAG_ATOL = 3 * 2 * 2.0 ** -12
CPU = torch.device("cpu")


def _one_process(kind: str = "rowwise_adagrad"):
    return build_embeddings("polyrec", ROWS, DIM, optimizer=EmbeddingOptimConfig(kind=kind, lr=LR), device=CPU,
                            seed=3, weight_dtype=DTYPES)


def _sharded(rank: int, world: int, plan: str) -> DistributedEmbeddings:
    shardings, kind = PLANS[plan]
    return DistributedEmbeddings(ROWS, DIM, optimizer=EmbeddingOptimizer(kind=kind, lr=LR), shardings=shardings,
                                 rank=rank, world_size=world, device=CPU, seed=5, weight_dtype=DTYPES)


def _one_rank(kind: str = "rowwise_adagrad", dtypes: tuple[torch.dtype, ...] = DTYPES) -> DistributedEmbeddings:
    """Every table whole on one rank (a world of one, no process group)."""
    return DistributedEmbeddings(ROWS, DIM, optimizer=EmbeddingOptimizer(kind=kind, lr=LR),
                                 shardings=[TableSharding(kind="table", ranks=(0,))] * len(ROWS), rank=0, world_size=1,
                                 device=CPU, seed=5, weight_dtype=dtypes)


def _global_batch(world: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """lengths [F, world*B] (empty bags among them) and the feature-major values of all ranks' samples."""
    gen = torch.Generator().manual_seed(40 + step)
    lengths = torch.randint(0, 4, (len(ROWS), world * B), generator=gen)
    lengths[1, 0] = 0
    values = torch.cat([torch.randint(0, r, (int(lengths[f].sum()),), generator=gen) for f, r in enumerate(ROWS)])
    return lengths, values


def _offsets(lengths: torch.Tensor) -> torch.Tensor:
    return F.pad(torch.cumsum(lengths.reshape(-1), 0), (1, 0))


def _rank_part(lengths: torch.Tensor, values: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s B samples of a global batch: values [nnz_r], offsets [F*B+1]."""
    starts = _offsets(lengths)[:-1].view(lengths.shape)
    keep = slice(rank * B, (rank + 1) * B)
    part = torch.cat([values[int(starts[f, rank * B]):int(starts[f, rank * B]) + int(lengths[f, keep].sum())]
                      for f in range(len(ROWS))])
    return part, _offsets(lengths[:, keep])


def _readout(world: int, step: int) -> torch.Tensor:
    return torch.randn(world * B, len(ROWS), DIM, generator=torch.Generator().manual_seed(70 + step))


def _recording(take, taken: list[bool]):
    """``take`` (a TBE's ``_take_prepared``), appending to ``taken`` whether it found a prepared sort."""
    def wrapped(*ids):
        found = take(*ids)
        taken.append(found is not None)
        return found
    return wrapped


def _trained_like_one_process(rank: int, world: int, directory: str, plan: str) -> None:
    reference = _one_process(PLANS[plan][1])
    sharded = _sharded(rank, world, plan)
    assert isinstance(sharded.local, MixedShardTables)  # both ranks hold fp32 and fp16 shards
    assert [tbe.weight_dtype for tbe in sharded.local.tbes] == [F32, F16]
    sharded.import_state(reference.export_state())  # a one-process checkpoint of mixed tables, cut into shards
    prepared, taken = [], []  # each TBE sorts its ids while the pooled rows cross (_backward_prelude), and its
    for tbe in sharded.local.tbes:  # backward takes that sort
        tbe.prepare_backward = lambda part, tbe=tbe, sort=tbe.prepare_backward: (prepared.append(tbe), sort(part))
        tbe._take_prepared = _recording(tbe._take_prepared, taken)
    for step in range(STEPS):
        lengths, values = _global_batch(world, step)
        expected = reference(values, _offsets(lengths), world * B)
        part, offsets = _rank_part(lengths, values, rank)
        out = sharded(part, offsets, B)
        assert out.dtype == F32 and out.shape == (B, len(ROWS), DIM)
        mine = expected[rank * B:(rank + 1) * B].detach()
        for f, dtype in enumerate(DTYPES):  # after a step, fp16 rows differ by their stochastic rounding
            atol = 1e-6 if dtype == F32 or step == 0 else FP16_BAG_ATOL
            torch.testing.assert_close(out[:, f], mine[:, f], rtol=0, atol=atol,
                                       msg=lambda m, step=step, f=f: f"step {step}, feature {f}: {m}")
        readout = _readout(world, step)
        (expected * readout).sum().backward()
        (out * readout[rank * B:(rank + 1) * B]).sum().backward()
    assert prepared == list(sharded.local.tbes) * STEPS and taken == [True] * len(prepared)
    sharded.check_errors()
    save_sharded(directory, sharded.sharded.local_shards, sharded.local, rank=rank, world_size=world, step=STEPS)
    again = _one_process(PLANS[plan][1])
    load_sharded(directory, full_tables(again), again)
    for t, (got, want) in enumerate(zip(again.table_weights(), reference.table_weights())):
        # fp16 rows round stochastically, each TBE from its own seeds (drawn from the ranks' unseeded generators:
        # they change from run to run): each step may round a row one unit in the last place (at most 2**-10 of it)
        # the other way, and the next steps carry it (a 3-unit gap was seen)
        atol = 1e-6 if DTYPES[t] == F32 else (STEPS + 1) * 2.0 ** -10 * float(want.abs().max())
        torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=atol,
                                   msg=lambda m, t=t: f"table {t}: {m}")
        assert got.dtype == DTYPES[t]
    assert all(tbe.step == STEPS for tbe in again.tbes)


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_sharded_mixed_row_dtypes_train_as_one_process_and_checkpoint_both_ways(tmp_path, plan):
    run_on_ranks(_trained_like_one_process, 2, str(tmp_path / "shards"), plan)


def test_a_rank_whose_shards_share_a_dtype_keeps_one_tbe():
    sharded = _one_rank("sgd", (F16,) * len(ROWS))
    assert isinstance(sharded.local, TableBatchedEmbedding) and sharded.local.weight_dtype == F16


def test_one_rank_of_mixed_row_dtypes_looks_up_without_host_bounds():
    """A world of one has no input distribution to count the pieces' ids: the split reads them from the offsets."""
    reference = _one_process()
    sharded = _one_rank()
    sharded.import_state(reference.export_state())
    lengths, values = _global_batch(1, 0)
    torch.testing.assert_close(sharded(values, _offsets(lengths), B), reference(values, _offsets(lengths), B),
                               rtol=0, atol=1e-6)
    with torch.no_grad():  # no backward follows: the split ids are not held for one (nnz ids a step)
        sharded(values, _offsets(lengths), B)
    assert sharded.local._parts is None


def test_one_rank_splits_at_the_batchs_host_bounds_without_reading_the_offsets(monkeypatch):
    """Where the batch's ``feature_bounds`` are known on the host (the trainer hands them over through
    ``DLRM.embed``), a world of one whose pieces are the batch's features splits there: no read of the offsets."""
    from polyrec.models import mixed_embeddings

    reference = _one_process()
    sharded = _one_rank()
    sharded.import_state(reference.export_state())
    lengths, values = _global_batch(1, 1)
    offsets = _offsets(lengths)
    bounds = tuple(offsets[::B].tolist())
    want = reference(values, offsets, B)

    def no_read(*args):
        raise AssertionError("the offsets were read on the host")

    monkeypatch.setattr(mixed_embeddings, "bag_bounds", no_read)
    torch.testing.assert_close(sharded(values, offsets, B, bounds=bounds), want, rtol=0, atol=1e-6)
    with pytest.raises(AssertionError, match="offsets were read"):  # without them, the split reads the offsets
        sharded(values, offsets, B)


def test_a_bad_id_is_named_by_the_ranks_feature():
    sharded = _one_rank()
    lengths, values = _global_batch(1, 0)
    first_of_3 = int(lengths[:3].sum())
    values[first_of_3] = ROWS[3]  # one past table 3's last row (an fp16 table)
    with pytest.raises(JaggedBatchError, match=r"feature 3 \(table 't3"):
        sharded(values, _offsets(lengths), B)
        sharded.check_errors()


def test_row_dtypes_must_be_one_per_table():
    with pytest.raises(ValueError, match="3 row dtypes for 5 tables"):
        _one_rank("sgd", (F32, F16, F32))


def test_torchrun_trains_mixed_row_dtypes_checkpoints_and_resumes_on_one_process(tmp_path):
    """`polyrec train` with a row dtype per table on 2 ranks (each holds fp32 and fp16 shards), resumed on 2 ranks,
    then on one process (``MixedRowEmbeddings`` filled from the sharded checkpoint)."""
    from test_train_distributed import COMMON, _polyrec, _result, _torchrun

    dtypes = ",".join("fp16" if t % 3 == 1 else "fp32" for t in range(26))  # dcnv2-small's 26 tables
    args = [*COMMON, "--embedding-dtype", dtypes, "--checkpoint-dir", str(tmp_path / "ckpt")]
    first = _result(_torchrun(2, *args, "--steps", "2"))
    assert first["status"] == "done" and first["step"] == 2
    again = _result(_torchrun(2, *args, "--steps", "4", "--resume"))
    assert again["step"] == 4
    one = _result(_polyrec(*args, "--steps", "6", "--resume"))
    assert one["status"] == "done" and one["step"] == 6


def test_a_plan_that_mixes_row_dtypes_on_two_ranks_trains_under_torchrun(tmp_path):
    """The co-design path end to end: a two-rank plan whose tables hold fp32 and fp16 rows (as two H100s at batch
    262144 per GPU plan MLPerf) is taken by `polyrec train --plan` under torchrun; before, it was refused."""
    import dataclasses
    import json

    from polyrec.models import preset
    from polyrec.planner.propose import make_plan
    from polyrec.planner.types import PlanConstraints, model_spec_from_config, parse_fleet
    from test_train_distributed import COMMON, _result, _torchrun

    plan = make_plan(model_spec_from_config(preset("dcnv2-small").with_capped_rows(64)), parse_fleet("H200x2"),
                     PlanConstraints(weight_dtypes=("fp32",), batch_per_gpu=8, dense_dtype="fp32"))
    mixed = dataclasses.replace(plan, tables=tuple(dataclasses.replace(t, weight_dtype="fp16") if i % 2 else t
                                                   for i, t in enumerate(plan.tables)))
    path = tmp_path / "plan.json"
    path.write_text(mixed.to_json())
    proc = _torchrun(2, *[a for a in COMMON if a not in ("--batch-size", "16")], "--steps", "2", "--plan", str(path))
    assert _result(proc)["status"] == "done"
    start = next(json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"event": "start"'))
    by_table = {t.table: t.weight_dtype for t in mixed.tables}
    assert start["config"]["embedding_dtype"] == ",".join(by_table[t.name] for t in mixed.model.tables)
