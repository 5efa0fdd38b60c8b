"""Search: strategies x batch sizes x storage, priced by the estimator; the best plan wins.

Order of preference: every table in HBM before any host caching (the trainer runs HBM plans only); then
the user's earliest optimizer; then the first weight precision everywhere before lower precision for
some tables; among equals, predicted samples/s. Tried in that order until the tables fit: in HBM, for
each optimizer of ``constraints.optimizers`` in turn, the first precision, then lower precision for the
largest tables one step at a time (``constraints.weight_dtypes``); then, where allowed, for each
optimizer in turn, host memory with an HBM cache for the fewest largest tables, in the lowest precision,
and each table (the smallest first) back in the first precision where it still fits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from polyrec.hardware.catalog import catalog
from polyrec.hardware.types import DeviceSpec
from polyrec.perfmodel.step import NCCL_CONTENTION
from polyrec.hardware.calibrate import datasheet_note
from polyrec.planner import memory as mem
from polyrec.planner.comms import link_origins
from polyrec.planner.enumerate import STRATEGIES, TableSplit, strategy_splits
from polyrec.planner.estimate import Estimate, Estimator, shard_loads
from polyrec.planner.partition import Placement, RankFits, Storage, partition, size_caches, within_budgets
from polyrec.planner.types import (
    DeviceGroup,
    DeviceMemory,
    Fleet,
    ModelSpec,
    Plan,
    PlanConstraints,
    StepBreakdown,
    TablePlan,
)

#: Batch sizes per GPU the planner tries when none is fixed (powers of four, to keep planning under
#: 2 s; DLRM training runs 1K-64K per GPU: MLPerf's reference uses a global batch of 65536).
BATCH_CHOICES: tuple[int, ...] = (1024, 4096, 16384, 65536, 262144)
#: Fleet sizes tried when looking for the smallest fleet that fits: devices per host, then hosts.
PER_HOST_CHOICES: tuple[int, ...] = (1, 2, 4, 8)
HOST_CHOICES: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
#: The largest fleet tried (``smallest_fleet``): hosts of the most devices, the most hosts.
MAX_FLEET_GPUS = PER_HOST_CHOICES[-1] * HOST_CHOICES[-1]


class NoFitError(ValueError):
    """The model fits no plan on the fleet; the message names fleets that would fit, ``model`` and ``fleet`` are
    what was planned (``serialize.no_fit_to_json``)."""

    def __init__(self, message: str, *, model: ModelSpec, fleet: Fleet):
        super().__init__(message)
        self.model, self.fleet = model, fleet


@dataclass(kw_only=True, slots=True)
class Candidate:
    tables: list[TablePlan]
    batch: int
    estimate: Estimate
    fallbacks: tuple[int, int, int]  # (1 = host caches, the optimizer's index, 1 = some rows in lower precision)
    strategy: str

    @property
    def samples_per_s(self) -> float:
        return self.batch * len(self.estimate.memory) / self.estimate.step.total_s


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


def _placement(model: ModelSpec, splits: list[TableSplit], storage: dict[str, Storage], est: Estimator,
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
    """``_placement``, or None where the estimator finds a rank's HBM or a host's memory short (so ``fits`` and
    ``candidates`` agree)."""
    placed = _placement(model, splits, storage, est, batch)
    return placed if placed is not None and est.memory_fits(est.memory(placed.tables, batch)) else None


def _fit(model: ModelSpec, splits: list[TableSplit], est: Estimator, batch: int,
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


def _batches(c: PlanConstraints) -> list[int]:
    """The fixed batch, else ``BATCH_CHOICES`` up to the largest allowed, and that largest itself."""
    if c.batch_per_gpu is not None:
        return [c.batch_per_gpu]
    return sorted({b for b in BATCH_CHOICES if b <= c.max_batch_per_gpu} | {c.max_batch_per_gpu})


def candidates(model: ModelSpec, fleet: Fleet, c: PlanConstraints, est: Estimator | None = None) -> list[Candidate]:
    """Every candidate that fits, over strategies and batch sizes."""
    est = est or Estimator(model, fleet, dense_dtype=c.dense_dtype, dense_optimizer=c.dense_optimizer,
                           overlap=c.overlap)
    world = fleet.world_size
    out = []
    for strategy in STRATEGIES:
        splits = strategy_splits(model, strategy, world, c.shardings)
        if splits is None:
            continue
        for batch in _batches(c):
            fitted = _fit(model, splits, est, batch, c)
            if fitted is None:
                continue
            placed, fallbacks = fitted
            estimate = est.evaluate(placed.tables, batch)
            if estimate.fits:
                out.append(Candidate(tables=placed.tables, batch=batch, estimate=estimate, fallbacks=fallbacks,
                                     strategy=strategy))
    return out


def best_candidate(cands: list[Candidate]) -> Candidate:
    return min(cands, key=lambda k: (k.fallbacks, -k.samples_per_s, k.batch))


def _origins(est: Estimator) -> dict[str, str]:
    out = {}
    for name, ceil in est.ceilings.items():
        out[f"{name}.hbm_bytes"] = "datasheet"
        out[f"{name}.copy_bandwidth"] = ceil.copy_bandwidth.origin
        out[f"{name}.l2_bandwidth"] = ceil.l2_bandwidth.origin
        out[f"{name}.matmul_{est.dense_dtype}"] = ceil.matmul_flops.get(est.dense_dtype, ceil.matmul_flops["bf16"]).origin
        out[f"{name}.launch_latency"] = ceil.launch_latency.origin
        out[f"{name}.host_costs"] = est.host[name].origin
        out[f"{name}.tdp_watts"] = "datasheet"
    if est.fleet.world_size > 1:
        out["collectives.contention"] = contention_origin(est.specs)
    return out | link_origins(est.links)


def contention_origin(specs: dict[str, DeviceSpec]) -> str:
    """Where the compute slowdown beside a collective (``perfmodel.step.NCCL_CONTENTION``) comes from,
    for a fleet of ``specs`` (device name -> spec)."""
    c = NCCL_CONTENTION
    what = f"{c.compute_bound:.2f} of GEMM and {c.memory_bound:.2f} of memory-bound throughput beside a collective"
    if set(specs) == {"H200"}:
        return f"calibrated on 2 H200s (NCCL over NVLink, 74b6996 traces): {what}"
    return f"estimate (measured on 2 H200s with NCCL only): {what}"


def build_plan(model: ModelSpec, fleet: Fleet, c: PlanConstraints, best: Candidate, est: Estimator) -> Plan:
    """The Plan of a candidate, with per-table times and every number's origin."""
    times = est.table_times(best.tables, best.batch)
    for tp in best.tables:
        tp.fwd_ms, tp.bwd_ms = (1e3 * s for s in times[tp.table])
    s = best.estimate.step
    step = StepBreakdown(embedding_fwd_ms=1e3 * s.embedding_fwd_s, embedding_bwd_ms=1e3 * s.embedding_bwd_s,
                         dense_fwd_ms=1e3 * s.dense_fwd_s, dense_bwd_ms=1e3 * s.dense_bwd_s,
                         all_to_all_ms=1e3 * s.all_to_all_s, all_reduce_ms=1e3 * s.all_reduce_s,
                         optimizer_ms=1e3 * s.optimizer_s, other_ms=1e3 * s.other_s, overlap_ms=1e3 * s.overlap_s,
                         host_excess_ms=1e3 * s.host_excess_s, total_ms=1e3 * s.total_s,
                         host_ms=1e3 * s.host_s, graphed_host_ms=1e3 * s.graphed_host_s, host_bound=s.host_bound,
                         graphed_host_bound=s.graphed_host_bound)
    cached = [t.table for t in best.tables if t.memory == "host_cached"]
    notes = [f"strategy {best.strategy}"]
    chosen = {t.optimizer for t in best.tables}
    if chosen != {c.optimizers[0]}:
        notes.append(f"{', '.join(sorted(chosen))} optimizer state to fit ({c.optimizers[0]}'s does not fit"
                     f"{'' if cached else ' in HBM'})")
    demoted = {d: [t.table for t in best.tables if t.weight_dtype == d] for d in c.weight_dtypes[1:]}
    if any(demoted.values()):
        notes.append("; ".join(f"{d} rows for {', '.join(names)}" for d, names in demoted.items() if names) + " to fit")
    if cached:
        host = max(est.host_memory(best.estimate.memory))
        given = (f" (of the {fleet.host_memory_bytes / 1e9:.1f} GB given)" if fleet.host_memory_bytes is not None
                 else "")
        notes.append(f"host memory with an HBM cache for {', '.join(cached)}: {host / 1e9:.1f} GB of host memory "
                     f"per host{given}")
    uncalibrated = datasheet_note(est.ceilings, est.dense_dtype)
    if uncalibrated:
        notes.append(uncalibrated)
    if fleet.world_size == 1 and step.host_excess_ms > 0:
        device_ms = step.total_ms - step.host_excess_ms
        notes.append(f"the eager step is host-bound by {step.host_excess_ms:.1f} ms: `polyrec train` CUDA-graphs "
                     f"the dense half here (--cuda-graphs auto, polyrec.runtime.graphs): host "
                     f"{step.graphed_host_ms:.1f} ms per step graphed, device {device_ms:.1f} ms")
    return Plan(model=model, fleet=fleet, batch_per_gpu=best.batch, dense_dtype=c.dense_dtype,
                dense_optimizer=c.dense_optimizer, overlap=c.overlap if fleet.world_size > 1 else "none",
                tables=tuple(best.tables), kernels=dict(sorted(best.estimate.kernels.items())), step=step,
                memory=tuple(best.estimate.memory), samples_per_s=best.samples_per_s, origins=_origins(est),
                notes=tuple(notes))


def fits(model: ModelSpec, fleet: Fleet, c: PlanConstraints) -> bool:
    """Whether any plan fits (every rank's HBM and every host's memory, as ``candidates`` checks them), at the
    smallest batch only (fast)."""
    est = Estimator(model, fleet, dense_dtype=c.dense_dtype, dense_optimizer=c.dense_optimizer, overlap=c.overlap)
    batch = min(_batches(c))
    for strategy in STRATEGIES:
        splits = strategy_splits(model, strategy, fleet.world_size, c.shardings)
        if splits is not None and _fit(model, splits, est, batch, c) is not None:
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


def host_memory_text(fleet: Fleet) -> str:
    """What a host of ``fleet`` has for host-cached tables, for messages: the fleet's figure or the upper bound."""
    if fleet.host_memory_bytes is not None:
        return f"{fleet.host_memory_bytes / 1e9:,.1f} GB of host memory per host (as given)"
    return f"at most {mem.HOST_MEMORY_BYTES / 1e12:.1f} TB of host memory per host (an upper bound; none given)"


def table_bytes(model: ModelSpec, c: PlanConstraints) -> int:
    """Bytes of every table's rows and optimizer state in the preferred precision and optimizer."""
    return sum(mem.weight_bytes(t.rows, t.dim, c.weight_dtypes[0]) + mem.state_bytes(t.rows, t.dim, c.optimizers[0])
               for t in model.tables)


def largest_batch(model: ModelSpec, fleet: Fleet, c: PlanConstraints, batch: int) -> int:
    """The largest batch per GPU below ``batch`` (which does not fit) at which the model fits; 0 where not even
    one sample does. Bisection, each probe as ``fits``."""
    if not fits(model, fleet, dataclasses.replace(c, batch_per_gpu=1)):
        return 0
    fitting, failing = 1, batch
    while failing - fitting > 1:
        middle = (fitting + failing) // 2
        if fits(model, fleet, dataclasses.replace(c, batch_per_gpu=middle)):
            fitting = middle
        else:
            failing = middle
    return fitting


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
    """A sentence naming the fallbacks ``_fit`` tried besides the preferred storage (they did not fit either)."""
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
    """What refuses ``model`` on ``fleet`` at ``batch`` per GPU, by the planner's own check (``_fit``'s first try:
    the tables as the constraints prefer, in HBM): of the shardings whose shards find a place within an even
    share of the lookups' activations (``rank_budgets``: it places what overflows), the one closest to fitting,
    with the rank it overflows most and the parts of that rank's peak; where none does, what those activations
    leave each rank for the tables; then the fallbacks ``_fit`` tried after it. Meant for a batch at which
    nothing fits (where the preferred storage fits, its rank reads as 0 bytes short or less)."""
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
        placed = None if splits is None else _placement(model, splits, storage, est, batch, even_share)
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
    batch = min(_batches(c))
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
    batch = min(_batches(c))
    return " ".join([head, *(f"On {f.text}, at batch {batch:,} per GPU: {shortfall(model, f, c, batch)}"
                             for f in (one, most))])


def no_fit_message(model: ModelSpec, fleet: Fleet, c: PlanConstraints) -> str:
    """Why nothing fits: the batch, where the model fits at a smaller one; else the tables, and the smallest
    fleets that would hold them (at a batch the planner chooses, where the one given alone overflows a GPU)."""
    batch = min(_batches(c))
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


def plan_if_fits(model: ModelSpec, fleet: Fleet, constraints: PlanConstraints | None = None) -> Plan | None:
    """The best plan of ``model`` on ``fleet``, or None when nothing fits (no message is worked out: the
    co-design asks this of every growth step)."""
    c = constraints or PlanConstraints()
    est = Estimator(model, fleet, dense_dtype=c.dense_dtype, dense_optimizer=c.dense_optimizer, overlap=c.overlap)
    cands = candidates(model, fleet, c, est)
    return build_plan(model, fleet, c, best_candidate(cands), est) if cands else None


def make_plan(model: ModelSpec, fleet: Fleet, constraints: PlanConstraints | None = None) -> Plan:
    """The best plan of ``model`` on ``fleet``; NoFitError (naming fleets that fit) when there is none."""
    c = constraints or PlanConstraints()
    plan = plan_if_fits(model, fleet, c)
    if plan is None:
        raise NoFitError(no_fit_message(model, fleet, c), model=model, fleet=fleet)
    return plan
