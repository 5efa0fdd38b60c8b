"""Sharded embeddings over torch.distributed: table-wise, row-wise and column-wise shards.

Every rank holds a local batch of ``B`` samples of all ``F`` features and some shards of the tables
(cut by ``polyrec.runtime.shards``). A step moves data in three all-to-alls (TorchRec's pattern, our own code):

1. input: each rank sends every shard owner the ids of that shard's feature for its ``B`` samples
   (row-wise shards get only the ids in their row range, rebased): lengths first, then values,
   bucketed by destination with vectorised ops (``polyrec.runtime.input_dist``) and one host sync
   for the value split sizes;
2. lookup: each owner runs its local table-batched embedding over ``world * B`` samples;
3. output: pooled rows go back to the samples' ranks; column-wise pieces are concatenated and
   row-wise partial sums added, giving ``[B, sum of feature dims]`` in feature order.

Backward reverses step 3 through autograd (``ExchangeRows``: ``polyrec.runtime.pooled_exchange``), so
each owner's fused optimizer sees the gradients of all ranks' samples. Each rank's loss is a mean over
its own ``B`` samples, while the single-process equivalent is a mean over ``world * B``: the backward
of the column placement scales the gradient by ``1 / world`` so that sharded training takes the same
steps as one process on the whole batch.

Both pooled exchanges start asynchronously and have work to do while the rows cross: in the forward,
the local tables' id sort for their backward (``prepare_backward``); in the backward, whatever the
caller hands ``backward_overlapping`` (the trainer: the dense optimizer step). The backward's exchange
can also start before the backward runs, from a gradient the caller has early (``start_backward``:
the trainer starts it inside the dense backward, when the cross network's input gradient is final).
On one host the two pooled exchanges can go over the GPUs' copy engines instead of NCCL
(``peer_exchange``: ``polyrec.runtime.peer_exchange``), the same blocks in the same places, no SM
taken from the kernels beside them. The input distribution can run ahead of its step
(``start_inputs``, ``distribute_inputs``): given an ``input_group``, on a GPU it is queued on an
input stream with that group's communicator, so that the next batch's ids cross while this step's
dense work runs and no rank meets its peers at the start of a step (the trainer's sync pipeline on
several ranks).

In a world of one rank nothing is exchanged (same code path, no collective, no host sync but in
the case ``InputRouter.local_batch`` names): the local batch goes to the local tables as it is (or
packed once, when a table has several shards on the rank), and their pooled output is the result
when it is already in feature order (otherwise its columns are placed, partial sums added, as after
the output all-to-all).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError, check_offsets_length
from polyrec.kernels.place_columns import column_layout, gather
from polyrec.runtime.input_dist import Counted, InputRouter, regroup
from polyrec.runtime.peer_exchange import CopyEngineExchange
from polyrec.runtime.pooled_exchange import Exchange, ExchangeRows, GradientKey, PlaceColumns
from polyrec.runtime.shards import Shard, TableSharding, make_shards, shard_features


def _all_to_all(tensor: Tensor, send: list[int], recv: list[int], group: dist.ProcessGroup | None) -> Tensor:
    out = tensor.new_empty(sum(recv))
    dist.all_to_all_single(out, tensor.contiguous(), recv, send, group=group)
    return out


def _check_layout(batch: JaggedBatch) -> None:
    """The shapes the input distribution reads a batch by (host metadata, no sync): 1-D values and
    offsets, ``F * B + 1`` offsets, a weight per id. Else torch failed inside the bucketing ("shape
    '[4, 2]' is invalid for input of size 7"); the local tables check the rest (dtypes, ids)."""
    if batch.values.dim() != 1 or batch.offsets.dim() != 1:
        raise JaggedBatchError(f"values and offsets must be 1-D, got shapes {tuple(batch.values.shape)} and "
                               f"{tuple(batch.offsets.shape)}")
    check_offsets_length(batch.offsets, batch.num_features, batch.batch_size)
    if batch.weights is not None and batch.weights.shape != batch.values.shape:
        raise JaggedBatchError(f"weights must have the shape of values {tuple(batch.values.shape)}, "
                               f"got {tuple(batch.weights.shape)}")


@dataclass(kw_only=True, slots=True)
class StartedInputs:
    """A batch whose input distribution ``ShardedEmbedding.start_inputs`` began."""

    batch: JaggedBatch
    counted: Counted
    recv_lengths: Tensor  # [world * P_r * B] int32: the bag lengths this rank receives
    sizes: Tensor  # [world + world * P_r] ids sent to each rank, then received per (rank, piece) (host; pinned on GPU)
    ready: torch.cuda.Event | None  # fires once ``sizes`` holds its values (None: already)
    local: JaggedBatch | None = None  # this rank's pieces for all ranks' samples, once distributed
    # where each piece's ids start in ``local.values``, then its nnz (host; for local tables that take them)
    bounds: list[int] | None = None
    done: torch.cuda.Event | None = None  # fires once ``local`` holds its values (None: already)


class ShardedEmbedding(nn.Module):
    """Embedding tables sharded over the ranks of the default process group.

    ``local_factory(shards, local_feature_to_shard)`` builds this rank's module: one table per shard
    (``shard.num_rows`` x ``shard.dim``), one feature per shard-feature, whose
    ``forward(JaggedBatch) -> [samples, sum of dims]`` pools sum-wise and whose backward applies its
    optimizer (polyrec's TableBatchedEmbedding). On several ranks every rank serves a feature (a
    sharding that leaves one without raises on every rank).

    A step's host work does not grow with the number of features: the input distribution is a fixed
    number of vectorised ops (``polyrec.runtime.input_dist``), its one host sync reads the split
    sizes of the value all-to-all, and the outputs are placed by one kernel (gathered back by one).
    """

    #: Whether ``backward_overlapping`` runs the local tables' update on a stream of its own (GPU, 2+
    #: ranks, a local module with a ``backward_stream``): it starts when the gradient has landed, beside
    #: DDP's last all-reduces and the dense optimizer, instead of after them (benchmarks turn it off).
    update_beside = True

    def __init__(self, *, rows: Sequence[int], dims: Sequence[int], shardings: Sequence[TableSharding],
                 feature_to_table: Sequence[int], local_factory: Callable[[list[Shard], list[int]], nn.Module],
                 rank: int, world_size: int, input_group: dist.ProcessGroup | None = None,
                 peer_exchange: CopyEngineExchange | None = None):
        super().__init__()
        self.rank, self.world = rank, world_size
        self.input_group = input_group  # of the input all-to-alls (None: the default group)
        self.peer_exchange = peer_exchange  # the pooled exchanges over copy engines (None: all_to_all_single)
        self._gradient_exchange_hook: Callable[[], None] | None = None  # see backward_overlapping
        self._started_gradient: tuple[GradientKey, Exchange] | None = None  # see start_backward
        self.shards = make_shards(rows, dims, shardings, world_size)
        self.pieces = shard_features(self.shards, feature_to_table, dims)
        self.pieces += [[] for _ in range(world_size - len(self.pieces))]
        idle = [r for r, pieces in enumerate(self.pieces) if not pieces]
        # An idle rank's pooled rows (fp32 zeros, no gradient) broke both exchanges: gloo aborted on another
        # dtype, and its peers' backward waited for a gradient exchange it never began. Every rank raises here.
        if world_size > 1 and idle:
            raise ValueError(f"rank(s) {idle} of {world_size} serve no feature; give every rank a shard of a table "
                             "that a feature reads")
        self.out_dim = sum(dims[t] for t in feature_to_table)
        self.num_features = len(feature_to_table)
        self.local_shards = [s for s in self.shards if s.rank == rank]
        local_index = {id(s): i for i, s in enumerate(self.local_shards)}
        self.local = local_factory(self.local_shards, [local_index[id(p.shard)] for p in self.pieces[rank]])
        device = next(iter(self.local.buffers()), torch.empty(0)).device  # where the local tables live
        self.device = device
        # The input distribution's stream: only with its own group, whose collectives no other stream
        # queues (a group's collectives on two streams would be ordered by whichever the host issued first).
        self.input_stream = torch.cuda.Stream(device) if input_group is not None and device.type == "cuda" else None
        self.update_stream = (torch.cuda.Stream(device) if self.update_beside and world_size > 1
                              and device.type == "cuda" and hasattr(self.local, "backward_stream") else None)
        # What backward_overlapping runs beside the update (the dense optimizer), at a higher priority
        # than the update's stream: its few kernels get SMs as the update's blocks retire.
        self.meanwhile_stream = torch.cuda.Stream(device, priority=-1) if self.update_stream is not None else None
        if world_size > 1 and hasattr(self.local, "defer_errors"):
            self.local.defer_errors = True  # raised by check_errors, on every rank together
        self.router = InputRouter(self.pieces, self.num_features, device)
        self.rank_dims = [sum(p.shard.dim for p in self.pieces[d]) for d in range(world_size)]
        rank_cols = [[c for p in pieces for c in range(*p.out_cols)] for pieces in self.pieces]  # output column
        out_cols = [c for cols in rank_cols for c in cols]  # of each pooled column, rank by rank
        # Several row-wise pieces of a feature land on the same columns (partial sums to add); otherwise
        # every output column is written exactly once and the outputs are copied, not added.
        row_pieces = [p.feature for pieces in self.pieces for p in pieces if p.shard.kind == "row"]
        self.sums_partials = len(set(row_pieces)) < len(row_pieces)
        if not self.sums_partials and sorted(out_cols) != list(range(self.out_dim)):
            raise ValueError("the shards do not cover every output column exactly once")
        # One rank whose pooled columns are already the output's: it is returned as it is.
        self.pooled_is_output = world_size == 1 and out_cols == list(range(self.out_dim))
        # The placement's tile tables (polyrec.kernels.place_columns), built once per sharding.
        self.layout = None if self.pooled_is_output else column_layout(
            self.rank_dims, rank_cols, self.out_dim, self.sums_partials, device)

    def start_inputs(self, batch: JaggedBatch) -> StartedInputs | None:
        """The first half of the input distribution of ``batch``: bucket counts, the lengths
        all-to-all, and the copy of the split sizes to the host, queued without waiting (on a GPU into
        pinned memory, with an event). Started one step ahead of its lookup, the host reads the sizes
        when the device has long passed that point, instead of waiting for the work queued before it.
        None in a world of one (nothing is exchanged)."""
        if self.world == 1:
            return None
        _check_layout(batch)
        b, world, mine = batch.batch_size, self.world, self.router.pieces_per_rank[self.rank]
        if batch.nnz >= 2**31:
            raise ValueError(f"rank {self.rank}: {batch.nnz} ids in one local batch; bag lengths are exchanged "
                             "as int32, so at most 2**31 - 1 ids per rank per step")
        with self._input_side():
            counted = self.router.count(batch)
            send_lengths = counted.send_lengths.to(torch.int32).reshape(-1)  # [P * B]
            recv_lengths = _all_to_all(send_lengths, [k * b for k in self.router.pieces_per_rank], [mine * b] * world,
                                       self.input_group)
            recv_counts = recv_lengths.view(world, mine, b).sum(2, dtype=counted.send_counts.dtype)  # [world, P_r]
            sizes = torch.cat([counted.send_counts, recv_counts.view(-1)])  # ids sent to each rank, received
            ready = None
            if sizes.is_cuda:
                host = torch.empty(sizes.shape, dtype=sizes.dtype, pin_memory=True)
                sizes = host.copy_(sizes, non_blocking=True)
                ready = torch.cuda.Event()
                ready.record()
        return StartedInputs(batch=batch, counted=counted, recv_lengths=recv_lengths, sizes=sizes, ready=ready)

    def _input_side(self) -> contextlib.AbstractContextManager:
        """Where the input distribution's work is queued: the input stream, after what the current stream
        has queued (the batch's copy to the device), or the current stream when there is none."""
        if self.input_stream is None:
            return contextlib.nullcontext()
        self.input_stream.wait_stream(torch.cuda.current_stream(self.device))
        return torch.cuda.stream(self.input_stream)

    def distribute_inputs(self, started: StartedInputs) -> None:
        """The second half of a started input distribution: the one host read of the split sizes, the
        send buffer, the values (and weights) all-to-all and the regroup into this rank's pieces
        (``started.local``). On the input stream when there is one: queued a step ahead, the ids cross
        while that step's dense work runs. Nothing to do once done. A collective, as ``start_inputs``."""
        if started.local is not None:
            return
        # The host read of the split sizes stays: all_to_all_single takes them as host ints, and they
        # depend on the data (every rank's bag lengths; for row-wise tables, which rows the ids hit),
        # which reach this rank only on the device, through the lengths all-to-all. Started a step
        # ahead (the trainer's sync pipeline on several ranks), the read finds them already copied.
        if started.ready is not None:
            started.ready.synchronize()
        sizes = started.sizes.tolist()
        world, mine = self.world, self.router.pieces_per_rank[self.rank]
        send, received = sizes[:world], sizes[world:]  # received: [world * P_r], (rank, piece) order
        recv = [sum(received[r * mine:(r + 1) * mine]) for r in range(world)]
        if getattr(self.local, "takes_bounds", False):  # tables of several row dtypes split the ids by piece
            started.bounds = [0]
            for piece in range(mine):  # the local batch is piece-major (``regroup``)
                started.bounds.append(started.bounds[-1] + sum(received[piece::mine]))
        with self._input_side():
            values, weights = self.router.pack(started.batch, started.counted, sum(send))
            got_values = _all_to_all(values, send, recv, self.input_group)
            got_weights = None if weights is None else _all_to_all(weights, send, recv, self.input_group)
            started.local = regroup(started.recv_lengths, got_values, got_weights, world=world, features=mine,
                                    batch=started.batch.batch_size)
            if self.input_stream is not None:
                started.done = torch.cuda.Event()
                started.done.record()

    def _send_inputs(self, batch: JaggedBatch, started: StartedInputs | None, bounds: tuple[int, ...] | None
                     ) -> tuple[JaggedBatch, list[int] | None]:
        """Local batch [F features x B samples] -> this rank's pieces for all ranks' samples, [P_r x world*B],
        and where each piece's ids start in it (host ints): on several ranks from the input distribution's counts;
        in a world of one, ``bounds`` (the batch's own, where the host knows them) when the pieces are the batch's
        features as they are, else None.

        Collectives: lengths (fixed sizes), values, weights when present; none in a world of one.
        One host read: the ids this rank sends to and receives from every rank, as one small tensor
        (``start_inputs``, here unless the caller started it a step ahead).
        """
        if self.world == 1:
            known = bounds is not None and self.router.passthrough  # the local batch is the batch itself
            return self.router.local_batch(batch), list(bounds) if known else None
        started = started or self.start_inputs(batch)
        if started.batch.values is not batch.values or started.batch.offsets is not batch.offsets:
            raise ValueError("the started input distribution belongs to another batch")
        self.distribute_inputs(started)
        local = started.local
        if started.done is not None:  # made on the input stream, read here (and by the backward)
            current = torch.cuda.current_stream(self.device)
            current.wait_event(started.done)
            for t in (local.values, local.offsets, local.weights):
                if t is not None:
                    t.record_stream(current)
        return local, started.bounds

    def backward_overlapping(self, output: Tensor, grad: Tensor, meanwhile: Callable[[], None]) -> bool:
        """``output.backward(grad)`` for an output of this module, calling ``meanwhile`` while the
        gradient crosses the all-to-all (the trainer steps the dense optimizer there). True when it
        ran there; False when no gradient crossed (a world of one), and the caller runs it.

        With an ``update_stream``, the local tables' backward (their update) runs there, once the
        gradient has landed (and the dense backward is queued: ``update_after_current``), not behind
        DDP's wait for its last all-reduces; ``meanwhile`` runs beside it on a stream of higher
        priority; the current stream then waits for both before anything else (the next lookup reads
        the updated tables). On 2 H200s (MLPerf DLRM-DCNv2) the update began 0.76 ms after its gradient
        landed without this; with it the step is 0.1-0.2 ms shorter (update_beside_ab_2026-11-30)."""
        side = self.update_stream
        self._gradient_exchange_hook = meanwhile if side is None else functools.partial(self._beside, meanwhile)
        if side is not None:
            self.local.backward_stream = side
        try:
            output.backward(grad)
            return self._gradient_exchange_hook is None
        finally:
            self._gradient_exchange_hook = None
            if side is not None:
                self.local.backward_stream = None
                current = torch.cuda.current_stream(self.device)
                current.wait_stream(side)
                current.wait_stream(self.meanwhile_stream)

    def _beside(self, work: Callable[[], None]) -> None:
        """``work`` on ``meanwhile_stream``, after what the current stream has queued. Memory it frees
        that the current stream made is safe to reuse there: ``backward_overlapping`` makes the current
        stream wait for this stream before anything else is queued on it."""
        self.meanwhile_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.meanwhile_stream):
            work()

    def update_after_current(self) -> None:
        """Make the tables' next update on ``update_stream`` also wait for what the current stream has
        queued so far; nothing without that stream. The trainer calls it when DDP's last bucket is ready:
        an update that starts as soon as its gradient lands takes the SMs from the dense backward's last
        kernels, so that bucket's all-reduce ends after the update, between it and the next lookup, where
        it holds back the rank with the shorter update (2 H200s, MLPerf: 22.25-22.39 ms a step against
        22.23-22.36 ms without the update stream; update_beside_ab_2026-11-30)."""
        if self.update_stream is not None:
            self.update_stream.wait_stream(torch.cuda.current_stream(self.device))

    def _take_gradient_exchange_hook(self) -> Callable[[], None] | None:
        hook, self._gradient_exchange_hook = self._gradient_exchange_hook, None
        return hook

    def check_errors(self) -> None:
        """Raise for bad input (ids out of range, bad offsets) that any rank's shards flagged in an
        earlier lookup, on every rank: the owner's error names the feature and its shard, the others
        say which rank flagged it. A collective: every rank must call it at the same point (the
        trainer does at each log step), so that no rank raises while its peers wait in an exchange."""
        check = getattr(self.local, "check_errors", None)
        error = None
        try:
            if check is not None:
                check()
        except JaggedBatchError as exc:
            error = exc
        malformed = self.router.take_malformed()
        if malformed:
            sent = (f"rank {self.rank}: the offsets of feature(s) {malformed} of a recent local batch decrease, leave "
                    "[0, nnz] or do not run from 0 to nnz; its bags were read as the nearest valid offsets")
            error = JaggedBatchError(sent if error is None else f"{error}; {sent}")
        if self.world > 1:
            flagged = torch.zeros(self.world, dtype=torch.int32, device=self.device)
            flagged[self.rank] = error is not None
            dist.all_reduce(flagged)
            if error is None and flagged.any():
                ranks = [r for r in range(self.world) if flagged[r]]
                raise JaggedBatchError(f"rank {self.rank}: bad input in a recent batch, flagged by the tables of "
                                       f"rank(s) {ranks}; their error names the feature and table")
        if error is not None:
            raise error

    def pooled_send(self, b: int) -> list[int]:
        """Values of pooled rows this rank sends each rank in the forward: its columns of their B samples."""
        return [b * self.rank_dims[self.rank]] * self.world

    def pooled_recv(self, b: int) -> list[int]:
        """Values of pooled rows this rank receives from each rank in the forward."""
        return [b * d for d in self.rank_dims]

    def start_rows_exchange(self, flat: Tensor, b: int) -> Exchange:
        """Start sending the pooled rows [world * B, local dims] to the ranks whose samples they are.
        Over copy engines, this rank's block lands after those of the ranks before it."""
        before = b * sum(self.rank_dims[:self.rank])
        return self._start_exchange(flat, self.pooled_send(b), self.pooled_recv(b), direction="rows",
                                    at_dest=[before] * self.world, capacity=b * sum(self.rank_dims))

    def start_gradient_exchange(self, grad: Tensor, b: int) -> Exchange:
        """Gather each rank's columns of ``grad`` [B, out_dim] (any row stride), scaled by 1 / world (see
        the module docstring), and start sending them back the way the pooled rows came."""
        flat = gather(grad, b, self.layout, 1.0 / self.world)
        return self._start_exchange(flat, self.pooled_recv(b), self.pooled_send(b), direction="grads",
                                    at_dest=[self.rank * b * d for d in self.rank_dims],
                                    capacity=self.world * b * max(self.rank_dims))

    def _start_exchange(self, tensor: Tensor, send: list[int], recv: list[int], *, direction: str,
                        at_dest: list[int], capacity: int) -> Exchange:
        """``all_to_all_single`` started asynchronously, or the same blocks over copy engines (where
        ``at_dest`` and ``capacity`` place them: ``CopyEngineExchange.start``)."""
        src = tensor.contiguous()  # no copy when contiguous
        if self.peer_exchange is None:
            out = src.new_empty(sum(recv))
            return Exchange(work=dist.all_to_all_single(out, src, recv, send, async_op=True), out=out, src=src)
        work, out = self.peer_exchange.start(src, send, recv, at_dest=at_dest, capacity=capacity,
                                             direction=direction)
        return Exchange(work=work, out=out, src=src)

    def start_backward(self, grad: Tensor) -> None:
        """Start the gradient all-to-all of the last forward's output from its gradient ``grad``
        [B, out_dim] as soon as the caller has it (the trainer: from inside the dense backward, before
        the cross network's last weight gradients), so that it crosses while other work runs. The
        backward of that output then takes this exchange when it gets this same gradient (the same
        memory, shape and strides); any other gradient raises. A gradient written in place after the
        start would go unnoticed: callers must not write it. Nothing to do in a world of one. Every
        rank must call it at the same point (it is a collective)."""
        if self.world == 1:
            return
        self._started_gradient = (GradientKey.of(grad), self.start_gradient_exchange(grad, grad.shape[0]))

    def take_started_gradient(self, grad: Tensor) -> Exchange | None:
        """The exchange ``start_backward`` began from ``grad``, once; None when none was started."""
        started, self._started_gradient = self._started_gradient, None
        if started is None:
            return None
        if started[0] != GradientKey.of(grad):
            raise RuntimeError(f"rank {self.rank}: the embedding backward got another gradient than the one its "
                               f"all-to-all was started from ({GradientKey.of(grad)} vs {started[0]})")
        return started[1]

    def _backward_prelude(self, local_batch: JaggedBatch) -> Callable[[], None] | None:
        """What of the local tables' backward can run while the pooled rows cross the all-to-all: a
        local module may define ``prepare_backward(batch)`` (polyrec's TBE sorts the ids there, ~0.9 ms
        of a world-2 MLPerf step otherwise spent after the gradient arrives). Only when a backward
        will follow."""
        prepare = getattr(self.local, "prepare_backward", None)
        if prepare is None or not torch.is_grad_enabled():
            return None
        return functools.partial(prepare, local_batch)

    def forward(self, batch: JaggedBatch, started: StartedInputs | None = None,
                bounds: tuple[int, ...] | None = None) -> Tensor:
        """Local batch [B samples x F features] -> pooled [B, sum of feature dims], feature order.
        ``started``: this batch's ``start_inputs``, when the caller began its distribution earlier; ``bounds``: where
        each feature's ids start in the batch, then its nnz, where the host knows them (a world of one splits the
        ids of tables of several row dtypes there without reading the device)."""
        if batch.num_features != self.num_features:
            raise ValueError(f"batch has {batch.num_features} features, the sharded tables serve {self.num_features}")
        _check_layout(batch)
        b, world = batch.batch_size, self.world
        local_batch, bounds = self._send_inputs(batch, started, bounds)
        if not local_batch.num_features:
            pooled = batch.values.new_zeros((world * b, 0), dtype=torch.float32)
        elif getattr(self.local, "takes_bounds", False):  # tables of several row dtypes split the ids by piece
            pooled = self.local(local_batch, bounds)
        else:
            pooled = self.local(local_batch)  # [world*B, local_dim]
        if self.pooled_is_output:
            return pooled
        self._started_gradient = None  # one started for an earlier output, whose backward never ran
        if world == 1:  # nothing to send back
            return PlaceColumns.apply(pooled.reshape(-1), b, self.layout, 1.0)
        return ExchangeRows.apply(pooled.view(-1), b, self._backward_prelude(local_batch), self)
