"""The pooled rows' way back to their samples' ranks, through autograd (step 3 of ``polyrec.runtime.sharding``).

``ExchangeRows`` sends this rank's pooled rows to the ranks whose samples they are and places their
columns in one kernel (``polyrec.kernels.place_columns``); its backward gathers the gradient's columns
and sends them back, or takes the exchange ``ShardedEmbedding.start_backward`` began from that same
gradient (``GradientKey``). ``Exchange`` is one all-to-all under way (NCCL's or gloo's, or over copy
engines: ``polyrec.runtime.peer_exchange``). ``PlaceColumns`` serves a world of one: the placement
and its gather, nothing exchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor

from polyrec.kernels.place_columns import ColumnLayout, gather, place
from polyrec.runtime.peer_exchange import CopiesLanded

if TYPE_CHECKING:
    from polyrec.runtime.sharding import ShardedEmbedding


@dataclass(kw_only=True, slots=True)
class Exchange:
    """An all-to-all under way (NCCL's, or over copy engines); ``out`` holds what arrived once
    ``finish`` returns."""

    work: dist.Work | CopiesLanded
    out: Tensor
    src: Tensor  # held until the exchange is done

    def finish(self, meanwhile: Callable[[], None] | None = None, *,
               consumer: torch.cuda.Stream | None = None) -> Tensor:
        """Make the stream that reads ``out`` (``consumer``; None: the current one) wait for the
        exchange, calling ``meanwhile`` (or None) first: work it queues on the current stream runs while
        the rows cross."""
        if meanwhile is not None:
            meanwhile()
        with torch.cuda.stream(consumer) if consumer is not None else contextlib.nullcontext():
            self.work.wait()
        return self.out


@dataclass(frozen=True, kw_only=True, slots=True)
class GradientKey:
    """Which gradient an early-started exchange was started from: the same memory, read the same way."""

    ptr: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @staticmethod
    def of(grad: Tensor) -> GradientKey:
        stride = tuple(st if n > 1 else 0 for n, st in zip(grad.shape, grad.stride()))  # a size-1 dim's is arbitrary
        return GradientKey(ptr=grad.data_ptr(), shape=tuple(grad.shape), stride=stride, dtype=grad.dtype)


class ExchangeRows(torch.autograd.Function):
    """Pooled rows of this rank's tables for every rank's samples -> this rank's ``[B, out_dim]``: the
    all-to-all (running ``prelude`` while the rows cross), then the columns placed in one kernel. The
    backward gathers each rank's columns and sends them back (or takes the exchange
    ``ShardedEmbedding.start_backward`` began from this gradient), running the owner's
    gradient-exchange hook (``backward_overlapping``) while they cross. The gradient it returns goes
    to the local tables' backward through views only (no kernel reads it on the way), so under
    ``backward_overlapping`` only the stream that backward runs on waits for it."""

    @staticmethod
    def forward(ctx, flat: Tensor, b: int, prelude: Callable[[], None] | None, owner: ShardedEmbedding) -> Tensor:
        ctx.b, ctx.owner = b, owner
        got = owner.start_rows_exchange(flat, b).finish(prelude)
        return place(got, b, owner.layout)  # [B, out_dim]

    @staticmethod
    def backward(ctx, grad: Tensor):
        owner = ctx.owner
        exchange = owner.take_started_gradient(grad) or owner.start_gradient_exchange(grad, ctx.b)
        consumer = getattr(owner.local, "backward_stream", None)
        return exchange.finish(owner._take_gradient_exchange_hook(), consumer=consumer), None, None, None


class PlaceColumns(torch.autograd.Function):
    """A world of one whose pooled columns are not in feature order: ``[B, out_dim]`` placed in one
    kernel (``polyrec.kernels.place_columns.place``), columns copied or partial sums added in a fixed
    order; backward gathers the columns times ``grad_scale`` in one kernel."""

    @staticmethod
    def forward(ctx, flat: Tensor, b: int, layout: ColumnLayout, grad_scale: float) -> Tensor:
        ctx.b, ctx.layout, ctx.grad_scale = b, layout, grad_scale
        return place(flat, b, layout)  # [B, out_dim]

    @staticmethod
    def backward(ctx, grad: Tensor):
        return gather(grad, ctx.b, ctx.layout, ctx.grad_scale), None, None, None
