"""Dense layers of DLRM: MLPs, the DCN-v2 low-rank cross network and the DLRM dot interaction.

Each layer holds fp32 master weights and runs its matmuls through a :class:`DenseOps` backend:
"torch" (``F.linear``, the eager reference) or "polyrec" (polyrec.kernels.gemm: Triton GEMMs with a
fused bias/ReLU epilogue and the fused cross update; the whole cross network as one autograd Function
with its backward fused into the GEMMs, polyrec.kernels.dcn). The matmuls run in the inputs' dtype
(``compute_dtype``: bf16 on a GPU, what autocast does), the weights copied to it: by a differentiable
cast on the torch backend, inside the autograd Functions on polyrec's, whose weight-gradient GEMMs
write the fp32 masters' gradients directly (no bf16 rounding, no cast kernel).
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from polyrec.kernels.fp8 import Fp8Out, Fp8Scaling
from polyrec.kernels.fp8 import aligned as fp8_aligned
from polyrec.kernels.master_copies import cast
from polyrec.perfmodel.gemm import ALIGNMENT_ELEMENTS

if TYPE_CHECKING:
    from polyrec.kernels.fp8_dense import BegunInput

DENSE_BACKENDS = ("torch", "polyrec")
#: Called in the backward with an input's final gradient, which it reads and must not write.
InputGradHook = Callable[[torch.Tensor], None]


def polyrec_dense_available() -> bool:
    """Whether polyrec.kernels.gemm (issue 3) is present."""
    return importlib.util.find_spec("polyrec.kernels.gemm") is not None


class DenseOps:
    """The two matmul shapes DLRM needs, from one backend."""

    def __init__(self, backend: str) -> None:
        if backend not in DENSE_BACKENDS:
            raise ValueError(f"dense backend must be one of {DENSE_BACKENDS}, got {backend!r}")
        self.backend = backend
        if backend == "polyrec":
            if not polyrec_dense_available():
                raise ImportError("dense backend 'polyrec' needs polyrec.kernels.gemm, which is not installed")
            from polyrec.kernels import dcn, gemm_layers

            self._gemm = gemm_layers
            self._dcn = dcn

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, relu: bool) -> torch.Tensor:
        """act(x @ weight.T + bias); x [B, in] in the compute dtype, weight [out, in] and bias the fp32
        masters, copied to x's dtype (polyrec's ``linear`` makes the copies inside and returns the
        masters' gradients from its GEMM in fp32) -> [B, out]."""
        if self.backend == "polyrec":
            return self._gemm.linear(x, weight, bias, activation="relu" if relu else "none")
        y = F.linear(x, cast(weight, x.dtype), cast(bias, x.dtype))
        return F.relu(y) if relu else y

    def cross(self, x0: torch.Tensor, v: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
              bias: torch.Tensor) -> torch.Tensor:
        """x0 * (v @ weight.T + bias) + x; x0, x [B, D], v [B, r] in the compute dtype, weight [D, r] and
        bias the masters (copied to v's dtype) -> [B, D]."""
        weight, bias = cast(weight, v.dtype), cast(bias, v.dtype)
        if self.backend == "polyrec":
            return self._gemm.cross_linear(x0, v, x, weight, bias)
        return x0 * F.linear(v, weight, bias) + x

    def cross_network(self, x0: torch.Tensor, vs: list[torch.Tensor], us: list[torch.Tensor],
                      bs: list[torch.Tensor], on_input_grad: InputGradHook | None = None,
                      owns_output_grad: bool = False, fp8: Fp8Scaling | None = None,
                      output_copies: Fp8Out | None = None, copies_only: bool = False) -> torch.Tensor:
        """The whole low-rank cross network with the fused backward (polyrec backend only).
        x0 [B, D], vs [r, D] each, us [D, r] each, bs [D] each (the masters, copied to x0's dtype inside;
        their gradients in the masters' dtype) -> [B, D]; ``on_input_grad``, ``owns_output_grad``, ``fp8``,
        ``output_copies`` and ``copies_only`` as ``polyrec.kernels.dcn.cross_network`` takes them."""
        if self.backend != "polyrec":
            raise ValueError("DenseOps.cross_network: the fused cross network needs the polyrec backend")
        return self._dcn.cross_network(x0, vs, us, bs, on_input_grad=on_input_grad,
                                       owns_output_grad=owns_output_grad, fp8=fp8, output_copies=output_copies,
                                       copies_only=copies_only)

    def fp8_mlp(self, x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor],
                relus: tuple[bool, ...], scaling: Fp8Scaling, begun: BegunInput | None = None) -> torch.Tensor:
        """MLP layers with fp8 GEMMs (polyrec backend only; ``polyrec.kernels.fp8_dense.mlp``)."""
        if self.backend != "polyrec":
            raise ValueError("DenseOps.fp8_mlp: fp8 layers need the polyrec backend")
        from polyrec.kernels import fp8_dense

        return fp8_dense.mlp(x, weights, biases, relus, scaling, begun)


def pad_reduction(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, K] and weight [N, K] with K zero-padded to a multiple of the GEMM model's alignment
    (``polyrec.perfmodel.gemm.ALIGNMENT_ELEMENTS``): the same product, and the same gradients (the
    pads' backward drops the zero columns); unchanged when aligned. Unaligned rows send cuBLAS to its
    align-1 kernels: Criteo's 13 dense features in bf16, [65536, 13] x [13, 512] forward with bias +
    ReLU 0.065 ms and weight gradient 0.086 ms, padded to 16 columns 0.039 / 0.031 ms plus 0.010 and
    0.008 ms for the two pads (H200, benchmarks/results/unaligned_k_probe_nvidia-h200_2026-12-01)."""
    pad = -x.shape[1] % ALIGNMENT_ELEMENTS
    if pad == 0:
        return x, weight
    return F.pad(x, (0, pad)), F.pad(weight, (0, pad))


def init_linear_(weight: torch.Tensor, bias: torch.Tensor | None, gen: torch.Generator) -> None:
    """DLRM reference init: W ~ N(0, 2/(in+out)), b ~ N(0, 1/out) (facebookresearch/dlrm create_mlp)."""
    out_dim, in_dim = weight.shape
    with torch.no_grad():
        weight.copy_(torch.randn(weight.shape, generator=gen) * math.sqrt(2.0 / (in_dim + out_dim)))
        if bias is not None:
            bias.copy_(torch.randn(bias.shape, generator=gen) * math.sqrt(1.0 / out_dim))


class MLP(nn.Module):
    """Linear layers with ReLU after each, except the last when ``last_relu`` is False. With the polyrec
    backend a layer whose input needs no gradient (the dense features) and whose rows are not aligned
    runs on zero-padded copies (``pad_reduction``); padding a layer with an input gradient would hand
    its consumer a strided slice, so those are left alone."""

    def __init__(self, in_dim: int, sizes: tuple[int, ...], *, last_relu: bool, gen: torch.Generator) -> None:
        super().__init__()
        dims = (in_dim, *sizes)
        self.weights = nn.ParameterList(nn.Parameter(torch.empty(o, i)) for i, o in zip(dims, dims[1:]))
        self.biases = nn.ParameterList(nn.Parameter(torch.empty(o)) for o in sizes)
        self.last_relu = last_relu
        for w, b in zip(self.weights, self.biases):
            init_linear_(w, b, gen)
        self.fp8: Fp8Scaling | None = None

    def enable_fp8(self) -> None:
        """Run the leading layers whose sizes suit an fp8 GEMM (``fp8_dense.mlp_fits``; the first layer's
        input counted padded, as ``pad_reduction`` pads the dense features) with fp8 GEMMs on the polyrec
        backend; ``forward`` keeps the compute dtype for an input it did not pad that does not suit."""
        from polyrec.kernels import fp8_dense

        in_dim = self.weights[0].shape[1]
        dims = (in_dim + -in_dim % ALIGNMENT_ELEMENTS, *(w.shape[0] for w in self.weights))
        count = fp8_dense.mlp_fits(dims)
        self.fp8 = Fp8Scaling(fp8_dense.mlp_kinds(count)).to(self.weights[0].device) if count else None

    def _fp8_layers(self, rows: int, cols: int, ops: DenseOps) -> int:
        """How many leading layers run in fp8 for an input [rows, cols] (as padded): the fp8 layers where
        the batch and the input (padded only without an input gradient: DLRM's dot-interaction top MLP
        takes 367 columns) suit their GEMMs; 0 where they run in the compute dtype."""
        if self.fp8 is not None and ops.backend == "polyrec" and fp8_aligned(rows, cols):
            return len(self.fp8.kinds) // 3
        return 0

    def begin_fp8_input(self, rows: int, device: torch.device, ops: DenseOps,
                        input_requires_grad: bool) -> BegunInput | None:
        """This MLP's fp8 pass begun ahead of its next input [rows, in], so that the kernel making the input
        writes the first layer's copies (``BegunInput.copies``); hand it to ``forward`` as ``begun``. None
        where that input will not run in fp8."""
        cols = self.weights[0].shape[1]
        start = self._fp8_layers(rows, cols, ops)
        if not start:
            return None
        from polyrec.kernels import fp8_dense

        trained = [*list(self.weights)[:start], *list(self.biases)[:start]]
        return fp8_dense.begin_input(self.fp8, rows, cols, device, fp8_dense.trains(input_requires_grad, trained))

    def forward(self, x: torch.Tensor, ops: DenseOps, begun: BegunInput | None = None) -> torch.Tensor:
        """x [B, in] in the compute dtype -> [B, out] (the matmuls in x's dtype, or fp8 where enabled).
        ``begun``: this pass's fp8 state, begun by ``begin_fp8_input`` ahead of x."""
        n = len(self.weights)
        relus = tuple(i < n - 1 or self.last_relu for i in range(n))
        weights = list(self.weights)
        if ops.backend == "polyrec" and not x.requires_grad:  # the dense features (the direct port's
            x, weights[0] = pad_reduction(x, weights[0])  # torch layers stay as they were)
        start = self._fp8_layers(x.shape[0], x.shape[1], ops)
        if begun is not None and not start:
            raise ValueError(f"MLP: an fp8 pass was begun for an input {tuple(x.shape)} that runs in {x.dtype}")
        if start:
            x = ops.fp8_mlp(x, weights[:start], list(self.biases)[:start], relus[:start], self.fp8, begun)
        for i in range(start, n):
            x = ops.linear(x, weights[i], self.biases[i], relu=relus[i])
        return x


class LowRankCross(nn.Module):
    """DCN-v2 cross network, low-rank form: x_{l+1} = x0 * (U_l (V_l x_l) + b_l) + x_l.

    Source: Wang et al., "DCN V2" (arXiv 2008.13535), eq. (2) with the low-rank W = U V of sec. 5.
    V_l is stored [r, D] (a linear layer D -> r), U_l [D, r], b_l [D].
    ``fused`` (default): with the polyrec backend the network is one autograd Function whose backward
    is fused into its GEMMs (``polyrec.kernels.dcn``); False runs the per-layer composition of
    ``linear`` and ``cross_linear`` (autograd sums the gradients), the baseline of
    ``benchmarks/dcn_backward.py``. The torch backend always runs the per-layer composition.
    """

    def __init__(self, dim: int, layers: int, rank: int, *, gen: torch.Generator) -> None:
        super().__init__()
        self.v = nn.ParameterList(nn.Parameter(torch.empty(rank, dim)) for _ in range(layers))
        self.u = nn.ParameterList(nn.Parameter(torch.empty(dim, rank)) for _ in range(layers))
        self.b = nn.ParameterList(nn.Parameter(torch.empty(dim)) for _ in range(layers))
        for v, u, b in zip(self.v, self.u, self.b):
            init_linear_(v, None, gen)
            init_linear_(u, b, gen)
        self.fused = True
        self.fp8: Fp8Scaling | None = None

    def enable_fp8(self) -> None:
        """Run the fused network's GEMMs in fp8 (five of six per layer; ``polyrec.kernels.fp8_dense``)."""
        from polyrec.kernels import fp8_dense

        self.fp8 = Fp8Scaling(fp8_dense.cross_kinds(len(self.v))).to(self.v[0].device)

    def writes_output_copies(self, ops: DenseOps) -> bool:
        """Whether ``forward`` can write fp8 copies of its output (the fused network's last pass)."""
        return self.fused and ops.backend == "polyrec"

    def forward(self, x0: torch.Tensor, ops: DenseOps, on_input_grad: InputGradHook | None = None,
                owns_output_grad: bool = False, output_copies: Fp8Out | None = None,
                copies_only: bool = False) -> torch.Tensor:
        """x0 [B, D] in the compute dtype -> [B, D]. ``on_input_grad``: called in the backward with x0's final gradient
        [B, D], which it must not write; the fused network calls it before its last weight gradients,
        the per-layer composition when autograd has summed x0's gradient. ``owns_output_grad``: the
        caller's layer is the output's one reader, so the fused backward may write over its gradient.
        ``output_copies``: fp8 copies of the output to write too (``writes_output_copies`` only);
        ``copies_only``: the caller reads the output only through them (``polyrec.kernels.dcn.cross_network``)."""
        if self.writes_output_copies(ops):
            fp8 = self.fp8 if fp8_aligned(x0.shape[0]) else None  # else the batch runs in the compute dtype
            return ops.cross_network(x0, list(self.v), list(self.u), list(self.b), on_input_grad,
                                     owns_output_grad=owns_output_grad, fp8=fp8, output_copies=output_copies,
                                     copies_only=copies_only)
        if output_copies is not None:
            raise ValueError("LowRankCross: only the fused network on the polyrec backend writes output copies")
        if on_input_grad is not None and x0.requires_grad:
            x0.register_hook(functools.partial(_observe, on_input_grad))
        x = x0  # [B, D]
        for v, u, b in zip(self.v, self.u, self.b):
            low = ops.linear(x, v, None, relu=False)  # [B, r]
            x = ops.cross(x0, low, x, u, b)  # [B, D]
        return x


def beside(lead: torch.Tensor, x: torch.Tensor, buffer: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.cat([lead, x], 1)``: lead [B, a], x [B, b] -> [B, a + b]. ``buffer``: a [B, a + b] tensor
    (contiguous, x's dtype) whose last b columns are x and whose first a columns hold nothing anyone
    reads (a lookup's ``lead_columns``, ``PolyrecEmbeddings.lead_buffer``): lead is written there and
    the result is the buffer's memory, so x is not copied (DLRM-DCNv2's x0: 0.22 ms of copy per step at MLPerf's
    batch 65536 on the H200, benchmarks/results/e2e_profile_nvidia-h200_2026-11-30). The gradient
    splits into column views either way."""
    if buffer is None:
        return torch.cat([lead, x], dim=1)
    (rows, a), b = lead.shape, x.shape[1]
    if (buffer.shape != (rows, a + b) or not buffer.is_contiguous() or not buffer.dtype == x.dtype == lead.dtype
            or x.stride() != (a + b, 1) or x.data_ptr() != buffer.data_ptr() + a * buffer.element_size()):
        raise ValueError(f"beside: buffer {tuple(buffer.shape)} ({buffer.dtype}) does not hold x {tuple(x.shape)} "
                         f"(strides {x.stride()}) after {a} free columns")
    return _Beside.apply(lead, x, buffer)


class _Beside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, lead, x, buffer):
        # an alias with its own version counter: x's values do not change (only the columns before it)
        out = torch.empty(0, dtype=buffer.dtype, device=buffer.device).set_(
            buffer.untyped_storage(), buffer.storage_offset(), buffer.shape, buffer.stride())  # [B, a + b]
        out[:, :lead.shape[1]].copy_(lead)
        ctx.lead_columns = lead.shape[1]
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad[:, :ctx.lead_columns], grad[:, ctx.lead_columns:], None


def _observe(hook: InputGradHook, grad: torch.Tensor) -> None:
    """A tensor hook that reads the gradient and leaves it as it is (returns None)."""
    hook(grad)


def dot_interaction(bottom: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
    """DLRM's pairwise dot products: bottom [B, D], emb [B, F, D] -> [B, D + (F+1)F/2].

    The strictly lower triangle of T T^T over T = [bottom, emb_1..emb_F], appended to the bottom
    output (facebookresearch/dlrm ``interact_features``, ``arch_interaction_itself=False``).
    """
    t = torch.cat([bottom.unsqueeze(1), emb], dim=1)  # [B, F+1, D]
    z = torch.bmm(t, t.transpose(1, 2))  # [B, F+1, F+1]
    # index_select's backward adds into distinct columns; advanced indexing z[:, li, lj] took a sort-based
    # index_put backward on CUDA: 4.57 ms of a 7.7 ms DLRM Kaggle step at batch 65536
    # (benchmarks/results/e2e_profile_dlrm-criteo-kaggle_nvidia-h200_2026-11-30 at a3b7163)
    tri = z.flatten(1).index_select(1, _lower_triangle(t.shape[1], t.device))  # [B, (F+1)F/2]
    return torch.cat([bottom, tri], dim=1)


@functools.lru_cache(maxsize=8)
def _lower_triangle(n: int, device: torch.device) -> torch.Tensor:
    """Flat positions ``i * n + j`` (j < i) of an n x n matrix's strictly lower triangle, row by row: [n(n-1)/2]."""
    li, lj = torch.tril_indices(n, n, offset=-1)
    return (li * n + lj).to(device)
