"""The lookups of ``TableBatchedEmbedding``: the pooled forward (its launches as the forward plan says,
writing the backward's sort keys when a backward will follow) and the sequence lookup, each with the
autograd function whose backward is the fused one. A mixin: it reads the module's tables, layout, weights,
flags and configs (``polyrec.kernels.tbe``); the kernels are in ``tbe_forward``, the backward in
``tbe_fused_backward``. See docs/tbe.md.
"""

from __future__ import annotations

import torch
from torch import Tensor

from polyrec.kernels import tbe_select
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe_forward import FLAG_BAD_ENDS, bag_ends_kernel, pooled_forward_kernel, sequence_forward_kernel
from polyrec.kernels.tbe_fused_backward import SortKeys


class Lookups:
    """The forward half of ``polyrec.kernels.tbe.TableBatchedEmbedding`` (mixed into it)."""

    def forward(self, batch: JaggedBatch, *, lead_columns: int = 0, into: Tensor | None = None) -> Tensor:
        """Pooled lookup: [B, output_dim] in ``output_dtype``; backward updates the weights in place.
        ``lead_columns``: the output is the last ``output_dim`` columns of a new [B, lead_columns +
        output_dim] buffer (its ``_base``), whose first columns are left unwritten for a caller that puts
        another tensor beside it without a copy (``polyrec.models.layers.beside``). ``into``: that buffer,
        given instead of a new one (contiguous, ``output_dtype``, on the module's device): a CUDA graph's
        static input the lookup fills in place. Per-sample weights get no gradient: a trained lookup
        refuses ones that require it."""
        if lead_columns < 0:
            raise ValueError(f"lead_columns must be >= 0, got {lead_columns}")
        if into is not None:
            self._check_into(into, batch.batch_size, lead_columns)
        if batch.weights is not None and batch.weights.requires_grad and torch.is_grad_enabled():
            raise ValueError("batch.weights requires grad, but the fused backward computes no gradient for per-sample "
                             "weights: pass batch.weights.detach() (or run the lookup under torch.no_grad())")
        self._validate(batch)
        self._prepared = None
        anchor = torch.empty(0, device=self.weights.device, requires_grad=torch.is_grad_enabled())
        return _PooledLookup.apply(anchor, self, batch.values, batch.offsets, batch.weights, batch.batch_size,
                                   lead_columns, into)

    def _check_into(self, into: Tensor, batch_size: int, lead_columns: int) -> None:
        """``forward``'s ``into`` must be the buffer it would have made: [B, lead_columns + output_dim],
        contiguous, ``output_dtype``, on the tables' device."""
        want = (batch_size, lead_columns + self.output_dim)
        if (tuple(into.shape) != want or not into.is_contiguous() or into.dtype != self.output_dtype
                or into.device != self.weights.device):
            raise ValueError(f"into: need a contiguous {list(want)} {self.output_dtype} tensor on "
                             f"{self.weights.device}, got {list(into.shape)} {into.dtype} on {into.device}"
                             f"{'' if into.is_contiguous() else ' (not contiguous)'}")

    def lookup_sequence(self, batch: JaggedBatch) -> Tensor:
        """Unpooled rows of the pooling-"none" features: [n, D], row i = the table row of the i-th id of
        those features in ``batch.values`` order (feature-major: all of the first such feature's ids,
        samples in order, then the next). All such tables must share D. Per-sample weights are not
        applied. Synchronises once (the output size depends on the offsets). Backward updates in place.
        Bad ids and offsets are masked and flagged as in ``forward``.
        """
        if not self.sequence_features:
            raise ValueError("no table has pooling 'none'; lookup_sequence has nothing to read")
        if self.sequence_dim < 0:
            raise ValueError("lookup_sequence needs all pooling-'none' tables to share one dim")
        self._validate(batch)
        anchor = torch.empty(0, device=self.weights.device, requires_grad=torch.is_grad_enabled())
        return _SequenceLookup.apply(anchor, self, batch.values, batch.offsets, batch.batch_size)

    def _pooled_forward(self, values: Tensor, offsets: Tensor, per_sample: Tensor | None, batch_size: int,
                        trained: bool, lead_columns: int = 0, into: Tensor | None = None) -> Tensor:
        """The pooled lookup; ``trained``: a backward will follow, so the launches also write its sort
        keys (kept for it in ``_forward_keys``); ``lead_columns`` and ``into`` as ``forward`` takes them."""
        batch = JaggedBatch(values=values, offsets=offsets, batch_size=batch_size,
                            num_features=len(self.feature_to_table), weights=per_sample)
        buffer = into if into is not None else torch.empty(
            batch_size, lead_columns + self.output_dim, dtype=self.output_dtype,
            device=self.weights.device)  # [B, lead + output_dim]
        out = buffer[:, lead_columns:] if lead_columns else buffer  # [B, output_dim]
        self._forward_keys = None
        if not self.pooled_features:
            return out.zero_()
        if batch_size == 0:  # no bag to read: any id lies outside every bag
            self._check_bag_ends(offsets, batch.nnz)
            self._record_flags()
            return out.zero_()
        keys = self.new_sort_keys(values, offsets, per_sample) if trained and batch.nnz else None
        for launch, feature_ids in self.forward_plan(batch):
            self.launch_pooled(batch, out, feature_ids, launch.config, keys)
        self._forward_keys = keys
        self._check_bag_ends(offsets, batch.nnz)
        self._record_flags()
        return out

    def launch_pooled(self, batch: JaggedBatch, out: Tensor, feature_ids: Tensor, cfg: tbe_select.ForwardConfig,
                      keys: SortKeys | None = None) -> None:
        """One pooled-lookup launch over the features ``feature_ids`` [k] int32 (pooled ones) of ``batch``
        into their columns of ``out`` [B, output_dim], with launch config ``cfg``; with ``keys``
        (``new_sort_keys`` of this batch), also the backward's sort keys of those features."""
        lay = self.layout
        grid = (ceil_div(batch.batch_size, cfg.bags), feature_ids.numel())
        key_buffers = (None, None, None) if keys is None else (keys.keys, keys.src, keys.scale)
        pooled_forward_kernel[grid](
            self.weights, batch.values, batch.offsets, batch.weights, out, self.flags,
            feature_ids, lay.feat_table, lay.feat_col, lay.feat_mean, lay.table_rows, lay.table_elem_base,
            lay.table_dim, *key_buffers, lay.table_row_base if keys is None else keys.plan.key_base, batch.batch_size,
            batch.values.numel(), out.stride(0), self.total_rows if keys is None else keys.plan.invalid_key,
            BAGS=cfg.bags, HOTS=cfg.hots, BLOCK_D=self.block_d, VEC=self.vec,
            HAS_PER_SAMPLE=batch.weights is not None, HAS_MEAN=bool(any(t.pooling == "mean" for t in self.tables)),
            STAGED=tbe_select.staged_loads(cfg) if self.staged_forward is None else self.staged_forward,
            SORT_KEYS=keys is not None, HAS_SCALE=keys is not None and keys.scale is not None,
            num_warps=cfg.num_warps)

    def _check_bag_ends(self, offsets: Tensor, nnz: int) -> None:
        """Flag ids outside every bag (``bag_ends_kernel``: offsets[0] != 0, offsets[-1] < nnz)."""
        bag_ends_kernel[(1,)](offsets, self.flags, offsets.numel() - 1, nnz, len(self.feature_to_table) - 1,
                              CODE=FLAG_BAD_ENDS)

    def _sequence_ranges(self, offsets: Tensor, batch_size: int, nnz: int) -> list[tuple[int, int, int, int]]:
        """(feature, first id position, id count, first output row) per sequence feature (synchronises).
        A feature's range is clamped into [0, nnz] (``sort_keys_kernel`` clamps alike): bad offsets,
        which the kernel flags, read nothing outside ``values``."""
        if batch_size == 0:
            return [(f, 0, 0, 0) for f in self.sequence_features]
        marks = offsets[::batch_size].tolist()
        out, row = [], 0
        for f in self.sequence_features:
            start = min(max(marks[f], 0), nnz)
            end = min(max(marks[f + 1], start), nnz)
            out.append((f, start, end - start, row))
            row += end - start
        return out

    def _sequence_forward(self, values: Tensor, offsets: Tensor, batch_size: int) -> tuple[Tensor, list]:
        nnz = values.numel()
        ranges = self._sequence_ranges(offsets, batch_size, nnz)
        total = sum(r[2] for r in ranges)
        out = torch.empty(total, self.sequence_dim, dtype=self.output_dtype, device=self.weights.device)
        positions = tbe_select.sequence_positions(self.block_d)
        warps = tbe_select.warps_for(positions * self.block_d, tbe_select.selection_spec(self.weights.device).warp_size)
        if batch_size == 0:  # no bag to read: any id lies outside every bag
            self._check_bag_ends(offsets, nnz)
            self._record_flags()
            return out, ranges
        for f, start, count, row0 in ranges:
            t = self.tables[self.feature_to_table[f]]
            base = sum(x.rows * x.dim for x in self.tables[: self.feature_to_table[f]])
            sequence_forward_kernel[(ceil_div(max(count, batch_size), positions),)](  # ids, and bags to check
                self.weights, values, offsets, out, self.flags, f, start, count, row0, out.stride(0), t.rows, base,
                t.dim, batch_size, nnz, POSITIONS=positions, BLOCK_D=self.block_d, num_warps=warps)
        self._check_bag_ends(offsets, nnz)
        self._record_flags()
        return out, ranges


def lookup_shared(modules: list, batches: list[JaggedBatch], *, lead_columns: int = 0,
                  into: Tensor | None = None) -> Tensor:
    """The pooled lookups of several modules into one output: module i looks up ``batches[i]`` (its features'
    ids) and writes its features' columns, which its ``output_columns`` place in an output all of them share
    (one width, output dtype and device; the union of their columns the whole row, which the caller sees to).
    [B, output_dim], ``lead_columns`` and ``into`` as ``Lookups.forward`` takes them; one autograd node, whose
    backward runs each module's fused backward on its columns of the gradient. No per-sample weights."""
    first = modules[0]
    if len(batches) != len(modules):
        raise ValueError(f"{len(batches)} batches for {len(modules)} modules")
    for m in modules:
        if (m.output_dim, m.output_dtype, m.weights.device) != (first.output_dim, first.output_dtype,
                                                               first.weights.device):
            raise ValueError("lookup_shared: the modules' outputs differ in width, dtype or device")
    if any(b.batch_size != batches[0].batch_size or b.weights is not None for b in batches):
        raise ValueError("lookup_shared: the batches must share one batch size and have no per-sample weights")
    if lead_columns < 0:
        raise ValueError(f"lead_columns must be >= 0, got {lead_columns}")
    if into is not None:
        first._check_into(into, batches[0].batch_size, lead_columns)
    for m, b in zip(modules, batches):
        m._validate(b)
        m._prepared = None
    anchor = torch.empty(0, device=first.weights.device, requires_grad=torch.is_grad_enabled())
    ids = [t for b in batches for t in (b.values, b.offsets)]
    return _SharedLookup.apply(anchor, modules, batches[0].batch_size, lead_columns, into, *ids)


class _SharedLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, modules, batch_size, lead_columns, into, *ids):
        ctx.modules, ctx.batch_size = modules, batch_size
        ctx.save_for_backward(*ids)
        first = modules[0]
        buffer = into if into is not None else torch.empty(
            batch_size, lead_columns + first.output_dim, dtype=first.output_dtype, device=first.weights.device)
        for m, values, offsets in zip(modules, ids[0::2], ids[1::2]):
            out = m._pooled_forward(values, offsets, None, batch_size, ctx.needs_input_grad[0], lead_columns, buffer)
        return out

    @staticmethod
    def backward(ctx, grad):
        ids = ctx.saved_tensors
        for m, values, offsets in zip(ctx.modules, ids[0::2], ids[1::2]):
            with torch.no_grad(), m.backward_side(grad, values, offsets):
                m._fused_backward(grad, values, offsets, None, ctx.batch_size, None)
        return (None,) * (5 + len(ids))


class _PooledLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, module, values, offsets, per_sample, batch_size, lead_columns, into):
        ctx.module, ctx.batch_size = module, batch_size
        ctx.save_for_backward(values, offsets, per_sample)
        return module._pooled_forward(values, offsets, per_sample, batch_size, ctx.needs_input_grad[0], lead_columns,
                                      into)

    @staticmethod
    def backward(ctx, grad):
        values, offsets, per_sample = ctx.saved_tensors
        with torch.no_grad(), ctx.module.backward_side(grad, values, offsets, per_sample):
            ctx.module._fused_backward(grad, values, offsets, per_sample, ctx.batch_size, None)
        return None, None, None, None, None, None, None, None


class _SequenceLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, module, values, offsets, batch_size):
        out, ranges = module._sequence_forward(values, offsets, batch_size)
        ctx.module, ctx.batch_size, ctx.ranges = module, batch_size, ranges
        ctx.save_for_backward(values, offsets)
        return out

    @staticmethod
    def backward(ctx, grad):
        values, offsets = ctx.saved_tensors
        with torch.no_grad(), ctx.module.backward_side(grad, values, offsets):
            ctx.module._fused_backward(grad, values, offsets, None, ctx.batch_size, ctx.ranges)
        return None, None, None, None, None
