"""Why a model fits no plan on a fleet, in words: what runs out (a rank's HBM at the batch, or the tables
over the fleet), by the planner's own check, and what would fit instead (a smaller batch, a larger fleet,
lower precision, other devices).
"""

from __future__ import annotations

import dataclasses

from polyrec.hardware.catalog import catalog
from polyrec.planner import memory as mem
from polyrec.planner.enumerate import STRATEGIES, TableSplit, strategy_splits
from polyrec.planner.estimate import Estimator
from polyrec.planner.fitting import (
    HOST_CHOICES,
    MAX_FLEET_GPUS,
    PER_HOST_CHOICES,
    batches,
    fits,
    largest_batch,
    placement,
    smallest_fleet,
)
from polyrec.planner.partition import Placement, Storage, within_budgets
from polyrec.planner.shard_cost import shard_loads
from polyrec.planner.types import DeviceGroup, DeviceMemory, Fleet, ModelSpec, PlanConstraints


def rank_room(est: Estimator) -> list[int]:
    """HBM bytes each rank has for the embedding shards, activations and workspace: capacity minus reserve
    and the dense parameters."""
    dense = sum(est.dense_bytes)
    return [est.specs[device].hbm_bytes - mem.reserve_bytes(est.specs[device].hbm_bytes) - dense
            for device in est.rank_devices]


def rank_budgets(est: Estimator, batch: int, storage: dict[str, Storage]) -> list[int]:
    """HBM bytes each rank has for embedding shards at ``batch``, the tables stored as ``storage``:
    ``rank_room`` minus ``batch_bytes``."""
    return [room - peak for room, peak in zip(rank_room(est), batch_bytes(est, batch, storage))]


def batch_bytes(est: Estimator, batch: int, storage: dict[str, Storage]) -> list[int]:
    """HBM bytes of each rank's activations and workspace at ``batch``, the tables stored as ``storage``: the
    embedding activations and ``Estimator.backward_peak`` (the peak ``Estimator.rank_memory`` counts) of an
    even share of the embedding work."""
    model = est.model
    cb = mem.DENSE_DTYPE_BYTES[est.dense_dtype]
    modules: dict[tuple[str, str], float] = {}  # lookups per TBE module (weight dtype, optimizer)
    for t in model.tables:
        key = (storage[t.name].weight_dtype, storage[t.name].optimizer)
        modules[key] = modules.get(key, 0.0) + batch * t.pooling
    pooled = batch * sum(t.dim for t in model.tables)
    share = mem.embedding_activation_bytes(
        lookups=sum(modules.values()), bags=batch * len(model.tables), pooled_values=pooled, local_batch=batch,
        exchanged_dim=est.exchanged_dim, num_dense=model.dense.num_dense, compute_bytes=cb)
    dim = max(t.dim for t in model.tables)
    by_device = {device: share + sum(est.backward_peak(device, modules, dim, pooled, batch)) for device in est.specs}
    return [by_device[device] for device in est.rank_devices]


def host_memory_text(fleet: Fleet) -> str:
    """What a host of ``fleet`` has for host-cached tables, for messages: the fleet's figure or the upper bound."""
    if fleet.host_memory_bytes is not None:
        return f"{fleet.host_memory_bytes / 1e9:,.1f} GB of host memory per host (as given)"
    return f"at most {mem.HOST_MEMORY_BYTES / 1e12:.1f} TB of host memory per host (an upper bound; none given)"


def table_bytes(model: ModelSpec, c: PlanConstraints) -> int:
    """Bytes of every table's rows and optimizer state in the preferred precision and optimizer."""
    return sum(mem.weight_bytes(t.rows, t.dim, c.weight_dtypes[0]) + mem.state_bytes(t.rows, t.dim, c.optimizers[0])
               for t in model.tables)


def crowded_rank(model: ModelSpec, fleet: Fleet, c: PlanConstraints, batch: int) -> tuple[str, int, int]:
    """(device, bytes of the activations and workspace at ``batch``, bytes they and the tables may take: capacity
    minus reserve and the dense layers) of the rank that batch overflows most (``batch_bytes``), the tables
    stored as the constraints prefer."""
    est = Estimator(model, fleet, dense_dtype=c.dense_dtype, dense_optimizer=c.dense_optimizer, overlap=c.overlap)
    storage = {t.name: Storage(weight_dtype=c.weight_dtypes[0], optimizer=c.optimizers[0]) for t in model.tables}
    taken, room = batch_bytes(est, batch, storage), rank_room(est)
    rank = max(range(len(taken)), key=lambda r: taken[r] - room[r])
    return est.rank_devices[rank], taken[rank], room[rank]


def size_text(n: float) -> str:
    """Bytes for messages: GB (10^9) with one decimal, MB below 0.1 GB (a rank a few MB short must not read
    0.0 GB)."""
    return f"{n / 1e9:,.1f} GB" if abs(n) >= 1e8 else f"{n / 1e6:,.3g} MB"


def _excess(m: DeviceMemory) -> int:
    """Bytes by which a rank's peak and reserve exceed its HBM (0 or less where it fits)."""
    return m.used + m.reserve - m.capacity


def _stored(c: PlanConstraints) -> str:
    return f"{c.weight_dtypes[0]} rows, {c.optimizers[0]} state"


def _fallbacks_text(c: PlanConstraints) -> str:
    """A sentence naming the fallbacks ``fitting.fit`` tried besides the preferred storage (they did not fit either)."""
    tried = [f"{', '.join(c.weight_dtypes[1:])} rows"] if len(c.weight_dtypes) > 1 else []
    tried += [f"{', '.join(c.optimizers[1:])} state"] if len(c.optimizers) > 1 else []
    tried += ["host caches"] if c.allow_host_cache else []
    return f" With {' or '.join(tried)} where allowed, it does not fit either." if tried else ""


def _rank_shortfall(est: Estimator, placed: Placement, m: DeviceMemory, c: PlanConstraints, batch: int) -> str:
    """The parts of rank ``m``'s peak (of ``placed`` at ``batch``), and on several ranks the global batch its
    shards serve."""
    dense = sum(est.dense_bytes)
    shards = m.weights + m.optimizer_state - dense
    text = (f"rank {m.rank} ({m.device}) needs {size_text(m.used + m.reserve)} of its {size_text(m.capacity)}, "
            f"{size_text(_excess(m))} too many: activations {size_text(m.activations)}, workspace "
            f"{size_text(m.workspace)}, table shards {size_text(shards)} ({_stored(c)}), dense layers "
            f"{size_text(dense)}, reserve {size_text(m.reserve)}.")
    world = est.fleet.world_size
    if world == 1:
        return text
    lookups = sum(s.accesses for s in shard_loads(est.model, placed.tables, batch, world) if s.rank == m.rank)
    return (f"{text} Its shards serve all {batch * world:,} samples of the global batch ({world} GPUs x {batch:,}): "
            f"{lookups:,.0f} lookups per step.")


def shortfall(model: ModelSpec, fleet: Fleet, c: PlanConstraints, batch: int) -> str:
    """What refuses ``model`` on ``fleet`` at ``batch`` per GPU, by the planner's own check (``fitting.fit``'s
    first try: the tables as the constraints prefer, in HBM): of the shardings whose shards find a place within
    an even share of the lookups' activations (``rank_budgets``: it places what overflows), the one closest to
    fitting, with the rank it overflows most and the parts of that rank's peak; where none does, what those
    activations leave each rank for the tables; then the fallbacks ``fitting.fit`` tried after it. Meant for a
    batch at which nothing fits (where the preferred storage fits, its rank reads as 0 bytes short or less)."""
    est = Estimator(model, fleet, dense_dtype=c.dense_dtype, dense_optimizer=c.dense_optimizer, overlap=c.overlap)
    splits_of = {s: strategy_splits(model, s, fleet.world_size, c.shardings) for s in STRATEGIES}
    if all(splits is None for splits in splits_of.values()):
        return (f"no sharding strategy keeps to the shardings allowed ({', '.join(c.shardings)}: "
                f"PlanConstraints.shardings) on {fleet.world_size} GPU(s).")
    return _preferred_shortfall(model, fleet, c, batch, est, splits_of) + _fallbacks_text(c)


def _preferred_shortfall(model: ModelSpec, fleet: Fleet, c: PlanConstraints, batch: int, est: Estimator,
                         splits_of: dict[str, list[TableSplit] | None]) -> str:
    """``shortfall`` of the preferred storage, the tables split as ``splits_of`` (strategy -> splits)."""
    storage = {t.name: Storage(weight_dtype=c.weight_dtypes[0], optimizer=c.optimizers[0]) for t in model.tables}
    even_share = within_budgets(rank_budgets(est, batch, storage))  # places what overflows, to show by how much
    tried = []
    for strategy, splits in splits_of.items():
        placed = None if splits is None else placement(model, splits, storage, est, batch, even_share)
        if placed is not None:
            worst = max(est.memory(placed.tables, batch), key=_excess)
            tried.append((_excess(worst), strategy, placed, worst))
    if tried:
        _, strategy, placed, worst = min(tried, key=lambda t: t[0])
        where = (f"with {strategy} sharding (the closest to fitting of the {len(tried)} shardings that place the "
                 f"tables), " if fleet.world_size > 1 else "")
        return where + _rank_shortfall(est, placed, worst, c, batch)
    device, taken, room = crowded_rank(model, fleet, c, batch)
    what = "the activations and workspace" + (" of an even share of the lookups" if fleet.world_size > 1 else "")
    if taken > room:
        return (f"{what} alone take {size_text(taken)} per {device}, which has {size_text(room)} for them and the "
                f"tables beside the reserve and the dense layers.")
    if fleet.world_size == 1:
        return (f"{what} take {size_text(taken)} of the {size_text(room)} the {device} has beside the reserve and "
                f"the dense layers, leaving {size_text(room - taken)} for the tables, which take "
                f"{size_text(table_bytes(model, c))} ({_stored(c)}).")
    return (f"{what} take {size_text(taken)} of the {size_text(room)} a {device} has beside the reserve and the "
            f"dense layers, leaving {size_text(room - taken)} per GPU for table shards, and no sharding places the "
            f"tables ({size_text(table_bytes(model, c))} over the fleet, {_stored(c)}) in that.")


def batch_message(model: ModelSpec, fleet: Fleet, c: PlanConstraints, batch: int, largest: int) -> str:
    """Why nothing fits where the tables would at a smaller batch: what runs out at ``batch`` (``shortfall``),
    the ``largest`` batch per GPU that fits, and where the batch alone fits a GPU, the smallest fleets that make
    room for it beside the tables."""
    which = "--batch-per-gpu" if c.batch_per_gpu is not None else "the smallest the planner tries"
    lines = [f"{model.name} does not fit {fleet.text} at batch {batch:,} per GPU ({which}): "
             f"{shortfall(model, fleet, c, batch)}",
             f"The largest batch per GPU that fits: {largest:,} (--batch-per-gpu {largest})."]
    _, taken, room = crowded_rank(model, fleet, c, batch)
    for kind in (g.device for g in fleet.groups) if taken <= room else ():
        smallest = smallest_fleet(model, kind, dataclasses.replace(c, batch_per_gpu=batch),
                                  host_memory_bytes=fleet.host_memory_bytes)
        lines.append(f"At batch {batch:,}, the smallest {kind} fleet that fits: {smallest.text}." if smallest else
                     f"At batch {batch:,}, no {kind} fleet of up to {MAX_FLEET_GPUS} GPUs fits.")
    return "\n".join(lines)


def batch_overflow(model: ModelSpec, fleet: Fleet, c: PlanConstraints) -> str:
    """A sentence saying so where the activations and workspace of the constraints' smallest batch alone
    overflow a GPU of ``fleet`` (no number of GPUs makes room for them); else empty."""
    batch = min(batches(c))
    device, taken, room = crowded_rank(model, fleet, c, batch)
    if taken <= room:
        return ""
    return (f"At batch {batch:,} per GPU the activations and workspace alone take {size_text(taken)} per {device}, "
            f"which has {size_text(room)} for them.")


def no_fleet_reason(model: ModelSpec, device: str, c: PlanConstraints, *,
                    host_memory_bytes: int | None = None) -> str:
    """Why ``smallest_fleet`` finds no fleet of ``device``: where the constraints' smallest batch alone overflows
    one GPU, that (``batch_overflow``); else what refuses one GPU and the largest fleet tried (``shortfall``)."""
    one, most = (Fleet(groups=(DeviceGroup(device=device, count=n),), hosts=h, host_memory_bytes=host_memory_bytes)
                 for n, h in ((1, 1), (PER_HOST_CHOICES[-1], HOST_CHOICES[-1])))
    head = f"fits no {device} fleet of up to {MAX_FLEET_GPUS} GPUs."
    overflow = batch_overflow(model, one, c)
    if overflow:
        return f"{head} {overflow}"
    batch = min(batches(c))
    return " ".join([head, *(f"On {f.text}, at batch {batch:,} per GPU: {shortfall(model, f, c, batch)}"
                             for f in (one, most))])


def no_fit_message(model: ModelSpec, fleet: Fleet, c: PlanConstraints) -> str:
    """Why nothing fits: the batch, where the model fits at a smaller one; else the tables, and the smallest
    fleets that would hold them (at a batch the planner chooses, where the one given alone overflows a GPU)."""
    batch = min(batches(c))
    largest = largest_batch(model, fleet, c, batch) if batch > 1 else 0
    if largest:
        return batch_message(model, fleet, c, batch, largest)
    need = table_bytes(model, c)
    usable = sum(s.hbm_bytes - mem.reserve_bytes(s.hbm_bytes) for s in
                 (fleet.specs()[d] for d in fleet.rank_devices()))
    host = f", and {host_memory_text(fleet)} for host-cached tables" if c.allow_host_cache else ""
    lines = [f"{model.name} does not fit {fleet.text}: its tables need {need / 1e9:.1f} GB "
             f"({c.weight_dtypes[0]} rows, {c.optimizers[0]} state) and the fleet has {usable / 1e9:.1f} GB usable "
             f"(before activations){host}."]
    if "table_wise" not in c.shardings:
        lines.append(f"Shardings allowed: {', '.join(c.shardings)} (PlanConstraints.shardings); a table too small to "
                     f"split, or any table on one GPU, needs table_wise.")
    overflow = batch_overflow(model, fleet, c) if c.batch_per_gpu is not None else ""
    if overflow:
        lines.append(f"{overflow} The fleets below are at a batch the planner chooses.")
        c = dataclasses.replace(c, batch_per_gpu=None)
    kinds = [g.device for g in fleet.groups]
    for kind in kinds:
        smallest = smallest_fleet(model, kind, c, host_memory_bytes=fleet.host_memory_bytes)
        found = smallest.text if smallest else f"none up to {MAX_FLEET_GPUS} GPUs"
        lines.append(f"Smallest {kind} fleet that fits: {found}.")
    if "fp16" not in c.weight_dtypes:
        relaxed = dataclasses.replace(c, weight_dtypes=(*c.weight_dtypes, "fp16"))
        if fits(model, fleet, relaxed):
            lines.append(f"It fits {fleet.text} with fp16 rows where needed "
                         f"(--weight-dtypes {','.join(relaxed.weight_dtypes)}).")
    others = []
    for name in sorted(catalog()):
        if name not in kinds:
            smallest = smallest_fleet(model, name, c, host_memory_bytes=fleet.host_memory_bytes)
            if smallest is not None:
                others.append(smallest.text)
    if others:
        lines.append("On other devices: " + ", ".join(others) + ".")
    return "\n".join(lines)
