"""polyrec embedding tables of several row dtypes (a plan's per-table precisions): one TBE per dtype.

``polyrec.kernels.tbe.TableBatchedEmbedding`` keeps all its tables in one flat buffer of one precision, so
tables of fp32 and fp16 rows live in two of them. A lookup splits the feature-major jagged batch by those
groups (one host sync: each feature's value bounds; one copy of the ids) and looks every group up in its TBE,
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


def feature_subset(values: torch.Tensor, offsets: torch.Tensor, bounds: list[int], batch_size: int,
                   features: list[int], index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The jagged batch of ``features`` alone, in their order: values [nnz_g] and offsets [len(features)*B+1];
    ``bounds``: where each feature's values start and end in ``values`` (``embeddings.bag_bounds``); ``index``:
    ``features`` on the ids' device. A few launches whatever the number of features (the lookup waits on the
    host between the sync of ``bounds`` and them)."""
    shifts, base = [], 0  # how far each feature's values move down, and the subset's nnz
    for f in features:
        shifts.append(bounds[f] - base)
        base += bounds[f + 1] - bounds[f]
    part = torch.cat([values[bounds[f]:bounds[f + 1]] for f in features])
    if batch_size == 0:
        return part, offsets.new_zeros(1)
    moves = torch.tensor([*shifts, base], dtype=offsets.dtype, device=offsets.device)
    bags = offsets[:-1].view(-1, batch_size).index_select(0, index)  # [F_g, B] each bag's first position
    return part, torch.cat([(bags - moves[:-1, None]).view(-1), moves[-1:]])


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
        for g, tables in enumerate(self.groups):  # each group's features, moved with the module (.to(device))
            self.register_buffer(f"features_{g}", torch.tensor(tables, device=device), persistent=False)

    def lookup(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int,
               into: torch.Tensor | None) -> torch.Tensor:
        """values [nnz], offsets [F*B+1] -> pooled [B, F*D], features in table order."""
        JaggedBatch(values=values, offsets=offsets, batch_size=batch_size,
                    num_features=self.num_features).validate(device=self.tbes[0].weights.device)
        bounds = bag_bounds(offsets, batch_size, self.num_features)
        if bounds[0] != 0 or bounds[-1] != values.numel():
            raise JaggedBatchError(f"offsets must run from 0 to nnz = {values.numel()}, got {bounds[0]} to "
                                   f"{bounds[-1]}")
        if any(b < a for a, b in zip(bounds, bounds[1:])):
            raise JaggedBatchError(f"offsets decrease between features: each feature's first offsets are {bounds}")
        batches = []
        for g, tables in enumerate(self.groups):
            part_values, part_offsets = feature_subset(values, offsets, bounds, batch_size, tables,
                                                       getattr(self, f"features_{g}"))
            batches.append(JaggedBatch(values=part_values, offsets=part_offsets, batch_size=batch_size,
                                       num_features=len(tables)))
        return lookup_shared(list(self.tbes), batches, lead_columns=self.lead_columns, into=into)

    def table_weights(self) -> list[torch.Tensor]:
        """Views [rows, dim] of each table's rows in its TBE's buffer, in table order."""
        views = {t: w for tbe, tables in zip(self.tbes, self.groups) for t, w in zip(tables, tbe.table_weights())}
        return [views[t] for t in range(self.num_features)]

    def apply_gradients(self) -> None:
        """Nothing to do: the backward pass already updated the rows."""

    def check_errors(self) -> None:
        """Raise for bad ids any TBE masked and flagged in recent lookups (waits for the flags)."""
        for tbe in self.tbes:
            tbe.check_errors(wait=True)

    def export_state(self) -> dict:
        """Each TBE's weights and optimizer state, for checkpoints (their layouts name tables and dtypes)."""
        return {"tbes": [tbe.state_dict() for tbe in self.tbes]}

    def import_state(self, state: dict) -> None:
        saved = state.get("tbes")
        if saved is None or len(saved) != len(self.tbes):
            held = "one row dtype" if saved is None else f"{len(saved)} row dtypes"
            raise ValueError(f"the checkpoint's tables hold {held}, these hold {len(self.tbes)}")
        for tbe, part in zip(self.tbes, saved):
            tbe.load_state_dict(part)
