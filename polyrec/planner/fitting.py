"""Whether and where the tables fit a fleet at a batch size: the shards placed by ``partition`` and checked
by the estimator, through storage fallbacks in order of preference; and the probes built on that check
(the smallest fleet, the largest batch).

Tried in order until the tables fit: in HBM, for each optimizer of ``constraints.optimizers`` in turn,
the first precision, then lower precision for the largest tables one step at a time
(``constraints.weight_dtypes``); then, where allowed, for each optimizer in turn, host memory with an HBM
cache for the fewest largest tables, in the lowest precision, and each table (the smallest first) back in
the first precision where it still fits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from polyrec.planner.enumerate import STRATEGIES, TableSplit, strategy_splits
from polyrec.planner.estimate import Estimator
from polyrec.planner.partition import Placement, RankFits, Storage, partition, size_caches
from polyrec.planner.types import DeviceGroup, Fleet, ModelSpec, PlanConstraints

#: Batch sizes per GPU the planner tries when none is fixed (powers of four, to keep planning under
#: 2 s; DLRM training runs 1K-64K per GPU: MLPerf's reference uses a global batch of 65536).
BATCH_CHOICES: tuple[int, ...] = (1024, 4096, 16384, 65536, 262144)
#: Fleet sizes tried when looking for the smallest fleet that fits: devices per host, then hosts.
PER_HOST_CHOICES: tuple[int, ...] = (1, 2, 4, 8)
HOST_CHOICES: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
#: The largest fleet tried (``smallest_fleet``): hosts of the most devices, the most hosts.
MAX_FLEET_GPUS = PER_HOST_CHOICES[-1] * HOST_CHOICES[-1]


def placement(model: ModelSpec, splits: list[TableSplit], storage: dict[str, Storage], est: Estimator,
              batch: int, rank_fits: RankFits | None = None) -> Placement | None:
    """The shards placed where ``rank_fits`` accepts them (by default ``_rank_fits``: each rank's peak as the
    estimator prices it), host-cached tables given HBM caches from what the estimator leaves free on each rank
    with the caches empty; None where they find no place (the estimator's check of the result is ``_place``'s)."""
    speeds = [est.ceilings[d].copy_bandwidth.value for d in est.rank_devices]
    placed = partition(model, splits, storage, speeds, batch * est.fleet.world_size,
                       rank_fits or _rank_fits(est, batch))
    if placed is None:
        return None
    if any(tp.memory == "host_cached" for tp in placed.tables):
        free = [m.capacity - m.reserve - m.used for m in est.memory(placed.tables, batch)]
        if not size_caches(model, placed, [used + left for used, left in zip(placed.used, free)]):
            return None
    return placed


def _rank_fits(est: Estimator, batch: int) -> RankFits:
    """Whether a rank's shards fit its HBM at ``batch`` per GPU: its peak (``Estimator.rank_memory``: the shards,
    the activations and TBE buffers of the lookups they serve, the dense layers) and the reserve within its
    capacity (``DeviceMemory.fits``). Host-cached shards count without a cache (``size_caches`` sizes them
    after)."""
    return lambda rank, loads: est.rank_memory(rank, loads, batch).fits


def _place(model: ModelSpec, splits: list[TableSplit], storage: dict[str, Storage], est: Estimator,
           batch: int) -> Placement | None:
    """``placement``, or None where the estimator finds a rank's HBM or a host's memory short (so ``fits`` and
    ``propose.candidates`` agree)."""
    placed = placement(model, splits, storage, est, batch)
    return placed if placed is not None and est.memory_fits(est.memory(placed.tables, batch)) else None


def fit(model: ModelSpec, splits: list[TableSplit], est: Estimator, batch: int,
        c: PlanConstraints) -> tuple[Placement, tuple[int, int, int]] | None:
    """Place the tables with the fewest fallbacks (see the module docstring): in HBM with each optimizer in
    turn, then with host caches, each optimizer in turn."""
    by_size = sorted(model.tables, key=lambda t: (-t.rows * t.dim, t.name))
    for opt_index, optimizer in enumerate(c.optimizers):
        fitted = _fit_in_hbm(model, splits, est, batch, c, optimizer, by_size)
        if fitted is not None:
            return fitted[0], (0, opt_index, int(fitted[1]))
    if not c.allow_host_cache:
        return None
    for opt_index, optimizer in enumerate(c.optimizers):
        fitted = _fit_host_cached(model, splits, est, batch, c, optimizer, by_size)
        if fitted is not None:
            return fitted[0], (1, opt_index, int(fitted[1]))
    return None


def _storage(model: ModelSpec, c: PlanConstraints, optimizer: str, dtype_index: dict[str, int],
             cached: set[str]) -> dict[str, Storage]:
    return {t.name: Storage(weight_dtype=c.weight_dtypes[dtype_index[t.name]], optimizer=optimizer,
                            memory="host_cached" if t.name in cached else "hbm") for t in model.tables}


def _fit_in_hbm(model: ModelSpec, splits: list[TableSplit], est: Estimator, batch: int, c: PlanConstraints,
                optimizer: str, by_size: list) -> tuple[Placement, bool] | None:
    """Every table in HBM: in the first weight precision, else with the largest tables lowered one step at a
    time; (the placement, whether any table was lowered)."""
    dtype_index = {t.name: 0 for t in model.tables}
    while True:
        placed = _place(model, splits, _storage(model, c, optimizer, dtype_index, set()), est, batch)
        if placed is not None:
            return placed, any(dtype_index.values())
        nxt = next((t for t in by_size if dtype_index[t.name] < len(c.weight_dtypes) - 1), None)
        if nxt is None:
            return None
        dtype_index[nxt.name] += 1


def _fit_host_cached(model: ModelSpec, splits: list[TableSplit], est: Estimator, batch: int, c: PlanConstraints,
                     optimizer: str, by_size: list) -> tuple[Placement, bool] | None:
    """Host memory with an HBM cache for the fewest largest tables that fit in the lowest precision; then each
    table, the smallest first, back in the first precision where that still fits; (the placement, whether
    any table stayed lowered)."""
    dtype_index = {t.name: len(c.weight_dtypes) - 1 for t in model.tables}
    cached: set[str] = set()
    placed = None
    for t in by_size:
        cached.add(t.name)
        placed = _place(model, splits, _storage(model, c, optimizer, dtype_index, cached), est, batch)
        if placed is not None:
            break
    if placed is None:
        return None
    for t in reversed(by_size):
        if dtype_index[t.name] == 0:  # one weight dtype allowed: nothing to raise
            continue
        lowered, dtype_index[t.name] = dtype_index[t.name], 0
        again = _place(model, splits, _storage(model, c, optimizer, dtype_index, cached), est, batch)
        if again is None:
            dtype_index[t.name] = lowered
        else:
            placed = again
    return placed, any(dtype_index.values())


def at_level(c: PlanConstraints, fallbacks: tuple[int, int, int]) -> PlanConstraints:
    """``c`` allowing no later fallback than ``fallbacks`` (``fit``'s (host caches, optimizer index, lowered
    rows)): host caches only where it has them, the optimizers up to its, the lower precisions where it lowers."""
    host, optimizer, lowered = fallbacks
    return dataclasses.replace(c, allow_host_cache=c.allow_host_cache and bool(host),
                               optimizers=c.optimizers[:optimizer + 1],
                               weight_dtypes=c.weight_dtypes if lowered else c.weight_dtypes[:1])


def bisect_largest(holds: Callable[[int], bool], holding: int, failing: int) -> int:
    """The largest batch below ``failing`` at which ``holds``, bisecting between ``holding`` (where it holds) and
    ``failing`` (where it does not)."""
    while failing - holding > 1:
        middle = (holding + failing) // 2
        if holds(middle):
            holding = middle
        else:
            failing = middle
    return holding


def batches(c: PlanConstraints) -> list[int]:
    """The fixed batch, else ``BATCH_CHOICES`` up to the largest allowed, and that largest itself (``propose``
    adds the largest batch below the first of these that drops to a later fallback, ``bisect_largest``)."""
    if c.batch_per_gpu is not None:
        return [c.batch_per_gpu]
    return sorted({b for b in BATCH_CHOICES if b <= c.max_batch_per_gpu} | {c.max_batch_per_gpu})


def fits(model: ModelSpec, fleet: Fleet, c: PlanConstraints) -> bool:
    """Whether any plan fits (every rank's HBM and every host's memory, as ``propose.candidates`` checks them), at the
    smallest batch only (fast)."""
    est = Estimator(model, fleet, dense_dtype=c.dense_dtype, dense_optimizer=c.dense_optimizer, overlap=c.overlap)
    batch = min(batches(c))
    for strategy in STRATEGIES:
        splits = strategy_splits(model, strategy, fleet.world_size, c.shardings)
        if splits is not None and fit(model, splits, est, batch, c) is not None:
            return True
    return False


def smallest_fleet(model: ModelSpec, device: str, c: PlanConstraints, *,
                   host_memory_bytes: int | None = None) -> Fleet | None:
    """The fewest devices of one kind (one host of 1-8, then hosts of 8) on which the model fits, on hosts of
    ``host_memory_bytes`` each (``Fleet.host_memory_bytes``)."""
    group = (DeviceGroup(device=device, count=PER_HOST_CHOICES[-1]),)
    options = [Fleet(groups=(DeviceGroup(device=device, count=n),), host_memory_bytes=host_memory_bytes)
               for n in PER_HOST_CHOICES]
    options += [Fleet(groups=group, hosts=h, host_memory_bytes=host_memory_bytes) for h in HOST_CHOICES]
    return next((f for f in options if fits(model, f, c)), None)


def largest_batch(model: ModelSpec, fleet: Fleet, c: PlanConstraints, batch: int) -> int:
    """The largest batch per GPU below ``batch`` (which does not fit) at which the model fits; 0 where not even
    one sample does. Bisection, each probe as ``fits``."""
    if not fits(model, fleet, dataclasses.replace(c, batch_per_gpu=1)):
        return 0
    return bisect_largest(lambda b: fits(model, fleet, dataclasses.replace(c, batch_per_gpu=b)), 1, batch)
