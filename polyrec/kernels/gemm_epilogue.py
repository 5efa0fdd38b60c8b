"""The GEMM's fused epilogues applied to a product that already exists, in one Triton elementwise pass
(``split_k_reduce_kernel`` with ``SPLIT_K=1``, launched by ``polyrec.kernels.gemm_launch.reduce_pass``):
``epilogue_pass`` for a caller's product (the DCN-v2 cross network keeps its product for the backward),
``apply_epilogue`` for the library path's (``polyrec.kernels.gemm._library``); ``CrossGrad``, the cross
layer's backward as an epilogue. Where Triton cannot run (CPU tensors without the interpreter) torch ops
apply the epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polyrec.kernels.fp8 import Fp8Out, eager_fused_out
from polyrec.kernels.gemm_configs import FP8_ONLY_PASS_NUM_WARPS, REDUCE_BLOCK_M, REDUCE_NUM_WARPS, pass_row_blocks
from polyrec.kernels.gemm_launch import epilogue_operands, reduce_pass
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.interpreter import interpreting

ACTIVATIONS = ("none", "relu")


@dataclass(kw_only=True, slots=True)
class CrossGrad:
    """The DCN-v2 cross layer's backward as an epilogue of the recompute GEMM y = v @ Wᵀ + b: the
    GEMM's output is g = grad * x0 (the gradient of y), and ``d_x0`` is updated in place with
    grad * y (x0's gradient through the cross update)."""

    grad: torch.Tensor  # [M, N] the gradient of the layer output x_{l+1}
    x0: torch.Tensor  # [M, N] the cross network's input
    d_x0: torch.Tensor  # [M, N] x0's gradient accumulator, updated in place (any float dtype)
    accumulate: bool = True  # d_x0 += ...; False overwrites it (the first layer of the backward)
    plus_grad: bool = False  # add grad too: x0 is also this layer's residual input (layer 0)
    bias_grad: torch.Tensor | None = None  # [N] fp32, written with the sum over M of g

    def tensors(self) -> tuple[tuple[str, torch.Tensor], ...]:
        return (("grad", self.grad), ("x0", self.x0), ("d_x0", self.d_x0))


def validate_fused(m, n, device, activation, residual, cross_grad) -> None:
    """The residual / CrossGrad epilogues: [m, n] tensors on ``device``, no activation."""
    named = [("residual", residual)] if residual is not None else []
    if cross_grad is not None:
        named += list(cross_grad.tensors())
        db = cross_grad.bias_grad
        if db is not None and (db.shape != (n,) or db.dtype != torch.float32 or db.device != device):
            raise ValueError(f"matmul: cross_grad bias_grad must be fp32 [{n}] on {device}, got {db.dtype} "
                             f"{tuple(db.shape)} on {db.device}")
    if named and activation != "none":
        raise ValueError("matmul: the residual and cross_grad epilogues take no activation")
    for name, t in named:
        if t.shape != (m, n) or t.device != device:
            raise ValueError(f"matmul: {name} must be [{m}, {n}] on {device}, got {tuple(t.shape)} on {t.device}")


def epilogue_pass(y: torch.Tensor, *, bias: torch.Tensor | None = None, activation: str = "none",
                  cross: tuple[torch.Tensor, torch.Tensor] | None = None, residual: torch.Tensor | None = None,
                  cross_grad: CrossGrad | None = None, out: torch.Tensor | None = None,
                  warmup: bool = False, fp8: Fp8Out | None = None, fp8_only: bool = False) -> torch.Tensor | None:
    """``matmul``'s epilogue applied to an existing product y [M, N] in one Triton pass (where Triton
    cannot run — CPU tensors without the interpreter — torch ops apply it). ``out`` [M, N] may be y
    itself (each element is read, then written, by one program); None allocates one like y. ``fp8``:
    the pass also writes fp8 copies of its output there (``polyrec.kernels.fp8.fused_out``);
    ``fp8_only``: the output is wanted only as those copies, so it is not written and None is returned
    (its other effects, a CrossGrad's d_x0 and bias gradient, are)."""
    if y.dim() != 2:
        raise ValueError(f"epilogue_pass: y must be 2-D [M, N], got {tuple(y.shape)}")
    m, n = y.shape
    if out is not None and (out.shape != (m, n) or out.device != y.device):
        raise ValueError(f"epilogue_pass: out must be [{m}, {n}] on {y.device}, got {tuple(out.shape)} on {out.device}")
    for name, t in (("y", y), ("out", out)):
        if t is not None and not t.is_floating_point():  # an integer output truncated the epilogue in silence
            raise TypeError(f"epilogue_pass: {name} must be a floating-point tensor, got {t.dtype}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"epilogue_pass: activation must be one of {ACTIVATIONS}, got {activation!r}")
    if bias is not None and (bias.shape != (n,) or not bias.is_contiguous() or bias.device != y.device):
        raise ValueError(f"epilogue_pass: bias must be a contiguous [{n}] on {y.device}, got {tuple(bias.shape)} with "
                         f"stride {bias.stride()} on {bias.device}")
    if cross is not None and len(cross) != 2:
        raise ValueError(f"epilogue_pass: cross must be the pair (x0, x), got {len(cross)} tensors")
    for name, t in (("x0", cross[0]), ("x", cross[1])) if cross is not None else ():
        if t.shape != (m, n) or t.device != y.device:
            raise ValueError(f"epilogue_pass: cross {name} must be [{m}, {n}] on {y.device}, got {tuple(t.shape)} "
                             f"on {t.device}")
    validate_fused(m, n, y.device, activation, residual, cross_grad)
    if fp8 is not None and (fp8.q.shape != (m, n) or fp8.qt.shape != (n, m)):
        raise ValueError(f"epilogue_pass: fp8 copies must be [{m}, {n}] and [{n}, {m}], got {tuple(fp8.q.shape)} "
                         f"and {tuple(fp8.qt.shape)}")
    if fp8_only:
        if fp8 is None or out is not None:
            raise ValueError("epilogue_pass: fp8_only needs fp8 copies to write and no out")
        apply_epilogue(y, y, bias, activation, cross, residual, cross_grad, warmup, fp8, store=False)
        return None
    return apply_epilogue(y, torch.empty_like(y) if out is None else out, bias, activation, cross, residual,
                          cross_grad, warmup, fp8)


def apply_epilogue(y, out, bias, activation, cross, residual, cross_grad, warmup: bool,
                   fp8: Fp8Out | None = None, store: bool = True) -> torch.Tensor:
    """``epilogue_pass`` on validated arguments: out [M, N] = epilogue(y); without ``store`` out is y
    and only ``fp8``'s copies (and a CrossGrad's other outputs) are written."""
    if bias is None and activation == "none" and cross is None and residual is None and cross_grad is None \
            and fp8 is None:
        return out.copy_(y) if out is not y else out
    if not (y.is_cuda or interpreting()):
        result = _eager_epilogue(y, bias, activation, cross, residual, cross_grad).to(out.dtype)
        if fp8 is not None:
            eager_fused_out(result, fp8)
        return out.copy_(result) if store else out
    per_program = pass_row_blocks(y.shape[0]) if cross_grad is not None and cross_grad.bias_grad is not None else 1
    ptrs, strides, flags, db = epilogue_operands(out, bias, cross, residual, cross_grad, activation,
                                                  ceil_div(y.shape[0], REDUCE_BLOCK_M * per_program))
    reduce_pass(y, out, ptrs, strides, flags | {"STORE_C": store}, 1, (0, y.stride(0), y.stride(1)), warmup, per_program,
            fp8, REDUCE_NUM_WARPS if store else FP8_ONLY_PASS_NUM_WARPS)
    if db is not None and not warmup:
        torch.sum(db, 0, out=cross_grad.bias_grad)
    return out


def _eager_epilogue(y, bias, activation, cross, residual, cross_grad) -> torch.Tensor:
    """The epilogue as torch ops on the product y [M, N] (CPU without the Triton interpreter)."""
    if bias is not None:
        y = y + bias.to(y.dtype)
    if activation == "relu":
        y = torch.relu(y)
    if cross is not None:
        y = cross[0].to(y.dtype) * y + cross[1].to(y.dtype)
    if residual is not None:
        y = y + residual.to(y.dtype)
    if cross_grad is not None:
        y = _eager_cross_grad(y, cross_grad)
    return y


def _eager_cross_grad(y: torch.Tensor, cg: CrossGrad) -> torch.Tensor:
    """CrossGrad as torch ops on y [M, N]; returns g = grad * x0."""
    grad = cg.grad.to(y.dtype)
    g = grad * cg.x0.to(y.dtype)  # [M, N]
    term = grad * (y + 1) if cg.plus_grad else grad * y
    if cg.accumulate:
        cg.d_x0.add_(term)
    else:
        cg.d_x0.copy_(term)
    if cg.bias_grad is not None:
        cg.bias_grad.copy_(g.sum(0, dtype=torch.float32))
    return g
