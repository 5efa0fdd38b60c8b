"""Autograd layers over ``polyrec.kernels.gemm.matmul``: ``linear`` (bias and ReLU fused) and ``cross_linear``
(a DCN-v2 cross layer's up-projection with the cross update fused), whose forward, dgrad and wgrad GEMMs all go
through ``matmul``.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from polyrec.kernels.dense_backward import relu_bias_backward, rows_apart
from polyrec.kernels.gemm import matmul
from polyrec.kernels.gemm_epilogue import ACTIVATIONS
from polyrec.kernels.master_copies import compute_copy


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, activation):
        w = compute_copy(weight, x.dtype)  # [out, in]
        y = matmul(x, w, trans_b=True, bias=compute_copy(bias, x.dtype), activation=activation)  # [B, out]
        ctx.save_for_backward(x, w, y if activation == "relu" else None)
        ctx.activation, ctx.has_bias = activation, bias is not None
        ctx.masters = (weight.dtype, None if bias is None else bias.dtype)  # the gradients' dtypes
        return y

    @staticmethod
    @once_differentiable  # matmul records no graph: a second derivative is refused by torch, not wrong
    def backward(ctx, grad):
        x, weight, y = ctx.saved_tensors
        grad = rows_apart(grad)
        need_bias = ctx.has_bias and ctx.needs_input_grad[2]
        if ctx.activation == "relu":  # one pass: grad where y > 0, and the bias gradient's fp32 column sums
            grad, db = relu_bias_backward(grad, y, relu=True, need_bias=need_bias)
        else:  # torch's column sum alone: 0.013 vs 0.049 ms for the N=1 last layer (dense_backward_* H200)
            db = grad.sum(0, dtype=torch.float32) if need_bias else None
        dx = matmul(grad, weight) if ctx.needs_input_grad[0] else None  # [B, out] @ [out, in]
        w_dtype, b_dtype = ctx.masters
        dw = matmul(grad, x, trans_a=True, out_dtype=w_dtype) if ctx.needs_input_grad[1] else None  # [out, B] @ [B, in]
        return dx, dw, db.to(b_dtype) if db is not None else None, None


class _CrossLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x0, v, x_residual, weight, bias):
        out = matmul(v, weight, trans_b=True, bias=bias, cross=(x0, x_residual))  # [B, D]
        ctx.save_for_backward(x0, v, weight, bias)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x0, v, weight, bias = ctx.saved_tensors
        grad = grad.contiguous()
        g = grad * x0  # d out / d (v @ Wᵀ + b): [B, D]
        d_x0 = None
        if ctx.needs_input_grad[0]:  # the layer output before the cross update, recomputed
            d_x0 = grad * matmul(v, weight, trans_b=True, bias=bias)
        dv = matmul(g, weight) if ctx.needs_input_grad[1] else None  # [B, D] @ [D, r]
        dw = matmul(g, v, trans_a=True) if ctx.needs_input_grad[3] else None  # [D, B] @ [B, r]
        db = g.sum(0, dtype=torch.float32).to(g.dtype) if ctx.needs_input_grad[4] else None
        return d_x0, dv, grad if ctx.needs_input_grad[2] else None, dw, db


def autocast_inputs(*tensors):
    """Cast to the autocast dtype where autocast is on for these tensors' device (as F.linear does)."""
    device_type = tensors[0].device.type
    if not torch.is_autocast_enabled(device_type):
        return tensors
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(t.to(dtype) if t is not None and t.is_floating_point() else t for t in tensors)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str = "none") -> torch.Tensor:
    """``activation(x @ weight.T + bias)``: x [B, in], weight [out, in], bias [out] -> [B, out].

    Autograd-capable; forward (A @ Bᵀ), dgrad (A @ B) and wgrad (Aᵀ @ B) all go through ``matmul``.
    x is cast as autocast would; weight and bias may be masters of another dtype (fp32 beside a bf16
    x): they are copied to x's dtype inside, and their gradients come back in their own dtype, the
    weight's written so by its GEMM (no half-precision rounding, no cast kernel).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"linear: activation must be one of {ACTIVATIONS}, got {activation!r}")
    (x,) = autocast_inputs(x)
    return _Linear.apply(x, weight, bias, activation)


def cross_linear(x0: torch.Tensor, v: torch.Tensor, x_residual: torch.Tensor, weight: torch.Tensor,
                 bias: torch.Tensor) -> torch.Tensor:
    """One low-rank DCN-v2 cross layer's up-projection with the cross update fused:
    ``x0 * (v @ weight.T + bias) + x_residual``.

    x0: [B, D] the cross network's input; v: [B, r] the rank-r projection ``x_l @ V`` of the layer
    input; x_residual: [B, D] the layer input x_l; weight: [D, r]; bias: [D] -> [B, D].
    Autograd-capable (the backward recomputes ``v @ weight.T + bias`` for x0's gradient).
    """
    x0, v, x_residual, weight, bias = autocast_inputs(x0, v, x_residual, weight, bias)
    return _CrossLinear.apply(x0, v, x_residual, weight, bias)
