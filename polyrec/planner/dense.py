"""The dense half of a model as a list of matmuls, with their GEMM shapes for a batch.

Mirrors ``polyrec.models.layers``: MLP layers ``y = act(x W^T + b)``; DCN-v2 low-rank cross layers
``v = x V^T`` (D -> r, no bias) then ``x' = x0 * (v U^T + b) + x`` (r -> D, fused epilogue).
"""

from __future__ import annotations

from dataclasses import dataclass

from polyrec.planner.types import ModelSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class Matmul:
    """One weight matrix of the dense layers."""

    name: str  # "bottom.0", "cross.1.v", "top.3", ...
    in_dim: int  # K of the forward GEMM
    out_dim: int  # N of the forward GEMM
    bias: bool  # has a bias vector
    needs_dgrad: bool  # False for the first bottom layer (its input, the dense features, needs no gradient)
    epilogue: str  # "relu", "none" or "cross" (fused x0 * (y + b) + x)

    @property
    def params(self) -> int:
        return self.in_dim * self.out_dim + (self.out_dim if self.bias else 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmShape:
    """One GEMM of a training step: C[M, N] = A[M, K] @ B[K, N]."""

    op: str  # "<matmul name>.fwd", ".dgrad" or ".wgrad"
    m: int
    n: int
    k: int
    epilogue: str  # fused epilogue of the forward; "none" for backward GEMMs
    library_adds_residual: bool = False  # the residual's storage is the call's: the library adds it in place
    fp8: bool = False  # fp8 operands through ``torch._scaled_mm`` (``polyrec.kernels.fp8.scaled_mm``)
    out_bytes: int = 0  # bytes per output element of an fp8 GEMM: the compute dtype's, or fp32 (a weight gradient)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


def _mlp(prefix: str, in_dim: int, sizes: tuple[int, ...], *, last_relu: bool, first_dgrad: bool) -> list[Matmul]:
    dims = (in_dim, *sizes)
    out = []
    for i, (k, n) in enumerate(zip(dims, dims[1:])):
        relu = i < len(sizes) - 1 or last_relu
        out.append(Matmul(name=f"{prefix}.{i}", in_dim=k, out_dim=n, bias=True,
                          needs_dgrad=first_dgrad or i > 0, epilogue="relu" if relu else "none"))
    return out


def dense_matmuls(model: ModelSpec) -> list[Matmul]:
    """Every weight matrix of the dense layers, in forward order."""
    d = model.dense
    mats = _mlp("bottom", d.num_dense, d.bottom_mlp, last_relu=True, first_dgrad=False)
    width = model.interaction_dim
    if d.interaction == "dcnv2":
        for layer in range(d.dcn_layers):
            mats.append(Matmul(name=f"cross.{layer}.v", in_dim=width, out_dim=d.dcn_rank, bias=False,
                               needs_dgrad=True, epilogue="none"))
            mats.append(Matmul(name=f"cross.{layer}.u", in_dim=d.dcn_rank, out_dim=width, bias=True,
                               needs_dgrad=True, epilogue="cross"))
    mats += _mlp("top", width, d.top_mlp, last_relu=False, first_dgrad=True)
    return mats


def dense_params(model: ModelSpec) -> int:
    return sum(m.params for m in dense_matmuls(model))


def padded_in_dim(mat: Matmul, align: int) -> int:
    """``in_dim`` rounded up to a multiple of ``align`` elements (``polyrec.models.layers.pad_reduction``)."""
    return -(-mat.in_dim // align) * align


def gemm_shapes(mat: Matmul, batch: int, align: int = 1) -> list[GemmShape]:
    """Forward, input-gradient and weight-gradient GEMMs of one matmul at ``batch`` samples; ``align``:
    the input dim is zero-padded to a multiple of that many elements (an MLP layer on polyrec's path)."""
    k = padded_in_dim(mat, align)
    shapes = [GemmShape(op=f"{mat.name}.fwd", m=batch, n=mat.out_dim, k=k, epilogue=mat.epilogue)]
    if mat.needs_dgrad:
        shapes.append(GemmShape(op=f"{mat.name}.dgrad", m=batch, n=k, k=mat.out_dim, epilogue="none"))
    shapes.append(GemmShape(op=f"{mat.name}.wgrad", m=mat.out_dim, n=k, k=batch, epilogue="none"))
    return shapes


def dense_flops_per_sample(model: ModelSpec) -> float:
    """Forward + backward FLOPs of the matmuls per sample."""
    return sum(s.flops for m in dense_matmuls(model) for s in gemm_shapes(m, 1))
