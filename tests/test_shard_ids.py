"""benchmarks/shard_ids.py: the ids and distinct rows each rank's shards receive, counted."""

from __future__ import annotations

import torch

from benchmark_util import load_benchmark
from polyrec.models import preset
from polyrec.runtime.shards import TableSharding, make_shards


def test_counts_split_by_shard_and_add_up_to_the_batch():
    shard_ids = load_benchmark("shard_ids")
    config = preset("dcnv2-small")
    tables = len(config.table_rows)
    batch, world = 64, 2
    shardings = [TableSharding(kind="row", ranks=(0, 1))] + [TableSharding(kind="table", ranks=(t % 2,))
                                                              for t in range(1, tables)]
    dims = [config.embedding_dim] * tables
    counts = shard_ids.ids_by_rank(config, make_shards(config.table_rows, dims, shardings, world), world, batch,
                                   device="cpu")
    ids = world * batch * sum(config.multi_hot)
    assert sum(c["ids"] for c in counts) == ids  # a row split sends each id to exactly one shard
    assert [c["shards"] for c in counts] == [1 + len(range(2, tables, 2)), 1 + len(range(1, tables, 2))]
    source = shard_ids.SyntheticSource(config, batch_size=world * batch, seed=0, device="cpu")
    per_table = torch.split(source.batch(shard_ids.TRAIN_STREAM, 0).values, source.feature_sizes)
    distinct = sum(torch.unique(v).numel() for v in per_table)
    assert sum(c["unique_rows"] for c in counts) == distinct  # row ranges do not overlap
    assert all(0 < c["unique_rows"] <= c["ids"] for c in counts)
    column = [TableSharding(kind="column", ranks=(0, 1)) for _ in range(tables)]
    both = shard_ids.ids_by_rank(config, make_shards(config.table_rows, dims, column, world), world, batch,
                                 device="cpu")
    assert both[0]["ids"] == both[1]["ids"] == ids  # column shards each see every id of their table
