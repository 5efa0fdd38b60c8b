"""DLRM and DLRM-DCNv2: embeddings -> (bottom MLP, interaction) -> top MLP -> one logit per sample.

The model is split in two halves that the trainer runs (and times) separately: :meth:`DLRM.embed`
(the sparse half, whose parameters take the embedding optimizer) and :meth:`DLRM.dense_forward`
(the dense half, fp32 master weights, matmuls in ``compute_dtype``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from polyrec.models.config import ModelConfig
from polyrec.models.embeddings import (
    EmbeddingOptimConfig,
    build_embeddings,
    polyrec_embedding_available,
)
from polyrec.models.layers import (MLP, DenseOps, InputGradHook, LowRankCross, beside, dot_interaction,
                                   polyrec_dense_available)


def default_backends(device: torch.device) -> tuple[str, str]:
    """(embedding, dense) backends: polyrec's Triton kernels on a GPU where they are installed, else torch.

    On the CPU Triton runs only in its interpreter (orders of magnitude slower), so torch is the default.
    """
    on_gpu = device.type == "cuda"
    return ("polyrec" if on_gpu and polyrec_embedding_available() else "torch",
            "polyrec" if on_gpu and polyrec_dense_available() else "torch")


def _embedding_part(hook: InputGradHook, bottom_dim: int, emb_shape: torch.Size, x0_grad: torch.Tensor) -> None:
    """Hand ``hook`` the embedding columns of the cross network's input gradient [B, (F+1) D] as [B, F, D]."""
    hook(x0_grad[:, bottom_dim:].view(emb_shape))


class DLRM(nn.Module):
    """DLRM (dot interaction) or DLRM-DCNv2 (cross network), as ``config.interaction`` says."""

    def __init__(self, config: ModelConfig, *, embedding_backend: str = "torch", dense_backend: str = "torch",
                 embedding_optimizer: EmbeddingOptimConfig | None = None, device: torch.device | str = "cpu",
                 seed: int = 0, embedding_output_dtype: torch.dtype = torch.float32,
                 embedding_weight_dtype: torch.dtype | tuple[torch.dtype, ...] = torch.float32,
                 embeddings: nn.Module | None = None, dense_fp8: bool = False) -> None:
        super().__init__()
        device = torch.device(device)
        self.config = config
        self.embedding_backend = embedding_backend
        self.dense_backend = dense_backend
        self.ops = DenseOps(dense_backend)
        # ``embeddings`` replaces the backend's tables with a module of the same interface (the
        # sharded tables of a distributed run, polyrec.runtime.distributed_embeddings).
        self.embeddings = embeddings if embeddings is not None else build_embeddings(
            embedding_backend, config.table_rows, config.embedding_dim,
            optimizer=embedding_optimizer or EmbeddingOptimConfig(), device=device, seed=seed,
            weight_dtype=embedding_weight_dtype, output_dtype=embedding_output_dtype)
        gen = torch.Generator().manual_seed(seed)
        self.bottom = MLP(config.num_dense, config.bottom_mlp, last_relu=True, gen=gen)
        self.cross = (LowRankCross(config.interaction_dim, config.dcn_layers, config.dcn_rank, gen=gen)
                      if config.interaction == "dcnv2" else None)
        self.top = MLP(config.interaction_dim, config.top_mlp, last_relu=False, gen=gen)
        for part in self.dense_parts():
            part.to(device)
        if dense_fp8:  # the dense GEMMs in fp8 where their sizes allow (polyrec.kernels.fp8_dense)
            if dense_backend != "polyrec":
                raise ValueError(f"fp8 dense layers need the polyrec dense backend, got {dense_backend!r}")
            for part in self.dense_parts():
                part.enable_fp8()
        if self.cross is not None and hasattr(self.embeddings, "lead_columns"):  # x0 = [bottom, emb] without a copy
            self.embeddings.lead_columns = config.bottom_mlp[-1]
        # Set by a caller for the next dense_forward: called in its backward with the gradient of that
        # call's ``emb`` [B, F, D] once final (a strided view it must not write), where that comes
        # before the rest of the dense backward: DLRM-DCNv2 with ``emb`` already in the compute dtype.
        self.embedding_grad_hook: InputGradHook | None = None

    def dense_parts(self) -> list[nn.Module]:
        return [m for m in (self.bottom, self.cross, self.top) if m is not None]

    def dense_parameters(self) -> list[nn.Parameter]:
        """Parameters the dense optimizer owns (everything but the embedding tables)."""
        return [p for part in self.dense_parts() for p in part.parameters()]

    def _check_dense(self, dense: torch.Tensor) -> None:
        """ValueError unless ``dense`` is [B, num_dense]: another width failed inside the first matmul, and a 1-D
        tensor's length was taken as the batch size (an offsets error, blaming the ids)."""
        if dense.dim() != 2 or dense.shape[1] != self.config.num_dense:
            raise ValueError(f"dense must be [B, num_dense] = [B, {self.config.num_dense}], got {tuple(dense.shape)}")

    def embed(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int, started: Any = None,
              bounds: tuple[int, ...] | None = None) -> torch.Tensor:
        """values [nnz], offsets [F*B+1] -> pooled embeddings [B, F, D] (fp32, or the polyrec output dtype).
        ``started``: sharded tables only, the batch's input distribution begun by ``embeddings.start_inputs``.
        ``bounds``: the batch's ``feature_bounds`` where the host knows them (polyrec's tables take them)."""
        if started is not None:
            return self.embeddings(values, offsets, batch_size, started=started)
        if bounds is not None and getattr(self.embeddings, "takes_bounds", False):
            return self.embeddings(values, offsets, batch_size, bounds=bounds)
        return self.embeddings(values, offsets, batch_size)

    def dense_forward(self, dense: torch.Tensor, emb: torch.Tensor,
                      compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """dense [B, num_dense], emb [B, F, D] -> logits [B] (fp32)."""
        self._check_dense(dense)
        expected = (dense.shape[0], self.config.num_tables, self.config.embedding_dim)
        if tuple(emb.shape) != expected:
            raise ValueError(f"emb must be [B, F, D] = [{', '.join(map(str, expected))}], got {tuple(emb.shape)}")
        bottom = self.bottom(dense.to(compute_dtype), self.ops)  # [B, D]
        on_emb_grad = self.embedding_grad_hook if emb.dtype == compute_dtype else None  # else a cast's copy
        emb = emb.to(compute_dtype)
        if self.cross is not None:
            lead = self.embeddings.lead_buffer(emb) if hasattr(self.embeddings, "lead_buffer") else None
            x0 = beside(bottom, emb.flatten(1), lead)  # [B, (F+1) D]
            on_x0_grad = None if on_emb_grad is None else functools.partial(
                _embedding_part, on_emb_grad, bottom.shape[1], emb.shape)
            # the top MLP's fp8 pass begun ahead, so that the cross network's last pass writes its input copies
            begun = None
            if self.cross.writes_output_copies(self.ops):
                cross_grad = x0.requires_grad or any(p.requires_grad for p in self.cross.parameters())
                begun = self.top.begin_fp8_input(x0.shape[0], x0.device, self.ops, cross_grad)
            # the top MLP alone reads the cross output: its gradient is the network's to overwrite, and where
            # the last pass writes the top MLP's input copies that MLP reads nothing else of it
            copies = begun.copies if begun is not None else None
            inter = self.cross(x0, self.ops, on_x0_grad, owns_output_grad=True, output_copies=copies,
                               copies_only=copies is not None)
        else:
            begun, inter = None, dot_interaction(bottom, emb)  # [B, D + (F+1)F/2]
        return self.top(inter, self.ops, begun).squeeze(1).float()

    def forward(self, dense: torch.Tensor, values: torch.Tensor, offsets: torch.Tensor,
                compute_dtype: torch.dtype = torch.float32, bounds: tuple[int, ...] | None = None) -> torch.Tensor:
        """Logits [B] of a batch: dense [B, num_dense], values [nnz], offsets [F*B+1]; ``bounds`` as ``embed``."""
        self._check_dense(dense)  # before its rows are taken as the batch size
        return self.dense_forward(dense, self.embed(values, offsets, dense.shape[0], bounds=bounds), compute_dtype)
