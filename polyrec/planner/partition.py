"""Place table shards on ranks where they fit, balancing the embedding work.

Greedy, in the spirit of TorchRec's greedy partitioner: shards whose ranks are fixed (row-wise over
all ranks) first, then the rest in decreasing order of cost, each on the rank that would finish its
embedding work soonest among those with room. Cost is the bytes the shard moves per step over the
rank's copy bandwidth (a proxy; the estimator prices the result exactly). Room is the caller's test of a
rank with the shard added (``RankFits``): the planner's is the estimator's own peak of that rank, whose
activations and TBE buffers grow with the lookups its shards serve (a whole table serves the global batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from polyrec.planner import memory as mem
from polyrec.planner.enumerate import TableSplit
from polyrec.planner.shard_cost import ShardLoad, shard_load
from polyrec.planner.types import WEIGHT_BYTES, ModelSpec, TablePlan


@dataclass(frozen=True, kw_only=True, slots=True)
class Storage:
    """How a table is stored: weight precision, optimizer state, memory kind."""

    weight_dtype: str
    optimizer: str
    memory: str = "hbm"


@dataclass(kw_only=True, slots=True)
class Placement:
    """A partition's result: table plans and the HBM bytes it put on each rank."""

    tables: list[TablePlan]
    used: list[int]


def _shard_cost(rows_share: float, dim: int, pooling: float, global_batch: int, storage: Storage) -> float:
    """Bytes one shard moves per step: rows read forward, read + written backward, state, outputs."""
    lookups = global_batch * pooling * rows_share
    row = dim * WEIGHT_BYTES[storage.weight_dtype]
    state = mem.state_bytes(1, dim, storage.optimizer)
    return lookups * (3 * row + 2 * state) + 2 * 4 * global_batch * dim


def _hbm_bytes(rows: int, dim: int, storage: Storage) -> int:
    w, s, _ = mem.shard_device_bytes(rows, dim, weight_dtype=storage.weight_dtype, optimizer=storage.optimizer,
                                     memory=storage.memory, cache_rows=0)
    return w + s


#: Whether shards fit a rank: (rank, every shard placed on it) -> True where they do.
RankFits = Callable[[int, list[ShardLoad]], bool]


def partition(model: ModelSpec, splits: Sequence[TableSplit], storage: dict[str, Storage], speeds: Sequence[float],
              global_batch: int, rank_fits: RankFits) -> Placement | None:
    """Assign every shard a rank (one rank per entry of ``speeds``); None when some shard fits on no rank.
    A shard goes only where ``rank_fits`` accepts the rank's shards with it, so the last shard placed on each
    rank was checked with everything on it."""
    world = len(speeds)
    loads: list[list[ShardLoad]] = [[] for _ in range(world)]
    used = [0] * world
    busy = [0.0] * world
    ranks: dict[str, list[int]] = {}
    pending = []
    for split in splits:
        t, st = model.table(split.table), storage[split.table]
        shapes = mem.shard_shapes(t.rows, t.dim, split.sharding, split.shards)
        if split.sharding == "row_wise":  # fixed: shard i on rank i
            for rank, (rows, dim) in enumerate(shapes):
                loads[rank].append(_load(model, split, st, rank, (rows, dim), global_batch))
                used[rank] += _hbm_bytes(rows, dim, st)
                busy[rank] += _shard_cost(rows / t.rows, dim, t.pooling, global_batch, st) / speeds[rank]
            ranks[t.name] = list(range(split.shards))
            continue
        cost = _shard_cost(1.0, shapes[0][1], t.pooling, global_batch, st)
        pending.append((cost, split, shapes[0]))
    if not all(rank_fits(rank, loads[rank]) for rank in range(world)):
        return None
    for cost, split, shape in sorted(pending, key=lambda p: (-p[0], p[1].table)):
        st = storage[split.table]
        chosen: list[int] = []
        for _ in range(split.shards):
            preferred = sorted((r for r in range(world) if r not in chosen),
                               key=lambda r: (busy[r] + cost / speeds[r], used[r], r))
            with_it = ((r, loads[r] + [_load(model, split, st, r, shape, global_batch)]) for r in preferred)
            best, placed = next(((r, p) for r, p in with_it if rank_fits(r, p)), (None, None))
            if best is None:
                return None
            loads[best] = placed
            used[best] += _hbm_bytes(*shape, st)
            busy[best] += cost / speeds[best]
            chosen.append(best)
        ranks[split.table] = chosen
    tables = []
    for split in splits:
        st = storage[split.table]
        tables.append(TablePlan(table=split.table, sharding=split.sharding, ranks=tuple(ranks[split.table]),
                                memory=st.memory, weight_dtype=st.weight_dtype, optimizer=st.optimizer))
    return Placement(tables=tables, used=used)


def within_budgets(budgets: Sequence[int]) -> RankFits:
    """A ``RankFits`` that holds a rank's table shards (rows and state in HBM) to ``budgets[rank]`` bytes."""
    return lambda rank, loads: sum(_hbm_bytes(s.rows, s.dim, _storage_of(s)) for s in loads) <= budgets[rank]


def _storage_of(s: ShardLoad) -> Storage:
    return Storage(weight_dtype=s.weight_dtype, optimizer=s.optimizer, memory=s.memory)


def _load(model: ModelSpec, split: TableSplit, st: Storage, rank: int, shape: tuple[int, int],
          global_batch: int) -> ShardLoad:
    """The shard of ``split`` of ``shape`` (rows, dim) on ``rank``, stored as ``st``, as the estimator prices it."""
    tp = TablePlan(table=split.table, sharding=split.sharding, ranks=(), memory=st.memory,
                   weight_dtype=st.weight_dtype, optimizer=st.optimizer)
    return shard_load(model, tp, rank=rank, rows=shape[0], dim=shape[1], global_batch=global_batch)


def size_caches(model: ModelSpec, placement: Placement, budgets: Sequence[int]) -> bool:
    """Give host-cached tables HBM caches from each rank's free budget, shared in proportion to
    lookups; False when a host-cached shard would get no cache at all."""
    free = [b - u for b, u in zip(budgets, placement.used)]
    demand: dict[int, float] = {}
    for tp in placement.tables:
        if tp.memory == "host_cached":
            for rank in tp.ranks:
                demand[rank] = demand.get(rank, 0.0) + model.table(tp.table).pooling
    for tp in placement.tables:
        if tp.memory != "host_cached":
            continue
        t = model.table(tp.table)
        shapes = mem.shard_shapes(t.rows, t.dim, tp.sharding, len(tp.ranks))
        rows_each = []
        for rank, (rows, dim) in zip(tp.ranks, shapes):
            share = free[rank] * t.pooling / demand[rank]
            rows_each.append(min(rows, int(share // (dim * WEIGHT_BYTES[tp.weight_dtype] + mem.CACHE_META_BYTES_PER_ROW))))
        tp.cache_rows = min(rows_each)
        if tp.cache_rows < 1:
            return False
    return True
