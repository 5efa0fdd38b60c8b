"""Input distribution of sharded embeddings: every id of a local batch to the shards that serve it.

A batch of ``F`` features x ``B`` samples is sent, per destination rank, as that rank's
shard-features ("pieces") in its order, each as ``B`` bag lengths and then the bags' ids:
table-wise and column-wise pieces get all ids of their feature; a row-wise table's ids go to the one
piece whose row range holds them, rebased to that range (an id outside the table goes to the first or
last piece, where the shard's lookup flags it as out of range).

Bucketing by destination is vectorised: a fixed number of torch ops whatever the number of features
and ranks, no per-feature Python loop, and no host synchronisation. It runs in two phases around the
one host sync of a step (the split sizes that ``all_to_all_single`` needs on the host):

1. ``InputRouter.count`` (device only): the ``[P, B]`` send lengths and the number of ids sent to
   each rank; with row-wise tables also each id's feature and first route (its feature's first
   piece, or for a row-wise table the piece whose rows hold it: one ``searchsorted`` over the row
   ranges of all tables) and its rank among the ids of its bag bound to the same piece;
2. ``InputRouter.pack`` (given that total on the host): the send buffer, ordered (destination rank,
   piece, sample, order within the bag). A table- or column-wise piece takes its feature's ids whole
   and in batch order, so without row-wise tables the buffer is the pieces' id ranges one after
   another (``polyrec.kernels.chunk_copy``, nothing computed per id); with them, the (id, route)
   pairs (a table-wise id is one pair, a column-wise id one per column shard) are scattered straight
   to their places.

Ids travel as int32 when every table has fewer than 2^31 - 1 rows (half the bytes of the values
all-to-all and of the copies around it): the pack narrows them in the same pass, clamped to
[-1, 2^31 - 1], so an id outside its table stays outside it and is flagged by the shard's lookup.

Offsets that are not a batch's (decreasing, outside ``[0, nnz]``, not from 0 to ``nnz``) would give
split sizes the ranks disagree on, negative sizes or reads and writes out of bounds; ``count`` reads
well-formed offsets in their place (``_well_formed``: the same ones for any valid batch) and notes the
features of the malformed bags in ``bad_features``, which ``take_malformed`` hands to the owner's
error check (``ShardedEmbedding.check_errors``).

``regroup`` reorders what a rank received, (source rank, piece, sample), into the feature-major
batch its local tables read, (piece, source rank, sample): a chunk copy of ``world x pieces`` blocks.

In a world of one rank no id is exchanged: ``InputRouter.local_batch`` hands the batch itself to the
local tables when each feature has one piece (any plan's table-, row- or column-wise shard covers the
whole table then), and otherwise packs it once without any collective (no host sync, unless one
column-wise table has several shards on the rank: see ``local_batch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from polyrec.kernels.chunk_copy import INT32_MAX, chunk_copy
from polyrec.kernels.jagged import JaggedBatch
from polyrec.runtime.shards import ShardFeature


@dataclass(kw_only=True, slots=True)
class Counted:
    """Phase 1 of the bucketing: per id and per piece, everything but the send buffer."""

    feature_starts: Tensor  # [F + 1] int64: where each feature's ids start in the batch
    send_lengths: Tensor  # [P, B] int64: bag lengths per piece, send order (destination-major)
    send_counts: Tensor  # [world] int64: ids sent to each rank
    feature: Tensor | None = None  # [nnz] int64, with row-wise shardings: the feature of each id
    route: Tensor | None = None  # [nnz] int64, row-wise: each id's first route (its feature's first, or its row range's)
    sample: Tensor | None = None  # [nnz] int64, row-wise shardings only: the bag of each id in its feature
    rank: Tensor | None = None  # [nnz] int64, row-wise only: ids of its bag before it bound to the same piece


def _exclusive_cumsum(x: Tensor) -> Tensor:
    """[n] -> [n] sums of the elements before each one."""
    return torch.cumsum(x, 0) - x


def _well_formed(clamped: Tensor, nnz: int) -> Tensor:
    """Offsets clamped to [0, nnz] with 0 first and ``nnz`` last -> well-formed ones: each bag's length
    at least 0 (a decreasing step read as an empty bag), summed again and kept within ``nnz``, last
    ``nnz``. A valid batch's offsets come back unchanged. A cumulative sum (CUB's scan), not a
    cumulative maximum: torch's ``cummax`` took 4.7 ms for MLPerf's 1.7M offsets on the H200
    (``offsets_check_cost``). Device ops only, no host sync."""
    lengths = (clamped[1:] - clamped[:-1]).clamp_(min=0)
    out = torch.zeros_like(clamped)
    torch.cumsum(lengths, 0, out=out[1:])
    out.clamp_(max=nnz)
    out[-1:].fill_(nnz)  # fill_ of a view: a kernel, where ``out[-1] = nnz`` would copy a host scalar in
    return out


def checked_offsets(batch: JaggedBatch, bad_features: Tensor) -> Tensor:
    """The batch's offsets as int64, well-formed (``_well_formed``); the features of its malformed bags
    (a decreasing step, an offset outside [0, nnz], a first offset not 0, a last not ``nnz``) are set in
    ``bad_features`` ([F] bool). Device ops, no host sync."""
    given = batch.offsets.to(torch.int64)
    clamped = given.clamp(0, batch.nnz)
    clamped[:1].fill_(0)
    clamped[-1:].fill_(batch.nnz)
    moved = clamped != given
    bad_bag = torch.lt(given[1:], given[:-1])
    bad_bag |= moved[1:]
    bad_bag |= moved[:-1]
    bad_features |= bad_bag.view(batch.num_features, batch.batch_size).any(1)
    return _well_formed(clamped, batch.nnz)


def _take(x: Tensor, source: Tensor | None) -> Tensor:
    """``x[source]``, or ``x`` itself where ``source`` is the identity (None)."""
    return x if source is None else x[source]


def _rank_in_bucket(bucket: Tensor, bag_start: Tensor, buckets: int) -> Tensor:
    """For each id, how many ids of its bag before it share its bucket: [nnz] int64.

    One cumulative count per bucket over all ids ([buckets, nnz] scratch), read at the id and at its
    bag's start. ``buckets`` is at most the number of row shards of one table. The counts are one 1-D
    scan over the flattened rows: both reads of an id lie in its bucket's row, so what the rows before
    it add cancels. (A scan along dim 1 of the [2, 14M] scratch took 21.7 ms per step on an H200:
    torch's innermost-dimension scan kernel parallelises over rows; multi_gpu_world2_rowwise_t20_profile
    at 0bd841d.)
    """
    n = bucket.numel()
    onehot = (bucket.unsqueeze(0) == torch.arange(buckets, device=bucket.device).unsqueeze(1)).view(-1)  # [K * nnz]
    count_dtype = torch.int32 if onehot.numel() < 2**31 else torch.int64
    before = torch.cumsum(onehot, 0, dtype=count_dtype) - onehot.to(count_dtype)  # [K * nnz]
    at = bucket * n
    positions = torch.arange(n, device=bucket.device)
    return (before[at + positions] - before[at + bag_start]).to(torch.int64)


class InputRouter:
    """The static routing tables of one sharding, built once; ``count`` / ``pack`` use them per step.

    Pieces are numbered in send order: destination rank by rank, each rank's pieces in its order.
    Routes are the same pieces numbered feature by feature (row-wise pieces by ascending rows), so a
    feature's ``copies`` routes are consecutive from its ``first_route``.
    """

    def __init__(self, pieces: Sequence[Sequence[ShardFeature]], num_features: int, device: torch.device):
        send = [(dest, p) for dest, ranked in enumerate(pieces) for p in ranked]
        self.world, self.num_features = len(pieces), num_features
        self.pieces_per_rank = [len(ranked) for ranked in pieces]
        # One rank whose pieces are the features in order, each over its whole table (rows from 0):
        # the local tables read the input batch unchanged.
        self.passthrough = self.world == 1 and [(p.feature, p.shard.rows[0]) for p in pieces[0]] == [
            (f, 0) for f in range(num_features)]
        routes = sorted(range(len(send)), key=lambda i: (send[i][1].feature, *send[i][1].shard.rows))
        per_feature: list[list[int]] = [[] for _ in range(num_features)]
        for i in routes:
            per_feature[send[i][1].feature].append(i)
        for f, ids in enumerate(per_feature):
            kinds = {send[i][1].shard.kind for i in ids}
            if len(kinds) != 1:
                raise ValueError(f"feature {f}: needs shards of exactly one sharding kind, got {sorted(kinds)}")
        row = [send[ids[0]][1].shard.kind == "row" for ids in per_feature]
        copies = [1 if r else len(ids) for r, ids in zip(row, per_feature)]  # routes each id takes
        self.has_rows = any(row)
        # ids narrow to int32 on the way out when no table reaches INT32_MAX rows (see the module docstring)
        self.narrow_ids = max((p.shard.rows[1] for _, p in send), default=0) < INT32_MAX
        self.max_copies = max(copies, default=1)
        self.buckets = max((len(ids) for r, ids in zip(row, per_feature) if r), default=1)
        firsts = [sum(len(ids) for ids in per_feature[:f]) for f in range(num_features)]
        i64 = dict(dtype=torch.int64, device=device)
        self.first_route = torch.tensor(firsts, **i64)  # [F]
        self.copies = torch.tensor(copies, **i64)  # [F]
        self.is_row = torch.tensor(row, dtype=torch.bool, device=device)  # [F]
        self.route_piece = torch.tensor(routes, **i64)  # [R]: send index of route r
        self.piece_feature = torch.tensor([p.feature for _, p in send], **i64)  # [P]
        self.piece_dest = torch.tensor([d for d, _ in send], **i64)  # [P]
        self.piece_row_lo = torch.tensor([p.shard.rows[0] for _, p in send], **i64)  # [P]
        self.piece_is_row = torch.tensor([p.shard.kind == "row" for _, p in send], dtype=torch.bool, device=device)
        self._build_row_search(send, per_feature, firsts, row, device)
        # [F] features whose offsets ``count`` found malformed since the last ``take_malformed``
        self.bad_features = torch.zeros(num_features, dtype=torch.bool, device=device)

    def _build_row_search(self, send: list[tuple[int, ShardFeature]], per_feature: list[list[int]],
                          firsts: list[int], row: list[bool], device: torch.device) -> None:
        """Row ranges of all row-wise features on one sorted key line: feature f's id v has key
        ``key_base[f] + clamp(v, 0, rows_f - 1)``; the last range start <= key is its route."""
        bases, limits, starts, start_routes, base = [], [], [], [], 0
        for f, ids in enumerate(per_feature):
            rows = max(send[i][1].shard.rows[1] for i in ids)
            bases.append(base if row[f] else 0)
            limits.append(max(rows - 1, 0) if row[f] else 0)
            if row[f]:
                starts += [base + send[i][1].shard.rows[0] for i in ids]
                start_routes += range(firsts[f], firsts[f] + len(ids))
                base += rows + 1  # a gap, so no range start of feature f+1 ties with one of f
        i64 = dict(dtype=torch.int64, device=device)
        self.key_base = torch.tensor(bases, **i64)  # [F]
        self.key_limit = torch.tensor(limits, **i64)  # [F]
        self.row_starts = torch.tensor(starts, **i64)  # [R_row], ascending
        self.row_start_route = torch.tensor(start_routes, **i64)  # [R_row]

    def _row_routes(self, values: Tensor, feature: Tensor) -> Tensor:
        """[nnz] route of each id of a row-wise feature (meaningless for the other ids)."""
        key = self.key_base[feature] + torch.minimum(values.to(torch.int64).clamp_min(0), self.key_limit[feature])
        found = torch.searchsorted(self.row_starts, key, right=True) - 1
        return self.row_start_route[found.clamp_min(0)]

    def count(self, batch: JaggedBatch) -> Counted:
        """Phase 1: routes, send lengths and per-rank counts (and in-bag ranks for row-wise); no host sync."""
        if batch.num_features != self.num_features:
            raise ValueError(f"batch has {batch.num_features} features, the router serves {self.num_features}")
        b, n, dev = batch.batch_size, batch.nnz, batch.values.device
        offsets = checked_offsets(batch, self.bad_features)  # [F * B + 1]
        lengths = offsets[1:] - offsets[:-1]  # [F * B]
        feature_starts = offsets[::b] if b else offsets.new_zeros(self.num_features + 1)  # [F + 1]
        send_lengths = lengths.view(self.num_features, b)[self.piece_feature]  # [P, B]
        send_counts = torch.zeros(self.world, dtype=torch.int64, device=dev)
        if not self.has_rows:  # every piece takes its feature's ids whole: nothing per id to find
            send_counts.index_add_(0, self.piece_dest, self._piece_sizes(feature_starts))
            return Counted(feature_starts=feature_starts, send_lengths=send_lengths, send_counts=send_counts)
        # [nnz] feature of each id. A binary search over the F + 1 starts, not repeat_interleave: its CUDA
        # kernel writes each input's repeats in one thread, 26 threads for 7M ids (1.5 ms per step in
        # multi_gpu_world2_profile at 598c161).
        feature = torch.searchsorted(feature_starts[1:].contiguous(), torch.arange(n, device=dev), right=True)
        bag = torch.repeat_interleave(lengths, output_size=n)  # [nnz]
        sample = bag - feature * b
        is_row = self.is_row[feature]
        route = torch.where(is_row, self._row_routes(batch.values, feature), self.first_route[feature])
        rank = _rank_in_bucket(route - self.first_route[feature], offsets[bag], self.buckets)
        row_lengths = torch.zeros(send_lengths.numel(), dtype=torch.int64, device=dev)
        row_lengths.index_add_(0, self.route_piece[route] * b + sample, is_row.to(torch.int64))
        send_lengths = torch.where(self.piece_is_row.unsqueeze(1), row_lengths.view_as(send_lengths), send_lengths)
        send_counts.index_add_(0, self.piece_dest, send_lengths.sum(1))
        return Counted(feature_starts=feature_starts, send_lengths=send_lengths, send_counts=send_counts,
                       feature=feature, route=route, sample=sample, rank=rank)

    def take_malformed(self) -> list[int]:
        """The features whose offsets ``count`` found malformed since the last call (and forgets them):
        one host read."""
        bad = self.bad_features.nonzero().flatten().tolist()
        if bad:
            self.bad_features.zero_()
        return bad

    def _piece_sizes(self, feature_starts: Tensor) -> Tensor:
        """[P] ids of each piece's feature (table- and column-wise pieces take them all), send order."""
        return (feature_starts[1:] - feature_starts[:-1])[self.piece_feature]

    def _places(self, counted: Counted, b: int, route: Tensor, piece: Tensor, source: Tensor | None,
                position: Tensor) -> Tensor:
        """[total] place in the send buffer of each (id, route) pair (with row-wise tables): ``route``
        [total] its route, ``piece`` its piece, ``position`` the id's index in the batch, ``source`` the
        same or None for the identity."""
        send_offsets = _exclusive_cumsum(counted.send_lengths.reshape(-1))  # [P * B]
        # A table- or column-wise piece takes all of its feature's ids in batch order: one shift per piece.
        shift = send_offsets[::b] - counted.feature_starts[self.piece_feature]  # [P]
        places = position + shift[self.route_piece][route]
        row_places = send_offsets[piece * b + _take(counted.sample, source)] + _take(counted.rank, source)
        return torch.where(self.piece_is_row[piece], row_places, places)

    def pack(self, batch: JaggedBatch, counted: Counted, total: int) -> tuple[Tensor, Tensor | None]:
        """Phase 2: the send buffers (values [total], int32 when ``narrow_ids``; weights [total] or None)
        in send order, given ``total`` = the sum of ``counted.send_counts`` (read on the host by the caller)."""
        dev, weights = batch.values.device, batch.weights
        narrow = self.narrow_ids and batch.values.dtype == torch.int64
        if not self.has_rows:  # the pieces' features, whole, one after another: a chunk copy each
            src = counted.feature_starts[self.piece_feature]  # [P]
            dst = _exclusive_cumsum(self._piece_sizes(counted.feature_starts))  # [P]
            return chunk_copy(batch.values, src, dst, total, narrow=narrow), (
                None if weights is None else chunk_copy(weights, src, dst, total))
        values = torch.empty(total, dtype=torch.int32 if narrow else batch.values.dtype, device=dev)
        sent_weights = None if weights is None else torch.empty(total, dtype=weights.dtype, device=dev)
        if total == 0:
            return values, sent_weights
        source = None  # each id goes to one route: the pairs are the ids themselves
        route, position = counted.route, torch.arange(total, device=dev)
        if self.max_copies > 1:  # table- and column-wise ids go to every piece of their feature
            copies = self.copies[counted.feature]  # [nnz]
            source = torch.repeat_interleave(copies, output_size=total)  # [total]: the id of each pair
            route = counted.route[source] + position - _exclusive_cumsum(copies)[source]
            position = source
        piece = self.route_piece[route]
        places = self._places(counted, batch.batch_size, route, piece, source, position)
        ids = _take(batch.values, source) - self.piece_row_lo[piece]
        ids = ids.clamp_(-1, INT32_MAX) if narrow else ids
        ids = ids.to(values.dtype)
        values.index_copy_(0, places, ids)
        if weights is not None:
            sent_weights.index_copy_(0, places, _take(weights, source))
        return values, sent_weights

    def local_batch(self, batch: JaggedBatch) -> JaggedBatch:
        """World of one: the batch this rank's pieces read ([P features x B samples]), no collective.

        With one piece per feature this is ``batch`` itself (no op, no copy). Otherwise it is the send
        buffer of ``count`` / ``pack``, already in the pieces' order. The buffer's size is ``nnz`` when
        each id has one route (table- and row-wise), known on the host; a column-wise table with
        several shards on the rank copies its ids once per shard, so the size is the sum of those
        features' id counts, which live on the device: that plan (never needed on one rank) reads it
        with one host sync.
        """
        if self.world != 1:
            raise ValueError(f"local_batch serves a world of one rank; this router has {self.world}")
        if self.passthrough:
            if batch.num_features != self.num_features:
                raise ValueError(f"batch has {batch.num_features} features, the router serves {self.num_features}")
            return batch
        counted = self.count(batch)
        total = batch.nnz if self.max_copies == 1 else int(counted.send_counts[0])
        values, weights = self.pack(batch, counted, total)
        return JaggedBatch.from_lengths(values=values, lengths=counted.send_lengths.reshape(-1),
                                        batch_size=batch.batch_size, num_features=self.pieces_per_rank[0],
                                        weights=weights)


def regroup(lengths: Tensor, values: Tensor, weights: Tensor | None, *, world: int, features: int,
            batch: int) -> JaggedBatch:
    """Bags received as (source rank, feature, sample) -> a batch of ``world * batch`` samples,
    feature-major: lengths [world * features * batch], values and weights [nnz]. The ids of one
    (source rank, feature) are contiguous on both sides: the values move as ``world * features``
    chunks."""
    lengths = lengths.to(torch.int64).view(world, features, batch)
    new_lengths = lengths.permute(1, 0, 2).reshape(-1)  # [features * world * batch]
    new_offsets = torch.zeros(new_lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
    torch.cumsum(new_lengths, 0, out=new_offsets[1:])
    sizes = lengths.sum(2)  # [world, features] ids per received chunk
    src = _exclusive_cumsum(sizes.reshape(-1)).view(world, features).t().reshape(-1)  # chunks in (feature, rank) order
    dst = _exclusive_cumsum(sizes.t().reshape(-1))
    n = values.numel()
    return JaggedBatch(values=chunk_copy(values, src, dst, n), offsets=new_offsets, batch_size=world * batch,
                       num_features=features, weights=None if weights is None else chunk_copy(weights, src, dst, n))
