"""Candidate shardings: for each strategy, how every table is split (before placement on ranks).

A strategy decides per table a sharding and a shard count; ``partition`` then places the shards.
Strategies (TorchRec's planner enumerates per-table options and searches; with tens of tables and
up to hundreds of GPUs, a handful of whole-model strategies covers the good plans at a fraction of
the cost):

- ``table_wise``: every table whole on one rank (least communication, coarse balance);
- ``balanced``: tables with more lookup traffic than a fair share of one rank split by columns into
  just enough shards to bring each under the share (column shards add no output traffic);
- ``row_wise_large``: tables bigger than a fair share of one rank split by rows over all ranks,
  the rest table-wise;
- ``column_wise_large``: the same tables split by columns over up to ``dim / MIN_COLUMN_DIM`` ranks;
- ``row_wise_all``: every table split by rows over all ranks (best balance, most communication).
"""

from __future__ import annotations

from dataclasses import dataclass

from polyrec.planner.memory import shard_shapes, weight_bytes
from polyrec.planner.types import ModelSpec, TableSpec

STRATEGIES: tuple[str, ...] = ("table_wise", "balanced", "row_wise_large", "column_wise_large", "row_wise_all")
#: Narrowest column shard: below 32 fp32 values (128 B) a row read wastes DRAM sectors and TBE lanes
#: (estimate; TorchRec's default column-shard minimum is 32 as well).
MIN_COLUMN_DIM = 32
#: Fewest rows per row-wise shard worth a shard (estimate: below this the shard's fixed costs dominate).
MIN_ROWS_PER_SHARD = 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class TableSplit:
    """How one table is cut: sharding and number of shards (their ranks come from ``partition``)."""

    table: str
    sharding: str  # one of polyrec.planner.types.SHARDINGS
    shards: int


def column_shards(dim: int, world: int) -> int:
    """Most equal column shards of ``dim``, each at least MIN_COLUMN_DIM wide, at most ``world``."""
    best = 1
    for n in range(2, world + 1):
        if dim % n == 0 and dim // n >= MIN_COLUMN_DIM:
            best = n
    return best


def _large(model: ModelSpec, world: int) -> set[str]:
    """Tables whose fp32 weights exceed a fair share (1/world) of all tables' weights."""
    total = sum(weight_bytes(t.rows, t.dim, "fp32") for t in model.tables)
    return {t.name for t in model.tables if world > 1 and weight_bytes(t.rows, t.dim, "fp32") > total / world}


def _traffic(t: TableSpec) -> float:
    """Values a table reads and writes per sample (lookups plus pooled output), a balance proxy."""
    return t.dim * (t.pooling + 1)


def balanced_splits(model: ModelSpec, world: int) -> list[TableSplit]:
    """Column splits that bring each table's traffic under total/world where its dim allows."""
    share = sum(_traffic(t) for t in model.tables) / world
    out = []
    for t in model.tables:
        most = column_shards(t.dim, world)
        n = next((k for k in range(1, most + 1) if t.dim % k == 0 and t.dim // k >= MIN_COLUMN_DIM
                  and _traffic(t) / k <= share), most)
        out.append(TableSplit(table=t.name, sharding="column_wise" if n > 1 else "table_wise", shards=n))
    return out


def _row_shards_full(rows: int, world: int) -> bool:
    """Whether ``rows`` split row-wise over ``world`` ranks give every rank at least MIN_ROWS_PER_SHARD
    rows: ranges of ``ceil(rows / world)`` rows (``memory.shard_shapes``) leave the last ones short, or
    empty, where rows / world is not much above the world (3073 rows over 3 ranks: 1023 in the last)."""
    return world > 1 and min(r for r, _ in shard_shapes(rows, 1, "row_wise", world)) >= MIN_ROWS_PER_SHARD


def _split(t: TableSpec, sharding: str, world: int) -> TableSplit:
    if sharding == "row_wise" and _row_shards_full(t.rows, world):
        return TableSplit(table=t.name, sharding="row_wise", shards=world)
    if sharding == "column_wise" and column_shards(t.dim, world) > 1:
        return TableSplit(table=t.name, sharding="column_wise", shards=column_shards(t.dim, world))
    return TableSplit(table=t.name, sharding="table_wise", shards=1)


def strategy_splits(model: ModelSpec, strategy: str, world: int, allowed: tuple[str, ...]) -> list[TableSplit] | None:
    """The splits of every table under ``strategy``; None when they take a sharding not ``allowed`` or change
    nothing over ``table_wise``."""
    if strategy == "balanced":
        splits = balanced_splits(model, world)
        changed = any(s.sharding != "table_wise" for s in splits)
        return splits if changed and {"column_wise", "table_wise"} <= set(allowed) else None
    large = _large(model, world)
    wanted = {"table_wise": {}, "row_wise_large": {n: "row_wise" for n in large},
              "column_wise_large": {n: "column_wise" for n in large},
              "row_wise_all": {t.name: "row_wise" for t in model.tables}}[strategy]
    if any(s not in allowed for s in wanted.values()) or (strategy != "table_wise" and not wanted):
        return None
    splits = [_split(t, wanted.get(t.name, "table_wise"), world) for t in model.tables]
    if strategy != "table_wise" and all(s.sharding == "table_wise" for s in splits):
        return None
    # a table too small to split (or one GPU) stays whole: not where the user allows no table_wise
    return splits if all(s.sharding in allowed for s in splits) else None
