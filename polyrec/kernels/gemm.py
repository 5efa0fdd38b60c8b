"""Triton GEMM with fp32 accumulation, every training layout, fused epilogues and split-K.

``matmul(a, b)`` computes ``A @ B`` for A [M, K] (or [K, M] with ``trans_a``) and B [K, N] (or [N, K]
with ``trans_b``), so forward (x @ Wᵀ), dgrad (g @ W) and wgrad (gᵀ @ x) all run without copies:
layouts are strides. Epilogues, fused into the store: ``+ bias[N]``, ReLU, and the DCN-v2 cross update
``x0 * (acc + bias) + x``. Programs walk the output grid in groups of ``group_m`` rows (L2 reuse);
``split_k > 1`` writes fp32 partials that a second kernel sums and finishes with the epilogue.
The config comes from ``polyrec.kernels.gemm_select`` (a performance model; nothing is timed), which
may also hand the GEMM to the vendor library (torch.matmul), whose product that same second kernel
(one elementwise pass, ``SPLIT_K=1``, ``polyrec.kernels.gemm_epilogue``) finishes with the epilogue; a
bias with or without ReLU, and a residual the caller gives up, the library applies in its own GEMM.

On Hopper the selector may instead pick a config of the persistent TMA kernel
(``polyrec.kernels.gemm_tma``, ``GemmConfig.persistent_tma``) where it can run: row-major A, 16-byte
aligned rows, 2-byte dtypes, the bias / ReLU / cross epilogues.

``linear`` and ``cross_linear`` (``polyrec.kernels.gemm_layers``) are autograd layers on top: their
backward GEMMs go through ``matmul`` as well.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.kernels.gemm_epilogue import ACTIVATIONS, CrossGrad, apply_epilogue, validate_fused
from polyrec.kernels.gemm_launch import device_spec, launch, tma_operands
from polyrec.kernels.gemm_select import DISPATCH, INTERPRETER_CONFIG, GemmChoice, select_gemm
from polyrec.kernels.grid import element_span
from polyrec.kernels.gemm_tma import TMA_ALIGN_BYTES
from polyrec.kernels.interpreter import interpreting
from polyrec.perfmodel import gemm_library

_TORCH_TO_GEMM = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
#: Largest element offset the kernels compute in 32-bit arithmetic.
MAX_ELEMENTS = 2**31 - 1
#: What runs a GEMM with M, N or K = 0 (an empty batch): the library (torch.matmul returns the empty or
#: all-zero product) and the epilogue pass; there are no tiles for a config (this one is never launched).
EMPTY_CHOICE = GemmChoice(backend="library", config=INTERPRETER_CONFIG, triton_seconds=math.inf,
                          library_seconds=math.inf)
#: Call signatures ``matmul`` remembers before it starts over: a model makes ~40 per batch size
#: (MLPerf DLRM-DCNv2: 41 per training step), so this holds ~100 batch sizes' worth.
DISPATCH_ENTRIES = 4096
#: Open ``selecting_as_captured`` blocks. A count for the whole process, not a ContextVar: the autograd engine
#: runs a CUDA backward's functions on its own thread, where a ContextVar set by the caller reads its default.
_AS_CAPTURED = [0]


@contextmanager
def selecting_as_captured() -> Iterator[None]:
    """Within: every call selects its GEMM as inside a CUDA graph's capture (``select_gemm(graphed=True)``, by
    GPU time alone), so that a warm-up or a dry run compiles and loads the Triton kernels the capture will
    launch. A kernel's first load (``cuModuleLoadData``) inside a capture can invalidate it: a graphed test
    failed so, once in four runs, at its capture's first Triton GEMM (H200, fiftieth session)."""
    _AS_CAPTURED[0] += 1
    try:
        yield
    finally:
        _AS_CAPTURED[0] -= 1


def _selects_as_captured(a: torch.Tensor) -> bool:
    """Whether a call on ``a`` selects as a captured one: it is being captured, or runs as if it were."""
    return a.is_cuda and (_AS_CAPTURED[0] > 0 or torch.cuda.is_current_stream_capturing())


def gemm_dtype(t: torch.Tensor) -> str:
    """The GEMM dtype of an input: bf16, fp16, or for fp32 "tf32" / "fp32" following
    ``torch.get_float32_matmul_precision()`` (as torch.matmul does)."""
    if t.dtype not in _TORCH_TO_GEMM:
        raise TypeError(f"matmul: dtype {t.dtype} is not supported; use bfloat16, float16 or float32")
    name = _TORCH_TO_GEMM[t.dtype]
    if name == "fp32" and torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return name


def epilogue_name(bias: bool, activation: str, cross: bool, residual: bool = False, cross_grad: bool = False) -> str:
    """The model's epilogue key (``polyrec.perfmodel.gemm_footprint.EPILOGUE_TENSORS``): "none", "bias", "relu",
    "bias_relu", "cross", "residual" or "cross_grad"."""
    if cross_grad:
        return "cross_grad"
    if residual:
        return "residual"
    if cross:
        return "cross"
    if activation == "relu":
        return "bias_relu" if bias else "relu"
    return "bias" if bias else "none"


def _validate(a, b, trans_a, trans_b, bias, activation, cross, residual=None,
              cross_grad=None) -> tuple[int, int, int]:
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"matmul: a and b must be 2-D, got a {tuple(a.shape)}, b {tuple(b.shape)}")
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    k_b, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if k != k_b:
        raise ValueError(f"matmul: inner sizes differ: a gives K={k} (trans_a={trans_a}), b gives K={k_b} "
                         f"(trans_b={trans_b})")
    if a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"matmul: a and b must share dtype and device, got {a.dtype}/{a.device} and "
                         f"{b.dtype}/{b.device}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"matmul: activation must be one of {ACTIVATIONS}, got {activation!r}")
    if bias is not None and (bias.shape != (n,) or bias.device != a.device or not bias.is_contiguous()):
        raise ValueError(f"matmul: bias must be a contiguous [{n}] on {a.device}, got {tuple(bias.shape)} with "
                         f"stride {bias.stride()} on {bias.device}")
    if cross is not None:
        if len(cross) != 2:
            raise ValueError(f"matmul: cross must be the pair (x0, x), got {len(cross)} tensors")
        if activation != "none":
            raise ValueError("matmul: the cross epilogue takes no activation")
        for name, t in zip(("x0", "x"), cross):
            if t.shape != (m, n) or t.device != a.device:
                raise ValueError(f"matmul: cross {name} must be [{m}, {n}] on {a.device}, got "
                                 f"{tuple(t.shape)} on {t.device}")
    if sum(x is not None for x in (cross, residual, cross_grad)) > 1:
        raise ValueError("matmul: cross, residual and cross_grad are exclusive epilogues")
    validate_fused(m, n, a.device, activation, residual, cross_grad)
    for name, t in (("a", a), ("b", b)):
        if t.numel() > MAX_ELEMENTS:
            raise ValueError(f"matmul: {name} has {t.numel()} elements, more than {MAX_ELEMENTS}")
    return m, n, k


def _operand_too_wide(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """The operand a Triton GEMM cannot address, with its span, else None: the kernels' offsets are 32-bit, and
    a strided view spans more elements than it holds (a [4, 16] slice of rows 2^30 apart spans 3.2e9)."""
    for name, t in (("a", a), ("b", b)):
        span = element_span(t)
        if span > MAX_ELEMENTS:
            return f"{name} spans {span} elements (shape {tuple(t.shape)}, strides {t.stride()})"
    return None


def _library(a, b, bias, activation, cross, out_dtype, residual=None, cross_grad=None,
             warmup: bool = False, overwrite_residual: bool = False) -> torch.Tensor:
    """torch.matmul (cuBLAS / hipBLASLt) writes the product; one Triton pass applies the epilogue in place.
    The library applies some epilogues itself, with no pass: a bias, with or without ReLU, in its
    GEMM's epilogue (``torch.addmm`` / ``torch._addmm_activation``; ``LIBRARY_EPILOGUES``), and a
    residual alone that the caller gives up (``overwrite_residual``): ``residual.addmm_(a, b)``
    (beta = 1, no copy)."""
    if _library_adds_residual(residual, overwrite_residual, bias, activation, a.dtype, out_dtype):
        return residual if warmup else residual.addmm_(a, b)
    epilogue = epilogue_name(bias is not None, activation, cross is not None, residual is not None,
                             cross_grad is not None)
    if bias is not None and epilogue in gemm_library.LIBRARY_EPILOGUES and bias.dtype == a.dtype == out_dtype:
        return torch._addmm_activation(bias, a, b) if activation == "relu" else torch.addmm(bias, a, b)
    if epilogue == "none" and _library_writes_fp32(a, out_dtype):
        return torch.mm(a, b, out_dtype=out_dtype)
    y = torch.matmul(a, b)  # [M, N] in the inputs' dtype
    out = y if out_dtype == y.dtype else torch.empty(y.shape, device=y.device, dtype=out_dtype)  # [M, N]
    return apply_epilogue(y, out, bias, activation, cross, residual, cross_grad, warmup)  # matmul validated


def _library_writes_fp32(a: torch.Tensor, out_dtype: torch.dtype) -> bool:
    """Whether the library writes the fp32 product of half-precision operands itself (``torch.mm``'s
    ``out_dtype``): the weight gradients of ``linear`` and the cross network, [out, B] x [B, in] at
    B = 65536, cost 1.846 ms so against 1.910 ms for the bf16 products and their casts, with 40-700x
    less error (H200, benchmarks/results/wgrad_fp32_probe_nvidia-h200_2026-12-01). torch's kernel
    (aten ``_mm_dtype_out_cuda``) refuses two settings, where the product and a cast pass run instead:
    ROCm's CK backend (``torch.backends.cuda.preferred_blas_library("ck")``) and fp16 operands with
    ``torch.backends.cuda.matmul.allow_fp16_accumulation``. Run on CUDA only (no AMD GPU here)."""
    if not (a.is_cuda and out_dtype == torch.float32 and a.dtype in (torch.bfloat16, torch.float16)):
        return False
    if a.dtype == torch.float16 and getattr(torch.backends.cuda.matmul, "allow_fp16_accumulation", False):
        return False
    return torch.backends.cuda.preferred_blas_library() != torch._C._BlasBackend.Ck


def _library_adds_residual(residual, overwrite: bool, bias, activation: str, dtype: torch.dtype,
                           out_dtype: torch.dtype) -> bool:
    """Whether the library path adds the residual itself (``residual.addmm_``): the caller gave its
    storage up, it is the only epilogue, contiguous, in the inputs' and output's dtype."""
    return (overwrite and residual is not None and bias is None and activation == "none"
            and residual.dtype == dtype == out_dtype and residual.is_contiguous())


def _vectorizable(t: torch.Tensor) -> bool:
    """Whether Triton can vectorize loads of a 2-D operand view: 16-byte aligned base, and the
    contiguous extent and the other stride multiples of 16 elements (its divisibility specialization)."""
    inner = 1 if t.stride(1) == 1 else 0  # the contiguous dimension
    return (t.data_ptr() % 16 == 0 and t.stride(inner) == 1 and t.shape[inner] % 16 == 0
            and t.stride(1 - inner) % 16 == 0)


def matmul(a: torch.Tensor, b: torch.Tensor, *, trans_a: bool = False, trans_b: bool = False,
           bias: torch.Tensor | None = None, activation: str = "none",
           cross: tuple[torch.Tensor, torch.Tensor] | None = None, residual: torch.Tensor | None = None,
           cross_grad: CrossGrad | None = None, out_dtype: torch.dtype | None = None,
           config: GemmConfig | None = None, library: bool = False, warmup: bool = False,
           overwrite_residual: bool = False) -> torch.Tensor:
    """``epilogue(op(a) @ op(b))`` with fp32 accumulation; returns [M, N] in ``out_dtype`` (default a's).

    a: [M, K] ([K, M] with ``trans_a``); b: [K, N] ([N, K] with ``trans_b``); bias: [N];
    cross = (x0, x), both [M, N]: ``out = x0 * (acc + bias) + x``; residual [M, N]: ``out = acc + bias +
    residual``; cross_grad: ``out = grad * x0`` and x0's gradient updated (``CrossGrad``).
    ``config=None`` asks the selector (by GPU time while a CUDA graph is being captured),
    which may run torch.matmul instead, followed by one fused epilogue pass, when it predicts that faster;
    ``library=True`` runs that library path whatever the prediction (benchmarks time both backends).
    ``warmup=True`` compiles the Triton kernel(s) for these arguments without running them.
    ``overwrite_residual=True`` gives ``residual``'s storage to the call, which returns ``residual``
    itself: the library path adds it inside the GEMM (``addmm_``, no pass, and the selector prices it
    so), the Triton kernel writes its output over it (same dtype, contiguous); it, and CrossGrad's d_x0,
    must not share memory with a or b. M, N or K = 0 (an empty batch) runs the library path.
    """
    if a.dtype not in _TORCH_TO_GEMM:  # before out_dtype, which defaults to it
        raise TypeError(f"matmul: input dtype {a.dtype} is not supported; use bfloat16, float16 or float32")
    out_dtype = out_dtype or a.dtype
    if out_dtype not in _TORCH_TO_GEMM:  # an integer or fp64 output was truncated or cast in silence
        raise TypeError(f"matmul: out_dtype {out_dtype} is not supported; use bfloat16, float16 or float32")
    if cross_grad is not None or (overwrite_residual and residual is not None):
        _check_in_place(a, b, residual if overwrite_residual else None, cross_grad)
    if torch.is_grad_enabled():
        _check_no_graph_wanted(a, b, bias, cross, residual)
    if library or config is not None:
        m, n, k = _validate(a, b, trans_a, trans_b, bias, activation, cross, residual, cross_grad)
        dtype = gemm_dtype(a)
        if library and config is not None:
            raise ValueError("matmul: library=True runs torch.matmul; it takes no Triton config")
        if not (library or a.is_cuda or interpreting()):
            raise ValueError("matmul: a Triton config runs on a CUDA / ROCm GPU, or on the CPU with "
                             f"TRITON_INTERPRET=1; the operands are on {a.device}: pass config=None or library=True")
        wide = None if library else _operand_too_wide(a, b)
        if wide is not None:
            raise ValueError(f"matmul: {wide}, more than the Triton kernels' 32-bit offsets reach "
                             f"({MAX_ELEMENTS}); pass library=True or a contiguous copy")
    else:
        m, n, k, dtype, choice = _dispatch(a, b, trans_a, trans_b, bias, activation, cross, residual, cross_grad,
                                           out_dtype, overwrite_residual)
        library, config = choice.backend == "library", choice.config
    a_op = a.t() if trans_a else a  # [M, K] view
    b_op = b.t() if trans_b else b  # [K, N] view
    if library:
        return _library(a_op, b_op, bias, activation, cross, out_dtype, residual, cross_grad, warmup,
                        overwrite_residual)
    out = (residual if _writes_residual(residual, overwrite_residual, out_dtype)
           else torch.empty((m, n), device=a.device, dtype=out_dtype))  # [M, N]
    launch(a_op, b_op, out, bias, cross, activation, config, dtype, m, n, k,
            (a_op.stride(0), a_op.stride(1)), (b_op.stride(0), b_op.stride(1)), warmup, residual, cross_grad)
    return out


def _check_no_graph_wanted(a, b, bias, cross, residual) -> None:
    """``matmul`` records no autograd graph on its Triton path (the library path's torch ops would): an input
    that requires a gradient got none on one path and one on the other, so it is refused on both."""
    for name, t in (("a", a), ("b", b), ("bias", bias), ("residual", residual), *zip(("x0", "x"), cross or ())):
        if t is not None and t.requires_grad:
            raise ValueError(f"matmul: {name} requires a gradient, which matmul does not compute; use "
                             "polyrec.kernels.gemm_layers.linear / cross_linear, or call it under torch.no_grad()")


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """[first, last) byte addresses a tensor's elements span."""
    return t.data_ptr(), t.data_ptr() + element_span(t) * t.element_size()


def _overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether two tensors' memory spans meet (the same storage, overlapping byte ranges)."""
    if x.numel() == 0 or y.numel() == 0 or x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr():
        return False
    (x_first, x_end), (y_first, y_end) = _extent(x), _extent(y)
    return x_first < y_end and y_first < x_end


def _check_in_place(a, b, given_up: torch.Tensor | None, cross_grad: CrossGrad | None) -> None:
    """What ``matmul`` writes in place (a residual given up, CrossGrad's d_x0) must not share memory with
    the operands: the programs of other output tiles still read the rows and columns it replaces."""
    written = [("residual (overwrite_residual)", given_up)] if given_up is not None else []
    if cross_grad is not None:
        written.append(("cross_grad.d_x0", cross_grad.d_x0))
    for name, t in written:
        for operand, op in (("a", a), ("b", b)):
            if _overlaps(t, op):
                raise ValueError(f"matmul: {name} is written in place but shares memory with {operand}; "
                                 "pass a separate tensor")


def _layout(t: torch.Tensor) -> tuple:
    """What the checks and the selection read of a tensor: sizes, strides, dtype, device, 16-byte alignment."""
    return t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % TMA_ALIGN_BYTES


def _dispatch_key(a, b, trans_a: bool, trans_b: bool, bias, activation: str, cross, residual, cross_grad,
                  out_dtype: torch.dtype, overwrite_residual: bool) -> tuple:
    """Everything ``_validate``, ``gemm_dtype`` and the selection inputs of ``_dispatch`` depend on."""
    fused = (*(cross or ()), *((residual,) if residual is not None else ()),
             *((t for _, t in cross_grad.tensors()) if cross_grad is not None else ()))
    bias_grad = cross_grad.bias_grad if cross_grad is not None else None
    return (_layout(a), _layout(b), trans_a, trans_b, activation, out_dtype, overwrite_residual,
            None if bias is None else _layout(bias), cross is not None, residual is not None, cross_grad is not None,
            tuple(_layout(t) for t in fused), None if bias_grad is None else _layout(bias_grad),
            torch.get_float32_matmul_precision(), _selects_as_captured(a))


def _dispatch(a, b, trans_a, trans_b, bias, activation, cross, residual, cross_grad, out_dtype,
              overwrite_residual) -> tuple:
    """(M, N, K, the GEMM dtype, the selector's ``GemmChoice``) of a call with no config: checked and
    selected once per call signature (``gemm_select.DISPATCH``), then one lookup (~4 us against ~26 us
    for the checks and the selection's inputs, on the dev machine's CPU)."""
    key = _dispatch_key(a, b, trans_a, trans_b, bias, activation, cross, residual, cross_grad, out_dtype,
                        overwrite_residual)
    known = DISPATCH.get(key)
    if known is not None:
        return known
    m, n, k = _validate(a, b, trans_a, trans_b, bias, activation, cross, residual, cross_grad)
    dtype = gemm_dtype(a)
    if min(m, n, k) == 0:  # an empty batch or layer: torch's empty (or zero) product, finished by the epilogue
        return m, n, k, dtype, EMPTY_CHOICE
    a_op = a.t() if trans_a else a  # [M, K] view
    b_op = b.t() if trans_b else b  # [K, N] view
    spec = device_spec(a)
    choice = select_gemm(m, n, k, dtype, spec, out_bytes=out_dtype.itemsize,
                         epilogue=epilogue_name(bias is not None, activation, cross is not None, residual is not None,
                                                cross_grad is not None),
                         a_aligned=_vectorizable(a_op), b_aligned=_vectorizable(b_op),
                         b_k_major=b_op.stride(0) == 1 and b_op.stride(1) != 1, a_row_major=a_op.stride(1) == 1,
                         tma=spec.arch == "sm_90" and tma_operands(a_op, b_op, out_dtype, cross, residual, cross_grad),
                         graphed=key[-1],
                         library_adds_residual=_library_adds_residual(residual, overwrite_residual, bias, activation,
                                                                      a.dtype, out_dtype))
    if choice.backend == "triton" and _operand_too_wide(a, b) is not None:  # the library takes any strides
        choice = dataclasses.replace(choice, backend="library")
    if len(DISPATCH) >= DISPATCH_ENTRIES:
        DISPATCH.clear()
    DISPATCH[key] = (m, n, k, dtype, choice)
    return m, n, k, dtype, choice


def _writes_residual(residual: torch.Tensor | None, overwrite: bool, out_dtype: torch.dtype) -> bool:
    """Whether the Triton kernel writes its output over a residual the caller gave up: each output
    element is read (as the residual) and written by the same program, also through split-K's
    reduction pass, so the storage can be shared when dtype and layout match."""
    return overwrite and residual is not None and residual.dtype == out_dtype and residual.is_contiguous()


def reference_matmul(a, b, *, trans_a=False, trans_b=False, bias=None, activation="none", cross=None):
    """float64 reference of ``matmul`` (same arguments), for tests."""
    a64 = (a.t() if trans_a else a).double()
    b64 = (b.t() if trans_b else b).double()
    y = a64 @ b64
    if bias is not None:
        y = y + bias.double()
    if activation == "relu":
        y = torch.relu(y)
    if cross is not None:
        y = cross[0].double() * y + cross[1].double()
    return y
