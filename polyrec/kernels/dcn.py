"""The DCN-v2 low-rank cross network as one autograd Function whose backward is fused into its GEMMs.

Layer l (Wang et al., DCN V2, arXiv 2008.13535, eq. 2 with the low-rank W = U V):
``v_l = x_l @ V_lᵀ`` [B, r], ``y_l = v_l @ U_lᵀ + b_l`` [B, D], ``x_{l+1} = x0 * y_l + x_l``.

The forward keeps each layer's product ``p_l = v_l @ U_lᵀ`` [B, D] (the cross update runs as one
epilogue pass over it, ``polyrec.kernels.gemm_epilogue.epilogue_pass``), so the backward recomputes nothing:
B x D x L values of the compute dtype more (1.36 GB at MLPerf's batch 65536, D 3456, 3 layers, bf16)
buy one [B, D] x r GEMM per layer (0.34 ms each on the H200 at that batch).

Backward of layer l, from G = dL/dx_{l+1} (four GEMMs, no full-size elementwise torch op):
1. one pass over p_l (``CrossGrad``) adds b_l, writes ``g = G * x0``, accumulates ``d_x0 += G * y_l``
   in place (layer 0 adds G too: x_0 is x0) and the column sums of g (b_l's gradient, from fp32
   partials per row block);
2. ``dv = g @ U_l`` [B, r]; 3. ``dU_l = gᵀ @ v_l``; 4. ``dV_l = dvᵀ @ x_l``;
5. ``dv @ V_l`` with the residual gradient added in the epilogue: ``dL/dx_l = dv @ V_l + G``; for
   layer 0 the residual is the accumulated d_x0, so the last GEMM writes x0's whole gradient. Where
   the residual is this function's own buffer (all but the incoming gradient) and the selector picks
   the library, the library adds it in place (``overwrite_residual``: no [B, D] pass). V_l goes in as
   a transposed copy [D, r] (a K-major B): at MLPerf's shape cuBLAS on the H200 runs that layout's kernel
   faster than the row-major V_l's (0.380 against 0.423 ms a call, for a 3.5 MB copy; measured in the
   forty-fifth session, ``benchmarks/results/fp8_pass_tiles_2026-12-04/dgrad_layout/``).

The unfused composition (``cross_linear`` + ``linear``: autograd sums the gradients of x0 and of
each x_l with separate adds, and the cross backward multiplies with torch ops) is kept in
``polyrec.models.layers.LowRankCross`` (``fused=False``) as the baseline of ``benchmarks/dcn_backward.py``.

Precision: x0's gradient is accumulated in the compute dtype (bf16 on a GPU), each term added in
fp32 and rounded once per layer; the unfused path rounds the same way (autograd adds the bf16
gradient tensors), and an fp32 accumulator would double its read-modify-write traffic (0.9 GB ->
1.8 GB per layer at batch 65536, D 3456).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.autograd.function import once_differentiable

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.kernels.byte_transpose import transpose
from polyrec.kernels.fp8 import Fp8Out, Fp8Scaling, aligned, spec_formats
from polyrec.kernels.fp8_dense import CROSS_ROLES, Fp8CrossGemms, trains
from polyrec.kernels.gemm import matmul
from polyrec.kernels.gemm_epilogue import CrossGrad, epilogue_pass
from polyrec.kernels.gemm_kernels import compile_job_for, reduce_compile_job
from polyrec.kernels.gemm_layers import autocast_inputs
from polyrec.kernels.master_copies import compute_copy

#: Batch sizes whose fused-backward GEMM configs ``compile_jobs`` covers (MLPerf DLRM-DCNv2 runs
#: 65536; 16384 is the e2e benchmark's smaller batch).
COMPILE_BATCHES = (16384, 65536)
#: MLPerf DLRM-DCNv2 cross network: 3456 = 27 x 128 features, rank 512 (MLPerf Training
#: recommendation_v2/torchrec_dlrm README).
MLPERF_DIM, MLPERF_RANK = 3456, 512


class LibraryCrossGemms:
    """The cross network's GEMMs in the compute dtype through ``matmul``; keeps x_l, v_l and g_l where
    the weight gradients read them. ``polyrec.kernels.fp8_dense.Fp8CrossGemms`` has the same methods in fp8."""

    def __init__(self, params: list[torch.Tensor], needs: tuple[bool, ...]) -> None:
        self.layers = len(params) // 3
        self.params = params  # V_l, U_l, b_l in the compute dtype
        self.needs = needs  # a gradient for V_l, U_l, b_l of each layer
        self.kept: dict[tuple[str, int], torch.Tensor] = {}

    def down(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """v_l = x_l V_lᵀ: [B, D] -> [B, r]."""
        if self.needs[layer]:
            self.kept["x", layer] = x
        return matmul(x, self.params[layer], trans_b=True)

    def up(self, layer: int, low: torch.Tensor) -> torch.Tensor:
        """p_l = v_l U_lᵀ: [B, r] -> [B, D]."""
        if self.needs[self.layers + layer]:
            self.kept["v", layer] = low
        return matmul(low, self.params[self.layers + layer], trans_b=True)

    def fused_input(self, layer: int, x_shape: torch.Size, device: torch.device) -> None:
        """No fp8 copies in the compute dtype."""

    def fused_grad(self, layer: int, g_shape: torch.Size, device: torch.device) -> None:
        """No fp8 copies in the compute dtype."""

    def dlow(self, layer: int, g: torch.Tensor) -> torch.Tensor:
        """g U_l: [B, D] @ [D, r]."""
        if self.needs[self.layers + layer]:
            self.kept["g", layer] = g
        return matmul(g, self.params[self.layers + layer])

    def d_u(self, layer: int, out_dtype: torch.dtype) -> torch.Tensor:
        """U_l's gradient gᵀ v_l: [D, B] @ [B, r]."""
        return matmul(self.kept.pop(("g", layer)), self.kept.pop(("v", layer)), trans_a=True, out_dtype=out_dtype)

    def d_v(self, layer: int, dlow: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """V_l's gradient dv_lᵀ x_l: [r, B] @ [B, D]."""
        return matmul(dlow, self.kept.pop(("x", layer)), trans_a=True, out_dtype=out_dtype)


def _k_major(v: torch.Tensor) -> torch.Tensor:
    """V_l [r, D] as the transposed copy [D, r] that ``dlow V_l + G`` takes as a K-major B, the layout the
    library runs faster (module docstring); by ``byte_transpose.transpose`` where it can (a contiguous
    compute copy of two-byte elements), else torch's copy."""
    if v.is_contiguous() and v.element_size() == 2:
        return transpose(v)
    return v.t().contiguous()


class _CrossNetwork(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x0, on_input_grad, owns_output_grad, fp8, output_copies, copies_only, *masters):
        layers = len(masters) // 3
        ctx.masters = [p.dtype for p in masters]  # the gradients' dtypes
        params = [compute_copy(p, x0.dtype) for p in masters]
        gemms = (LibraryCrossGemms(params, ctx.needs_input_grad[6:]) if fp8 is None
                 else Fp8CrossGemms(fp8, list(masters), ctx.needs_input_grad[6:], x0.dtype))
        bs = params[2 * layers:]
        x, products = x0, []
        for l, b in enumerate(bs):
            low = gemms.down(l, x)  # [B, r]
            products.append(gemms.up(l, low))  # [B, D] p_l, kept for the backward
            # [B, D] x0 * (p_l + b) + x_l, with its fp8 copies where the next GEMMs take them
            copies = gemms.fused_input(l + 1, x.shape, x.device) if l + 1 < layers else output_copies
            unread = l + 1 == layers and copies_only and copies is not None  # the caller reads the copies alone
            x = epilogue_pass(products[-1], bias=b, cross=(x0, x), fp8=copies, fp8_only=unread)
            x = _unread_output(x0) if unread else x
        ctx.layers, ctx.on_input_grad, ctx.owns_output_grad, ctx.gemms = layers, on_input_grad, owns_output_grad, gemms
        ctx.save_for_backward(x0, *products, *params)
        return x

    @staticmethod
    @once_differentiable  # its GEMMs and passes record no graph: a second derivative is refused, not wrong
    def backward(ctx, grad):
        layers, gemms = ctx.layers, ctx.gemms
        x0, *saved = ctx.saved_tensors
        products, params = saved[:layers], saved[layers:]
        vs, bs = params[:layers], params[2 * layers:]
        need_x0, need = ctx.needs_input_grad[0], ctx.needs_input_grad[6:]  # need: V, U, b of each layer
        d_x0 = torch.empty_like(x0)  # [B, D] x0's gradient, accumulated by the recompute epilogues
        d_v, d_u, d_b = [None] * layers, [None] * layers, [None] * layers
        owned = ctx.owns_output_grad or not grad.is_contiguous()  # a copy made here is ours too
        grad = grad.contiguous()  # [B, D] dL/dx_{l+1}
        for l in reversed(range(layers)):
            bias_grad = None
            if need[2 * layers + l]:
                bias_grad = torch.empty(x0.shape[1], device=x0.device, dtype=torch.float32)  # [D]
            epilogue = CrossGrad(grad=grad, x0=x0, d_x0=d_x0, accumulate=l < layers - 1, plus_grad=l == 0,
                                 bias_grad=bias_grad)
            # [B, D] = G * x0; where the fp8 GEMMs take its copies from the pass, only those are written
            copies = gemms.fused_grad(l, x0.shape, x0.device)
            g = epilogue_pass(products[l], bias=bs[l], cross_grad=epilogue, fp8=copies, fp8_only=copies is not None)
            dlow = gemms.dlow(l, g)  # [B, D] @ [D, r]
            del g  # the fp8 GEMMs keep its copy; freed before the next layer allocates its own
            if l > 0:  # [B, D] dL/dx_l; below the top layer grad is this function's own buffer to overwrite,
                # in the top layer where the caller gave the incoming gradient up
                grad = matmul(dlow, _k_major(vs[l]), trans_b=True, residual=grad,
                              overwrite_residual=l < layers - 1 or owned)
            elif need_x0:  # [B, D] x0's whole gradient
                d_x0 = matmul(dlow, _k_major(vs[0]), trans_b=True, residual=d_x0, overwrite_residual=True)
                if ctx.on_input_grad is not None:
                    ctx.on_input_grad(d_x0)  # final now: what reads it runs beside layer 0's weight gradients
            if need[layers + l]:
                d_u[l] = gemms.d_u(l, ctx.masters[layers + l])  # [D, B] @ [B, r]
            if bias_grad is not None:
                d_b[l] = bias_grad.to(ctx.masters[2 * layers + l])
            if need[l]:
                d_v[l] = gemms.d_v(l, dlow, ctx.masters[l])  # [r, B] @ [B, D]
            del dlow  # (memory_peak: a second [B, D] at the peak)
        ctx.gemms = None
        return (d_x0 if need_x0 else None), None, None, None, None, None, *d_v, *d_u, *d_b


def _unread_output(like: torch.Tensor) -> torch.Tensor:
    """What the network returns for an output whose values its caller does not read (``copies_only``): NaN
    in ``like``'s shape, one value broadcast (no memory), so that a reader after all sees NaN, not stale data."""
    return torch.full((1, 1), float("nan"), dtype=like.dtype, device=like.device).expand(like.shape)


def cross_network(x0: torch.Tensor, vs: list[torch.Tensor], us: list[torch.Tensor],
                  bs: list[torch.Tensor], *, on_input_grad: Callable[[torch.Tensor], None] | None = None,
                  owns_output_grad: bool = False, fp8: Fp8Scaling | None = None,
                  output_copies: Fp8Out | None = None, copies_only: bool = False) -> torch.Tensor:
    """The low-rank cross network's output x_L with the fused backward.

    x0: [B, D]; vs: L tensors [r, D] (V_l, the down-projection); us: L tensors [D, r] (U_l); bs: L
    tensors [D] -> [B, D]. Under autocast x0 is cast as ``F.linear`` would; the weights may be masters
    of another dtype (fp32 beside a bf16 x0), copied to x0's dtype inside, with their gradients in their
    own dtype (the weight gradients written so by their GEMMs, as ``polyrec.kernels.gemm_layers.linear``).
    ``on_input_grad``: called in the backward with x0's gradient [B, D] as soon as it is final,
    before layer 0's two weight-gradient GEMMs (each as large as the 0.34 ms GEMM of the module
    docstring), so that work reading it (the sharded embeddings' gradient all-to-all) overlaps them;
    it must not write it. ``owns_output_grad``: the caller guarantees that nothing but this network
    reads the gradient autograd hands its output (the output's one consumer is the caller's own layer,
    no hooks), so the top layer's backward may write over it (the library adds the residual in place).
    ``fp8``: run five of each layer's six GEMMs in fp8 with this state's scales (``cross_kinds(L)`` roles;
    ``polyrec.kernels.fp8_dense``); a pass with a gradient ages its history. ``output_copies``: the last
    layer's pass also writes these fp8 copies of the output [B, D] (its next layer's input, begun by
    ``fp8_dense.begin_input``), in either precision. ``copies_only``: the caller reads the output only through
    ``output_copies`` (where given): the last pass then writes those alone, not the output [B, D] (MLPerf: 453 MB
    of bf16 a step), and the tensor returned holds NaN (a broadcast scalar).
    """
    if not (len(vs) == len(us) == len(bs) >= 1):
        raise ValueError(f"cross_network: need as many V, U and b as layers (>= 1), got {len(vs)}, {len(us)}, "
                         f"{len(bs)}")
    if x0.dim() != 2:
        raise ValueError(f"cross_network: x0 must be [B, D], got {tuple(x0.shape)}")
    d = x0.shape[1]
    for l, (v_w, u_w, b) in enumerate(zip(vs, us, bs)):
        r = v_w.shape[0]
        if v_w.shape != (r, d) or u_w.shape != (d, r) or b.shape != (d,):
            raise ValueError(f"cross_network: layer {l} needs V [r, {d}], U [{d}, r], b [{d}]; got V "
                             f"{tuple(v_w.shape)}, U {tuple(u_w.shape)}, b {tuple(b.shape)}")
    (x0,) = autocast_inputs(x0)
    if fp8 is not None:
        if len(fp8.kinds) != CROSS_ROLES * len(vs):
            raise ValueError(f"cross_network: fp8 scaling has {len(fp8.kinds)} roles, {len(vs)} layers need "
                             f"{CROSS_ROLES * len(vs)}")
        if not aligned(x0.shape[0], d, *(v.shape[0] for v in vs)):
            raise ValueError(f"cross_network: fp8 GEMMs need the batch, D and every rank to be multiples of 16, "
                             f"got batch {x0.shape[0]}, D {d}, ranks {[v.shape[0] for v in vs]}")
        fp8.begin(trains(x0.requires_grad, [*vs, *us, *bs]))
    if output_copies is not None and output_copies.q.shape != x0.shape:
        raise ValueError(f"cross_network: output copies {tuple(output_copies.q.shape)} for an output "
                         f"{tuple(x0.shape)}")
    return _CrossNetwork.apply(x0, on_input_grad, owns_output_grad, fp8, output_copies, copies_only, *vs, *us, *bs)


def compile_jobs(spec: DeviceSpec) -> list[CompileJob]:
    """Compile jobs for the configs the selector picks for the MLPerf shapes: the up-projection GEMM
    (NT, no epilogue) and the projection dgrad (NN, residual), plus the epilogue passes (cross in the
    forward, CrossGrad in the backward, residual on the library path), the split-K reduction, and the
    two passes that write fp8 copies (e4m3 x_l beside x_l in the forward, e5m2 g alone in the backward;
    fp8 dense layers)."""
    from polyrec.kernels.gemm_select import select_gemm

    jobs = []
    for batch in COMPILE_BATCHES:
        for epilogue, trans_b in (("none", True), ("residual", False)):
            config = select_gemm(batch, MLPERF_DIM, MLPERF_RANK, "bf16", spec, epilogue=epilogue,
                                 b_k_major=trans_b).config
            job = compile_job_for(config, "bf16", spec, epilogue=epilogue, trans_b=trans_b)
            if job.label not in {j.label for j in jobs}:
                jobs.append(job)
    passes = [reduce_compile_job("bf16", split_k=s, epilogue=e) for e, s in
              (("cross", 1), ("cross_grad", 1), ("residual", 1), ("residual", 4))]
    passes += [reduce_compile_job("bf16", split_k=1, epilogue=e, fp8=f, copies_only=e == "cross_grad")
               for e, f in zip(("cross", "cross_grad"), spec_formats(spec))]
    return jobs + passes
