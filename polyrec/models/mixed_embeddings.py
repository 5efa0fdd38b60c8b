"""polyrec embedding tables of several row dtypes (a plan's per-table precisions): one TBE per dtype.

``polyrec.kernels.tbe.TableBatchedEmbedding`` keeps all its tables in one flat buffer of one precision, so
tables of fp32 and fp16 rows live in two of them. A lookup splits the feature-major jagged batch by those
groups (one host sync: each feature's value bounds), looks every group up in its TBE, and puts the pooled
outputs into one ``[B, F, D]`` in table order; each TBE's backward updates its rows in place (fused), from its
columns of the output gradient.

What a one-dtype ``PolyrecEmbeddings`` adds for speed is not here: the lookup writes no caller's buffer (no
``lead_columns`` for DLRM-DCNv2's x0, no ``hold_output`` for a CUDA graph's static input: the model and the
trainer copy instead), and the split and the reassembly are extra passes over the ids and the pooled output (and
its gradient).
"""

from __future__ import annotations

import torch
from torch import nn

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.models.embeddings import bag_bounds

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
                   features: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The jagged batch of ``features`` alone, in their order: values [nnz_g] and offsets [len(features)*B+1];
    ``bounds``: where each feature's values start and end in ``values`` (``embeddings.bag_bounds``)."""
    parts, starts, base = [], [], 0
    for f in features:
        parts.append(values[bounds[f]:bounds[f + 1]])
        starts.append(offsets[f * batch_size:(f + 1) * batch_size] - (bounds[f] - base))
        base += bounds[f + 1] - bounds[f]
    starts.append(offsets.new_tensor([base]))
    return torch.cat(parts), torch.cat(starts)


class _Interleave(torch.autograd.Function):
    """The groups' pooled outputs [B, F_g, D] written into one [B, F, D] at their features' columns; backward
    hands each group its columns of the gradient, contiguous (as its TBE's backward reads them): one pass each way
    (a cat and a gather would take two, and their backward two more)."""

    @staticmethod
    def forward(ctx, columns: list[torch.Tensor], *parts: torch.Tensor) -> torch.Tensor:
        ctx.columns = columns
        first = parts[0]
        out = first.new_empty((first.shape[0], sum(p.shape[1] for p in parts), first.shape[2]))  # [B, F, D]
        for index, part in zip(columns, parts):
            out.index_copy_(1, index, part)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, *(grad.index_select(1, index) for index in ctx.columns)


class MixedRowEmbeddings(nn.Module):
    """Tables of several row dtypes, each dtype's in one ``TableBatchedEmbedding`` with the fused optimizer."""

    fused = True

    def __init__(self, table_rows: tuple[int, ...], dim: int, *, row_dtypes: tuple[torch.dtype, ...],
                 optimizer: EmbeddingOptimizer, device: torch.device, seed: int,
                 output_dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if len(row_dtypes) != len(table_rows):
            raise ValueError(f"{len(row_dtypes)} row dtypes for {len(table_rows)} tables: give one per table")
        self.dim, self.num_features = dim, len(table_rows)
        grouped = dtype_groups(row_dtypes)
        self.groups = [tables for _, tables in grouped]
        self.tbes = nn.ModuleList()
        for dtype, tables in grouped:
            tbe = TableBatchedEmbedding(
                [TableSpec(name=f"t{t}", rows=table_rows[t], dim=dim, pooling="sum") for t in tables],
                optimizer=optimizer, weight_dtype=dtype, device=device, output_dtype=output_dtype,
                seed=seed * GROUP_SEED_STRIDE + tables[0])
            tbe.feature_numbers = tables  # its errors name the model's features
            self.tbes.append(tbe)
        for g, tables in enumerate(self.groups):  # each group's features, moved with the module (.to(device))
            self.register_buffer(f"columns_{g}", torch.tensor(tables, device=device), persistent=False)

    def forward(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int) -> torch.Tensor:
        """values [nnz], offsets [F*B+1] -> pooled [B, F, D], features in table order."""
        JaggedBatch(values=values, offsets=offsets, batch_size=batch_size,
                    num_features=self.num_features).validate(device=self.tbes[0].weights.device)
        bounds = bag_bounds(offsets, batch_size, self.num_features)
        if bounds[0] != 0 or bounds[-1] != values.numel():
            raise JaggedBatchError(f"offsets must run from 0 to nnz = {values.numel()}, got {bounds[0]} to "
                                   f"{bounds[-1]}")
        if any(b < a for a, b in zip(bounds, bounds[1:])):
            raise JaggedBatchError(f"offsets decrease between features: each feature's first offsets are {bounds}")
        outs = []
        for tbe, tables in zip(self.tbes, self.groups):
            part_values, part_offsets = feature_subset(values, offsets, bounds, batch_size, tables)
            batch = JaggedBatch(values=part_values, offsets=part_offsets, batch_size=batch_size,
                                num_features=len(tables))
            outs.append(tbe(batch).view(batch_size, len(tables), self.dim))  # [B, F_g, D]
        return _Interleave.apply([getattr(self, f"columns_{g}") for g in range(len(self.groups))], *outs)

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
