"""The fused backward of ``TableBatchedEmbedding``: the ids' sort keys (written by the pooled forward
of a lookup that will be trained, else by ``sort_keys_kernel``) sorted (early, by ``prepare_backward``,
or in the backward), duplicates reduced exactly and the optimizer applied in place, then the runs that
cross tile ends merged level by level. A mixin: it reads the module's tables, layout, weights,
optimizer state and configs (``polyrec.kernels.tbe``); the kernels are in ``tbe_backward`` and ``tbe_merge``. See
docs/tbe.md.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from polyrec.kernels import tbe_select
from polyrec.kernels.grid import ceil_div, element_span
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe_backward import PERMUTE_BLOCK, lane_update_kernel, permute_kernel, update_kernel
from polyrec.kernels.tbe_forward import sort_keys_kernel, vector_width
from polyrec.kernels.tbe_merge import merge_level_kernel
from polyrec.kernels.tbe_optim import OPTIM_CODE
from polyrec.perfmodel.tbe import LEVEL_TILE


class FusedBackward:
    """The backward half of ``polyrec.kernels.tbe.TableBatchedEmbedding`` (mixed into it)."""

    def _next_seed(self) -> int:
        """The stochastic rounding's seed for this step: from the module's seed and step when deterministic,
        else drawn from torch's generator; fp32 rows round nothing and draw nothing."""
        if self.weight_dtype == torch.float32:
            return 0
        if self.deterministic:
            return (self.seed * 1_000_003 + self.step * 7_919 + 1) & 0x7FFFFFFF
        return int(torch.randint(0, 2**31 - 1, (1,)))

    def prepare_backward(self, batch: JaggedBatch) -> None:
        """Do now the part of the pooled lookup's backward that reads only the ids (sort keys, the
        sort, and for the lane update the gradient offsets of a contiguous ``[B, output_dim]``
        gradient), so that it runs while something else does: sharded embeddings call it while the
        pooled rows cross the all-to-all. The next backward of this same batch (same ``values`` and
        ``offsets`` tensors, unmodified) uses it; anything else recomputes. Kept until then or the
        next ``forward``. The batch's metadata is checked first (``check_batch``): its kernels read it."""
        self.check_batch(batch)
        if not self.pooled_features or batch.nnz == 0 or batch.batch_size == 0:
            return
        with torch.no_grad():
            ids = self._sort_ids(batch.values, batch.offsets, batch.weights, batch.batch_size, None)
            if any(c.variant == "lane" for c in self.plan_configs(ids.plan, batch.nnz)):
                ids.grad_stride = self.output_dim
                ids.g_off, ids.sorted_scale = self._permute(batch.batch_size * self.output_dim, ids,
                                                            batch.batch_size, False)
        self._prepared = ids

    def backward_side(self, *read: Tensor | None) -> contextlib.AbstractContextManager:
        """Where the fused backward runs: on ``backward_stream`` when its user set one, else on the
        current stream. That user orders the stream after the gradient and whatever wrote the tables
        before, and the tables' next reader after it (``polyrec.runtime.sharding``: the update runs
        beside the dense optimizer and DDP's last all-reduces). The tensors it reads that were made on
        another stream (``read``: the batch and the gradient; the forward's sort keys, a prepared
        sort) are recorded on it, so that the caching allocator hands them out again only when it is done."""
        stream = self.backward_stream
        if stream is None:
            return contextlib.nullcontext()
        held = [*read, *_tensors_of(self._prepared), *_tensors_of(self._forward_keys)]
        for t in held:
            if t is not None:
                t.record_stream(stream)
        return torch.cuda.stream(stream)

    def _take_prepared(self, values: Tensor, offsets: Tensor, per_sample: Tensor | None) -> SortedIds | None:
        """The prepared sort of exactly this batch (the same tensors at the same version), once."""
        ids, self._prepared = self._prepared, None
        return ids if _of_batch(ids, values, offsets, per_sample) else None

    def new_sort_keys(self, values: Tensor, offsets: Tensor, per_sample: Tensor | None,
                      sequence: bool = False) -> SortKeys:
        """Unwritten buffers for the sort keys of a batch (the keys hold the invalid key until written)."""
        n, dev = values.numel(), self.weights.device
        has_mean = not sequence and any(self.tables[self.feature_to_table[f]].pooling == "mean"
                                        for f in self.pooled_features)
        has_scale = not sequence and (per_sample is not None or has_mean)
        plan = self.key_plan(n)
        # every launch's programs covered whole, whatever their spans (24 and 16 need 32 positions at n = 17)
        length = max(padded_length(n, c.span) for c in self.plan_configs(plan, n))
        keys = torch.full((length,), plan.invalid_key, dtype=plan.key_dtype,
                          device=dev)  # the padding sorts last (the invalid key)
        return SortKeys(batch=(values, offsets, per_sample), versions=_versions(values, offsets, per_sample),
                        plan=plan, keys=keys, src=torch.empty(n, dtype=torch.int32, device=dev),
                        scale=torch.empty(n, dtype=torch.float32, device=dev) if has_scale else None)

    def _take_forward_keys(self, values: Tensor, offsets: Tensor, per_sample: Tensor | None) -> SortKeys | None:
        """The sort keys the pooled forward wrote for exactly this batch (unmodified since), once."""
        keys, self._forward_keys = self._forward_keys, None
        return keys if _of_batch(keys, values, offsets, per_sample) else None

    def _sort_keys(self, values: Tensor, offsets: Tensor, per_sample: Tensor | None, batch_size: int,
                   sequence: list | None) -> SortKeys:
        """Each id position's global row (the sort key), gradient row and scale (``sort_keys_kernel``)."""
        lay = self.layout
        feats = self._sequence_ids if sequence is not None else self._pooled_ids
        out = self.new_sort_keys(values, offsets, per_sample, sequence is not None)
        seq_base = (torch.tensor([r[3] for r in sequence], dtype=torch.int64, device=self.weights.device)
                    if sequence is not None else None)
        batch = JaggedBatch(values=values, offsets=offsets, batch_size=batch_size,
                            num_features=len(self.feature_to_table))
        fcfg = self._forward_config(batch, sequence is not None)
        sort_keys_kernel[(ceil_div(batch_size, fcfg.bags), feats.numel())](
            values, offsets, per_sample if out.scale is not None else None, out.keys, out.src, out.scale,
            feats, lay.feat_table, lay.feat_mean, lay.table_rows, out.plan.key_base, seq_base,
            batch_size, values.numel(), out.plan.invalid_key,
            BAGS=fcfg.bags, HOTS=fcfg.hots, SEQUENCE=sequence is not None, HAS_SCALE=out.scale is not None,
            num_warps=fcfg.num_warps)
        return out

    def _sort_ids(self, values: Tensor, offsets: Tensor, per_sample: Tensor | None, batch_size: int,
                  sequence: list | None) -> SortedIds:
        """The sort keys (the pooled forward's, else ``_sort_keys``), sorted by key."""
        written = self._take_forward_keys(values, offsets, per_sample) if sequence is None else None
        keys = written or self._sort_keys(values, offsets, per_sample, batch_size, sequence)
        sorted_keys, perm = torch.sort(keys.keys, stable=self.deterministic)
        return SortedIds(batch=keys.batch, versions=keys.versions, plan=keys.plan, keys=sorted_keys, perm=perm,
                         src=keys.src, scale=keys.scale)

    def _fused_backward(self, grad: Tensor, values: Tensor, offsets: Tensor, per_sample: Tensor | None,
                        batch_size: int, sequence: list | None) -> None:
        """Sort the ids (unless ``prepare_backward`` did), reduce duplicates, apply the optimizer in
        place; one optimizer step."""
        n, dev, lay = values.numel(), self.weights.device, self.layout
        self.step += 1
        prepared = self._take_prepared(values, offsets, per_sample) if sequence is None else None
        if n == 0 or batch_size == 0:
            return
        feats = self._sequence_ids if sequence is not None else self._pooled_ids
        if feats.numel() == 0:
            return
        if grad.stride(-1) != 1:  # the kernels take any row stride (the trainer's gradient is a column slice)
            grad = grad.contiguous()
        ids = prepared or self._sort_ids(values, offsets, per_sample, batch_size, sequence)
        plan = ids.plan
        configs = self.plan_configs(plan, n)
        programs = [ceil_div(n, c.span) for c in configs]
        slots = 2 * sum(programs)  # two per program of each group's launch, the groups' slots one after another
        partial = torch.empty(slots, self.block_d, dtype=torch.float32, device=dev)  # [slots, BLOCK_D]
        part_key = torch.empty(slots, dtype=torch.int64, device=dev)  # [slots] row of each piece
        opt = self.optimizer
        common = dict(lr=opt.step_size(self.step), eps=opt.eps, mix1=1.0 - opt.beta1, mix2=1.0 - opt.beta2,
                      weight_decay=opt.weight_decay, seed=self._next_seed())
        flags = dict(OPTIM=OPTIM_CODE[opt.kind], HAS_WD=opt.weight_decay > 0,
                     STOCHASTIC=self.weight_dtype != torch.float32, BLOCK_D=self.block_d, VEC=self.vec,
                     T_PAD=self.t_pad)
        if any(c.variant == "lane" for c in configs) and ids.grad_stride != grad.stride(0):
            ids.g_off, ids.sorted_scale = self._permute(element_span(grad), ids, batch_size, sequence is not None,
                                                        grad.stride(0))  # not prepared for this gradient's layout
            ids.grad_stride = grad.stride(0)
        slot = 0
        for g, (block, ucfg, progs) in enumerate(zip(plan.blocks, configs, programs)):
            group = dict(GROUPED=plan.grouped, PART_D=self.block_d, BLOCK_D=block, TILE=ucfg.tile)
            self._update_group(ucfg, progs, grad, ids, partial[slot:], part_key[slot:], g, batch_size, sequence,
                               common, dict(flags, **group))
            slot += 2 * progs
        self._merge(partial, part_key, common, flags, configs[-1].merge_chunks)

    def _update_group(self, ucfg: tbe_select.UpdateConfig, programs: int, grad: Tensor, ids: SortedIds,
                      partial: Tensor, part_key: Tensor, group: int, batch_size: int, sequence: list | None,
                      common: dict, flags: dict) -> None:
        """The update launch of dim group ``group`` (its keys ``group * total_rows`` and up; every key
        when there is one group) with config ``ucfg`` over ``programs`` programs, parking its pieces in
        ``partial`` / ``part_key`` (2 slots per program)."""
        lay, dev = self.layout, self.weights.device
        keys = (group * self.total_rows, (group + 1) * self.total_rows)
        if ucfg.variant == "scan":
            update_kernel[(programs,)](
                self.weights, self.state1, self.state2, grad, partial, part_key, ids.keys, ids.perm, ids.src,
                ids.scale, lay.table_row_base, lay.table_elem_base, lay.table_dim, lay.feat_col,
                ids.src.numel(), batch_size, grad.stride(0), len(self.tables), ids.plan.invalid_key, *keys, **common,
                SEQUENCE=sequence is not None, HAS_SCALE=ids.scale is not None, num_warps=ucfg.num_warps, **flags)
            return
        lane_flags = dict(flags, VEC=min(self.vec, self._grad_vec(grad)), ONE_DIM=self.one_dim)
        cap = ({"maxnreg": ucfg.max_registers}
               if ucfg.max_registers and dev.type == "cuda" and torch.version.hip is None else {})
        lane_update_kernel[(programs,)](
            self.weights, self.state1, self.state2, grad, partial, part_key, ids.keys, ids.g_off, ids.sorted_scale,
            lay.table_row_base, lay.table_elem_base, lay.table_dim, len(self.tables), ids.plan.invalid_key, *keys,
            **common, HAS_SCALE=ids.scale is not None, CHUNKS=ucfg.chunks, num_warps=ucfg.num_warps, **cap,
            **lane_flags)

    def _merge(self, partial: Tensor, part_key: Tensor, common: dict, flags: dict, chunks: int) -> None:
        """Finish the runs that cross tile ends, level by level (``merge_level_kernel``): each level
        reads the pieces the one before parked and parks 2 per LEVEL_TILE * ``chunks`` slots (the update
        config's ``merge_chunks``); the last level is one program, so every run ends in it."""
        lay, dev = self.layout, self.weights.device
        warps = tbe_select.lane_warps(self.block_d, tbe_select.selection_spec(dev).warp_size)
        level_flags = dict(flags, TILE=LEVEL_TILE, CHUNKS=chunks, VEC=min(self.vec, tbe_select.LANE_VEC),
                           ONE_DIM=self.one_dim)
        while True:
            programs = ceil_div(part_key.numel(), LEVEL_TILE * chunks)
            out = torch.empty(programs * 2, self.block_d, dtype=torch.float32, device=dev)  # [programs * 2, BLOCK_D]
            out_key = torch.empty(programs * 2, dtype=torch.int64, device=dev)
            merge_level_kernel[(programs,)](
                self.weights, self.state1, self.state2, partial, part_key, out, out_key,
                lay.table_row_base, lay.table_elem_base, lay.table_dim, part_key.numel(), len(self.tables),
                **common, num_warps=warps, **level_flags)
            if programs == 1:
                return
            partial, part_key = out, out_key

    def _grad_vec(self, grad: Tensor) -> int:
        """Elements per vector access of the output-gradient slices (every slice offset is a multiple)."""
        dims = [t.dim for t in self.tables] + [grad.stride(0)]
        return vector_width(dims, grad.element_size()) if grad.data_ptr() % 16 == 0 else 1

    def _permute(self, grad_span: int, ids: SortedIds, batch_size: int, sequence: bool,
                 grad_stride: int | None = None) -> tuple[Tensor, Tensor | None]:
        """Gradient element offset [n] (int32 when the gradient allows) and scale [n] in sorted order,
        for a gradient spanning ``grad_span`` elements (``grid.element_span``) with row stride ``grad_stride``
        (default output_dim)."""
        n, scale = ids.keys.numel(), ids.scale
        off_dtype = torch.int32 if grad_span <= 2**31 else torch.int64
        g_off = torch.empty(n, dtype=off_dtype, device=ids.keys.device)
        sorted_scale = torch.empty(n, dtype=scale.dtype, device=scale.device) if scale is not None else None
        permute_kernel[(ceil_div(n, PERMUTE_BLOCK),)](
            ids.keys, ids.perm, ids.src, scale, self.layout.feat_col, g_off, sorted_scale, n, batch_size,
            self.output_dim if grad_stride is None else grad_stride, ids.plan.invalid_key, SEQUENCE=sequence,
            HAS_SCALE=scale is not None, BLOCK=PERMUTE_BLOCK, num_warps=4)
        return g_off, sorted_scale


def padded_length(n: int, span: int) -> int:
    """Length of the sorted arrays of ``n`` id positions: the update's programs of ``span`` positions
    cover them whole, plus the one position after the last that the lane update reads (its run ends)."""
    return ceil_div(n, span) * span + 1


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyPlan:
    """How a batch's ids are keyed and updated (``TableBatchedEmbedding.key_plan``): one update launch at
    the widest BLOCK_D, keys = global row ids; or, for tables whose dims take several BLOCK_D, one launch
    per dim group at its own BLOCK_D, keys = group * total_rows + global row id, so that the sort puts
    each group's ids together (``tbe_backward._group_row``)."""

    blocks: tuple[int, ...]  # BLOCK_D of each launch, ascending
    key_base: Tensor  # [T] int64 key of each table's row 0 (the layout's table_row_base or table_key_base)
    invalid_key: int  # the key of no row: after every table's keys (len(blocks) * total_rows)

    @property
    def grouped(self) -> bool:
        return len(self.blocks) > 1

    @property
    def key_dtype(self) -> torch.dtype:
        """int32 where every key and the invalid one fit (fewer radix passes and bytes to sort)."""
        return torch.int32 if self.invalid_key < tbe_select.INT32_KEY_LIMIT else torch.int64


@dataclass(kw_only=True, slots=True)
class SortKeys:
    """Per id position of a batch, unsorted: what the backward sorts and reads, and the batch it is of."""

    batch: tuple[Tensor, Tensor, Tensor | None]  # values, offsets, per-sample weights
    versions: tuple[int, ...]  # their in-place versions when written
    plan: KeyPlan  # how the keys are made (and so how the update launches)
    keys: Tensor  # [padded_length(n, span)] sort key of each id position (``plan``); invalid key elsewhere
    src: Tensor  # [n] int32 gradient row of each id position
    scale: Tensor | None  # [n] per-sample weight x 1/len (mean) of each position, or None


@dataclass(kw_only=True, slots=True)
class SortedIds:
    """The id-only part of a backward (``TableBatchedEmbedding._sort_ids``), and the batch it is of."""

    batch: tuple[Tensor, Tensor, Tensor | None]  # values, offsets, per-sample weights
    versions: tuple[int, ...]  # their in-place versions when sorted
    plan: KeyPlan  # how the keys were made
    keys: Tensor  # [padded_length(n, span)] the sorted keys; the padding (invalid key) last
    perm: Tensor  # [padded_length] the sort's permutation (the padding's >= n)
    src: Tensor  # [n] gradient row of each id position (unsorted)
    scale: Tensor | None  # [n] per-sample weight x 1/len (mean) of each position, or None
    grad_stride: int | None = None  # the gradient row stride g_off was computed for (lane update)
    g_off: Tensor | None = None  # [padded_length] gradient element offsets in sorted order (padding: 0)
    sorted_scale: Tensor | None = None  # [padded_length] scales in sorted order (padding: 0)


def _of_batch(held: SortKeys | SortedIds | None, values: Tensor, offsets: Tensor, per_sample: Tensor | None) -> bool:
    """Whether ``held`` was made from exactly these batch tensors, unmodified since (same versions)."""
    if held is None or not (held.batch[0] is values and held.batch[1] is offsets and held.batch[2] is per_sample):
        return False
    return held.versions == _versions(values, offsets, per_sample)


def _tensors_of(held: SortKeys | SortedIds | None) -> list[Tensor]:
    """The device tensors a held sort holds (its batch's are the caller's)."""
    if held is None:
        return []
    return [v for f in fields(held) if f.name != "batch" and isinstance(v := getattr(held, f.name), Tensor)]


def _versions(*tensors: Tensor | None) -> tuple[int, ...]:
    return tuple(-1 if t is None else t._version for t in tensors)
