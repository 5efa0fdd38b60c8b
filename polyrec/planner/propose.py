"""Search: strategies x batch sizes x storage, priced by the estimator; the best plan wins.

Order of preference: every table in HBM before any host caching (the trainer runs HBM plans only); then
the user's earliest optimizer; then the first weight precision everywhere before lower precision for
some tables; among equals, predicted samples/s. Each strategy and batch size takes the storage
``fitting.fit`` finds (the fallbacks in that order); where nothing fits, ``no_fit`` says why. Beside the
batch sizes of ``fitting.batches``, each strategy tries the largest batch that keeps the best fallbacks found
(a bisection), so that a larger ``max_batch_per_gpu`` never plans fewer samples/s than a smaller one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from polyrec.hardware.calibrate import datasheet_note
from polyrec.hardware.types import DeviceSpec
from polyrec.perfmodel.gemm import ALIGNMENT_ELEMENTS
from polyrec.perfmodel.step import NCCL_CONTENTION
from polyrec.planner.comms import link_origins
from polyrec.planner.enumerate import STRATEGIES, TableSplit, strategy_splits
from polyrec.planner.estimate import Estimate, Estimator
from polyrec.planner.fitting import at_level, batches, bisect_largest, fit
from polyrec.planner.no_fit import no_fit_message
from polyrec.planner.types import Fleet, ModelSpec, Plan, PlanConstraints, StepBreakdown, TablePlan


#: The batch sizes the bisection of ``_largest_at`` tries are multiples of this: GEMMs over a batch of another size
#: run unaligned (``perfmodel.gemm.ALIGNMENT_ELEMENTS``): MLPerf on an H200 plans 3.94M samples/s at batch 418,447
#: against 4.28M at 418,432.
BATCH_QUANTUM = ALIGNMENT_ELEMENTS


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


def candidates(model: ModelSpec, fleet: Fleet, c: PlanConstraints, est: Estimator | None = None) -> list[Candidate]:
    """Every candidate that fits, over strategies and batch sizes (``fitting.batches``), and each strategy's
    largest batch at the best fallbacks (``_largest_at``)."""
    est = est or Estimator(model, fleet, dense_dtype=c.dense_dtype, dense_optimizer=c.dense_optimizer,
                           overlap=c.overlap)
    found: dict[str, tuple[list[TableSplit], list[Candidate]]] = {}
    for strategy in STRATEGIES:
        splits = strategy_splits(model, strategy, fleet.world_size, c.shardings)
        if splits is not None:
            tried = (_candidate(model, splits, est, batch, c, strategy) for batch in batches(c))
            found[strategy] = splits, [k for k in tried if k is not None]
    out = [k for _, cands in found.values() for k in cands]
    if out:
        level = min(k.fallbacks for k in out)
        larger = (_largest_at(model, splits, est, c, cands, level) for splits, cands in found.values())
        out += [k for k in larger if k is not None]
    return out


def _candidate(model: ModelSpec, splits: list[TableSplit], est: Estimator, batch: int, c: PlanConstraints,
               strategy: str) -> Candidate | None:
    """The strategy's candidate at ``batch`` with the fewest fallbacks (``fitting.fit``); None where none fits."""
    fitted = fit(model, splits, est, batch, c)
    if fitted is None:
        return None
    placed, fallbacks = fitted
    estimate = est.evaluate(placed.tables, batch)
    return Candidate(tables=placed.tables, batch=batch, estimate=estimate, fallbacks=fallbacks,
                     strategy=strategy) if estimate.fits else None


def _largest_at(model: ModelSpec, splits: list[TableSplit], est: Estimator, c: PlanConstraints,
                cands: list[Candidate], level: tuple[int, int, int]) -> Candidate | None:
    """A strategy's candidate at the largest batch with ``level``'s fallbacks, between its largest tried batch with
    them and the next tried batch (which needs later fallbacks or does not fit), a multiple of ``BATCH_QUANTUM``;
    None where there is none between.
    Without it a bound between two tried batches planned fewer samples/s than a smaller bound (MLPerf on an H200,
    --max-batch-per-gpu 400000: 4.26M, 1000000: 4.24M, the largest tried batch in fp32 rows being 262144)."""
    held = max((k.batch for k in cands if k.fallbacks == level), default=None)
    above = [b for b in batches(c) if held is not None and b > held]
    if not above:
        return None
    limited, q = at_level(c, level), BATCH_QUANTUM
    units = bisect_largest(lambda n: fit(model, splits, est, n * q, limited) is not None, held // q, -(-above[0] // q))
    return _candidate(model, splits, est, units * q, limited, cands[0].strategy) if units * q > held else None


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
    note = _fixed_batch_note(model, fleet, c, plan)
    return plan if note is None else dataclasses.replace(plan, notes=(*plan.notes, note))


def _fixed_batch_note(model: ModelSpec, fleet: Fleet, c: PlanConstraints, plan: Plan) -> str | None:
    """Where a fixed batch per GPU pushed tables into host memory and the planner's own batch plans more samples/s,
    a note saying so: at the largest batch that fits one H200 (1882216, MLPerf) the activations took 135.5 of 141
    GB and 19 tables kept HBM caches of 1 to 53 rows, 0.88M samples/s planned against 4.02M at the planner's batch
    (datasheet peaks), with nothing in the plan but the host memory it needed to say why."""
    cached = [t for t in plan.tables if t.memory == "host_cached"]
    if c.batch_per_gpu is None or not cached:
        return None
    own = plan_if_fits(model, fleet, dataclasses.replace(c, batch_per_gpu=None))
    if own is None or own.samples_per_s <= plan.samples_per_s:
        return None
    rows = sorted(t.cache_rows for t in cached)
    activations = max(m.activations for m in plan.memory)
    own_cached = sum(t.memory == "host_cached" for t in own.tables)
    return (f"a batch of {plan.batch_per_gpu} per GPU takes {activations / 1e9:.1f} GB of activations and leaves "
            f"{len(cached)} tables in host memory behind HBM caches of {rows[0]:,} to {rows[-1]:,} rows; the "
            f"planner's own batch, {own.batch_per_gpu}, plans {own.samples_per_s / 1e6:.2f}M samples/s against "
            f"{plan.samples_per_s / 1e6:.2f}M (host-cached tables there: {own_cached or 'none'}; leave the batch free)")
