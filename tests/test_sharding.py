"""Sharded embeddings over 2 gloo processes equal one process on the whole batch.

The local module here is a test double (dense per-shard weights pooled with torch ops) so the data
movement is checked on its own; test_sharding_tbe.py runs the same with polyrec's fused TBE.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import pytest
import torch
from torch import nn

from distributed_util import run_on_ranks
from polyrec.kernels.jagged import JaggedBatch
from polyrec.runtime.peer_exchange import _local_peers_reachable, copy_engine_exchange
from polyrec.runtime.sharding import ShardedEmbedding
from polyrec.runtime.shards import Shard, TableSharding, make_shards

ROWS = (50, 37, 64)
DIMS = (8, 4, 8)
FEATURE_TO_TABLE = (0, 1, 2, 0)  # feature 3 shares table 0
B = 5  # local batch per rank


class PooledTablesDouble(nn.Module):
    """Test double: one dense weight per table, sum-pooled with index_add (differentiable)."""

    def __init__(self, weights: list[torch.Tensor], feature_to_table: list[int]):
        super().__init__()
        self.weights = nn.ParameterList(nn.Parameter(w.clone()) for w in weights)
        self.feature_to_table = feature_to_table

    def forward(self, batch: JaggedBatch) -> torch.Tensor:
        b = batch.batch_size
        outs = []
        for f, t in enumerate(self.feature_to_table):
            lengths = batch.offsets[f * b + 1:(f + 1) * b + 1] - batch.offsets[f * b:(f + 1) * b]
            ids = batch.values[int(batch.offsets[f * b]):int(batch.offsets[(f + 1) * b])]
            rows = self.weights[t][ids]
            if batch.weights is not None:
                rows = rows * batch.weights[int(batch.offsets[f * b]):int(batch.offsets[(f + 1) * b])][:, None]
            bag = torch.repeat_interleave(torch.arange(b), lengths)
            outs.append(rows.new_zeros(b, rows.shape[1]).index_add(0, bag, rows))
        return torch.cat(outs, dim=1)


def full_weights(seed: int = 7) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(r, d, generator=gen, dtype=torch.float64) for r, d in zip(ROWS, DIMS)]


def _row_edges(rows: int, parts: int) -> list[int]:
    """The first and last row of each of ``parts`` row shards of a table (make_shards' ranges)."""
    shards = make_shards((rows,), (1,), [TableSharding(kind="row", ranks=tuple(range(parts)))], parts)
    return sorted({x for s in shards for x in (s.rows[0], s.rows[1] - 1) if s.num_rows})


def global_batch(world: int, seed: int = 3, weighted: bool = False, edges: bool = False,
                 row_parts: int | None = None) -> JaggedBatch:
    """A batch of world*B samples with empty bags, duplicates and a weight per id. ``edges``: every
    boundary of ``row_parts`` (default ``world``) row shards of every table in the bags of sample 2,
    and feature 1's bags all empty."""
    gen = torch.Generator().manual_seed(seed)
    n = world * B
    lengths = torch.randint(0, 4, (len(FEATURE_TO_TABLE), n), generator=gen)
    lengths[:, 1] = 0  # an empty bag in every feature
    values = [torch.randint(0, ROWS[t], (int(lengths[f].sum()),), generator=gen)
              for f, t in enumerate(FEATURE_TO_TABLE)]
    if edges:
        lengths[1] = 0
        values[1] = values[1][:0]
        for f, t in enumerate(FEATURE_TO_TABLE):
            if f != 1:
                at = int(lengths[f, :2].sum())  # where sample 2's bag starts
                extra = torch.tensor(_row_edges(ROWS[t], row_parts or world))
                values[f] = torch.cat([values[f][:at], extra, values[f][at:]])
                lengths[f, 2] += extra.numel()
    values = torch.cat(values)
    weights = torch.rand(values.numel(), generator=gen, dtype=torch.float64) if weighted else None
    return JaggedBatch.from_lengths(values=values, lengths=lengths.reshape(-1), batch_size=n,
                                    num_features=len(FEATURE_TO_TABLE), weights=weights)


def local_part(batch: JaggedBatch, rank: int, world: int) -> JaggedBatch:
    """The samples [rank*B, (rank+1)*B) of every feature."""
    n, f = batch.batch_size, batch.num_features
    lengths = batch.lengths().view(f, n)[:, rank * B:(rank + 1) * B]
    pick = torch.cat([torch.arange(int(batch.offsets[i * n + rank * B]), int(batch.offsets[i * n + (rank + 1) * B]))
                      for i in range(f)])
    weights = None if batch.weights is None else batch.weights[pick]
    return JaggedBatch.from_lengths(values=batch.values[pick], lengths=lengths.reshape(-1), batch_size=B,
                                    num_features=f, weights=weights)


def double_factory(weights: list[torch.Tensor]):
    def build(shards: list[Shard], feature_to_shard: list[int]) -> nn.Module:
        pieces = [weights[s.table][s.rows[0]:s.rows[1], s.cols[0]:s.cols[1]] for s in shards]
        return PooledTablesDouble(pieces, feature_to_shard)
    return build


def _plans(kinds: tuple[str, ...], world: int) -> list[TableSharding]:
    """One sharding per table: table-wise round-robin, row- and column-wise over every rank."""
    return [TableSharding(kind=k, ranks=(t % world,) if k == "table" else tuple(range(world)))
            for t, k in enumerate(kinds)]


def _check_sharded_matches_single(rank: int, world: int, shardings: list[TableSharding], weighted: bool,
                                  edges: bool, row_parts: int | None = None, peer_exchange=None) -> None:
    torch.manual_seed(0)
    weights = full_weights()
    batch = global_batch(world, weighted=weighted, edges=edges, row_parts=row_parts)
    reference = PooledTablesDouble(weights, list(FEATURE_TO_TABLE))
    ref_out = reference(batch)  # [world*B, sum D]
    grad_out = torch.randn(ref_out.shape, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    (ref_out * grad_out).sum().div(world * B).backward()  # loss = mean over the global batch

    sharded = ShardedEmbedding(rows=ROWS, dims=DIMS, shardings=shardings, feature_to_table=FEATURE_TO_TABLE,
                               local_factory=double_factory(weights), rank=rank, world_size=world,
                               peer_exchange=peer_exchange)
    out = sharded(local_part(batch, rank, world))
    torch.testing.assert_close(out, ref_out[rank * B:(rank + 1) * B], rtol=1e-12, atol=1e-12)
    (out * grad_out[rank * B:(rank + 1) * B]).sum().div(B).backward()  # loss = mean over the local batch
    for shard, param in zip(sharded.local_shards, sharded.local.weights):
        expected = reference.weights[shard.table].grad[shard.rows[0]:shard.rows[1], shard.cols[0]:shard.cols[1]]
        torch.testing.assert_close(param.grad, expected, rtol=1e-12, atol=1e-12)


KIND_MIXES = [(("table", "table", "table"), False, False), (("row", "row", "row"), False, False),
              (("column", "column", "column"), False, False), (("row", "table", "column"), False, False),
              (("row", "column", "table"), True, False), (("row", "row", "column"), True, True),
              (("table", "column", "row"), False, True)]


def _check_all_mixes(rank: int, world: int) -> None:
    for kinds, weighted, edges in KIND_MIXES:  # one process pair for all mixes: spawning costs seconds
        _check_sharded_matches_single(rank, world, _plans(kinds, world), weighted, edges)


def test_sharded_forward_and_gradients_match_single_process():
    run_on_ranks(_check_all_mixes, 2)


class PushesOverGloo:
    """``CopyEngineExchange`` on the CPU: every rank's blocks land in each destination's buffer of
    ``capacity`` elements (NaN where nothing lands) at the offset ``at_dest`` gives, as the copy engines
    would put them; what this rank returns is the start of its own buffer."""

    def start(self, src, send, recv, *, at_dest, capacity, direction):
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        blocks = list(torch.split(src, list(send)))
        landing: list = [None] * world
        torch.distributed.all_gather_object(landing, [(blocks[d].clone(), at_dest[d]) for d in range(world)])
        buffer = src.new_full((capacity,), float("nan"))
        for block, offset in (landing[s][rank] for s in range(world)):
            assert offset + block.numel() <= capacity, f"{direction}: a block lands past the buffer's end"
            buffer[offset:offset + block.numel()] = block
        return mock.Mock(wait=lambda: True), buffer[:sum(recv)]


def _check_pushed_blocks_land_in_place(rank: int, world: int) -> None:
    # the 8- and 4-wide tables do not split into 3 equal column shards: no column-wise mix on 3 ranks
    mixes = KIND_MIXES if world == 2 else [m for m in KIND_MIXES if "column" not in m[0]]
    for kinds, weighted, edges in mixes:
        _check_sharded_matches_single(rank, world, _plans(kinds, world), weighted, edges,
                                      peer_exchange=PushesOverGloo())


@pytest.mark.parametrize("world", [2, 3])
def test_exchanges_pushed_into_peer_buffers_match_single_process(world):
    """The copy-engine exchange's arithmetic (where each rank's block lands in each peer's buffer, and
    how large every buffer is) gives the single-process outputs and gradients, nothing left unwritten."""
    run_on_ranks(_check_pushed_blocks_land_in_place, world)


#: World of one rank: whole tables of each kind (the batch passes through), and tables split into
#: several row or column shards on the one rank (routed and placed locally).
ONE_RANK_PLANS = {
    "whole": [TableSharding(kind="row", ranks=(0,)), TableSharding(kind="column", ranks=(0,)),
              TableSharding(kind="table", ranks=(0,))],
    "split rows": [TableSharding(kind="row", ranks=(0, 0, 0)), TableSharding(kind="row", ranks=(0,)),
                   TableSharding(kind="table", ranks=(0,))],
    "split rows and columns": [TableSharding(kind="row", ranks=(0, 0, 0)), TableSharding(kind="table", ranks=(0,)),
                               TableSharding(kind="column", ranks=(0, 0))],
}


@pytest.mark.parametrize("plan", ONE_RANK_PLANS)
def test_one_rank_matches_single_process_without_a_process_group(plan):
    """No process group exists here, so any collective would raise."""
    assert not torch.distributed.is_initialized()
    _check_sharded_matches_single(0, 1, ONE_RANK_PLANS[plan], weighted=True, edges=True, row_parts=3)


def test_one_rank_hands_the_batch_and_the_pooled_rows_through():
    """Whole tables on one rank: the local tables read the input batch itself, and their output is
    the result (no copy on either side)."""
    weights = full_weights()
    sharded = ShardedEmbedding(rows=ROWS, dims=DIMS, shardings=ONE_RANK_PLANS["whole"],
                               feature_to_table=FEATURE_TO_TABLE, local_factory=double_factory(weights),
                               rank=0, world_size=1)
    seen = {}
    sharded.local.register_forward_hook(lambda module, args, out: seen.update(batch=args[0], out=out))
    batch = global_batch(1, weighted=True)
    out = sharded(batch)
    assert seen["batch"] is batch and out is seen["out"]


def test_make_shards_splits_rows_and_columns():
    shards = make_shards((10, 7), (8, 4), [TableSharding(kind="row", ranks=(0, 1, 2)),
                                           TableSharding(kind="column", ranks=(1, 0))], 3)
    assert [s.rows for s in shards[:3]] == [(0, 4), (4, 8), (8, 10)]
    assert [s.cols for s in shards[3:]] == [(0, 2), (2, 4)] and [s.rank for s in shards[3:]] == [1, 0]


@pytest.mark.parametrize("plan, message", [
    (TableSharding(kind="diagonal", ranks=(0,)), "sharding kind"),
    (TableSharding(kind="table", ranks=(0, 1)), "exactly one rank"),
    (TableSharding(kind="row", ranks=(0, 5)), "within"),
    (TableSharding(kind="column", ranks=(0, 1, 2)), "does not split"),
])
def test_bad_sharding_is_named(plan, message):
    with pytest.raises(ValueError, match=message):
        make_shards((10,), (8,), [plan], 3)


def _check_started_backward(rank: int, world: int) -> None:
    """``start_backward`` sends the gradient before the output's backward runs; that backward then
    takes the exchange (no second all-to-all) and the gradients equal those of the plain backward. A
    gradient other than the one the exchange started from is refused."""
    weights = full_weights()
    shardings = _plans(("row", "table", "column"), world)
    batch = local_part(global_batch(world, weighted=True), rank, world)
    wide = torch.randn(B, sum(DIMS[t] for t in FEATURE_TO_TABLE) + 3, generator=torch.Generator().manual_seed(5),
                       dtype=torch.float64)
    grad = wide[:, 3:]  # [B, out_dim], rows strided as the cross network's input gradient is
    grads = []
    for start_early in (False, True):
        sharded = ShardedEmbedding(rows=ROWS, dims=DIMS, shardings=shardings, feature_to_table=FEATURE_TO_TABLE,
                                   local_factory=double_factory(weights), rank=rank, world_size=world)
        out = sharded(batch)
        if start_early:
            sharded.start_backward(grad)
        no_second_exchange = mock.patch.object(torch.distributed, "all_to_all_single",
                                               side_effect=AssertionError("a second gradient exchange"))
        with no_second_exchange if start_early else contextlib.nullcontext():
            out.backward(grad)
        grads.append([p.grad.clone() for p in sharded.local.weights])
    for plain, early in zip(*grads):
        assert torch.equal(plain, early)
    out = sharded(batch)
    sharded.start_backward(grad)
    with pytest.raises(RuntimeError, match="another gradient than the one its all-to-all was started from"):
        out.backward(grad.clone())


def test_a_started_gradient_exchange_is_taken_by_the_backward():
    run_on_ranks(_check_started_backward, 2)


def _check_no_copy_engines_on_cpus(rank: int, world: int) -> None:
    assert copy_engine_exchange(torch.distributed.group.WORLD, torch.device("cpu"), 60.0) is None
    assert copy_engine_exchange(None, torch.device("cuda", rank), 60.0) is None
    # every rank answers after the same gather (no GPU here: no peer to map), none hangs
    assert not _local_peers_reachable(torch.distributed.group.WORLD, torch.device("cuda", rank))


def test_the_pooled_exchanges_stay_collectives_without_peer_gpus():
    """gloo ranks on CPUs (and no group) get ``all_to_all_single``: nothing to map, nothing raised."""
    run_on_ranks(_check_no_copy_engines_on_cpus, 2)
