"""Sharded embeddings at edge shapes (2 gloo processes where the exchange is involved): a sharding that
leaves a rank no feature, the initial range of row shards, and training that equals one process with
tables of fewer rows than ranks, shard-boundary and duplicate ids, a feature empty on one rank and
mixed dims."""

from __future__ import annotations

import math
import os

import pytest
import torch

from distributed_util import run_on_ranks
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.runtime.distributed_embeddings import DistributedEmbeddings
from polyrec.runtime.sharding import ShardedEmbedding
from polyrec.runtime.shards import TableSharding
from test_sharding import double_factory, full_weights

T = TableSharding


@pytest.mark.parametrize("shardings, feature_to_table", [
    ([T(kind="table", ranks=(0,))], (0,)),  # fewer tables than ranks
    ([T(kind="table", ranks=(0,)), T(kind="table", ranks=(1,))], (0, 0)),  # rank 1's table has no feature
])
def test_a_sharding_that_leaves_a_rank_no_feature_raises_on_every_rank(shardings, feature_to_table):
    """Rank 1 was built: its pooled rows (fp32 zeros without a gradient) aborted gloo when the others'
    were fp64 ("Received data size doesn't match"), and with fp32 its peer's backward waited forever for
    a gradient exchange rank 1 never began."""
    rows, dims = (50, 37)[:len(shardings)], (8, 4)[:len(shardings)]
    weights = [w[:, :d] for w, d in zip(full_weights(), dims)]
    for rank in range(2):
        with pytest.raises(ValueError, match=r"rank\(s\) \[1\] of 2 serve no feature"):
            ShardedEmbedding(rows=rows, dims=dims, shardings=shardings, feature_to_table=feature_to_table,
                             local_factory=double_factory(weights), rank=rank, world_size=2)


def test_row_shards_start_in_their_whole_tables_range():
    """One process draws a table of R rows from U(+-sqrt(1/R)); a row shard of R/2 rows was drawn from
    U(+-sqrt(2/R)), sqrt(2) wider, as the TBE sized the range by the shard's rows."""
    rows = (1000, 1000, 1000)
    shardings = [T(kind="row", ranks=(0, 1)), T(kind="column", ranks=(1, 0)), T(kind="table", ranks=(1,))]
    opt = EmbeddingOptimizer(kind="sgd", lr=0.1)
    for rank in range(2):
        emb = DistributedEmbeddings(rows, 4, optimizer=opt, shardings=shardings, rank=rank, world_size=2,
                                    device=torch.device("cpu"), seed=1)
        for shard, view in zip(emb.sharded.local_shards, emb.local.table_weights()):
            bound = math.sqrt(1.0 / rows[shard.table])
            assert 0.99 * bound < float(view.abs().max()) <= bound, (rank, shard)


ROWS = (3, 64, 2, 33)  # the 2-row table split row-wise over 2 ranks: one row each
DIMS = (8, 4, 6, 8)
FEATURE_TO_TABLE = (0, 1, 2, 3, 1)
B, STEPS = 3, 3  # local batch per rank, optimizer steps
#: ids on every row-shard boundary (first and last row of each shard over 2 ranks) of each table
EDGES = {0: [1, 2, 0], 1: [31, 32, 63, 0], 2: [0, 1], 3: [16, 17, 32, 0]}
#: (shardings, optimizer): row-wise Adagrad only without column-wise shards (docs/distributed.md)
CASES = [([T(kind="row", ranks=(0, 1)), T(kind="column", ranks=(1, 0)), T(kind="table", ranks=(1,)),
           T(kind="row", ranks=(1, 0))], EmbeddingOptimizer(kind="adam", lr=0.05)),
         ([T(kind="column", ranks=(0, 1)), T(kind="row", ranks=(0, 1)), T(kind="row", ranks=(1, 0)),
           T(kind="table", ranks=(0,))], EmbeddingOptimizer(kind="adagrad", lr=0.1)),
         ([T(kind="table", ranks=(1,)), T(kind="table", ranks=(1,)), T(kind="table", ranks=(1,)),
           T(kind="row", ranks=(0, 1))], EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.1))]


def _bags(step: int) -> list[list[list[int]]]:
    """[feature][global sample] -> ids: rank 0's sample 1 holds every boundary id, rank 1's sample 1 the
    first of them again (duplicates across ranks); feature 2 is empty on rank 0, feature 4 on rank 1."""
    gen = torch.Generator().manual_seed(50 + step)
    bags = [[torch.randint(0, ROWS[t], (int(torch.randint(0, 4, (1,), generator=gen)),), generator=gen).tolist()
             for _ in range(2 * B)] for t in FEATURE_TO_TABLE]
    for f, t in enumerate(FEATURE_TO_TABLE):
        bags[f][1] += EDGES[t]
        bags[f][B + 1] += EDGES[t][:2]
    for s in range(B):
        bags[2][s], bags[4][B + s] = [], []
    return bags


def _batch(bags: list[list[list[int]]], samples: range) -> JaggedBatch:
    lengths = torch.tensor([len(bags[f][s]) for f in range(len(bags)) for s in samples])
    values = torch.tensor([v for f in range(len(bags)) for s in samples for v in bags[f][s]], dtype=torch.int64)
    return JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=len(samples), num_features=len(bags))


def _train(module: torch.nn.Module, samples: range) -> None:
    gen = torch.Generator().manual_seed(21)
    w, y = torch.randn(sum(DIMS[t] for t in FEATURE_TO_TABLE), generator=gen), torch.randn(2 * B, generator=gen)
    for step in range(STEPS):
        out = module(_batch(_bags(step), samples))
        ((out @ w - y[samples.start:samples.stop]) ** 2).mean().backward()


def _check_edge_training(rank: int, world: int) -> None:
    tables = [TableSpec(name=f"t{i}", rows=r, dim=d) for i, (r, d) in enumerate(zip(ROWS, DIMS))]
    for shardings, opt in CASES:
        full = TableBatchedEmbedding(tables, optimizer=opt, feature_to_table=list(FEATURE_TO_TABLE), seed=5,
                                     deterministic=True)
        start = [w.clone() for w in full.table_weights()]

        def build(shards, feature_to_shard):
            local = TableBatchedEmbedding([TableSpec(name=f"s{i}", rows=s.num_rows, dim=s.dim)
                                           for i, s in enumerate(shards)], optimizer=opt,
                                          feature_to_table=feature_to_shard, deterministic=True)
            with torch.no_grad():
                for view, s in zip(local.table_weights(), shards):
                    view.copy_(start[s.table][s.rows[0]:s.rows[1], s.cols[0]:s.cols[1]])
            return local

        sharded = ShardedEmbedding(rows=ROWS, dims=DIMS, shardings=shardings, feature_to_table=FEATURE_TO_TABLE,
                                   local_factory=build, rank=rank, world_size=world)
        _train(sharded, range(rank * B, (rank + 1) * B))
        _train(full, range(2 * B))
        for shard, view in zip(sharded.local_shards, sharded.local.table_weights()):
            expected = full.table_weights()[shard.table][shard.rows[0]:shard.rows[1], shard.cols[0]:shard.cols[1]]
            torch.testing.assert_close(view, expected, rtol=1e-5, atol=1e-6, msg=f"{opt.kind} {shard}")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="the TBE runs on the CPU only through Triton's interpreter")
def test_sharded_training_at_edge_shapes_matches_one_process():
    run_on_ranks(_check_edge_training, 2)
