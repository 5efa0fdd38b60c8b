"""DLRM's embedding tables sharded over the ranks of a torch.distributed job.

``DistributedEmbeddings`` has the interface of the single-GPU embedding backends of
``polyrec.models.embeddings`` (``forward(values, offsets, batch_size) -> [B, F, D]``,
``apply_gradients``, ``export_state`` / ``import_state``), so the model and the trainer use it
unchanged: each rank holds its shards in one polyrec TableBatchedEmbedding (the fused optimizer runs
on each shard) and the all-to-alls of ``polyrec.runtime.sharding`` move ids and pooled rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn

from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.runtime.mixed_shards import MixedShardTables
from polyrec.runtime.peer_exchange import CopyEngineExchange
from polyrec.runtime.sharded_checkpoint import load_unsharded
from polyrec.runtime.sharding import ShardedEmbedding, StartedInputs
from polyrec.runtime.shards import Shard, TableSharding, make_shards, row_split_fills

#: Each rank initialises its shards from seed * _SEED_STRIDE + rank: distinct streams per rank, so
#: initial values depend on the sharding (a resumed or resharded checkpoint carries exact values).
_SEED_STRIDE = 1_000_003


#: With lookup balancing, a rank may hold up to this factor of an even share of the table bytes
#: (MLPerf DLRM-DCNv2 on 2 H200s: 1.25 x 52 GB of fp32 rows and row-wise state fits 141 GB with the
#: activations of a 65536 batch, ~20 GB: benchmarks/results/multi_gpu_world1_*).
BYTES_SLACK = 1.25


def default_shardings(table_rows: Sequence[int], dim: int, world_size: int, *,
                      lookups: Sequence[float] | None = None, row_wise_above: int | None = None) -> list[TableSharding]:
    """Table-wise placement. With ``lookups`` (ids per sample of each table): the most looked-up tables
    first onto the rank with the fewest lookups among those whose bytes stay under BYTES_SLACK x an
    even share (an embedding step's time follows its lookups: bytes-balanced MLPerf put 172 of 214
    lookups per sample on one of 2 ranks, 1.54x scaling, multi_gpu_world2_*); a table with more than
    an even share of all lookups is split row-wise over every rank (no table placement could balance
    it). Without: bytes balanced, largest tables first onto the lightest rank. Tables with more than
    ``row_wise_above`` rows are split row-wise over every rank too. A table whose row split would leave
    a rank no rows stays whole (a row shard without rows cannot be built)."""
    weight = list(lookups) if lookups is not None else list(table_rows)
    if len(weight) != len(table_rows):
        raise ValueError(f"default_shardings: {len(weight)} lookup counts for {len(table_rows)} tables")
    cap = max(BYTES_SLACK * sum(table_rows) / world_size, max(table_rows, default=0))
    rows = [0] * world_size
    load = [0.0] * world_size
    plans: list[TableSharding | None] = [None] * len(table_rows)
    for t in sorted(range(len(table_rows)), key=lambda t: (-weight[t], -table_rows[t])):
        too_hot = lookups is not None and weight[t] > sum(weight) / world_size
        too_big = row_wise_above is not None and table_rows[t] > row_wise_above
        if (too_hot or too_big) and world_size > 1 and row_split_fills(table_rows[t], world_size):
            plans[t] = TableSharding(kind="row", ranks=tuple(range(world_size)))
            for r in range(world_size):
                rows[r] += table_rows[t] // world_size
                load[r] += weight[t] / world_size
            continue
        room = [r for r in range(world_size) if rows[r] + table_rows[t] <= cap]
        rank = (min(room, key=lambda r: (load[r], rows[r])) if room
                else min(range(world_size), key=lambda r: rows[r]))  # no rank under the cap: the emptiest
        plans[t] = TableSharding(kind="table", ranks=(rank,))
        rows[rank] += table_rows[t]
        load[rank] += weight[t]
    return [p for p in plans if p is not None]


def check_buildable(shards: Sequence[Shard], world_size: int) -> None:
    """Every rank can build its TableBatchedEmbedding: it holds a shard, and no shard is without rows
    (a table split row-wise over more ranks than it has rows). Every rank checks the whole sharding, so
    all raise the same error before any collective, instead of one rank failing while its peers wait."""
    idle = sorted(set(range(world_size)) - {s.rank for s in shards})
    if idle:
        raise ValueError(f"rank(s) {idle} of {world_size} hold no shard; give every rank at least one table or shard")
    empty = sorted({(s.table, s.rows[1]) for s in shards if s.num_rows == 0})
    if empty:
        tables = ", ".join(f"table {t} ({rows} rows)" for t, rows in empty)
        raise ValueError(f"{tables} split row-wise over more ranks than rows: every row shard needs a row; "
                         "shard it over fewer ranks or keep it whole")


def _init_as_whole_tables(local: TableBatchedEmbedding, shards: Sequence[Shard], table_rows: Sequence[int]) -> None:
    """Row shards' initial weights drawn from their whole table's range: the TBE draws each of its tables
    from U(-sqrt(1 / rows), sqrt(1 / rows)) of its own rows (docs/tbe.md), which for a shard of a table
    split row-wise over N ranks was about sqrt(N) wider than one process's (TorchRec inits a shard by
    its whole table's size)."""
    with torch.no_grad():
        for view, s in zip(local.table_weights(), shards):
            if s.num_rows != table_rows[s.table]:
                view.mul_(math.sqrt(s.num_rows / table_rows[s.table]))


class DistributedEmbeddings(nn.Module):
    """Sharded embedding tables with the single-GPU backends' interface."""

    fused = True

    def __init__(self, table_rows: tuple[int, ...], dim: int, *, optimizer: EmbeddingOptimizer,
                 shardings: Sequence[TableSharding], rank: int, world_size: int, device: torch.device,
                 seed: int, weight_dtype: torch.dtype | tuple[torch.dtype, ...] = torch.float32,
                 output_dtype: torch.dtype = torch.float32, input_group: dist.ProcessGroup | None = None,
                 peer_exchange: CopyEngineExchange | None = None) -> None:
        """``weight_dtype``: the row dtype of every table, or one per table (a rank whose shards hold several
        keeps one TBE per dtype: ``MixedShardTables``)."""
        super().__init__()
        self.dim, self.num_tables = dim, len(table_rows)
        row_dtypes = weight_dtype if isinstance(weight_dtype, tuple) else (weight_dtype,) * len(table_rows)
        if len(row_dtypes) != len(table_rows):
            raise ValueError(f"{len(row_dtypes)} row dtypes for {len(table_rows)} tables: give one per table")

        check_buildable(make_shards(table_rows, [dim] * len(table_rows), shardings, world_size), world_size)

        def tbe(shards: list[Shard], feature_to_shard: list[int], dtype: torch.dtype, group: int = 0,
                output_columns: tuple[list[int], int] | None = None) -> TableBatchedEmbedding:
            tables = [TableSpec(name=f"t{s.table}[{s.rows[0]}:{s.rows[1]},{s.cols[0]}:{s.cols[1]}]",
                                rows=s.num_rows, dim=s.dim) for s in shards]
            local = TableBatchedEmbedding(tables, optimizer=optimizer, weight_dtype=dtype,
                                          feature_to_table=feature_to_shard, device=device,
                                          seed=seed * _SEED_STRIDE + rank + group * world_size,  # per rank, TBE
                                          output_dtype=output_dtype, output_columns=output_columns)
            _init_as_whole_tables(local, shards, table_rows)
            return local

        def build(shards: list[Shard], feature_to_shard: list[int]) -> nn.Module:
            dtypes = [row_dtypes[s.table] for s in shards]
            if len(set(dtypes)) == 1:
                return tbe(shards, feature_to_shard, dtypes[0])
            return MixedShardTables(dtypes, feature_to_shard, [shards[s].dim for s in feature_to_shard],
                                    lambda group, part, to_table, dtype, columns: tbe(
                                        [shards[s] for s in part], to_table, dtype, group, columns))

        self.sharded = ShardedEmbedding(rows=table_rows, dims=[dim] * len(table_rows), shardings=shardings,
                                        feature_to_table=list(range(len(table_rows))), local_factory=build,
                                        rank=rank, world_size=world_size, input_group=input_group,
                                        peer_exchange=peer_exchange)

    @property
    def local(self) -> nn.Module:
        """This rank's tables: one TableBatchedEmbedding, or ``MixedShardTables`` where they hold several row
        dtypes."""
        return self.sharded.local

    def start_inputs(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int) -> StartedInputs | None:
        """Begin the input distribution of a batch (``ShardedEmbedding.start_inputs``); hand the result
        to ``forward`` as ``started`` with the same tensors."""
        batch = JaggedBatch(values=values, offsets=offsets, batch_size=batch_size, num_features=self.num_tables)
        return self.sharded.start_inputs(batch)

    def distribute_inputs(self, started: StartedInputs) -> None:
        """Queue the rest of a started input distribution now (``ShardedEmbedding.distribute_inputs``)."""
        self.sharded.distribute_inputs(started)

    #: ``forward`` takes the batch's ``feature_bounds`` (``DLRM.embed`` hands them over; a world of one uses them)
    takes_bounds = True

    def forward(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int,
                started: StartedInputs | None = None, bounds: tuple[int, ...] | None = None) -> torch.Tensor:
        """values [nnz], offsets [F*B+1] of this rank's B samples -> pooled [B, F, D]; ``bounds``: the batch's
        ``feature_bounds`` where the host knows them (``ShardedEmbedding.forward``)."""
        batch = JaggedBatch(values=values, offsets=offsets, batch_size=batch_size, num_features=self.num_tables)
        return self.sharded(batch, started, bounds).view(batch_size, self.num_tables, self.dim)

    def start_backward(self, grad: torch.Tensor) -> None:
        """Start the gradient all-to-all of the last forward's output from its gradient ``grad`` [B, F, D]
        (any row stride) before that output's backward runs (``ShardedEmbedding.start_backward``)."""
        self.sharded.start_backward(grad.reshape(grad.shape[0], -1))

    def backward_overlapping(self, output: torch.Tensor, grad: torch.Tensor, meanwhile) -> bool:
        """``output.backward(grad)``, calling ``meanwhile`` while the gradient crosses the all-to-all
        (``ShardedEmbedding.backward_overlapping``); False when nothing crossed and the caller runs it."""
        return self.sharded.backward_overlapping(output, grad, meanwhile)

    @property
    def updates_beside(self) -> bool:
        """Whether the tables' update runs on a stream of its own (``ShardedEmbedding.update_stream``)."""
        return self.sharded.update_stream is not None

    def update_after_current(self) -> None:
        """The next update also waits for the current stream's queued work (``ShardedEmbedding.update_after_current``)."""
        self.sharded.update_after_current()

    def apply_gradients(self) -> None:
        """Nothing to do: each shard's backward already applied its optimizer."""

    def check_errors(self) -> None:
        """Raise, on every rank, for bad ids any rank's shards flagged in an earlier lookup (one device
        sync and one all-reduce; ``ShardedEmbedding.check_errors``)."""
        self.sharded.check_errors()

    def export_state(self) -> dict:
        """This rank's shards (weights and optimizer state) with their place in the tables."""
        return {"shards": [{"table": s.table, "kind": s.kind, "rows": list(s.rows), "cols": list(s.cols)}
                           for s in self.sharded.local_shards],
                "tbe": self.local.state_dict()}

    def import_state(self, state: dict) -> None:
        """Load a state exported by this rank under the same sharding (see sharded_checkpoint for resharding),
        or a one-process checkpoint's unsharded tables (``{"tbe": ...}`` or ``{"tbes": ...}``), cut into this
        rank's shards."""
        if "shards" not in state:
            load_unsharded(state, self.sharded.local_shards, self.local)
            return
        mine = [{"table": s.table, "kind": s.kind, "rows": list(s.rows), "cols": list(s.cols)}
                for s in self.sharded.local_shards]
        if state["shards"] != mine:
            raise ValueError("checkpoint shards differ from this rank's shards; load it with "
                             "polyrec.runtime.sharded_checkpoint.load_sharded to reshard")
        self.local.load_state_dict(state["tbe"])
