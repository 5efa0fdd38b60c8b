"""Sharded training with polyrec's fused TBE on each shard equals one process on the whole batch,
and sharded checkpoints resume on a different number of ranks (2 gloo processes, interpreter)."""

from __future__ import annotations

import os

import torch

from distributed_util import run_on_ranks
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.runtime.sharded_checkpoint import load_sharded, save_sharded
from polyrec.runtime.sharding import ShardedEmbedding
from polyrec.runtime.shards import TableSharding
from test_sharding import DIMS, FEATURE_TO_TABLE, ROWS, B, global_batch, local_part

STEPS = 3


def _tables() -> list[TableSpec]:
    return [TableSpec(name=f"t{i}", rows=r, dim=d) for i, (r, d) in enumerate(zip(ROWS, DIMS))]


def _reference(opt: EmbeddingOptimizer) -> TableBatchedEmbedding:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return TableBatchedEmbedding(_tables(), optimizer=opt, feature_to_table=list(FEATURE_TO_TABLE), seed=5,
                                 deterministic=True)


def _factory(opt: EmbeddingOptimizer, full: TableBatchedEmbedding):
    def build(shards, feature_to_shard):
        tables = [TableSpec(name=f"t{s.table}[{s.rows[0]}:{s.rows[1]},{s.cols[0]}:{s.cols[1]}]", rows=s.num_rows,
                            dim=s.dim) for s in shards]
        local = TableBatchedEmbedding(tables, optimizer=opt, feature_to_table=feature_to_shard, seed=9,
                                      deterministic=True)
        with torch.no_grad():
            for view, s in zip(local.table_weights(), shards):
                view.copy_(full.table_weights()[s.table][s.rows[0]:s.rows[1], s.cols[0]:s.cols[1]])
        return local
    return build


def _readout(world: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(21)
    width = sum(DIMS[t] for t in FEATURE_TO_TABLE)
    return torch.randn(width, generator=gen), torch.randn(world * B, generator=gen)


def _losses_single(opt: EmbeddingOptimizer, world: int) -> tuple[list[float], TableBatchedEmbedding]:
    full = _reference(opt)
    w, y = _readout(world)
    losses = []
    for step in range(STEPS):
        out = full(global_batch(world, seed=100 + step))
        loss = ((out @ w - y) ** 2).mean()
        loss.backward()
        losses.append(float(loss))
    return losses, full


def _sharded(rank: int, world: int, kinds, opt: EmbeddingOptimizer) -> ShardedEmbedding:
    shardings = [TableSharding(kind=k, ranks=(t % world,) if k == "table" else tuple(range(world)))
                 for t, k in enumerate(kinds)]
    return ShardedEmbedding(rows=ROWS, dims=DIMS, shardings=shardings, feature_to_table=FEATURE_TO_TABLE,
                            local_factory=_factory(opt, _reference(opt)), rank=rank, world_size=world)


def _train_sharded(module: ShardedEmbedding, rank: int, world: int, steps: range) -> list[float]:
    import torch.distributed as dist

    w, y = _readout(world)
    losses = []
    for step in steps:
        out = module(local_part(global_batch(world, seed=100 + step), rank, world))
        loss = ((out @ w - y[rank * B:(rank + 1) * B]) ** 2).mean()
        loss.backward()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / world)  # mean of equal-size local means = the global mean
    return losses


CASES = [(("table", "row", "table"), EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.1)),
         (("row", "column", "table"), EmbeddingOptimizer(kind="adagrad", lr=0.1)),
         (("column", "table", "row"), EmbeddingOptimizer(kind="sgd", lr=0.5))]


def _check_training(rank: int, world: int) -> None:
    """Also: each step's backward used the sort its forward prepared while the pooled rows crossed
    the all-to-all (``prepare_backward``)."""
    real, used = TableBatchedEmbedding._take_prepared, []

    def spy(self, *args):
        got = real(self, *args)
        used.append(got is not None)
        return got

    TableBatchedEmbedding._take_prepared = spy
    try:
        for kinds, opt in CASES:
            expected, _ = _losses_single(opt, world)
            used.clear()
            got = _train_sharded(_sharded(rank, world, kinds, opt), rank, world, range(STEPS))
            torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), rtol=1e-5, atol=1e-6,
                                       msg=f"{kinds} {opt.kind}")
            assert used == [True] * STEPS, (kinds, used)
    finally:
        TableBatchedEmbedding._take_prepared = real


def test_sharded_tbe_training_matches_single_process():
    run_on_ranks(_check_training, 2)


KINDS = ("row", "table", "row")
OPT = EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.1)


def _save_after_two_steps(rank: int, world: int, directory: str) -> None:
    module = _sharded(rank, world, KINDS, OPT)
    _train_sharded(module, rank, world, range(2))
    save_sharded(directory, module.local_shards, module.local, rank=rank, world_size=world, step=2)


def _resume_resharded(rank: int, world: int, directory: str) -> None:
    """On 2 ranks with another sharding, the first loss after resuming is the single-process step-3 loss."""
    module = _sharded(rank, world, ("table", "row", "column"), OPT)
    manifest = load_sharded(directory, module.local_shards, module.local)
    assert manifest["step"] == 2 and manifest["world_size"] == 2
    expected, _ = _losses_single(OPT, world)
    got = _train_sharded(module, rank, world, range(2, 3))
    torch.testing.assert_close(got[0], expected[2], rtol=1e-5, atol=1e-6)


def _resume_one_rank_matches(rank: int, world: int, directory: str) -> None:
    """On 1 rank the resumed tables equal the single-process tables after 2 steps."""
    module = _sharded(rank, world, ("table", "row", "row"), OPT)
    load_sharded(directory, module.local_shards, module.local)
    full = _reference(OPT)
    w, y = _readout(2)
    for step in range(2):
        ((full(global_batch(2, seed=100 + step)) @ w - y) ** 2).mean().backward()
    for shard, view in zip(module.local_shards, module.local.table_weights()):
        torch.testing.assert_close(view, full.table_weights()[shard.table][shard.rows[0]:shard.rows[1]],
                                   rtol=1e-5, atol=1e-6)
    for shard, state in zip(module.local_shards, module.local.table_state()):
        torch.testing.assert_close(state, full.table_state()[shard.table][shard.rows[0]:shard.rows[1]],
                                   rtol=1e-5, atol=1e-6)
    assert module.local.step == full.step


def test_checkpoint_from_two_ranks_resumes_on_one_and_two(tmp_path):
    directory = str(tmp_path / "ckpt")
    run_on_ranks(_save_after_two_steps, 2, directory)
    run_on_ranks(_resume_one_rank_matches, 1, directory)
    run_on_ranks(_resume_resharded, 2, directory)


def _raise_message(module: ShardedEmbedding, batch) -> str:
    """The lookup of ``batch`` (it must not raise: the flags wait for the check), then the collective
    check's error message on this rank ("" when none)."""
    from polyrec.kernels.jagged import JaggedBatchError

    with torch.no_grad():
        module(batch)
    try:
        module.check_errors()
    except JaggedBatchError as exc:
        return str(exc)
    return ""


def _with_bad_ids(batch, bad: dict[int, int]):
    """``batch`` with the first id of the first feature of each table in ``bad`` replaced by its value."""
    from test_sharding import FEATURE_TO_TABLE

    starts = batch.offsets[:: batch.batch_size]
    first = {f: int(starts[f]) for f in range(batch.num_features) if starts[f + 1] > starts[f]}
    for f, at in first.items():
        if FEATURE_TO_TABLE[f] in bad:
            batch.values[at] = bad.pop(FEATURE_TO_TABLE[f])
    assert not bad, "every bad table needs a feature with an id in this batch"
    return batch


def _flag_ids_past_int32(rank: int, world: int) -> None:
    """An id past int32 (ids cross the all-to-all as int32, clamped) and a negative one, sent by rank
    1 for tables owned by rank 0 and rank 1: each owner's check names its table, no id wraps into range."""
    import torch.distributed as dist

    module = _sharded(rank, world, ("table", "table", "table"), OPT)  # table t on rank t % 2
    batch = local_part(global_batch(world, seed=7), rank, world)
    if rank == 1:
        batch = _with_bad_ids(batch, {0: 2**40, 1: -5})  # table 0 lives on rank 0, table 1 on rank 1
    messages = [None] * world
    dist.all_gather_object(messages, _raise_message(module, batch))
    assert f"t{rank}[" in messages[rank], messages  # the owner names its shard of that table


def _flag_on_every_rank(rank: int, world: int) -> None:
    """A bad id only rank 0's tables see: rank 0's check names the table, and rank 1's raises too,
    naming rank 0, instead of carrying on into a collective rank 0 never reaches."""
    module = _sharded(rank, world, ("table", "table", "table"), OPT)
    batch = local_part(global_batch(world, seed=7), rank, world)
    if rank == 1:
        batch = _with_bad_ids(batch, {2: 10**6})  # table 2 lives on rank 0
    message = _raise_message(module, batch)
    expected = "t2[" if rank == 0 else "flagged by the tables of rank(s) [0]"
    assert expected in message, (rank, message)


def test_bad_input_one_rank_flags_raises_on_every_rank():
    run_on_ranks(_flag_on_every_rank, 2)


def test_ids_past_int32_or_negative_are_flagged_by_their_owner():
    run_on_ranks(_flag_ids_past_int32, 2)
