"""polyrec embedding tables of several row dtypes (a plan's per-table precisions): one TBE per dtype.

``polyrec.kernels.tbe.TableBatchedEmbedding`` keeps all its tables in one flat buffer of one precision, so
tables of fp32 and fp16 rows live in two of them. A lookup splits the feature-major jagged batch by those
groups (each feature's value bounds: from the batch's ``feature_bounds`` where its source knows them on the host,
else one host sync; one copy of the ids) and looks every group up in its TBE,
which writes its features' columns of one shared ``[B, lead_columns + F*D]`` output in table order
(``output_columns``, ``tbe_lookups.lookup_shared``); each TBE's backward reads its columns of the output
gradient and updates its rows in place (fused). The output is held as a one-dtype ``PolyrecEmbeddings`` holds
it (``HeldOutputEmbeddings``): DLRM-DCNv2's x0 beside it, a CUDA graph's static input filled in place.
"""

from __future__ import annotations

import torch
from torch import nn

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_lookups import lookup_shared
from polyrec.models.embeddings import HeldOutputEmbeddings, bag_bounds

#: Spreads the groups' seeds apart (a prime, as ``TorchEmbeddings`` seeds its tables): the TBEs draw
#: their initial rows and their stochastic rounding from unrelated streams.
GROUP_SEED_STRIDE = 1_000_003


def dtype_groups(row_dtypes: tuple[torch.dtype, ...]) -> list[tuple[torch.dtype, list[int]]]:
    """The tables of each row dtype, dtypes in order of their first table: [(dtype, [t, ...]), ...]."""
    groups: dict[torch.dtype, list[int]] = {}
    for t, dtype in enumerate(row_dtypes):
        groups.setdefault(dtype, []).append(t)
    return list(groups.items())


def device_ints(values: list[int], like: torch.Tensor) -> torch.Tensor:
    """``values`` as a tensor of ``like``'s dtype on its device. On a GPU copied from page-locked memory without
    waiting: ``torch.tensor(values, device=...)`` copies from pageable memory, which waits for all work queued
    before it (a host sync)."""
    host = torch.tensor(values, dtype=like.dtype)
    if like.device.type == "cpu":
        return host
    return host.pin_memory().to(like.device, non_blocking=True)


def feature_subset(values: torch.Tensor, offsets: torch.Tensor, bounds: list[int], batch_size: int,
                   features: list[int], index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The jagged batch of ``features`` alone, in their order: values [nnz_g] and offsets [len(features)*B+1];
    ``bounds``: where each feature's values start and end in ``values`` (``embeddings.bag_bounds``); ``index``:
    ``features`` on the ids' device. A few launches whatever the number of features, none waiting on the
    device."""
    shifts, base = [], 0  # how far each feature's values move down, and the subset's nnz
    for f in features:
        shifts.append(bounds[f] - base)
        base += bounds[f + 1] - bounds[f]
    part = torch.cat([values[bounds[f]:bounds[f + 1]] for f in features])
    if batch_size == 0:
        return part, offsets.new_zeros(1)
    moves = device_ints([*shifts, base], offsets)
    bags = offsets[:-1].view(-1, batch_size).index_select(0, index)  # [F_g, B] each bag's first position
    return part, torch.cat([(bags - moves[:-1, None]).view(-1), moves[-1:]])


def register_features(module: nn.Module, features: list[list[int]], device: torch.device) -> None:
    """Each TBE's features (``features[g]``) as the non-persistent buffer ``features_{g}`` of ``module``: on the
    ids' device, moved with the module (``.to(device)``); ``group_features`` reads them."""
    for g, group in enumerate(features):
        module.register_buffer(f"features_{g}", torch.tensor(group, device=device), persistent=False)


def group_features(module: nn.Module, count: int) -> list[torch.Tensor]:
    """The ``count`` buffers ``register_features`` gave ``module``, in order."""
    return [getattr(module, f"features_{g}") for g in range(count)]


def grouped_table_weights(tbes: nn.ModuleList, groups: list[list[int]]) -> list[torch.Tensor]:
    """Views [rows, dim] of every table the TBEs hold, in the order their positions (``groups[i]``: TBE i's) give."""
    views = {t: w for tbe, tables in zip(tbes, groups) for t, w in zip(tables, tbe.table_weights())}
    return [views[t] for t in range(len(views))]


def split_lookup(tbes: list[TableBatchedEmbedding], groups: list[list[int]], features: list[torch.Tensor],
                 batch: JaggedBatch, bounds: list[int] | None, *, lead_columns: int = 0,
                 into: torch.Tensor | None = None) -> tuple[torch.Tensor, list[JaggedBatch]]:
    """``batch`` looked up by several TBEs into one output (``tbe_lookups.lookup_shared``): TBE i reads the
    features ``groups[i]`` (``features[i]``: the same on the ids' device), which its ``output_columns`` place.
    ``bounds``: each feature's first id position, then nnz (host ints; None: read from the offsets, one host
    sync). ``batch``: validated by the caller (``JaggedBatch.validate``). Returns the output and the batch each TBE
    read."""
    if batch.weights is not None:
        raise JaggedBatchError("tables of several row dtypes take no per-sample weights")
    if bounds is None:
        bounds = bag_bounds(batch.offsets, batch.batch_size, batch.num_features)
    if bounds[0] != 0 or bounds[-1] != batch.nnz:
        raise JaggedBatchError(f"offsets must run from 0 to nnz = {batch.nnz}, got {bounds[0]} to {bounds[-1]}")
    if any(b < a for a, b in zip(bounds, bounds[1:])):
        raise JaggedBatchError(f"offsets decrease between features: each feature's first offsets are {bounds}")
    parts = []
    for group, index in zip(groups, features):
        part_values, part_offsets = feature_subset(batch.values, batch.offsets, bounds, batch.batch_size, group,
                                                   index)
        parts.append(JaggedBatch(values=part_values, offsets=part_offsets, batch_size=batch.batch_size,
                                 num_features=len(group)))
    return lookup_shared(tbes, parts, lead_columns=lead_columns, into=into), parts


class MixedRowEmbeddings(HeldOutputEmbeddings):
    """Tables of several row dtypes, each dtype's in one ``TableBatchedEmbedding`` with the fused optimizer."""

    fused = True

    def __init__(self, table_rows: tuple[int, ...], dim: int, *, row_dtypes: tuple[torch.dtype, ...],
                 optimizer: EmbeddingOptimizer, device: torch.device, seed: int,
                 output_dtype: torch.dtype = torch.float32) -> None:
        if len(row_dtypes) != len(table_rows):
            raise ValueError(f"{len(row_dtypes)} row dtypes for {len(table_rows)} tables: give one per table")
        super().__init__(len(table_rows), dim)
        grouped = dtype_groups(row_dtypes)
        self.groups = [tables for _, tables in grouped]
        self.tbes = nn.ModuleList()
        for dtype, tables in grouped:
            tbe = TableBatchedEmbedding(
                [TableSpec(name=f"t{t}", rows=table_rows[t], dim=dim, pooling="sum") for t in tables],
                optimizer=optimizer, weight_dtype=dtype, device=device, output_dtype=output_dtype,
                seed=seed * GROUP_SEED_STRIDE + tables[0],
                output_columns=([t * dim for t in tables], len(table_rows) * dim))  # table order in one output
            tbe.feature_numbers = tables  # its errors name the model's features
            self.tbes.append(tbe)
        register_features(self, self.groups, device)  # a table per feature: each group's tables are its features
        # set where a lookup's host bounds differed from its offsets' (check_errors raises)
        self.register_buffer("bounds_differ", torch.zeros((), dtype=torch.bool, device=device), persistent=False)

    def lookup(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int, into: torch.Tensor | None,
               bounds: tuple[int, ...] | None) -> torch.Tensor:
        """values [nnz], offsets [F*B+1] -> pooled [B, F*D], features in table order. ``bounds``: the host's
        ``Batch.feature_bounds`` (no host sync; compared with the offsets on the device, ``check_errors``
        raises where they differ); None: read from the offsets (one host sync)."""
        batch = JaggedBatch(values=values, offsets=offsets, batch_size=batch_size, num_features=self.num_features)
        batch.validate(device=self.tbes[0].weights.device)
        if bounds is not None:
            bounds = self._host_bounds(offsets, batch_size, bounds)
        return split_lookup(list(self.tbes), self.groups, group_features(self, len(self.groups)), batch, bounds,
                            lead_columns=self.lead_columns, into=into)[0]

    def _host_bounds(self, offsets: torch.Tensor, batch_size: int, bounds: tuple[int, ...]) -> list[int]:
        """``bounds`` as a list, after queueing their comparison with the offsets' (``bounds_differ``)."""
        if len(bounds) != self.num_features + 1:
            raise JaggedBatchError(f"feature_bounds: {len(bounds)} for {self.num_features} features (need F+1 = "
                                   f"{self.num_features + 1})")
        if batch_size:
            given = device_ints(list(bounds), offsets)
            self.bounds_differ.logical_or_((offsets[::batch_size] != given).any())
        return list(bounds)

    def table_weights(self) -> list[torch.Tensor]:
        """Views [rows, dim] of each table's rows in its TBE's buffer, in table order."""
        return grouped_table_weights(self.tbes, self.groups)

    def apply_gradients(self) -> None:
        """Nothing to do: the backward pass already updated the rows."""

    def check_errors(self) -> None:
        """Raise for bad ids any TBE masked and flagged in recent lookups, and for host bounds that were not the
        offsets' (waits for the flags), those first: the TBEs' flags would then only tell of a wrong split."""
        if bool(self.bounds_differ):
            self.bounds_differ.zero_()
            raise JaggedBatchError("a batch's feature_bounds (given by its data source, on the host) are not its "
                                   "offsets' (offsets[0], offsets[B], ..., offsets[F*B]): its ids were split between "
                                   "the row dtypes' tables at the wrong places")
        for tbe in self.tbes:
            tbe.check_errors(wait=True)

    def export_state(self) -> dict:
        """Each TBE's weights and optimizer state and the tables it holds, for checkpoints (their layouts name the
        tables' shapes and dtypes)."""
        return {"tbes": [tbe.state_dict() for tbe in self.tbes], "groups": self.groups}

    def import_state(self, state: dict) -> None:
        saved = state.get("tbes")
        if saved is None or len(saved) != len(self.tbes):
            held = "one row dtype" if saved is None else f"{len(saved)} row dtypes"
            raise ValueError(f"the checkpoint's tables hold {held}, these hold {len(self.tbes)}")
        for tbe, part in zip(self.tbes, saved):
            tbe.load_state_dict(part)
