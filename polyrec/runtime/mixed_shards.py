"""A rank's shards of tables of several row dtypes: one TBE per dtype, one output.

``ShardedEmbedding`` looks a rank's shards up through one local module, ``forward(JaggedBatch) -> [N, local
dims]``, whose backward applies the optimizer. A TBE holds one row dtype, so where a plan gives the shards of one
rank several (fp32 and fp16 tables, say), ``MixedShardTables`` holds one TBE per dtype and looks the batch up as
``models.mixed_embeddings.split_lookup`` does for one process: each TBE reads its features' ids and writes their
columns of one shared output. A rank whose shards share a dtype keeps one plain TBE (no split, no copy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import TableBatchedEmbedding
from polyrec.models.mixed_embeddings import (dtype_groups, group_features, grouped_table_weights,
                                              register_features, split_lookup)


class MixedShardTables(nn.Module):
    """The local tables of one rank, of several row dtypes, with the interface ``ShardedEmbedding`` uses."""

    #: ``ShardedEmbedding`` hands ``forward`` the local batch's feature bounds where the input distribution knows
    #: them on the host (no host sync for the split).
    takes_bounds = True

    def __init__(self, shard_dtypes: Sequence[torch.dtype], feature_to_shard: Sequence[int],
                 feature_dims: Sequence[int],
                 build: Callable[[int, list[int], list[int], torch.dtype, tuple[list[int], int]],
                                 TableBatchedEmbedding]) -> None:
        """``shard_dtypes``: each local shard's row dtype; ``feature_to_shard``, ``feature_dims``: the shard and width
        of each local feature (the output's columns, in feature order). ``build(group, shards, feature_to_table, dtype,
        output_columns)`` makes the TBE of the ``shards`` (local indices) of one dtype, the ``group``-th."""
        super().__init__()
        starts = [sum(feature_dims[:f]) for f in range(len(feature_dims))]
        width = sum(feature_dims)
        self.groups: list[list[int]] = []  # each TBE's shards (local indices), for checkpoints
        self.feature_groups: list[list[int]] = []  # each TBE's features
        self.tbes = nn.ModuleList()
        for group, (dtype, shards) in enumerate(dtype_groups(tuple(shard_dtypes))):
            features = [f for f, s in enumerate(feature_to_shard) if s in shards]
            to_table = [shards.index(feature_to_shard[f]) for f in features]
            tbe = build(group, shards, to_table, dtype, ([starts[f] for f in features], width))
            tbe.feature_numbers = features  # its errors name the rank's features, as one TBE's would
            self.tbes.append(tbe)
            self.groups.append(shards)
            self.feature_groups.append(features)
        register_features(self, self.feature_groups, self.tbes[0].weights.device)
        self._parts: tuple[JaggedBatch, list[JaggedBatch]] | None = None  # the last trained lookup's batch, its split

    def forward(self, batch: JaggedBatch, bounds: list[int] | None = None) -> torch.Tensor:
        """The local batch [F features x N samples] -> pooled [N, local dims]; ``bounds``: each feature's first id
        position, then nnz (host ints; None: read from the offsets, one host sync)."""
        batch.validate(device=self.tbes[0].weights.device)
        out, parts = split_lookup(list(self.tbes), self.feature_groups, group_features(self, len(self.tbes)), batch,
                                  bounds)
        # kept for ``prepare_backward`` only where a backward follows, and only until it is called
        self._parts = (batch, parts) if torch.is_grad_enabled() else None
        return out

    def prepare_backward(self, batch: JaggedBatch) -> None:
        """Each TBE's id sort for the backward of the last lookup, when ``batch`` is that lookup's
        (``TableBatchedEmbedding.prepare_backward``); nothing otherwise."""
        held, self._parts = self._parts, None
        if held is not None and held[0] is batch:
            for tbe, part in zip(self.tbes, held[1]):
                tbe.prepare_backward(part)

    @property
    def backward_stream(self) -> torch.cuda.Stream | None:
        return self.tbes[0].backward_stream

    @backward_stream.setter
    def backward_stream(self, stream: torch.cuda.Stream | None) -> None:
        for tbe in self.tbes:
            tbe.backward_stream = stream

    @property
    def defer_errors(self) -> bool:
        return self.tbes[0].defer_errors

    @defer_errors.setter
    def defer_errors(self, defer: bool) -> None:
        for tbe in self.tbes:
            tbe.defer_errors = defer

    def check_errors(self) -> None:
        """Raise for bad ids any TBE flagged in recent lookups (waits for the flags)."""
        for tbe in self.tbes:
            tbe.check_errors(wait=True)

    def table_weights(self) -> list[torch.Tensor]:
        """Views [rows, dim] of each local shard's rows, in shard order."""
        return grouped_table_weights(self.tbes, self.groups)
