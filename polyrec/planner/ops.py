"""What the dense half of a training step issues, op by op, derived from the model's layers.

Mirrors the code that runs: ``polyrec.models.layers`` (fp32 master weights copied to the compute dtype
for every matmul, their gradients written in fp32 by the weight-gradient GEMMs; MLPs; the DCN-v2 cross network; the DLRM dot interaction) on top of the autograd
layers of ``polyrec.kernels.gemm_layers`` (``_Linear``: GEMM with fused bias/ReLU, backward ``grad * (y > 0)``,
dgrad, wgrad, ``grad.sum(0)``) and ``polyrec.kernels.dcn`` (the cross network, backward in its GEMMs). Each :class:`Op` carries what the time model needs (a GEMM shape, or bytes moved at a
rate class) and what the host model needs (eager torch ops issued besides the GEMMs' own launches).
Each :class:`LayerMemory` says, per sample, which tensors a layer keeps for backward and which its
backward allocates, for the activation peak in ``planner.memory``.

The cross network is one function, :func:`cross_network`, so a change of its kernels is one edit here.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass

from polyrec.kernels.dense_backward import BLOCK_NS, MAX_ITERATIONS, TILE_ELEMENTS
from polyrec.kernels.fp8 import aligned as fp8_aligned
from polyrec.kernels.fp8_dense import mlp_fits
from polyrec.kernels.gemm_configs import pass_partial_rows
from polyrec.perfmodel.gemm import ALIGNMENT_ELEMENTS
from polyrec.planner.dense import GemmShape, Matmul, dense_matmuls, gemm_shapes, padded_in_dim
from polyrec.planner.types import ModelSpec

#: Rate classes of non-GEMM ops, as fractions of the copy bandwidth (bytes read + written): torch's
#: same-dtype vectorized ops and polyrec's ReLU/bias backward at the copy rate ("vector"), the cross
#: network's epilogue passes (``split_k_reduce_kernel``) below it ("pass": 6 calls moving 13.13 GB in
#: 3.312 ms per step at a 4.24 TB/s copy rate, benchmarks/results/e2e_profile_nvidia-h200_2026-12-01 at 737b55b).
RATE_CLASSES: dict[str, float] = {"vector": 1.0, "pass": 0.935, **{
    # fp8 dense layers (``--precision fp8``), on the H200 at MLPerf's batch 65536 against a ~4.27 TB/s copy:
    # ``cast_fp8`` of a bf16 tensor into plain + transposed copies ([65536, 3456]: 4 bytes per element in 0.264 ms,
    # benchmarks/results/fp8_copies_2026-12-03, cast tile 64 x 128);
    "fp8_cast": 0.80,
    # the cross forward pass writing its output's copies too (5 bf16 tensors' bytes in 0.635 ms,
    # benchmarks/results/fp8_passes_2026-12-03) and CrossGrad writing only g's copies (6 in 0.771 ms at 8 warps,
    # the maximum kept per tile element: benchmarks/results/fp8_pass_tiles_2026-12-04/probe);
    "fp8_pass": 0.83, "fp8_cross_grad": 0.83,
    # the last cross pass writing only its output's copies (the top MLP's input: 4 bf16 tensors' bytes in
    # 0.476 ms at 8 warps, benchmarks/results/cross_output_copies_2026-12-04/);
    "fp8_copies_pass": 0.90,
    # ReLU / bias backward writing the masked gradient's copies (6 bytes per element, N = 1024: 0.164 ms;
    # fp8_copies_2026-12-03).
    "fp8_relu": 0.58}}
#: Device seconds of torch's column sum of a bias gradient's fp32 partials (``reduce_kernel``: 10 calls,
#: 0.129 ms per step in the same profile: 7 ReLU layers with a bias, 3 cross layers).
COLUMN_SUM_S = 12.9e-6
#: Device seconds at least of one small memory-bound kernel: the weight casts (then with their
#: gradients' casts back to fp32 and the bias gradients' casts: 67 copy kernels, 0.219 ms per step in
#: the same profile; the gradients' casts are gone since the weight-gradient GEMMs write fp32).
MIN_KERNEL_S = 3.3e-6
#: Bytes of an fp32 value (master weights, their gradients, the loss).
FP32 = 4
#: Bytes of an fp8 value (the fp8 GEMMs' operand copies).
FP8 = 1
#: Torch ops one fp8 GEMM issues (``polyrec.kernels.fp8.scaled_mm``: ``torch._scaled_mm`` and the compute-dtype
#: copy of a bias it takes).
FP8_GEMM_TORCH_OPS = 2
#: Torch-op equivalents of host time each fp8 op (cast, transpose of a master's copy, GEMM) takes besides the
#: launches it counts: the scaling's Python around it (role views, ``prepare``, ``fused_out``). 1, rounded from
#: 0.71-0.91 fitted on the host-bound even rows of two runs (rows 0 and 6 of
#: benchmarks/results/planner_accuracy_fp8_2026-12-04/ and run2/; run 1's row 6, 2.2, left out as the one that
#: is likely device time). The odd rows check it (that directory's README).
FP8_OP_HOST_TORCH_OPS = 1
#: fp32 [B / pass_partial_rows(B), D] buffers alive at the cross backward's peak: the
#: CrossGrad pass's bias-gradient partials and two of the same size while ``torch.sum`` reduces them
#: (allocator trace of one step, benchmarks/results/memory_peak_*_nvidia-h200_2026-11-30 at a184b6c,
#: one partial row per 32 rows then: 3 blocks of 432 B per sample for D = 3456, 54 B for D = 432).
BIAS_GRAD_PARTIAL_COPIES = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class Op:
    """One op of the dense step: a GEMM (``gemm`` set) or a memory-bound op (``bytes`` at ``rate``)."""

    name: str  # "top.0.relu_bias_grad", "cross.1.u.product", ...
    phase: str  # "fwd" or "bwd"
    gemm: GemmShape | None = None
    bytes: float = 0.0  # bytes read + written (memory-bound ops)
    rate: str = "vector"  # key of RATE_CLASSES
    column_sums: int = 0  # torch column sums of bias-gradient partials it issues (COLUMN_SUM_S each)
    torch_ops: int = 1  # eager torch ops this issues (host); a GEMM's own launches are counted apart
    triton_ops: int = 0  # Triton kernels this issues (host), the GEMMs' own apart


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerMemory:
    """Per-sample bytes of one layer (in forward order): kept for its backward, and at its backward's peak."""

    name: str
    saved: float  # new tensors kept from the forward until this layer's backward ends
    backward_peak: float  # its incoming gradient plus what its backward allocates, at the same time
    carried: float = 0.0  # gradient buffers alive from this layer's backward down to the layers before it
    freed_early: float = 0.0  # part of ``saved`` only the next layer keeps: freed before this backward runs


@dataclass(frozen=True, kw_only=True, slots=True)
class DenseInventory:
    ops: tuple[Op, ...]
    layers: tuple[LayerMemory, ...]
    autograd_nodes: int  # backward nodes the autograd engine runs (host)


def _gemm_ops(mat: Matmul, batch: int, align: int = 1) -> list[Op]:
    return [Op(name=s.op, phase="fwd" if s.op.endswith(".fwd") else "bwd", gemm=s, torch_ops=0)
            for s in gemm_shapes(mat, batch, align)]


def _pad_alignment(mat: Matmul) -> int:
    """Elements a layer's input dim is padded to a multiple of: the GEMM alignment for the layer whose
    input needs no gradient (the dense features, ``polyrec.models.layers.MLP``), else 1."""
    return 1 if mat.needs_dgrad else ALIGNMENT_ELEMENTS


def _reduction_pads(mat: Matmul, batch: int, cb: int) -> list[Op]:
    """The zero-padded copies of the first layer's input (compute dtype) and weight (the fp32 master,
    copied to the compute dtype after) when their rows are not aligned (``polyrec.models.layers.
    pad_reduction``: read, then written wider); none otherwise."""
    k = padded_in_dim(mat, _pad_alignment(mat))
    if k == mat.in_dim:
        return []
    return [Op(name=f"{mat.name}.pad_{what}", phase="fwd", bytes=rows * (mat.in_dim + k) * size)
            for what, rows, size in (("x", batch, cb), ("w", mat.out_dim, FP32))]


def _weight_casts(mat: Matmul, cb: int, kept_copies: bool) -> list[Op]:
    """fp32 master -> compute dtype for the forward (``polyrec.kernels.master_copies.compute_copy``); none
    when the compute dtype is fp32. ``kept_copies``: the dense optimizer writes the masters' copies
    (``FusedAdagrad``), so only a weight that is not itself a parameter is cast: the first layer's
    zero-padded copy (``_reduction_pads``), a new tensor each step. No cast back: the weight-gradient GEMM
    writes the fp32 gradient and the bias gradient's column sums are fp32 already."""
    out: list[Op] = []
    if cb == FP32:
        return out
    padded = padded_in_dim(mat, _pad_alignment(mat)) != mat.in_dim  # the weight given to the GEMMs is a pad's copy
    for what, n in (("w", mat.in_dim * mat.out_dim), ("b", mat.out_dim if mat.bias else 0)):
        if n and (not kept_copies or (what == "w" and padded)):
            out.append(Op(name=f"{mat.name}.cast_{what}", phase="fwd", bytes=n * (FP32 + 2)))
    return out


def mlp_layer(mat: Matmul, batch: int, cb: int, kept_copies: bool = False) -> tuple[list[Op], LayerMemory]:
    """One ``linear`` (``_Linear``): fused bias/ReLU forward; backward one ReLU-mask + bias-sum pass
    (``polyrec.kernels.dense_backward``), dgrad, wgrad. ``kept_copies`` as ``_weight_casts`` takes it."""
    n, k, b = mat.out_dim, padded_in_dim(mat, _pad_alignment(mat)), batch  # k: as the GEMMs see it
    ops = (_gemm_ops(mat, batch, _pad_alignment(mat)) + _weight_casts(mat, cb, kept_copies)
           + _reduction_pads(mat, batch, cb))
    relu = mat.epilogue == "relu"
    if relu:  # one relu_bias_backward pass: grad and y read, the masked grad written (+ bias partials)
        partial_rows = b / (TILE_ELEMENTS // BLOCK_NS[-1] * MAX_ITERATIONS)  # fp32 column partials (large B)
        moved = 3 * b * n * cb + (2 * partial_rows * n * FP32 if mat.bias else 0)
        # partials and masked grad allocated, the partials summed (one column sum, fp32 as the master)
        ops.append(Op(name=f"{mat.name}.relu_bias_grad", phase="bwd", bytes=moved, triton_ops=1,
                      torch_ops=2 if mat.bias else 1, column_sums=1 if mat.bias else 0))
    elif mat.bias:  # torch's fp32 column sum of the gradient
        ops.append(Op(name=f"{mat.name}.bias_grad", phase="bwd", bytes=b * n * cb, torch_ops=1))
    # saved: its output (ReLU's mask source and the next layer's input); the first layer also its input
    saved = n * cb + (k * cb if not mat.needs_dgrad else 0)
    # backward: incoming grad and the masked grad, then dgrad's output
    peak = n * cb + (n * cb if relu else 0) + (k * cb if mat.needs_dgrad else 0)
    return ops, LayerMemory(name=mat.name, saved=saved, backward_peak=peak)


def cross_network(pairs: list[tuple[Matmul, Matmul]], batch: int, cb: int,
                  kept_copies: bool = False) -> tuple[list[Op], LayerMemory]:
    """The low-rank DCN-v2 network as ``polyrec.kernels.dcn.cross_network`` runs it (one autograd
    Function). Forward per layer: ``low = x_l Vᵀ``, the product ``p = low Uᵀ`` (kept for the backward),
    then one epilogue pass ``x_{l+1} = x0 * (p + b) + x_l`` (reads p, x0, x_l; writes x_{l+1}).
    Backward per layer: one CrossGrad pass over p that writes ``g = grad * x0``, accumulates x0's
    gradient (reads grad, x0, d_x0 but in the first layer of the backward; writes g, d_x0) and the
    bias-gradient partials, summed by torch; ``g U``, ``gᵀ low``, ``dlowᵀ x_l``; ``dlow V`` with the
    residual gradient added in its epilogue ("residual"), in place by the library in every layer: below
    the top one over the network's own buffer, in the top one over the incoming gradient, which DLRM
    gives up (``owns_output_grad``: the top MLP is the cross output's one reader). No elementwise torch
    op of size [B, D]; V's transposed copy for that last GEMM. ``kept_copies`` as ``_weight_casts`` takes it.
    """
    ops: list[Op] = [Op(name="cross.grad_x0_alloc", phase="bwd", bytes=0)]
    b = batch
    for i, (v, u) in enumerate(pairs):
        w, r = u.out_dim, v.out_dim
        ops += [Op(name=f"{v.name}.fwd", phase="fwd", gemm=GemmShape(op=f"{v.name}.fwd", m=b, n=r, k=w,
                                                                     epilogue="none"), torch_ops=0),
                Op(name=f"{u.name}.product", phase="fwd",
                   gemm=GemmShape(op=f"{u.name}.product", m=b, n=w, k=r, epilogue="none"), torch_ops=0),
                Op(name=f"{u.name}.cross_pass", phase="fwd", bytes=4 * b * w * cb, rate="pass", torch_ops=1,
                   triton_ops=1)]
        ops += _weight_casts(v, cb, kept_copies) + _weight_casts(u, cb, kept_copies)
        first_backward = i == len(pairs) - 1  # d_x0 is written, not read
        ops.append(Op(name=f"{u.name}.cross_grad_pass", phase="bwd", bytes=(6 - first_backward) * b * w * cb,
                      rate="pass", torch_ops=3, triton_ops=1))  # g and the partials allocated, the partials summed
        backward = (GemmShape(op=f"{u.name}.dgrad", m=b, n=r, k=w, epilogue="none"),
                    GemmShape(op=f"{u.name}.wgrad", m=w, n=r, k=b, epilogue="none"),
                    GemmShape(op=f"{v.name}.wgrad", m=r, n=w, k=b, epilogue="none"),
                    GemmShape(op=f"{v.name}.dgrad", m=b, n=w, k=r, epilogue="residual",
                              library_adds_residual=True))
        ops += [Op(name=g.op, phase="bwd", gemm=g, torch_ops=0) for g in backward]
        ops.append(_transposed_v(v.name, r, w, cb))
        ops.append(Op(name=f"{u.name}.bias_grad", phase="bwd", bytes=0, torch_ops=1,
                      column_sums=1))  # the partials' column sum into the fp32 buffer
    w, r = pairs[0][1].out_dim, pairs[0][0].out_dim
    layers = len(pairs)
    # saved until the whole backward ends: x_0..x_{L-1} (x0 counted by the cat), every low and every
    # product p; the output x_L only the top MLP keeps. Backward peak: grad (each layer writes the next
    # one over it, the top one too: ``owns_output_grad``), d_x0, g and dlow, and the CrossGrad pass's
    # bias-gradient partials while torch sums them.
    return ops, LayerMemory(name="cross", saved=layers * (r + 2 * w) * cb,
                            backward_peak=(3 * w + r) * cb + BIAS_GRAD_PARTIAL_COPIES * FP32 * w
                            / pass_partial_rows(batch),
                            freed_early=w * cb)


def _fp8_cast(name: str, phase: str, rows: int, cols: int, cb: int, *, plain: bool = True,
              transposed: bool = True) -> Op:
    """``polyrec.kernels.fp8.cast_fp8`` of a [rows, cols] tensor in the compute dtype: read once, each asked
    copy written; its two copies allocated."""
    return Op(name=name, phase=phase, bytes=rows * cols * (cb + FP8 * (plain + transposed)), rate="fp8_cast",
              torch_ops=2 + FP8_OP_HOST_TORCH_OPS, triton_ops=1)


def _fp8_weight_casts(name: str, n: int, k: int, transposed: bool) -> list[Op]:
    """``cast_fp8`` of an fp32 master [n, k]: the kernel writes the plain copy; a transposed one is
    ``byte_transpose.transpose`` of it (``cast_fp8``'s fp32 rule: its output allocated, one Triton launch)."""
    ops = [Op(name=f"{name}.cast_w_fp8", phase="fwd", bytes=n * k * (FP32 + FP8), rate="fp8_cast",
              torch_ops=1 + FP8_OP_HOST_TORCH_OPS, triton_ops=1)]
    if transposed:
        ops.append(Op(name=f"{name}.transpose_w_fp8", phase="fwd", bytes=2 * n * k * FP8,
                      torch_ops=1 + FP8_OP_HOST_TORCH_OPS, triton_ops=1))
    return ops


def _fp8_gemm(name: str, phase: str, m: int, n: int, k: int, out_bytes: int, epilogue: str = "none") -> Op:
    """One ``scaled_mm`` (a bias is the library's epilogue)."""
    return Op(name=name, phase=phase, gemm=GemmShape(op=name, m=m, n=n, k=k, epilogue=epilogue, fp8=True,
                                                     out_bytes=out_bytes),
              torch_ops=FP8_GEMM_TORCH_OPS + FP8_OP_HOST_TORCH_OPS)


def fp8_mlp_layer(mat: Matmul, batch: int, cb: int, *, input_copies: bool, last: bool) -> tuple[list[Op], LayerMemory]:
    """One layer of ``polyrec.kernels.fp8_dense.mlp`` (``_Fp8MLP``): its input cast to plain + transposed
    copies (``input_copies``: written by the input's producer instead), the master's copies, the forward
    GEMM with its bias; backward the ReLU / bias pass writing the masked gradient's copies (the first bottom
    layer, with no input gradient: the gradient written, then its transposed copy cast), the weight- and
    input-gradient GEMMs. ``last``: the MLP's last fp8 layer, whose ReLU is a torch op (and its backward)."""
    n, k, b = mat.out_dim, padded_in_dim(mat, _pad_alignment(mat)), batch
    relu = mat.epilogue == "relu"
    ops = _reduction_pads(mat, batch, cb)
    if not input_copies:
        ops.append(_fp8_cast(f"{mat.name}.cast_x_fp8", "fwd", b, k, cb))
    ops += _fp8_weight_casts(mat.name, n, k, transposed=mat.needs_dgrad)
    ops.append(_fp8_gemm(f"{mat.name}.fwd", "fwd", b, n, k, cb, "bias" if mat.bias else "none"))
    if last and relu:
        ops += [Op(name=f"{mat.name}.relu", phase="fwd", bytes=2 * b * n * cb),
                Op(name=f"{mat.name}.relu_grad", phase="bwd", bytes=3 * b * n * cb)]
    partials = 2 * b / (TILE_ELEMENTS // BLOCK_NS[-1] * MAX_ITERATIONS) * n * FP32 if mat.bias else 0
    read = (2 if relu else 1) * b * n * cb  # the gradient, and the pre-activation where a ReLU masks it
    passes = dict(phase="bwd", triton_ops=1, torch_ops=2 if mat.bias else 1, column_sums=1 if mat.bias else 0)
    if mat.needs_dgrad:
        ops.append(Op(name=f"{mat.name}.relu_bias_grad", bytes=read + 2 * b * n * FP8 + partials, rate="fp8_relu",
                      **passes))
        ops.append(_fp8_gemm(f"{mat.name}.dgrad", "bwd", b, k, n, cb))
    else:
        ops += [Op(name=f"{mat.name}.relu_bias_grad", bytes=read + b * n * cb + partials, **passes),
                _fp8_cast(f"{mat.name}.cast_g_fp8", "bwd", b, n, cb, plain=False)]
    ops.append(_fp8_gemm(f"{mat.name}.wgrad", "bwd", n, k, b, FP32))
    # saved: the input's transposed copy, the pre-activation where a ReLU follows (and the last one's
    # output); backward: the incoming gradient, the masked gradient's copies, the input gradient
    saved = k * FP8 + (n * cb if relu else 0) + (n * cb if last and relu else 0)
    peak = n * cb + 2 * n * FP8 + (k * cb if mat.needs_dgrad else 0)
    return ops, LayerMemory(name=mat.name, saved=saved, backward_peak=peak)


def _transposed_v(name: str, r: int, w: int, cb: int) -> Op:
    """The backward's transposed copy of V_l [r, w] in the compute dtype, for ``dlow V + G``'s K-major B
    (``byte_transpose.transpose``: its output allocated, one Triton launch)."""
    return Op(name=f"{name}.transpose", phase="bwd", bytes=2 * r * w * cb, triton_ops=1)


def fp8_cross_network(pairs: list[tuple[Matmul, Matmul]], batch: int, cb: int, kept_copies: bool,
                      output_copies: bool) -> tuple[list[Op], LayerMemory]:
    """``cross_network`` with ``polyrec.kernels.fp8_dense.Fp8CrossGemms``: five of each layer's six GEMMs in
    fp8 (``dlow V + G`` stays in the compute dtype). x0 is cast; each later x_l's copies are written by the
    pass that makes it (``output_copies``: the last pass writes the next MLP's input copies too), g's by
    CrossGrad instead of g (the same bytes in bf16: two 1-byte copies); low and dlow are cast, V and U cast
    from their masters each step. Where the last pass writes the next MLP's copies, it writes them alone (that
    MLP reads nothing else of the output: ``cross_network``'s ``copies_only``)."""
    ops: list[Op] = [Op(name="cross.grad_x0_alloc", phase="bwd", bytes=0)]
    b = batch
    for i, (v, u) in enumerate(pairs):
        w, r = u.out_dim, v.out_dim
        copies = i + 1 < len(pairs) or output_copies
        unread = i + 1 == len(pairs) and output_copies  # the output itself is not written
        if i == 0:
            ops.append(_fp8_cast("cross.cast_x0_fp8", "fwd", b, w, cb))
        ops += _fp8_weight_casts(v.name, r, w, transposed=False)
        ops.append(_fp8_gemm(f"{v.name}.fwd", "fwd", b, r, w, cb))
        ops.append(_fp8_cast(f"{v.name}.cast_low_fp8", "fwd", b, r, cb))
        ops += _fp8_weight_casts(u.name, w, r, transposed=True)
        ops += [_fp8_gemm(f"{u.name}.product", "fwd", b, w, r, cb),
                Op(name=f"{u.name}.cross_pass", phase="fwd",
                   bytes=b * w * ((4 - unread) * cb + (2 * FP8 if copies else 0)),
                   rate="fp8_copies_pass" if unread else "fp8_pass" if copies else "pass",
                   torch_ops=1 + 2 * copies, triton_ops=1)]
        ops += _weight_casts(v, cb, kept_copies) + _weight_casts(u, cb, kept_copies)
        first_backward = i == len(pairs) - 1  # d_x0 is written, not read
        ops += [Op(name=f"{u.name}.cross_grad_pass", phase="bwd", bytes=(6 - first_backward) * b * w * cb,
                   rate="fp8_cross_grad", torch_ops=4, triton_ops=1),
                _fp8_gemm(f"{u.name}.dgrad", "bwd", b, r, w, cb),
                _transposed_v(v.name, r, w, cb),
                Op(name=f"{v.name}.dgrad", phase="bwd", gemm=GemmShape(op=f"{v.name}.dgrad", m=b, n=w, k=r,
                                                                        epilogue="residual", library_adds_residual=True),
                   torch_ops=0),
                _fp8_gemm(f"{u.name}.wgrad", "bwd", w, r, b, FP32),
                _fp8_cast(f"{v.name}.cast_dlow_fp8", "bwd", b, r, cb, plain=False),
                _fp8_gemm(f"{v.name}.wgrad", "bwd", r, w, b, FP32),
                Op(name=f"{u.name}.bias_grad", phase="bwd", bytes=0, torch_ops=1, column_sums=1)]
    w, r = pairs[0][1].out_dim, pairs[0][0].out_dim
    layers = len(pairs)
    # saved until the whole backward ends: each layer's x_l and low as transposed fp8 copies and its product
    # p; the backward's peak as ``cross_network``'s (g's two copies take g's bytes)
    return ops, LayerMemory(name="cross", saved=layers * ((w + r) * FP8 + w * cb),
                            backward_peak=(3 * w + r) * cb + BIAS_GRAD_PARTIAL_COPIES * FP32 * w
                            / pass_partial_rows(batch),
                            freed_early=w * cb)


def _fp8_layers(mlp: list[Matmul], batch: int, fp8: bool) -> int:
    """How many leading layers of an MLP run in fp8 (``polyrec.models.layers.MLP``): the aligned leading
    layers (the input counted padded, ``MLP.enable_fp8``) where the batch and the input as given (padded only
    without an input gradient) suit an fp8 GEMM; 0 without fp8."""
    if not fp8 or not mlp:
        return 0
    first = mlp[0]
    k = padded_in_dim(first, _pad_alignment(first))
    if not fp8_aligned(batch, k):
        return 0
    return mlp_fits((padded_in_dim(first, ALIGNMENT_ELEMENTS), *(m.out_dim for m in mlp)))


def _mlp_ops(mlp: list[Matmul], batch: int, cb: int, kept_copies: bool, fp8: bool,
             input_copies: bool = False) -> tuple[list[Op], list[LayerMemory]]:
    """An MLP's layers: its leading fp8 layers (``_fp8_layers``), then the rest in the compute dtype."""
    count = _fp8_layers(mlp, batch, fp8)
    ops: list[Op] = []
    layers: list[LayerMemory] = []
    for i, m in enumerate(mlp):
        if i < count:
            o, lm = fp8_mlp_layer(m, batch, cb, input_copies=input_copies and i == 0, last=i == count - 1)
        else:
            o, lm = mlp_layer(m, batch, cb, kept_copies)
        ops += o
        layers.append(lm)
    return ops, layers


def dot_interaction(model: ModelSpec, batch: int, cb: int) -> tuple[list[Op], LayerMemory]:
    """``polyrec.models.layers.dot_interaction``: cat -> bmm(T, Tᵀ) -> lower triangle -> cat, and its backward."""
    f1, d, b = len(model.tables) + 1, model.embedding_dim, batch
    t, z, tri = f1 * d * cb, f1 * f1 * cb, (f1 * (f1 - 1) // 2) * cb  # per sample: T, T Tᵀ, its lower triangle
    out = d * cb + tri
    ops = [Op(name="interaction.cat", phase="fwd", bytes=2 * b * t),
           Op(name="interaction.bmm", phase="fwd", bytes=b * (2 * t + z)),
           Op(name="interaction.tril_indices", phase="fwd", bytes=0),
           Op(name="interaction.gather", phase="fwd", bytes=2 * b * tri),
           Op(name="interaction.cat_out", phase="fwd", bytes=2 * b * out),
           Op(name="interaction.scatter", phase="bwd", bytes=b * (z + 2 * tri), torch_ops=2),
           Op(name="interaction.bmm_grad", phase="bwd", bytes=2 * b * (2 * t + z), torch_ops=2),
           Op(name="interaction.grad_add", phase="bwd", bytes=3 * b * t),
           Op(name="interaction.grad_split", phase="bwd", bytes=2 * b * t)]
    # saved: T, both operands of the bmm (the gather keeps only its indices); backward: the scattered
    # product gradient, T's two gradients and their sum, and the incoming gradient
    return ops, LayerMemory(name="interaction", saved=t, backward_peak=z + 3 * t + out)


@functools.lru_cache(maxsize=1024)
def dense_inventory(model: ModelSpec, batch: int, dense_dtype_bytes: int, x0_in_lookup: bool = False,
                    kept_copies: bool = False, fp8: bool = False) -> DenseInventory:
    """Every op of the dense forward and backward at ``batch`` samples, and the per-layer memory
    (cached: a 64-GPU plan asks for the same few batches ~1300 times). ``x0_in_lookup``: DLRM-DCNv2's
    x0 is the buffer the lookup wrote its pooled rows into (one GPU, polyrec's tables:
    ``polyrec.models.layers.beside``), so only the bottom MLP's columns are copied and x0 keeps only
    those beyond the pooled output (which the embedding side counts). ``kept_copies``: the dense
    optimizer keeps the masters' compute-dtype copies (``_weight_casts``). ``fp8``: the dense layers'
    GEMMs in fp8 where their sizes allow (``--precision fp8``; activations in the compute dtype, which
    must be 16-bit)."""
    cb, b = dense_dtype_bytes, batch
    if fp8 and cb != 2:
        raise ValueError(f"dense_inventory: fp8 GEMMs run beside 16-bit activations, got {cb} bytes per value")
    mats = dense_matmuls(model)
    bottom = [m for m in mats if m.name.startswith("bottom.")]
    top = [m for m in mats if m.name.startswith("top.")]
    ops: list[Op] = [] if cb == FP32 else [Op(name="input.cast", phase="fwd", bytes=b * model.dense.num_dense * (FP32 + cb))]
    o, layers = _mlp_ops(bottom, batch, cb, kept_copies, fp8)
    ops += o
    fd = len(model.tables) * model.embedding_dim
    if model.dense.interaction == "dcnv2":
        width = model.interaction_dim
        copied = width - fd if x0_in_lookup else width  # [B, copied] read and written into x0
        ops.append(Op(name="cross.cat", phase="fwd", bytes=2 * b * copied * cb))
        layers.append(LayerMemory(name="cross.x0", saved=copied * cb, backward_peak=width * cb + fd * cb))
        cross = [m for m in mats if m.name.startswith("cross.")]
        pairs = list(zip(cross[::2], cross[1::2]))
        # the last pass writes the top MLP's input copies where that layer runs in fp8 (DLRM.dense_forward)
        top_copies = _fp8_layers(top, batch, fp8) > 0
        if fp8 and fp8_aligned(batch, width, *(v.out_dim for v, _ in pairs)):
            o, lm = fp8_cross_network(pairs, batch, cb, kept_copies, output_copies=top_copies)
        else:
            o, lm = cross_network(pairs, batch, cb, kept_copies)
        ops += o
        layers.append(lm)
    else:
        top_copies = False
        o, lm = dot_interaction(model, batch, cb)
        ops += o
        layers.append(lm)
    o, lms = _mlp_ops(top, batch, cb, kept_copies, fp8, input_copies=top_copies)
    ops += o
    layers += lms
    ops.append(Op(name="loss", phase="fwd", bytes=b * (cb + 3 * FP32), torch_ops=3))  # squeeze/float, BCE
    ops.append(Op(name="loss_grad", phase="bwd", bytes=b * (cb + 3 * FP32), torch_ops=3))
    nodes = sum(2 + 2 * (1 if m.bias else 0) for m in mats) + 4
    return DenseInventory(ops=tuple(ops), layers=tuple(layers), autograd_nodes=nodes)


def activation_peak_per_sample(inv: DenseInventory) -> float:
    """Per-sample bytes at the dense backward's peak: every layer's saved tensors down to the one whose
    backward runs, its backward's own buffers, and gradient buffers carried from the layers after it."""
    saved = [lm.saved for lm in inv.layers]
    peak = sum(saved)  # the end of the forward
    carried = 0.0
    for i in range(len(inv.layers) - 1, -1, -1):
        lm = inv.layers[i]
        peak = max(peak, sum(saved[: i + 1]) - lm.freed_early + lm.backward_peak + carried)
        carried = max(carried, lm.carried)
    return peak
