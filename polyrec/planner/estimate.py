"""Predicted step time and memory of a candidate plan, from the per-op cost models.

Per-op terms come from the kernels' own models, never from a second copy here: embedding lookups
and the fused backward from ``planner.shard_cost`` (``polyrec.perfmodel.tbe_step`` with the configs
``polyrec.kernels.tbe_select`` picks), dense GEMMs from ``polyrec.kernels.gemm_select`` (which ranks
configs with ``polyrec.perfmodel.gemm`` and chooses Triton or the vendor library). Collectives use the
alpha-beta model of ``planner.comms``; ``perfmodel.step`` combines everything.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.kernels import gemm_select, tbe_forward, tbe_select
from polyrec.kernels.chunk_copy import INT32_MAX
from polyrec.perfmodel import tbe
from polyrec.perfmodel.gemm import GemmProblem, rate_dtype
from polyrec.perfmodel.gemm_library import library_seconds
from polyrec.perfmodel.step import NCCL_CONTENTION, StepParts, StepTime, step_time
from polyrec.planner import memory as mem
from polyrec.planner.comms import FleetLinks, all_reduce_seconds, all_to_all_seconds, fleet_links
from polyrec.planner.dense import GemmShape, dense_matmuls, dense_params
from polyrec.planner.host import (
    HostCosts,
    Launches,
    gemm_launches,
    host_costs,
    optimizer_launches,
    split_launches,
    tbe_launches,
)
from polyrec.planner.ops import COLUMN_SUM_S, FP32, MIN_KERNEL_S, RATE_CLASSES, Op, dense_inventory
from polyrec.planner.shard_cost import (
    ShardLoad,
    anonymous,
    dim_groups,
    host_traffic_seconds,
    module_key,
    module_nnz,
    modules,
    shard_loads,
    split_seconds,
    tbe_group_seconds,
    update_config,
)
from polyrec.planner.types import WEIGHT_BYTES, DeviceMemory, Fleet, ModelSpec, TablePlan

#: fp32 values the dense optimizer reads plus writes per parameter: Adagrad as the trainer runs it on a
#: GPU, ``polyrec.kernels.dense_optim.FusedAdagrad`` (parameter, gradient and sum read; parameter and
#: sum written: 5; torch's foreach path was 11); SGD and Adam through torch's foreach implementation
#: (torch/optim/adam.py ``_multi_tensor_adam``: about twice the foreach Adagrad's 11).
DENSE_OPTIMIZER_VALUES = {"sgd": 3, "adagrad": 5, "adam": 22}
#: Map the planner's epilogue names to polyrec.perfmodel.gemm's.
_EPILOGUE = {("relu", True): "bias_relu", ("none", True): "bias", ("none", False): "none", ("cross", True): "cross"}
#: Parameter tensors of a dense matmul with a bias (weight and bias) the optimizer walks.
TENSORS_PER_BIAS_MATMUL = 2
#: Bytes of a bag length crossing the input all-to-all (int32). Ids cross as int32 when every table has
#: fewer than INT32_MAX rows, else int64 (polyrec.runtime.input_dist ``narrow_ids``).
LENGTH_BYTES = 4


def wire_id_bytes(model: ModelSpec) -> int:
    """Bytes of one id crossing the input all-to-all for ``model``'s tables."""
    return 4 if max(t.rows for t in model.tables) < INT32_MAX else 8


@dataclass(frozen=True, kw_only=True, slots=True)
class DenseTimes:
    """The dense half on one device kind: device seconds by phase, and what the host issues."""

    fwd_s: float
    bwd_s: float
    optimizer_s: float
    after_input_grad_s: float  # of bwd_s, what runs after the cross network's input gradient is final
    launches: Launches  # forward + backward
    optimizer_launches: Launches
    labels: tuple[tuple[str, str], ...]  # (GEMM op, chosen kernel)


@dataclass(frozen=True, kw_only=True, slots=True)
class OpTime:
    """One op of the dense half priced: device seconds, what the host issues for it and, for a GEMM,
    the epilogue it runs with and the kernel the selector picks."""

    op: Op
    seconds: float
    launches: Launches
    epilogue: str = ""
    kernel: str = ""


@dataclass(kw_only=True, slots=True)
class Estimate:
    """Everything the planner predicts about one candidate."""

    step: StepTime
    memory: list[DeviceMemory]
    fits: bool  # every rank's peak fits its HBM and every host's memory its host-cached tables
    kernels: dict[str, str]
    table_times: dict[str, tuple[float, float]]  # table -> (fwd s, bwd s) of its slowest shard


def _check_matrix_rates(dense_dtype: str, gemm_dtype: str, specs: dict[str, DeviceSpec]) -> None:
    """Refuse a dense dtype whose GEMMs some device has no matrix rate for: a data file's peak of 0 means the
    dtype is unsupported (docs/hardware.md), and every GEMM would be priced at infinity (a plan of an infinite
    step and 0 samples/s). fp8 runs fp8 GEMMs beside bf16 ones; tf32 runs at the fp32 rate where the device has
    no TF32 dot (``rate_dtype``)."""
    for dtype in ("fp8", gemm_dtype) if dense_dtype == "fp8" else (gemm_dtype,):
        lacking = sorted(name for name, spec in specs.items() if not spec.peak_flops.get(rate_dtype(dtype, spec)))
        if lacking:
            raise ValueError(f"dense dtype {dense_dtype}: {', '.join(lacking)} has no {dtype} matrix rate "
                             f"(no {dtype} GEMMs); choose another --dense-dtype")


class Estimator:
    """Predicts plans of one model on one fleet; per-op answers are cached across candidates."""

    def __init__(self, model: ModelSpec, fleet: Fleet, *, dense_dtype: str = "bf16", dense_optimizer: str = "adagrad",
                 overlap: str = "ddp") -> None:
        self.model, self.fleet = model, fleet
        self.dense_dtype, self.dense_optimizer, self.overlap = dense_dtype, dense_optimizer, overlap
        self.specs = fleet.specs()
        self.ceilings = {name: ceilings(spec) for name, spec in self.specs.items()}
        self.host = {name: host_costs(name) for name in self.ceilings}
        self.rank_devices = fleet.rank_devices()
        self.links: FleetLinks = fleet_links(fleet)
        self.matmuls = dense_matmuls(model)
        self.params = dense_params(model)
        # (weights, optimizer state + gradients) of the dense layers on each rank
        self.dense_bytes = mem.dense_parameter_bytes(model, dense_optimizer=dense_optimizer,
                                                     world_size=fleet.world_size)
        # one GPU trains with polyrec's tables unsharded: the lookup writes into DLRM-DCNv2's x0
        # (polyrec.models.dlrm sets PolyrecEmbeddings.lead_columns); sharded tables concatenate
        self.x0_in_lookup = fleet.world_size == 1
        # feature values per sample each rank receives from the pooled all-to-all (none on one GPU)
        self.exchanged_dim = len(model.tables) * model.embedding_dim if fleet.world_size > 1 else 0
        # the trainer's GPU Adagrad (FusedAdagrad) writes the masters' half-precision copies the forward
        # takes (polyrec.kernels.master_copies): no cast per step, the copies written by the optimizer
        self.kept_copies = dense_optimizer == "adagrad" and mem.DENSE_DTYPE_BYTES[dense_dtype] < FP32
        # fp8 dense layers: their fp8 GEMMs priced at the fp8 matmul rate, the rest (and the activations) bf16
        self.fp8 = dense_dtype == "fp8"
        self.gemm_dtype = "bf16" if self.fp8 else dense_dtype
        _check_matrix_rates(dense_dtype, self.gemm_dtype, self.specs)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one Estimator lives for one planning call
    def tbe_seconds(self, device: str, loads: tuple[ShardLoad, ...]) -> tuple[float, float, float, str]:
        return tbe_group_seconds(loads, self.specs[device], self.ceilings[device],
                                 mem.DENSE_DTYPE_BYTES[self.dense_dtype])

    @functools.lru_cache(maxsize=4096)  # noqa: B019
    def tbe_merge_levels(self, device: str, loads: tuple[ShardLoad, ...], host_bound: bool = False) -> int:
        """Merge-level launches of the backward of one module holding ``loads`` (its selected update configs;
        ``host_bound``: as the trainer selects them on a step predicted host-bound). The merge takes the
        slots of every update launch: a dim group's launch covers all sorted positions."""
        configs = self.tbe_update_configs(device, loads, host_bound)
        programs = sum(-(-module_nnz(loads) // c.span) for c in configs)
        return tbe.merge_levels(programs, tbe.LEVEL_TILE * configs[-1].merge_chunks)

    @functools.lru_cache(maxsize=4096)  # noqa: B019
    def tbe_update_configs(self, device: str, loads: tuple[ShardLoad, ...],
                           host_bound: bool = False) -> tuple[tbe_select.UpdateConfig, ...]:
        """The selected config of each update launch of one module holding ``loads`` (one per dim group
        where it groups, ``shard_cost.dim_groups``)."""
        spec, ceil, grad_bytes = self.specs[device], self.ceilings[device], mem.DENSE_DTYPE_BYTES[self.dense_dtype]
        return tuple(update_config(group, spec, ceil, grad_bytes, host_bound, module=loads)
                     for group in dim_groups(loads, spec, ceil, grad_bytes, host_bound))

    def embedding_seconds(self, rank: int, loads: list[ShardLoad]) -> tuple[float, float, float, dict[str, str]]:
        """(fwd, bwd+update, of that the id sorts) seconds of one rank: one TBE module per (weight
        dtype, optimizer), and the split of the ids between them where there are several."""
        device = self.rank_devices[rank]
        grouped = modules(loads)
        fwd, bwd, sort = split_seconds(list(grouped.values()), self.ceilings[device]), 0.0, 0.0
        labels = {}
        for (dtype, opt), group in grouped.items():
            key = module_key(group)
            f, b, sort_s, label = self.tbe_seconds(device, key)
            host = sum(host_traffic_seconds(s, self.specs[device]) for s in group)
            fwd, bwd, sort = fwd + f + host / 2, bwd + b + host / 2, sort + sort_s
            labels[f"tbe.{dtype}.{opt}"] = label
        return fwd, bwd, sort, labels

    @functools.lru_cache(maxsize=256)  # noqa: B019
    def dense_op_times(self, device: str, batch: int) -> tuple[OpTime, ...]:
        """Every op of the dense half (``planner.ops``) with its device seconds on one device kind: GEMMs
        as the selector runs them, memory-bound ops at their rate class of the copy bandwidth."""
        spec, ceil = self.specs[device], self.ceilings[device]
        copy = ceil.copy_bandwidth.value
        epilogues = {f"{m.name}.fwd": _EPILOGUE[(m.epilogue, m.bias)] for m in self.matmuls}
        inv = dense_inventory(self.model, batch, mem.DENSE_DTYPE_BYTES[self.dense_dtype], self.x0_in_lookup,
                              self.kept_copies, self.fp8)
        out = []
        for op in inv.ops:
            if op.gemm is None:
                out.append(OpTime(op=op, seconds=memory_op_seconds(op, copy),
                                  launches=Launches(triton=op.triton_ops, torch_ops=op.torch_ops)))
                continue
            if op.gemm.fp8:
                out.append(OpTime(op=op, seconds=fp8_gemm_seconds(op.gemm, spec, ceil), epilogue=op.gemm.epilogue,
                                  launches=Launches(torch_ops=op.torch_ops), kernel="library fp8"))
                continue
            epi = epilogues.get(op.gemm.op, op.gemm.epilogue)
            in_place = op.gemm.library_adds_residual
            choice = gemm_select.select_gemm(op.gemm.m, op.gemm.n, op.gemm.k, self.gemm_dtype, spec, epilogue=epi,
                                             library_adds_residual=in_place)
            launches = gemm_launches(choice.backend, choice.config.split_k, "none" if in_place else epi)
            out.append(OpTime(op=op, seconds=choice.gpu_seconds, epilogue=epi,  # the host side is the launch model's
                              launches=launches, kernel=f"{choice.backend} {choice.config.label}"))
        return tuple(out)

    @functools.lru_cache(maxsize=256)  # noqa: B019
    def dense_seconds(self, device: str, batch: int) -> DenseTimes:
        """Device seconds of the dense half on one device kind (the sum of ``dense_op_times`` by phase),
        and its launches."""
        copy = self.ceilings[device].copy_bandwidth.value
        inv = dense_inventory(self.model, batch, mem.DENSE_DTYPE_BYTES[self.dense_dtype], self.x0_in_lookup,
                              self.kept_copies, self.fp8)
        seconds = {"fwd": 0.0, "bwd": 0.0}
        after = 0.0
        launches = Launches(torch_ops=inv.autograd_nodes)
        times = self.dense_op_times(device, batch)
        for t in times:
            seconds[t.op.phase] += t.seconds
            after += t.seconds if runs_after_cross_input_grad(t.op) else 0.0
            launches += t.launches
        labels = tuple((t.op.gemm.op, t.kernel) for t in times if t.op.gemm is not None)
        copies = mem.DENSE_DTYPE_BYTES[self.dense_dtype] * self.params if self.kept_copies else 0  # written
        opt = (FP32 * self.params * DENSE_OPTIMIZER_VALUES[self.dense_optimizer] + copies) / copy
        tensors = sum(TENSORS_PER_BIAS_MATMUL if m.bias else 1 for m in self.matmuls)
        return DenseTimes(fwd_s=seconds["fwd"], bwd_s=seconds["bwd"], optimizer_s=opt, after_input_grad_s=after,
                          launches=launches,
                          optimizer_launches=optimizer_launches(self.dense_optimizer, tensors), labels=labels)

    @functools.lru_cache(maxsize=4096)  # noqa: B019
    def tbe_workspace(self, device: str, lookups: float, dim: int, weight_dtype: str, optimizer: str) -> int:
        """Backward buffers of one TBE module with ``lookups`` ids (at the update tile its selector picks)."""
        block_d = tbe_forward.block_d([dim])
        ucfg = tbe_select.select_update(self.specs[device], nnz=max(int(lookups), 1), block_d=block_d,
                                        row_bytes=block_d * WEIGHT_BYTES[weight_dtype],
                                        state_tiles=mem.STATE_PER_ELEMENT[optimizer],
                                        rounding=tbe.rounded(weight_dtype),
                                        grad_bytes=mem.DENSE_DTYPE_BYTES[self.dense_dtype], ceil=self.ceilings[device])
        return mem.tbe_workspace_bytes(lookups=lookups, block_d=block_d, tile=ucfg.tile,
                                       wide_keys=self.model.total_rows >= 2**31 - 1)

    @functools.lru_cache(maxsize=256)  # noqa: B019
    def dense_activations(self, batch: int) -> tuple[int, int]:
        """(activations, BLAS workspace) of the dense backward's peak at ``batch``
        (``memory.dense_activation_bytes``)."""
        return mem.dense_activation_bytes(self.model, batch, self.dense_dtype, self.x0_in_lookup)

    def backward_peak(self, device: str, modules: dict[tuple[str, str], float], dim: int, pooled: int,
                      batch: int) -> tuple[int, int]:
        """(activations, workspace) of one rank at its peak, beyond the embedding activations and the weights:
        the larger of the dense backward (saved activations and backward buffers, the BLAS workspace, and the
        sort keys held through it) and the embedding backward (the pooled outputs' gradient and the largest
        TBE module's buffers, at the update tile its selector picks). ``modules``: lookups per (weight dtype,
        optimizer) module on the rank; ``dim``: its widest shard; ``pooled``: its pooled output values."""
        cb = mem.DENSE_DTYPE_BYTES[self.dense_dtype]
        dense_act, blas = self.dense_activations(batch)
        tbe_ws = max((self.tbe_workspace(device, n, dim, dt, opt) for (dt, opt), n in modules.items()), default=0)
        held = mem.held_key_bytes(sum(modules.values()), self.fleet.world_size)
        if dense_act + blas + held >= cb * pooled + tbe_ws:
            return dense_act + held, blas
        return cb * pooled, tbe_ws

    def rank_memory(self, rank: int, loads: list[ShardLoad], batch: int) -> DeviceMemory:
        """Allocator bytes of one rank at its peak: weights, optimizer state, the embedding activations and
        ``backward_peak``."""
        device = self.rank_devices[rank]
        capacity = self.specs[device].hbm_bytes
        cb = mem.DENSE_DTYPE_BYTES[self.dense_dtype]
        weights = state = host = 0
        for s in loads:
            w, st, h = mem.shard_device_bytes(s.rows, s.dim, weight_dtype=s.weight_dtype, optimizer=s.optimizer,
                                              memory=s.memory, cache_rows=s.cache_rows)
            weights, state, host = weights + w, state + st, host + h
        dense_w, dense_state = self.dense_bytes
        pooled = sum(s.bags * s.dim for s in loads)
        lookups, bags = sum(s.accesses for s in loads), sum(s.bags for s in loads)
        emb_act = mem.embedding_activation_bytes(
            lookups=lookups, bags=bags, pooled_values=pooled,
            local_batch=batch, exchanged_dim=self.exchanged_dim,
            num_dense=self.model.dense.num_dense, compute_bytes=cb)
        groups: dict[tuple[str, str], float] = {}
        for s in loads:
            groups[(s.weight_dtype, s.optimizer)] = groups.get((s.weight_dtype, s.optimizer), 0.0) + s.accesses
        dim = max((s.dim for s in loads), default=self.model.embedding_dim)
        activations, workspace = self.backward_peak(device, groups, dim, pooled, batch)
        split = mem.split_index_bytes(lookups=lookups, bags=bags, modules=len(groups))
        return DeviceMemory(rank=rank, device=device, weights=weights + dense_w, optimizer_state=state + dense_state,
                            activations=emb_act + split + activations, workspace=workspace,
                            reserve=mem.reserve_bytes(capacity), capacity=capacity, host_bytes=host)

    def memory(self, plans: Sequence[TablePlan], batch: int) -> list[DeviceMemory]:
        """Every rank's memory at its peak (``rank_memory``), in rank order."""
        world = self.fleet.world_size
        per_rank: list[list[ShardLoad]] = [[] for _ in range(world)]
        for s in shard_loads(self.model, plans, batch, world):
            per_rank[s.rank].append(s)
        return [self.rank_memory(rank, per_rank[rank], batch) for rank in range(world)]

    def host_memory(self, memory: Sequence[DeviceMemory]) -> list[int]:
        """Per host, the host memory its ranks' host-cached tables take (``memory`` of every rank)."""
        hosts = [0] * self.fleet.hosts
        for m in memory:
            hosts[self.fleet.host_of(m.rank)] += m.host_bytes
        return hosts

    def memory_fits(self, memory: Sequence[DeviceMemory]) -> bool:
        """Whether every rank's peak fits its HBM (with the reserve) and every host's memory holds the
        host-cached tables of its ranks (``memory.host_memory_limit``)."""
        limit = mem.host_memory_limit(self.fleet)
        return all(m.fits for m in memory) and all(h <= limit for h in self.host_memory(memory))

    def collective_seconds(self, loads: list[ShardLoad], batch: int) -> tuple[float, float, float, float]:
        """(input, output, gradient) all-to-all and dense all-reduce seconds; the busiest rank bounds."""
        world = self.fleet.world_size
        if world == 1:
            return 0.0, 0.0, 0.0, 0.0
        # the pooled rows and their gradients cross in the dense half's dtype (the sharded TBE's output
        # dtype, polyrec.runtime.parallel.sharded_embeddings)
        pooled_bytes = mem.DENSE_DTYPE_BYTES[self.dense_dtype]
        id_bytes = wire_id_bytes(self.model)
        out_bytes = [0.0] * world  # pooled values each rank sends back (its shards x all samples)
        in_bytes = [0.0] * world  # ids each rank receives
        for s in loads:
            out_bytes[s.rank] += s.bags * s.dim * pooled_bytes
            in_bytes[s.rank] += s.accesses * id_bytes + s.bags * LENGTH_BYTES
        a2a_in = all_to_all_seconds(max(in_bytes), self.links)
        a2a_out = all_to_all_seconds(max(out_bytes), self.links)
        all_reduce = all_reduce_seconds(4.0 * self.params, self.links)
        return a2a_in, a2a_out, a2a_out, all_reduce

    def placement_seconds(self, rank: int, batch: int) -> float:
        """Device seconds of the copies around one rank's pooled exchanges (several ranks;
        polyrec.runtime): the rows placed into ``[B, out]`` and the gradient gathered back, each a read
        and a write of ``B x out`` values in the dense dtype (polyrec.kernels.place_columns)."""
        if self.fleet.world_size == 1:
            return 0.0
        out = batch * sum(t.dim for t in self.model.tables) * mem.DENSE_DTYPE_BYTES[self.dense_dtype]
        return 2 * 2 * out / self.ceilings[self.rank_devices[rank]].copy_bandwidth.value

    def input_copies_seconds(self, rank: int, mine: list[ShardLoad], sent_ids: float) -> float:
        """Device seconds of one rank's input distribution copies (several ranks): its ``sent_ids`` local
        ids packed (int64 in, ids out) and the ids its shards ``mine`` receive regrouped
        (polyrec.runtime.input_dist). They run with the input all-to-all, on its stream a step ahead."""
        if self.fleet.world_size == 1:
            return 0.0
        id_bytes = wire_id_bytes(self.model)
        pack = sent_ids * (mem.INDEX_BYTES + id_bytes)
        regroup = sum(s.accesses for s in mine) * 2 * id_bytes
        return (pack + regroup) / self.ceilings[self.rank_devices[rank]].copy_bandwidth.value

    def host_seconds(self, rank: int, loads: list[ShardLoad], dense: DenseTimes, host_bound: bool = False) -> float:
        """CPU seconds to issue one step on ``rank`` (``planner.host``); ``host_bound``: the merge levels
        the trainer's embedding backward takes on a step predicted host-bound."""
        device = self.rank_devices[rank]
        keys = [module_key(group) for group in modules(loads).values()]
        emb_f, emb_b = tbe_launches([self.tbe_merge_levels(device, k, host_bound) for k in keys],
                                    [[c.variant for c in self.tbe_update_configs(device, k, host_bound)] for k in keys])
        costs: HostCosts = self.host[self.rank_devices[rank]]
        return (emb_f + emb_b + split_launches(len(keys)) + dense.launches
                + dense.optimizer_launches).step_seconds(costs)

    def graphed_host_seconds(self, rank: int, host_s: float, dense: DenseTimes) -> float:
        """CPU seconds of the step of ``host_s`` with its dense half CUDA-graphed: its launches replaced by
        the graph's replay (``HostCosts.graphed_dense_s``); the embeddings and the optimizer stay eager."""
        costs: HostCosts = self.host[self.rank_devices[rank]]
        return host_s - dense.launches.seconds(costs) + costs.graphed_dense_s

    def evaluate(self, plans: Sequence[TablePlan], batch: int) -> Estimate:
        world = self.fleet.world_size
        loads = shard_loads(self.model, plans, batch, world)
        per_rank: list[list[ShardLoad]] = [[] for _ in range(world)]
        for s in loads:
            per_rank[s.rank].append(s)
        emb_f, emb_b, emb_sort, dense_f, dense_b, opt, other, memory = [], [], [], [], [], [], [], []
        host, graphed, tail, input_copies, dense_times = [], [], [], [], []
        kernels: dict[str, str] = {}
        sent_ids = sum(s.accesses for s in loads) / world  # each rank's local ids, sent once per piece
        for rank in range(world):
            f, b, sort, labels = self.embedding_seconds(rank, per_rank[rank])
            dense = self.dense_seconds(self.rank_devices[rank], batch)
            dense_times.append(dense)
            emb_f.append(f)
            emb_b.append(b)
            emb_sort.append(sort)
            dense_f.append(dense.fwd_s)
            dense_b.append(dense.bwd_s)
            tail.append(dense.after_input_grad_s)
            opt.append(dense.optimizer_s)
            other.append(self.placement_seconds(rank, batch))
            input_copies.append(self.input_copies_seconds(rank, per_rank[rank], sent_ids))
            host.append(self.host_seconds(rank, per_rank[rank], dense))
            graphed.append(self.graphed_host_seconds(rank, host[-1], dense))
            memory.append(self.rank_memory(rank, per_rank[rank], batch))
            kernels |= {f"{self.rank_devices[rank]}.{k}": v for k, v in labels.items()}
            kernels |= {f"{self.rank_devices[rank]}.gemm.{op}": v for op, v in dense.labels}
        a2a_in, a2a_out, a2a_grad, ar = self.collective_seconds(loads, batch)
        parts = StepParts(embedding_fwd_s=emb_f, embedding_bwd_s=emb_b, embedding_sort_s=emb_sort,
                          dense_fwd_s=dense_f, dense_bwd_s=dense_b,
                          dense_optimizer_s=opt, other_s=other, gradient_tail_s=self.gradient_tail(tail),
                          input_all_to_all_s=a2a_in + max(input_copies),
                          output_all_to_all_s=a2a_out, grad_all_to_all_s=a2a_grad, all_reduce_s=ar,
                          all_reduce_bytes=4.0 * self.params, overlap=self.overlap if world > 1 else "none",
                          host_s=host, graphed_host_s=graphed, contention=NCCL_CONTENTION)
        return Estimate(step=self._as_run(parts, per_rank, dense_times), memory=memory,
                        fits=self.memory_fits(memory), kernels=kernels, table_times={})

    def _as_run(self, parts: StepParts, per_rank: list[list[ShardLoad]], dense: list[DenseTimes]) -> StepTime:
        """The step time, with the host time of the merge levels the trainer runs: where a step (eager, or
        graphed) is predicted host-bound by launches counted at the device-time choice, the trainer's
        embedding backward selects with the levels' host issue (``polyrec.runtime.graphs``, told by
        ``StepTime.host_bound`` / ``graphed_host_bound``, which stay set where that selection's fewer
        levels leave the step device-bound)."""
        step = step_time(parts)
        device_s = step.total_s - step.host_excess_s
        eager_bound, graphed_bound = step.host_s > device_s, step.graphed_host_s > device_s
        if not (eager_bound or graphed_bound):
            return step
        bound = [self.host_seconds(r, per_rank[r], dense[r], host_bound=True) for r in range(len(per_rank))]
        host = bound if eager_bound else parts.host_s
        graphed = ([self.graphed_host_seconds(r, bound[r], dense[r]) for r in range(len(per_rank))]
                   if graphed_bound else parts.graphed_host_s)
        return replace(step_time(replace(parts, host_s=host, graphed_host_s=graphed)), host_bound=eager_bound,
                       graphed_host_bound=graphed_bound)

    def gradient_tail(self, after_input_grad: list[float]) -> list[float] | None:
        """Per rank, the dense backward that runs after the embedding gradient's all-to-all has
        started (``StepParts.gradient_tail_s``): on several ranks of a model with a cross network,
        whose input gradient the runtime exchanges as soon as it is final (polyrec.runtime.trainer
        ``_early_gradient_exchange``); None otherwise (the dot interaction's gradient is final only
        when the dense backward ends, and one rank exchanges nothing)."""
        if self.fleet.world_size == 1 or self.model.dense.interaction != "dcnv2":
            return None
        return after_input_grad

    def table_times(self, plans: Sequence[TablePlan], batch: int) -> dict[str, tuple[float, float]]:
        """Per table, (fwd, bwd+update) seconds of its slowest shard run alone (for the report)."""
        out: dict[str, tuple[float, float]] = {}
        for s in shard_loads(self.model, plans, batch, self.fleet.world_size):
            device = self.rank_devices[s.rank]
            f, b, _, _ = self.tbe_seconds(device, (anonymous(s),))
            host = host_traffic_seconds(s, self.specs[device])
            prev = out.get(s.table, (0.0, 0.0))
            out[s.table] = (max(prev[0], f + host / 2), max(prev[1], b + host / 2))
        return out


def fp8_gemm_seconds(gemm: GemmShape, spec: DeviceSpec, ceil: Ceilings) -> float:
    """Device seconds of one fp8 GEMM (``torch._scaled_mm``: cuBLASLt / hipBLASLt) by the library model at the
    calibrated fp8 matmul rate (``hw calibrate``: e4m3, unit scales, bf16 out), 1-byte operands."""
    problem = GemmProblem(m=gemm.m, n=gemm.n, k=gemm.k, dtype="fp8", out_bytes=gemm.out_bytes, epilogue="none")
    return library_seconds(problem, spec, ceil)


def memory_op_seconds(op: Op, copy: float) -> float:
    """Device seconds of a memory-bound op at ``copy`` bytes/s: its bytes at its rate class, at least one
    small kernel's time, plus its bias-gradient column sums."""
    moved = max(op.bytes / (copy * RATE_CLASSES[op.rate]), MIN_KERNEL_S) if op.bytes else 0.0
    return moved + op.column_sums * COLUMN_SUM_S


def runs_after_cross_input_grad(op: Op) -> bool:
    """Whether a dense op runs after the cross network's input gradient x0 is final, where
    polyrec.kernels.dcn hands it on (``on_input_grad``, before layer 0's weight gradients): layer 0's
    two weight-gradient GEMMs (fp32 gradients of the masters, no casts after them) and the bottom MLP's
    whole backward."""
    if op.phase != "bwd":
        return False
    return op.name.split(".")[0] == "bottom" or op.name in ("cross.0.u.wgrad", "cross.0.v.wgrad")
