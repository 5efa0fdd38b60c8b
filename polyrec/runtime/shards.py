"""Shards of embedding tables: how each table is cut (table-, row- or column-wise) and over which ranks.

``make_shards`` turns one ``TableSharding`` per table into its ``Shard`` pieces (rows split in
contiguous ranges, columns in equal parts); ``shard_features`` says, per rank, which feature's lookups
each of its shards serves and where in the pooled output they land (``ShardFeature``). Host code, no
collective: ``polyrec.runtime.sharding.ShardedEmbedding`` builds its local tables and input routing
from them, and the planner's memory model (``polyrec.planner.memory.shard_shapes``) cuts shards the
same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SHARDING_KINDS = ("table", "row", "column")


@dataclass(frozen=True, kw_only=True, slots=True)
class TableSharding:
    """How one table is split: ``kind`` and the ranks of its shards, in shard order."""

    kind: str  # "table" (one rank), "row" (row ranges) or "column" (column ranges)
    ranks: tuple[int, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Shard:
    """One piece of one table, on one rank."""

    table: int  # index of the table
    kind: str  # the table's sharding kind
    rank: int
    rows: tuple[int, int]  # [start, end) of the table's rows held here
    cols: tuple[int, int]  # [start, end) of the table's columns held here

    @property
    def dim(self) -> int:
        return self.cols[1] - self.cols[0]

    @property
    def num_rows(self) -> int:
        return self.rows[1] - self.rows[0]


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardFeature:
    """A feature as one shard sees it: the lookups of ``feature`` served by ``shard``."""

    feature: int
    shard: Shard
    out_cols: tuple[int, int]  # [start, end) of the output columns this piece lands in


def _split(total: int, parts: int, quantum: int = 1) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering [0, total), sizes multiples of ``quantum`` but the last."""
    step = math.ceil(total / parts / quantum) * quantum
    return [(min(i * step, total), min((i + 1) * step, total)) for i in range(parts)]


def row_split_fills(total: int, parts: int) -> bool:
    """Whether ``_split`` gives every one of ``parts`` ranges rows (9 rows over 4 ranks: 3, 3, 3, 0)."""
    return all(lo < hi for lo, hi in _split(total, parts))


def make_shards(rows: Sequence[int], dims: Sequence[int], shardings: Sequence[TableSharding],
                world_size: int) -> list[Shard]:
    """The shards of every table, table by table, shard order within a table."""
    if not (len(rows) == len(dims) == len(shardings)):
        raise ValueError(f"rows, dims and shardings differ in length: {len(rows)}, {len(dims)}, {len(shardings)}")
    shards = []
    for t, (n_rows, dim, plan) in enumerate(zip(rows, dims, shardings)):
        if plan.kind not in SHARDING_KINDS:
            raise ValueError(f"table {t}: sharding kind must be one of {SHARDING_KINDS}, got {plan.kind!r}")
        if not plan.ranks or any(not 0 <= r < world_size for r in plan.ranks):
            raise ValueError(f"table {t}: ranks {plan.ranks} must be non-empty and within [0, {world_size})")
        if plan.kind == "table" and len(plan.ranks) != 1:
            raise ValueError(f"table {t}: table-wise sharding takes exactly one rank, got {plan.ranks}")
        n = len(plan.ranks)
        if plan.kind == "column" and dim % n:
            raise ValueError(f"table {t}: dim {dim} does not split into {n} equal column shards")
        row_ranges = _split(n_rows, n) if plan.kind == "row" else [(0, n_rows)] * n
        col_ranges = _split(dim, n) if plan.kind == "column" else [(0, dim)] * n
        shards += [Shard(table=t, kind=plan.kind, rank=r, rows=rr, cols=cc) for r, rr, cc in zip(plan.ranks, row_ranges, col_ranges)]
    return shards


def shard_features(shards: Sequence[Shard], feature_to_table: Sequence[int],
                   dims: Sequence[int]) -> list[list[ShardFeature]]:
    """Per rank, the shard-features it serves, in (feature, shard) order."""
    starts = [0]
    for f in feature_to_table:
        starts.append(starts[-1] + dims[f])
    world = 1 + max(s.rank for s in shards)
    per_rank: list[list[ShardFeature]] = [[] for _ in range(world)]
    for feature, table in enumerate(feature_to_table):
        for shard in (s for s in shards if s.table == table):
            cols = (starts[feature] + shard.cols[0], starts[feature] + shard.cols[1])
            per_rank[shard.rank].append(ShardFeature(feature=feature, shard=shard, out_cols=cols))
    return per_rank
