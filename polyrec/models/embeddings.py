"""Embedding tables of DLRM, from one of two backends with one interface.

- "torch": one ``nn.EmbeddingBag(mode="sum", sparse=True)`` per table and a torch sparse optimizer
  (the "direct port" and the eager reference);
- "polyrec": polyrec.kernels.tbe.TableBatchedEmbedding (issue 4), one Triton launch for all tables,
  whose backward applies the optimizer in place (fused; no ``.grad`` on its weights).

Both take the feature-major jagged layout of TorchRec's KeyedJaggedTensor: ``values`` [nnz] int64 and
``offsets`` [F*B+1] int64, bag (f, b) being ``values[offsets[f*B+b]:offsets[f*B+b+1]]``.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

import torch
from torch import nn

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError, check_offsets_length
from polyrec.kernels.tbe_optim import check_hyperparameters

EMBEDDING_BACKENDS = ("torch", "polyrec")
EMBEDDING_OPTIMIZERS = ("sgd", "rowwise_adagrad", "adagrad", "adam")


def polyrec_embedding_available() -> bool:
    """Whether polyrec.kernels.tbe and polyrec.kernels.jagged (issue 4) are present."""
    return all(importlib.util.find_spec(m) is not None for m in ("polyrec.kernels.tbe", "polyrec.kernels.jagged"))


@dataclass(kw_only=True, slots=True)
class EmbeddingOptimConfig:
    """The sparse optimizer of the embedding tables (fields as in polyrec.kernels.tbe.EmbeddingOptimizer)."""

    kind: str = "rowwise_adagrad"  # one of EMBEDDING_OPTIMIZERS
    lr: float = 0.005  # MLPerf DLRM-DCNv2 reference: --adagrad --learning_rate 0.005 (mlcommons/training README)
    eps: float = 1e-8  # Adagrad/Adam denominator guard (torch.optim default 1e-10 / 1e-8)
    beta1: float = 0.9  # Adam only (Kingma & Ba defaults)
    beta2: float = 0.999  # Adam only
    weight_decay: float = 0.0
    initial_accumulator_value: float = 0.0  # Adagrad's starting sum of squares

    def __post_init__(self) -> None:
        if self.kind not in EMBEDDING_OPTIMIZERS:
            raise ValueError(f"embedding optimizer must be one of {EMBEDDING_OPTIMIZERS}, got {self.kind!r}")
        check_hyperparameters(self)  # polyrec's TBE checked them, the torch tables did not


class SparseRowwiseAdagrad(torch.optim.Optimizer):
    """Row-wise Adagrad on sparse gradients: one accumulator per row, the mean of its squared gradient.

    state += mean_j(g_j^2); w -= lr * g / (sqrt(state) + eps), on the rows present in the gradient
    (FBGEMM's EXACT_ROWWISE_ADAGRAD, the MLPerf DLRM-DCNv2 embedding optimizer). torch has none.
    """

    def __init__(self, params, *, lr: float, eps: float, initial_accumulator_value: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "eps": eps, "init": initial_accumulator_value})

    @torch.no_grad()
    def step(self, closure=None) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "sum" not in state:
                    state["sum"] = torch.full((p.shape[0],), group["init"], dtype=p.dtype, device=p.device)
                grad = p.grad.coalesce()
                rows, g = grad.indices()[0], grad.values()  # [n], [n, D]
                acc = state["sum"].index_add_(0, rows, g.pow(2).mean(dim=1))[rows]  # [n]
                p.index_add_(0, rows, g * (-group["lr"] / (acc.sqrt() + group["eps"])).unsqueeze(1))


def torch_sparse_optimizer(params: list[nn.Parameter], cfg: EmbeddingOptimConfig) -> torch.optim.Optimizer:
    """The torch optimizer matching ``cfg`` for sparse-gradient embedding weights."""
    if cfg.weight_decay and cfg.kind != "sgd":
        raise ValueError(f"the torch embedding backend has no weight decay for sparse {cfg.kind}")
    if cfg.kind == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.kind == "adagrad":
        return torch.optim.Adagrad(params, lr=cfg.lr, eps=cfg.eps, initial_accumulator_value=cfg.initial_accumulator_value)
    if cfg.kind == "adam":
        return torch.optim.SparseAdam(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    return SparseRowwiseAdagrad(params, lr=cfg.lr, eps=cfg.eps, initial_accumulator_value=cfg.initial_accumulator_value)


def bag_bounds(offsets: torch.Tensor, batch_size: int, num_features: int) -> list[int]:
    """Where each feature's values start and end: offsets[0], offsets[B], ..., offsets[F*B] (one host sync);
    with no samples (offsets [1]) every feature's range is empty."""
    if batch_size == 0:
        return offsets[:1].tolist() * (num_features + 1)
    return offsets[::batch_size].tolist()


class TorchEmbeddings(nn.Module):
    """One nn.EmbeddingBag(sparse=True) per table with a torch sparse optimizer (the direct port)."""

    fused = False

    def __init__(self, table_rows: tuple[int, ...], dim: int, *, optimizer: EmbeddingOptimConfig,
                 device: torch.device, seed: int) -> None:
        super().__init__()
        self.dim = dim
        self.bags = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum", sparse=True, device=device)
                                  for rows in table_rows)
        gen = torch.Generator(device=device)
        for t, bag in enumerate(self.bags):
            gen.manual_seed(seed * 1_000_003 + t)
            bound = math.sqrt(1.0 / bag.num_embeddings)  # DLRM reference create_emb: U(-sqrt(1/n), sqrt(1/n))
            with torch.no_grad():
                bag.weight.uniform_(-bound, bound, generator=gen)
        self.optimizer = torch_sparse_optimizer(list(self.parameters()), optimizer)

    def forward(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int) -> torch.Tensor:
        """values [nnz], offsets [F*B+1] -> pooled [B, F, D]; offsets of another length are an error (they
        would split the bags between the features at the wrong places), and so are offsets that do not run from
        0 to nnz (values outside them were dropped) and ids outside their tables (``_bad_input``)."""
        check_offsets_length(offsets, len(self.bags), batch_size)
        bounds = bag_bounds(offsets, batch_size, len(self.bags))
        if bounds[0] != 0:
            raise JaggedBatchError(f"offsets[0] must be 0, got {bounds[0]}")
        if bounds[-1] != values.numel():
            raise JaggedBatchError(f"offsets[-1] must equal nnz = {values.numel()}, got {bounds[-1]}")
        try:
            pooled = [bag(values[bounds[f]:bounds[f + 1]], offsets[f * batch_size:(f + 1) * batch_size] - bounds[f])
                      for f, bag in enumerate(self.bags)]  # F x [B, D]
        except (IndexError, RuntimeError):
            self._bad_input(values, offsets, batch_size)
            raise
        return torch.stack(pooled, dim=1)

    def _bad_input(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int) -> None:
        """JaggedBatchError naming the feature, id and table size (or the offsets) where nn.EmbeddingBag failed
        saying only "Expected i < index_size"; checked after a failure, so a good batch pays nothing."""
        batch = JaggedBatch(values=values.contiguous(), offsets=offsets.contiguous(), batch_size=batch_size,
                            num_features=len(self.bags))
        batch.validate(rows=[bag.num_embeddings for bag in self.bags], full=True)

    def apply_gradients(self) -> None:
        """The optimizer's step. Its sparse tensors (``torch.optim.Adagrad``'s from the gradient's own indices) are
        built with torch's invariant checks off, as they were by default, but said so: left implicit, torch 2.13
        warned on every run (the checks would cost a pass over the indices and find nothing)."""
        with torch.sparse.check_sparse_tensor_invariants(enable=False):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def check_errors(self) -> None:
        """Nothing deferred: nn.EmbeddingBag raises on a bad id at the lookup."""

    def export_state(self) -> dict:
        """Weights and optimizer state, for checkpoints."""
        return {"weights": self.state_dict(), "optimizer": self.optimizer.state_dict()}

    def import_state(self, state: dict) -> None:
        self.load_state_dict(state["weights"])
        self.optimizer.load_state_dict(state["optimizer"])


def tbe_modules(module: nn.Module) -> list[nn.Module]:
    """The polyrec TBEs within ``module``: one, one per row dtype (``MixedRowEmbeddings``), a rank's shards, or
    none (torch's tables)."""
    from polyrec.kernels.tbe import TableBatchedEmbedding

    return [m for m in module.modules() if isinstance(m, TableBatchedEmbedding)]


def tbe_optimizer(cfg: EmbeddingOptimConfig):
    """``cfg`` as polyrec's TBE takes it (``polyrec.kernels.tbe.EmbeddingOptimizer``)."""
    from polyrec.kernels.tbe import EmbeddingOptimizer

    return EmbeddingOptimizer(kind=cfg.kind, lr=cfg.lr, eps=cfg.eps, beta1=cfg.beta1, beta2=cfg.beta2,
                              weight_decay=cfg.weight_decay, initial_accumulator_value=cfg.initial_accumulator_value)


class HeldOutputEmbeddings(nn.Module):
    """polyrec's tables whose pooled output is one [B, lead_columns + F*D] buffer that callers may write
    beside (``lead_columns``, ``lead_buffer``: DLRM-DCNv2's x0) or hold for every later lookup
    (``hold_output``: a CUDA graph's static input). A subclass looks the batch up into it (``lookup``)."""

    #: ``forward`` takes the batch's ``feature_bounds`` (``DLRM.embed`` hands them over)
    takes_bounds = True

    def __init__(self, num_features: int, dim: int) -> None:
        super().__init__()
        self.num_features, self.dim = num_features, dim
        # Columns the lookup leaves free before its output in the buffer it writes (TableBatchedEmbedding's
        # ``lead_columns``): DLRM-DCNv2 puts the bottom MLP's output there (polyrec.models.layers.beside).
        self.lead_columns = 0
        self._free_lead: int | None = None  # data_ptr of the latest output, while its lead columns are free
        self._latest: int | None = None  # data_ptr of the latest output
        self._held: torch.Tensor | None = None  # [B, lead_columns + F*D]: where trained lookups of B bags go

    def lookup(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int, into: torch.Tensor | None,
               bounds: tuple[int, ...] | None) -> torch.Tensor:
        """The pooled [B, F*D], the last columns of a [B, lead_columns + F*D] buffer (``into`` when given);
        ``bounds``: each feature's first and last id positions, known on the host (``Batch.feature_bounds``)."""
        raise NotImplementedError

    def forward(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int,
                bounds: tuple[int, ...] | None = None) -> torch.Tensor:
        """values [nnz], offsets [F*B+1] -> pooled [B, F, D]."""
        held = self._held
        into = held if held is not None and torch.is_grad_enabled() and held.shape[0] == batch_size else None
        out = self.lookup(values, offsets, batch_size, into, bounds)  # [B, F*D]
        self._latest = out.data_ptr()
        self._free_lead = out.data_ptr() if self.lead_columns else None
        return out.view(batch_size, self.num_features, self.dim)

    def hold_output(self, emb: torch.Tensor) -> bool:
        """Write every later trained lookup of ``emb``'s batch size into ``emb``'s buffer (``emb`` [B, F, D]:
        this module's latest output), so that a CUDA graph captured on ``emb`` finds each step's lookup in
        its static input instead of copying it there, and ``lead_buffer`` hands that buffer out at every
        call (the capture runs the dense half several times). For a caller that reads each lookup's output
        before the next trained lookup (the sync trainer). False, holding nothing, where ``emb`` is not
        that output."""
        buffer = emb._base if emb._base is not None else emb
        width = self.lead_columns + emb.shape[1] * emb.shape[2]
        if (emb.data_ptr() != self._latest or not buffer.is_contiguous() or buffer.shape != (emb.shape[0], width)
                or emb.data_ptr() != self._output_ptr(buffer)):
            return False
        self._held = buffer
        return True

    def _output_ptr(self, buffer: torch.Tensor) -> int:
        """Where a lookup's output starts in its [B, lead_columns + F*D] buffer: after the lead columns."""
        return buffer.data_ptr() + self.lead_columns * buffer.element_size()

    def _holds(self, emb: torch.Tensor) -> bool:
        """Whether ``emb`` [B, F, D] lies where ``hold_output``'s buffer has its lookups."""
        held = self._held
        return held is not None and emb.shape[0] == held.shape[0] and emb.data_ptr() == self._output_ptr(held)

    def lead_buffer(self, emb: torch.Tensor) -> torch.Tensor | None:
        """The [B, lead_columns + F*D] buffer whose last columns are ``emb`` [B, F, D] (this module's latest
        output, or a view of it at the same place), while its lead columns are free: a tensor over the
        same memory with its own version counter (the lookup wrote the buffer and ``emb``'s values stay
        as they are). Once per output: a second call, or any other tensor, gets None; but the buffer that
        ``hold_output`` holds, at every call."""
        rows, width = emb.shape[0], self.lead_columns + emb.shape[1] * emb.shape[2]
        if self.lead_columns == 0 or emb.stride() != (width, emb.shape[2], 1):
            return None
        if not self._holds(emb):
            if emb.data_ptr() != self._free_lead:
                return None
            self._free_lead = None
        return torch.empty(0, dtype=emb.dtype, device=emb.device).set_(
            emb.untyped_storage(), emb.storage_offset() - self.lead_columns, (rows, width), (width, 1))


class PolyrecEmbeddings(HeldOutputEmbeddings):
    """polyrec's table-batched embedding with its fused optimizer (state lives in its state_dict)."""

    fused = True

    def __init__(self, table_rows: tuple[int, ...], dim: int, *, optimizer: EmbeddingOptimConfig,
                 device: torch.device, seed: int, weight_dtype: torch.dtype = torch.float32,
                 output_dtype: torch.dtype = torch.float32) -> None:
        super().__init__(len(table_rows), dim)
        if not polyrec_embedding_available():
            raise ImportError("embedding backend 'polyrec' needs polyrec.kernels.tbe and polyrec.kernels.jagged, "
                              "which are not installed")
        from polyrec.kernels.jagged import JaggedBatch
        from polyrec.kernels.tbe import TableBatchedEmbedding, TableSpec

        self._jagged = JaggedBatch
        tables = [TableSpec(name=f"t{t}", rows=rows, dim=dim, pooling="sum") for t, rows in enumerate(table_rows)]
        self.tbe = TableBatchedEmbedding(tables, optimizer=tbe_optimizer(optimizer), weight_dtype=weight_dtype,
                                         device=device, seed=seed, output_dtype=output_dtype)

    def lookup(self, values: torch.Tensor, offsets: torch.Tensor, batch_size: int, into: torch.Tensor | None,
               bounds: tuple[int, ...] | None) -> torch.Tensor:
        """One TBE reads the whole batch: ``bounds`` are not needed."""
        batch = self._jagged(values=values, offsets=offsets, batch_size=batch_size, num_features=self.num_features)
        return self.tbe(batch, lead_columns=self.lead_columns, into=into)

    def table_weights(self) -> list[torch.Tensor]:
        """Views [rows, dim] of each table's rows in the TBE's buffer."""
        return self.tbe.table_weights()

    def apply_gradients(self) -> None:
        """Nothing to do: the backward pass already updated the rows."""

    def check_errors(self) -> None:
        """Raise for bad ids the TBE kernels masked and flagged in recent lookups (waits for the flags)."""
        self.tbe.check_errors(wait=True)

    def export_state(self) -> dict:
        """Weights and optimizer state (the TBE's state_dict carries both), for checkpoints."""
        return {"tbe": self.tbe.state_dict()}

    def import_state(self, state: dict) -> None:
        self.tbe.load_state_dict(state["tbe"])


def build_embeddings(backend: str, table_rows: tuple[int, ...], dim: int, *, optimizer: EmbeddingOptimConfig,
                     device: torch.device, seed: int,
                     weight_dtype: torch.dtype | tuple[torch.dtype, ...] = torch.float32,
                     output_dtype: torch.dtype = torch.float32) -> nn.Module:
    """The tables of one backend; ``output_dtype`` (polyrec only) is the pooled output's dtype: bf16 there
    saves the fp32 round trip when the dense layers run in bf16 (torch's EmbeddingBag returns fp32).
    ``weight_dtype``: the rows' dtype, or one per table (several: ``MixedRowEmbeddings``, one TBE per
    dtype); fp16 / bf16 only with polyrec's TBE."""
    dtypes = weight_dtype if isinstance(weight_dtype, tuple) else (weight_dtype,) * len(table_rows)
    if len(dtypes) != len(table_rows):
        raise ValueError(f"{len(dtypes)} row dtypes for {len(table_rows)} tables: give one, or one per table")
    if backend == "torch":
        others = sorted(map(str, set(dtypes) - {torch.float32}))
        if others:
            raise ValueError(f"embedding backend 'torch' keeps fp32 rows, got weight dtype {', '.join(others)}")
        return TorchEmbeddings(table_rows, dim, optimizer=optimizer, device=device, seed=seed)
    if backend == "polyrec":
        if len(set(dtypes)) > 1:
            from polyrec.models.mixed_embeddings import MixedRowEmbeddings

            return MixedRowEmbeddings(table_rows, dim, row_dtypes=dtypes, optimizer=tbe_optimizer(optimizer),
                                      device=device, seed=seed, output_dtype=output_dtype)
        return PolyrecEmbeddings(table_rows, dim, optimizer=optimizer, device=device, seed=seed,
                                 weight_dtype=dtypes[0] if dtypes else torch.float32, output_dtype=output_dtype)
    raise ValueError(f"embedding backend must be one of {EMBEDDING_BACKENDS}, got {backend!r}")
