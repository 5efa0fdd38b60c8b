"""What a plan's embedding shards cost: each shard of a table on a rank with the lookups it serves per
step (``ShardLoad``), one rank's shards grouped into the table-batched modules the runtime builds (one per
weight dtype and optimizer), and each module's forward and fused backward priced by
``polyrec.perfmodel.tbe_step`` with the launches and configs the runtime would run: the forward as
``polyrec.kernels.tbe_forward_plan.plan_forward`` launches it, the update at the config
``polyrec.kernels.tbe_select`` picks (one launch per dim group where it groups); plus the PCIe traffic of
host-cached shards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.kernels import tbe_forward, tbe_select
from polyrec.kernels.tbe_forward_plan import plan_forward
from polyrec.perfmodel import tbe, tbe_lookup, tbe_reads, tbe_step
from polyrec.planner import memory as mem
from polyrec.planner.ops import MIN_KERNEL_S
from polyrec.planner.types import WEIGHT_BYTES, ModelSpec, TablePlan

#: Bytes per pooled value the TBE cost model writes and reads back as gradient (fp32; the runtime's
#: bf16 output under a bf16 dense half is not modelled there: the planner_accuracy fit was made so).
POOLED_BYTES = 4
#: Passes over one module's offsets in a split lookup (``polyrec.models.mixed_embeddings.feature_subset``): each
#: bag's first position gathered for the module's features (``index_select``), moved down by its feature's shift
#: (a subtraction) and joined with the end (``cat``).
SPLIT_OFFSET_PASSES = 3
#: Device launches per module in a split lookup: those three, the ids' join and the shifts' copy to the device, each
#: at least ``ops.MIN_KERNEL_S``. Checked on one H100 (full-size MLPerf, the H100x1 plan's two row dtypes, steady
#: steps of ``benchmarks/e2e_profile.py``'s trace, ``benchmarks/results/mixed_split_profile_2026-12-06/``): the
#: split's kernels and the gaps between them took about 0.15 ms, priced 0.13 (the ids' joins 89 us of it).
SPLIT_LAUNCHES = 5


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardLoad:
    """One shard of one table on one rank, and the lookups it serves per step."""

    table: str
    rank: int
    rows: int
    dim: int
    accesses: float  # ids looked up per step
    bags: int  # pooled outputs produced per step (samples of all ranks)
    weight_dtype: str
    optimizer: str
    memory: str
    cache_rows: int
    skew: str


def shard_loads(model: ModelSpec, plans: Sequence[TablePlan], batch_per_gpu: int, world: int) -> list[ShardLoad]:
    """The shards of every table with their per-step lookups (``shard_load``)."""
    loads = []
    for tp in plans:
        t = model.table(tp.table)
        shapes = mem.shard_shapes(t.rows, t.dim, tp.sharding, len(tp.ranks))
        loads += [shard_load(model, tp, rank=rank, rows=rows, dim=dim, global_batch=batch_per_gpu * world)
                  for rank, (rows, dim) in zip(tp.ranks, shapes)]
    return loads


def shard_load(model: ModelSpec, tp: TablePlan, *, rank: int, rows: int, dim: int, global_batch: int) -> ShardLoad:
    """One shard of ``tp``'s table (``rows`` x ``dim``, as ``memory.shard_shapes`` cuts it) on ``rank``: it pools
    for every sample of the global batch, and looks up all of the table's ids or, row-wise, its share of them
    (ids spread evenly over row shards). ``tp.ranks`` is not read: the partitioner prices shards before it."""
    t = model.table(tp.table)
    share = rows / t.rows if tp.sharding == "row_wise" else 1.0
    return ShardLoad(table=t.name, rank=rank, rows=rows, dim=dim, accesses=global_batch * t.pooling * share,
                     bags=global_batch, weight_dtype=tp.weight_dtype, optimizer=tp.optimizer, memory=tp.memory,
                     cache_rows=tp.cache_rows, skew=model.index_distribution)


def cache_hit_rate(rows: int, cache_rows: int, skew: str) -> float:
    """Fraction of lookups an HBM cache of the ``cache_rows`` hottest rows serves."""
    return tbe_reads.rank_cdf(cache_rows, rows, skew)


def _update_kwargs(loads: tuple[ShardLoad, ...], grad_bytes: int, block_d: int) -> dict:
    """What the update's selection and cost depend on for ``loads`` at ``block_d``, besides nnz (as
    ``TableBatchedEmbedding._update_shape``)."""
    wb = WEIGHT_BYTES[loads[0].weight_dtype]
    return dict(block_d=block_d, row_bytes=block_d * wb, state_tiles=mem.STATE_PER_ELEMENT[loads[0].optimizer],
                rounding=tbe.rounded(loads[0].weight_dtype), grad_bytes=grad_bytes)


def module_nnz(loads: tuple[ShardLoad, ...]) -> int:
    return max(int(sum(s.accesses for s in loads)), 1)


def update_config(loads: tuple[ShardLoad, ...], spec: DeviceSpec, ceil: Ceilings, grad_bytes: int,
                  host_bound: bool = False, module: tuple[ShardLoad, ...] | None = None) -> tbe_select.UpdateConfig:
    """The update config the selector picks for the launch that updates ``loads`` of the module holding
    ``module`` (default: ``loads``; a dim group's launch is selected at the module's nnz and without
    ``one_dim``, as ``TableBatchedEmbedding.plan_configs``); ``host_bound``: its step is predicted host-bound."""
    module = loads if module is None else module
    return tbe_select.select_update(spec, nnz=module_nnz(module), one_dim=len({s.dim for s in module}) == 1,
                                    host_bound=host_bound, ceil=ceil,
                                    **_update_kwargs(loads, grad_bytes, tbe_forward.block_d([s.dim for s in loads])))


def dim_groups(loads: tuple[ShardLoad, ...], spec: DeviceSpec, ceil: Ceilings, grad_bytes: int,
               host_bound: bool = False) -> list[tuple[ShardLoad, ...]]:
    """The shards of one module by the update launch that takes them (``TableBatchedEmbedding.key_plan``'s
    default): one launch per BLOCK_D where the dims take several and ``tbe_select.groups_pay`` says so;
    else one for all."""
    blocks = sorted({tbe_forward.block_d([s.dim]) for s in loads})
    if len(blocks) == 1:
        return [loads]
    if not tbe_select.groups_pay(spec, nnz=module_nnz(loads), groups=len(blocks),
                                 total_rows=sum(s.rows for s in loads), host_bound=host_bound, ceil=ceil,
                                 **_update_kwargs(loads, grad_bytes, blocks[-1])):
        return [loads]
    return [tuple(s for s in loads if tbe_forward.block_d([s.dim]) == b) for b in blocks]


def tbe_group_seconds(loads: tuple[ShardLoad, ...], spec: DeviceSpec, ceil: Ceilings,
                      grad_bytes: int) -> tuple[float, float, float, str]:
    """(fwd s, bwd+update s, of that the id sort s, config label) of one table-batched module holding
    ``loads`` (same dtype, optimizer); ``grad_bytes``: its output gradient's element size (the dense
    half's dtype)."""
    wb = WEIGHT_BYTES[loads[0].weight_dtype]
    block_d = tbe_forward.block_d([s.dim for s in loads])
    bags = loads[0].bags
    tables = _table_loads(loads)
    vec = tbe_forward.vector_width([s.dim for s in loads], wb)
    launches = plan_forward(spec, batch_size=bags, bag_lengths=[t.accesses / bags for t in tables], block_d=block_d,
                            row_bytes=block_d * wb, vec=vec, table_rows=[t.rows for t in tables], ceil=ceil)
    fwd = [(tbe_lookup.ForwardTile(bags=la.config.bags, hots=la.config.hots, block_d=block_d,
                                   num_warps=la.config.num_warps, vec=vec, elem_bytes=wb), la.features)
           for la in launches]
    est, ucfg, _ = _estimate(loads, loads, spec, ceil, grad_bytes, fwd)
    label = "fwd " + " + ".join(f"bags={la.config.bags} hots={la.config.hots} warps={la.config.num_warps}"
                                for la in launches)
    groups = dim_groups(loads, spec, ceil, grad_bytes)
    if len(groups) == 1:
        return (est.forward_s, est.backward_s, est.sort_s,
                label + f"; update {ucfg.variant} tile={ucfg.tile} warps={ucfg.num_warps}")
    # one launch per dim group: each group's ids priced at its own BLOCK_D and config (their sorts add up to
    # about the module's: the sort goes with the ids), plus its programs over the other groups' ids; one merge
    # over every launch's slots
    parts = [_estimate(group, loads, spec, ceil, grad_bytes, [(fwd[0][0], tuple(range(len(group))))])
             for group in groups]  # (their forward, of one launch over the group's tables, is not used)
    label += "; update " + " / ".join(f"D{tbe_forward.block_d([s.dim for s in g])} {c.variant} tile={c.tile} "
                                      f"warps={c.num_warps}"
                                      for g, (_, c, _) in zip(groups, parts))
    ids = sum(s.accesses for s in loads)
    idle = sum(tbe.idle_programs_seconds(shape, spec, programs=(ids - sum(s.accesses for s in g)) / c.span)
               for g, (_, c, shape) in zip(groups, parts))
    backward = sum(p.backward_s - p.merge_s for p, _, _ in parts) + idle
    merge = _groups_merge_seconds(groups, parts, ids, block_d, spec, ceil)
    return est.forward_s, backward + merge, sum(p.sort_s for p, _, _ in parts), label


def _groups_merge_seconds(groups: list, parts: list, ids: float, block_d: int, spec: DeviceSpec,
                          ceil: Ceilings) -> float:
    """The one merge after a module's launches, one per dim group (``groups``, priced as ``parts``), each over all
    ``ids`` sorted positions: every launch's slots, the pieces of its own ids, at the widest group's merge chunks
    and the module's BLOCK_D (``tbe_fused_backward``)."""
    launches, programs = [], 0.0
    for group, (est, cfg, _) in zip(groups, parts):
        own = sum(s.accesses for s in group)
        launches.append(tbe.MergeLaunch(programs=math.ceil(own / cfg.span), grad_row_bytes=est.grad_row_bytes,
                                        crossing=max(0.0, 1.0 - est.unique_rows / max(own, 1.0))))
        programs += math.ceil(ids / cfg.span)
    return tbe.slots_merge_seconds(launches, programs=programs, spec=spec, ceil=ceil, chunks=parts[-1][1].merge_chunks,
                                   rounding=tbe.rounded(groups[0][0].weight_dtype), rounded_block_d=block_d)


def _table_loads(loads: tuple[ShardLoad, ...]) -> list[tbe_reads.TableLoad]:
    """The perf model's view of ``loads``: the rows a lookup reads (an HBM cache's, when host-cached)."""
    wb = WEIGHT_BYTES[loads[0].weight_dtype]
    return [tbe_reads.TableLoad(rows=min(s.cache_rows, s.rows) if s.memory == "host_cached" else s.rows,
                                row_bytes=s.dim * wb, accesses=s.accesses, skew=s.skew) for s in loads]


def _estimate(loads: tuple[ShardLoad, ...], module: tuple[ShardLoad, ...], spec: DeviceSpec, ceil: Ceilings,
              grad_bytes: int, fwd: list) -> tuple[tbe_step.StepEstimate, tbe_select.UpdateConfig, tbe.UpdateShape]:
    """``tbe_step.estimate`` of ``loads`` (the module ``module``, or one of its dim groups) with the update
    launch that takes them, and that launch's selected config (at its BLOCK_D) and the shape it is priced as;
    ``fwd``: forward launches over ``loads``."""
    wb = WEIGHT_BYTES[loads[0].weight_dtype]
    block_d = tbe_forward.block_d([s.dim for s in loads])
    one_dim = len({s.dim for s in module}) == 1  # as TableBatchedEmbedding.one_dim
    ucfg = update_config(loads, spec, ceil, grad_bytes, module=module)
    bwd = tbe.UpdateShape(variant=ucfg.variant, tile=ucfg.tile, num_warps=ucfg.num_warps, chunks=ucfg.chunks,
                          merge_chunks=ucfg.merge_chunks, rounding=tbe.rounded(loads[0].weight_dtype),
                          grad_bytes=grad_bytes, one_dim=one_dim,
                          elems_per_thread=ucfg.tile * block_d / (ucfg.num_warps * spec.warp_size),
                          state_tiles=mem.STATE_PER_ELEMENT[loads[0].optimizer], max_registers=ucfg.max_registers)
    state_row = 4 * (mem.STATE_PER_ROW[loads[0].optimizer] + mem.STATE_PER_ELEMENT[loads[0].optimizer] * block_d)
    est = tbe_step.estimate(_table_loads(loads), batch_size=loads[0].bags, out_dim=sum(s.dim for s in loads),
                            out_bytes=POOLED_BYTES, state_bytes_per_row=state_row, spec=spec, ceil=ceil, fwd=fwd,
                            bwd=bwd, weight_bytes=wb, row_state=mem.STATE_PER_ROW[loads[0].optimizer] > 0)
    return est, ucfg, bwd


def host_traffic_seconds(s: ShardLoad, spec: DeviceSpec) -> float:
    """PCIe time of a host-cached shard: missed unique rows (and their state) fetched, evicted rows written back."""
    if s.memory != "host_cached":
        return 0.0
    miss = 1.0 - cache_hit_rate(s.rows, s.cache_rows, s.skew)
    cold = tbe_reads.TableLoad(rows=max(s.rows - s.cache_rows, 1), row_bytes=s.dim * WEIGHT_BYTES[s.weight_dtype],
                               accesses=s.accesses * miss, skew="uniform")
    row_bytes = mem.weight_bytes(1, s.dim, s.weight_dtype) + mem.state_bytes(1, s.dim, s.optimizer)
    return 2 * tbe_reads.unique_rows(cold) * row_bytes / spec.host_link_bandwidth


def modules(loads: list[ShardLoad]) -> dict[tuple[str, str], list[ShardLoad]]:
    """One rank's shards by TBE module: one per (weight dtype, optimizer), in that order."""
    groups: dict[tuple[str, str], list[ShardLoad]] = {}
    for s in loads:
        groups.setdefault((s.weight_dtype, s.optimizer), []).append(s)
    return dict(sorted(groups.items()))


def split_seconds(groups: Sequence[Sequence[ShardLoad]], ceil: Ceilings) -> float:
    """Device seconds of one rank's lookup split between its modules (``groups``: each module's shards; tables of
    several row dtypes, ``polyrec.models.mixed_embeddings.feature_subset``): each module's ids copied out of the
    batch and its offsets moved in ``SPLIT_OFFSET_PASSES`` passes, int64 read and written at the copy rate, and
    ``SPLIT_LAUNCHES`` small kernels per module; nothing for one module, which reads the batch as it is."""
    if len(groups) < 2:
        return 0.0
    moved = sum(2 * mem.INDEX_BYTES * (s.accesses + SPLIT_OFFSET_PASSES * s.bags) for group in groups for s in group)
    return moved / ceil.copy_bandwidth.value + SPLIT_LAUNCHES * len(groups) * MIN_KERNEL_S


def module_key(group: list[ShardLoad]) -> tuple[ShardLoad, ...]:
    """A module's shards as a cache key: without table names or rank, in a fixed order."""
    return tuple(sorted((anonymous(s) for s in group), key=lambda s: (s.rows, s.dim, s.accesses)))


def anonymous(s: ShardLoad) -> ShardLoad:
    """The shard without its name and rank, so equal shards share one cache entry."""
    return ShardLoad(table="", rank=0, rows=s.rows, dim=s.dim, accesses=s.accesses, bags=s.bags,
                     weight_dtype=s.weight_dtype, optimizer=s.optimizer, memory=s.memory, cache_rows=s.cache_rows,
                     skew=s.skew)
