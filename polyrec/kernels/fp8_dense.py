"""DLRM's dense layers with their GEMMs in fp8: an MLP as one autograd Function, and the GEMMs of the
DCN-v2 cross network (``polyrec.kernels.dcn`` runs its passes and residual GEMMs as in bf16).

Activations, biases and the tensors between layers stay in the compute dtype (bf16); each GEMM reads
fp8 copies of its operands made by ``polyrec.kernels.fp8.cast_fp8`` with delayed per-tensor scales, or,
once a role has a history, by the pass that makes the tensor (an MLP layer's masked output gradient by
``relu_bias_backward``, the cross network's x_l and g_l by its passes, and its output, DLRM-DCNv2's top MLP
input, by its last pass once that MLP's pass is begun ahead of it: ``begin_input``).
Forward operands are e4m3 (with cuBLAS's fast accumulation, as Transformer Engine runs the forward),
output gradients e5m2. Weight gradients come out of their GEMM in the masters' dtype (fp32).

MLP roles (``mlp_kinds``), per layer i: 3i the input, 3i + 1 the weight, 3i + 2 the output gradient.
A ReLU between two layers is applied by the next layer's cast (``relu=True``): the GEMM writes the
pre-activation with its bias, and nothing writes the activation itself; the backward masks by the
pre-activation (``relu_bias_backward``) as the bf16 layers do.

Cross network roles (``cross_kinds``), per layer l: 6l + (x_l, v_l = x_l Vᵀ, V_l, U_l, g_l, dv_l).
Of a layer's six GEMMs, five run in fp8; ``dv @ V_l`` with the residual gradient added stays bf16
(cuBLAS adds the residual in place; ``_scaled_mm`` takes no C matrix), so x0's gradient, which the
embeddings train on, is formed in bf16 from an fp8 ``dv``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from polyrec.kernels.dense_backward import relu_bias_backward, rows_apart
from polyrec.kernels.fp8 import FORWARD, GRADIENT, Fp8Out, Fp8Scaling, aligned, cast_fp8, fused_out, scaled_mm
from polyrec.kernels.master_copies import compute_copy

#: Roles per MLP layer and per cross layer (see the module docstring).
MLP_ROLES, CROSS_ROLES = 3, 6


def mlp_kinds(layers: int) -> list[str]:
    """Role kinds of an fp8 MLP of ``layers`` layers: (input, weight) forward, output gradient gradient."""
    return [FORWARD, FORWARD, GRADIENT] * layers


def cross_kinds(layers: int) -> list[str]:
    """Role kinds of an fp8 cross network: x_l, v_l, V_l, U_l forward; g_l and dv_l gradient."""
    return [FORWARD, FORWARD, FORWARD, FORWARD, GRADIENT, GRADIENT] * layers


def mlp_fits(dims: tuple[int, ...]) -> int:
    """How many leading layers of an MLP with sizes ``dims`` (input first) can run in fp8: both of a
    layer's sizes multiples of 16."""
    count = 0
    while count + 1 < len(dims) and aligned(dims[count], dims[count + 1]):
        count += 1
    return count


@dataclass(frozen=True, slots=True)
class BegunInput:
    """An fp8 MLP's pass begun before its input exists (``begin_input``). ``copies``: where the kernel
    making the input writes the first layer's fp8 copies of it (None while that role has no history:
    ``mlp`` casts the input itself)."""

    copies: Fp8Out | None


def trains(x_requires_grad: bool, params: list[torch.Tensor]) -> bool:
    """Whether an fp8 pass over an input (``x_requires_grad``) and ``params`` records into the history:
    under autograd, with anything to take a gradient."""
    return torch.is_grad_enabled() and (x_requires_grad or any(p.requires_grad for p in params))


def begin_input(scaling: Fp8Scaling, rows: int, cols: int, device: torch.device, training: bool) -> BegunInput:
    """Begin an fp8 MLP's pass (``scaling``, ``mlp_kinds`` roles) ahead of its input [rows, cols], so that
    the kernel making the input can write the first layer's copies with this pass's scale (saving the
    standalone cast its read of the input); hand the result to ``mlp`` as ``begun``."""
    scaling.begin(training)
    return BegunInput(fused_out(scaling, 0, rows, cols, device))


class _Fp8MLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scaling, relus, input_copies, *masters):
        layers = len(relus)
        weights, biases = masters[:layers], masters[layers:]
        h, relu_in, saved = x, False, []
        for i, (w, b) in enumerate(zip(weights, biases)):
            need_dw, need_dx = ctx.needs_input_grad[4 + i], i > 0 or ctx.needs_input_grad[0]
            if i == 0 and input_copies is not None:  # written by x's producer
                xq, xqt = input_copies.q, input_copies.qt if need_dw else None
            else:
                xq, xqt = cast_fp8(h, scaling, 3 * i, transposed=need_dw, relu=relu_in)  # [B, K], [K, B]
            wq, wqt = cast_fp8(w, scaling, 3 * i + 1, transposed=need_dx)  # [N, K], [K, N]
            h = scaled_mm(xq, wq.t(), scaling.dequant(3 * i), scaling.dequant(3 * i + 1), out_dtype=x.dtype,
                          bias=compute_copy(b, x.dtype), fast_accumulation=True)  # [B, N] pre-activation
            saved += [xqt, wqt, h if relus[i] else None]
            relu_in = relus[i]
        ctx.relus, ctx.scaling, ctx.saved = relus, scaling, saved
        ctx.masters = [p.dtype for p in masters]
        return torch.relu(h) if relus[-1] else h

    @staticmethod
    @once_differentiable  # its GEMMs and passes record no graph: a second derivative is refused, not wrong
    def backward(ctx, grad):
        layers, scaling = len(ctx.relus), ctx.scaling
        d_w, d_b = [None] * layers, [None] * layers
        grad = rows_apart(grad)  # [B, N] of the last layer
        for i in reversed(range(layers)):
            xqt, wqt, y = ctx.saved[3 * i:3 * i + 3]
            need_dw, need_db = ctx.needs_input_grad[4 + i], ctx.needs_input_grad[4 + layers + i]
            need_dx = i > 0 or ctx.needs_input_grad[0]
            # the masked gradient's fp8 copies [B, N], [N, B] written by the pass once the role has a history
            copies = fused_out(scaling, 3 * i + 2, *grad.shape, grad.device) if need_dw and need_dx else None
            g, db = relu_bias_backward(grad, y, relu=ctx.relus[i], need_bias=need_db, fp8=copies)  # [B, N], [N]
            d_b[i] = db.to(ctx.masters[layers + i]) if db is not None else None
            if not (need_dw or need_dx):  # the first layer, trained only through its bias
                continue
            if copies is not None:
                gq, gqt = copies.q, copies.qt
            else:
                gq, gqt = cast_fp8(g, scaling, 3 * i + 2, plain=need_dx, transposed=need_dw)  # [B, N], [N, B]
            if need_dw:  # [N, B] @ [B, K]
                d_w[i] = scaled_mm(gqt, xqt.t(), scaling.dequant(3 * i + 2), scaling.dequant(3 * i),
                                   out_dtype=ctx.masters[i])
            if need_dx:  # [B, N] @ [N, K]
                grad = scaled_mm(gq, wqt.t(), scaling.dequant(3 * i + 2), scaling.dequant(3 * i + 1),
                                 out_dtype=grad.dtype)
        ctx.saved = None
        return (grad if ctx.needs_input_grad[0] else None), None, None, None, *d_w, *d_b


def mlp(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor], relus: tuple[bool, ...],
        scaling: Fp8Scaling, begun: BegunInput | None = None) -> torch.Tensor:
    """An MLP's layers with fp8 GEMMs: x [B, K0] in the compute dtype, weights [N_i, K_i] and biases [N_i]
    (the masters), ``relus[i]``: ReLU after layer i -> [B, N_last] in x's dtype. ``scaling``: this MLP's
    state (``mlp_kinds(len(weights))`` roles); a pass with a gradient ages its history. ``begun``: the pass
    was begun by ``begin_input`` (not begun again here), its copies of x written by x's producer."""
    if not (len(weights) == len(biases) == len(relus) >= 1):
        raise ValueError(f"fp8 mlp: need as many weights, biases and relus (>= 1), got {len(weights)}, "
                         f"{len(biases)}, {len(relus)}")
    if len(scaling.kinds) != MLP_ROLES * len(weights):
        raise ValueError(f"fp8 mlp: scaling has {len(scaling.kinds)} roles, {len(weights)} layers need "
                         f"{MLP_ROLES * len(weights)}")
    k = x.shape[1]
    for i, w in enumerate(weights):
        if w.shape[1] != k or not aligned(*w.shape):
            raise ValueError(f"fp8 mlp: layer {i} weight {tuple(w.shape)} does not take {k} inputs or is not a "
                             "multiple of 16 on both sides")
        k = w.shape[0]
    copies = begun.copies if begun is not None else None
    if copies is not None and (copies.q.shape != x.shape or copies.q.device != x.device):
        raise ValueError(f"fp8 mlp: the input's copies are {tuple(copies.q.shape)} on {copies.q.device}, the input "
                         f"{tuple(x.shape)} on {x.device}")
    if begun is None:
        scaling.begin(trains(x.requires_grad, [*weights, *biases]))
    return _Fp8MLP.apply(x, scaling, tuple(relus), copies, *weights, *biases)


class Fp8CrossGemms:
    """The cross network's GEMMs in fp8, for ``polyrec.kernels.dcn``: each call casts what it needs and
    keeps what the backward's GEMMs read (transposed copies of x_l and v_l, U_lᵀ, g_l's transposed copy).
    x_l (l >= 1) and g_l are not cast apart once their roles have a history: the passes that make them
    write their fp8 copies too (``fused_input``, ``fused_grad``), saving a read of each [B, D] tensor, and
    g_l, which only these GEMMs read, is then not written in the compute dtype at all."""

    def __init__(self, scaling: Fp8Scaling, masters: list[torch.Tensor], needs: tuple[bool, ...],
                 dtype: torch.dtype) -> None:
        self.scaling, self.layers = scaling, len(masters) // 3
        self.masters, self.needs = masters, needs  # needs: a gradient for V_l, U_l, b_l of each layer
        self.dtype = dtype  # the compute dtype: of x0, the products and the GEMMs' outputs
        self.kept: dict[tuple[str, int], torch.Tensor | None] = {}
        self.made: dict[tuple[str, int], Fp8Out | None] = {}  # copies the passes wrote (``fused_*``)

    def _role(self, layer: int, which: int) -> int:
        return CROSS_ROLES * layer + which

    def _inverse(self, layer: int, which: int) -> torch.Tensor:
        return self.scaling.dequant(self._role(layer, which))

    def fused_input(self, layer: int, x_shape: torch.Size, device: torch.device) -> Fp8Out | None:
        """Where the pass making x_layer (the previous layer's cross update; layer >= 1) writes its fp8
        copies; None while the role has no history."""
        out = fused_out(self.scaling, self._role(layer, 0), *x_shape, device)
        self.made["x", layer] = out
        return out

    def fused_grad(self, layer: int, g_shape: torch.Size, device: torch.device) -> Fp8Out | None:
        """Where layer's CrossGrad pass writes g_l's fp8 copies, and only those (None while the role has no
        history: the pass writes g_l for ``dlow`` to cast)."""
        out = fused_out(self.scaling, self._role(layer, 4), *g_shape, device)
        self.made["g", layer] = out
        return out

    def down(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """v_l = x_l V_lᵀ: x [B, D] -> [B, r]; keeps x_l's transposed copy for V_l's gradient."""
        made = self.made.pop(("x", layer), None)
        if made is not None:
            xq, self.kept["xt", layer] = made.q, made.qt
        else:
            xq, self.kept["xt", layer] = cast_fp8(x, self.scaling, self._role(layer, 0), transposed=self.needs[layer])
        vq, _ = cast_fp8(self.masters[layer], self.scaling, self._role(layer, 2))  # [r, D]
        return scaled_mm(xq, vq.t(), self._inverse(layer, 0), self._inverse(layer, 2), out_dtype=x.dtype,
                         fast_accumulation=True)

    def up(self, layer: int, low: torch.Tensor) -> torch.Tensor:
        """p_l = v_l U_lᵀ: low [B, r] -> [B, D]; keeps v_l's transposed copy and U_lᵀ."""
        need_du = self.needs[self.layers + layer]
        lq, self.kept["vt", layer] = cast_fp8(low, self.scaling, self._role(layer, 1), transposed=need_du)
        uq, self.kept["ut", layer] = cast_fp8(self.masters[self.layers + layer], self.scaling, self._role(layer, 3),
                                              transposed=True)  # [D, r], [r, D]
        return scaled_mm(lq, uq.t(), self._inverse(layer, 1), self._inverse(layer, 3), out_dtype=low.dtype,
                         fast_accumulation=True)

    def dlow(self, layer: int, g: torch.Tensor | None) -> torch.Tensor:
        """dv_l = g U_l: g [B, D] (None when the pass wrote only its fp8 copies) -> [B, r]; keeps g's
        transposed copy for U_l's gradient."""
        made = self.made.pop(("g", layer), None)
        if made is not None:
            gq, self.kept["gt", layer] = made.q, made.qt
        elif g is None:
            raise ValueError(f"Fp8CrossGemms.dlow: layer {layer}'s g has neither fp8 copies nor a tensor to cast")
        else:
            need_du = self.needs[self.layers + layer]
            gq, self.kept["gt", layer] = cast_fp8(g, self.scaling, self._role(layer, 4), transposed=need_du)
        ut = self.kept.pop(("ut", layer))  # [r, D]
        return scaled_mm(gq, ut.t(), self._inverse(layer, 4), self._inverse(layer, 3), out_dtype=self.dtype)

    def d_u(self, layer: int, out_dtype: torch.dtype) -> torch.Tensor:
        """U_l's gradient gᵀ v_l: [D, B] @ [B, r] -> [D, r]."""
        gt, vt = self.kept.pop(("gt", layer)), self.kept.pop(("vt", layer))
        return scaled_mm(gt, vt.t(), self._inverse(layer, 4), self._inverse(layer, 1), out_dtype=out_dtype)

    def d_v(self, layer: int, dlow: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """V_l's gradient dv_lᵀ x_l: [r, B] @ [B, D] -> [r, D]."""
        _, dt = cast_fp8(dlow, self.scaling, self._role(layer, 5), plain=False, transposed=True)  # [r, B]
        xt = self.kept.pop(("xt", layer))  # [D, B]
        return scaled_mm(dt, xt.t(), self._inverse(layer, 5), self._inverse(layer, 0), out_dtype=out_dtype)
