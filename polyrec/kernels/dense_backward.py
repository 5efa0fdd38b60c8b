"""A dense layer's backward epilogue in one pass: the ReLU mask on the output gradient and the bias
gradient's column sums.

``relu_bias_backward(grad, y, relu=..., need_bias=...)`` reads grad [B, N] (and, with ``relu``, the
layer's output y [B, N]) once, writes ``grad where y > 0 else 0`` in grad's dtype and, with
``need_bias``, fp32 column sums of that masked gradient per block of rows; one small ``torch.sum``
over the row blocks gives the bias gradient [N] (fp32). Unfused, this is ``threshold_backward``
(read grad and y, write) and a column-sum reduction that reads the masked gradient again: the fused
pass saves that second read (one [B, N] tensor of the four). With ``fp8`` (the fp8 dense layers,
``polyrec.kernels.fp8_dense``) the pass writes the masked gradient's fp8 copies instead of the masked
gradient itself, which only the fp8 GEMMs read: no bf16 write and no separate cast's read of it.

The launch configuration comes from ``select_config`` (a rule from first principles, nothing timed).
Where Triton cannot run (CPU tensors without ``TRITON_INTERPRET``) the same torch ops as the unfused
path compute it, with the same results.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import triton
import triton.language as tl

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.kernels.fp8 import E5M2, TRITON_FP8_TYPES, Fp8Format, Fp8Out, eager_fused_out, quantize_store, spec_formats
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.interpreter import interpreting

_TRITON_TYPES = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32"}
#: Elements one program loads per tensor per loop iteration: with 4 warps of 32 lanes, 32 elements
#: per lane = four 16-byte loads of bf16 (eight of fp32), enough independent loads in flight per lane
#: for a streaming pass without crowding the registers (the fp32 column-sum accumulator is as big).
TILE_ELEMENTS = 4096
#: Column widths of the tile: 128 for the MLP layers (N = 128..1024 in MLPerf DLRM-DCNv2: a
#: warp's 16 lanes x 8 bf16 cover a 256-byte row segment, coalesced); 32 for narrow layers (the top
#: MLP's N = 1 output), where a 128-wide tile would leave most lanes masked.
BLOCK_NS = (32, 128)
#: Tile (BLOCK_M, BLOCK_N) of the pass writing the masked gradient's fp8 copies (``fp8``): 64 x 64, fastest
#: of six tiles at N = 1024, 512 and 256 (0.164 / 0.090 / 0.068 ms at batch 65536 against 0.208 / 0.114 /
#: 0.077 at the bf16 pass's 32 x 128; H200, benchmarks/results/fp8_copies_2026-12-03/relu_fp8_probe_*).
FP8_TILE = (64, 64)
#: Threads per program in warps (4: 128 lanes on NVIDIA, 256 on AMD's wave64).
NUM_WARPS = 4
#: Tile iterations one program walks before writing its partial sums: 8 at most (partials then add
#: 4 B per 8 x BLOCK_M rows of a column, under 1% of the pass's bytes at BLOCK_M = 32 bf16).
MAX_ITERATIONS = 8
#: Programs per SM / CU the row split aims for: a streaming pass needs bytes in flight (Little's law:
#: 4.8 TB/s x ~0.6 us HBM latency ~ 2.9 MB, ~22 KB per H200 SM), one program has one tile per tensor
#: (8-16 KB bf16) in flight, and 4 equal programs per SM also run as one balanced wave (an SM holds
#: 16 four-warp programs).
PROGRAMS_PER_CU = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class DenseBackwardConfig:
    """Launch configuration of ``relu_bias_backward_kernel``."""

    block_m: int  # rows of the tile loaded per loop iteration (power of two)
    block_n: int  # columns per program (power of two)
    rows_per_program: int  # rows one program walks (a multiple of block_m); its partial sums cover them
    num_warps: int = NUM_WARPS

    @property
    def label(self) -> str:
        return f"BM{self.block_m} BN{self.block_n} w{self.num_warps}"


@triton.jit
def relu_bias_backward_kernel(
    grad_ptr, y_ptr, out_ptr, partial_ptr, q_ptr, qt_ptr, q_scale_ptr, q_amax_ptr,
    M, N, ROWS_PER_PROGRAM,
    stride_gm, stride_gn, stride_ym, stride_yn, stride_om, stride_on,
    RELU: tl.constexpr, BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    FP8_OUT: tl.constexpr = False, FP8_MAX: tl.constexpr = 57344.0, FP8_ROUND_IN_FP32: tl.constexpr = False,
    FP8_MANTISSA_BITS: tl.constexpr = 2, FP8_MIN_EXPONENT: tl.constexpr = -14,
):
    """One program: rows [pid_m * ROWS_PER_PROGRAM, + ROWS_PER_PROGRAM) x BLOCK_N columns. With RELU
    it writes out = (y <= 0 ? 0 : grad) (aten's threshold_backward, NaN y passes grad); with BIAS it
    writes the fp32 column sums of the (masked) gradient over its rows to partials[pid_m, :]. With
    FP8_OUT the masked gradient goes, instead of to out, to fp8 copies q [M, N] and qt [N, M] at scale
    q_scale (``polyrec.kernels.fp8.quantize_store``), its absolute maximum to q_amax by one atomic max."""
    pid_m = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    amax = tl.zeros((BLOCK_N,), dtype=tl.float32)  # column maxima of |masked gradient|
    for start in range(pid_m * ROWS_PER_PROGRAM, (pid_m + 1) * ROWS_PER_PROGRAM, BLOCK_M):
        rows = (start + tl.arange(0, BLOCK_M)).to(tl.int64)  # [BM], 64-bit offsets
        mask = (rows < M)[:, None] & col_ok[None, :]
        g = tl.load(grad_ptr + rows[:, None] * stride_gm + cols[None, :] * stride_gn, mask=mask, other=0.0)
        if RELU:
            y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, mask=mask, other=0.0)
            g = tl.where(y <= 0, tl.zeros_like(g), g)
        if FP8_OUT:
            masked = g.to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(masked), axis=0))
            quantize_store(masked, rows, cols, mask, q_ptr, qt_ptr, M, N, tl.load(q_scale_ptr), True, True,
                           FP8_MAX, FP8_ROUND_IN_FP32, FP8_MANTISSA_BITS, FP8_MIN_EXPONENT)
        elif RELU:
            tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, g, mask=mask)
        if BIAS:
            acc += g.to(tl.float32)
    if BIAS:
        tl.store(partial_ptr + pid_m * N + cols, tl.sum(acc, axis=0), mask=col_ok)
    if FP8_OUT:
        tl.atomic_max(q_amax_ptr, tl.max(amax, axis=0))


@lru_cache(maxsize=1024)
def select_config(m: int, n: int, compute_units: int, fp8: bool = False) -> DenseBackwardConfig:
    """The tile for N columns (``FP8_TILE`` for a pass writing fp8 copies), and rows per program: the most
    iterations (up to MAX_ITERATIONS, fewest partials) that still give PROGRAMS_PER_CU programs per SM / CU,
    else one iteration."""
    block_n = BLOCK_NS[0] if n <= BLOCK_NS[0] else BLOCK_NS[-1]
    block_m = TILE_ELEMENTS // block_n
    if fp8:
        block_m, block_n = FP8_TILE
    iterations = MAX_ITERATIONS
    while iterations > 1 and ceil_div(m, block_m * iterations) * ceil_div(n, block_n) < \
            PROGRAMS_PER_CU * compute_units:
        iterations //= 2
    return DenseBackwardConfig(block_m=block_m, block_n=block_n, rows_per_program=block_m * iterations)


@lru_cache(maxsize=None)
def _compute_units(device: torch.device) -> int:
    """SMs / CUs of a CUDA or ROCm device; 1 for the interpreter on the CPU."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _validate(grad: torch.Tensor, y: torch.Tensor | None, relu: bool) -> None:
    if grad.dim() != 2:
        raise ValueError(f"relu_bias_backward: grad must be 2-D [B, N], got shape {tuple(grad.shape)}")
    if grad.dtype not in _TRITON_TYPES:
        raise TypeError(f"relu_bias_backward: grad dtype {grad.dtype} is not supported; use bfloat16, "
                        "float16 or float32")
    if not relu:
        return
    if y is None:
        raise ValueError("relu_bias_backward: relu=True needs the layer output y")
    if y.shape != grad.shape or y.dtype != grad.dtype or y.device != grad.device:
        raise ValueError(f"relu_bias_backward: y must match grad (shape {tuple(grad.shape)}, {grad.dtype}, "
                         f"{grad.device}), got {tuple(y.shape)}, {y.dtype}, {y.device}")


def relu_bias_backward(grad: torch.Tensor, y: torch.Tensor | None, *, relu: bool, need_bias: bool,
                       config: DenseBackwardConfig | None = None,
                       fp8: Fp8Out | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(masked gradient [B, N] in grad's dtype, bias gradient [N] fp32 or None) of ``act(x Wᵀ + b)``.

    grad [B, N]: the gradient of the layer output; y [B, N]: the layer output (read with ``relu``
    only; may be None without it). ``relu``: mask grad where y <= 0 (as ``threshold_backward(grad, y,
    0)``); without it the masked gradient is grad itself (no copy). ``need_bias``: also return the
    column sums of the masked gradient, summed in fp32. ``config``: None selects one (``select_config``).
    ``fp8``: write the masked gradient's fp8 copies there (``polyrec.kernels.fp8.fused_out``) and not
    the masked gradient itself (returned as None), as ``cast_fp8`` of it would.
    """
    _validate(grad, y, relu)
    if fp8 is not None and (fp8.q.shape != grad.shape or fp8.qt.shape != grad.shape[::-1]):
        raise ValueError(f"relu_bias_backward: fp8 copies must be {list(grad.shape)} and {list(grad.shape[::-1])}, "
                         f"got {list(fp8.q.shape)} and {list(fp8.qt.shape)}")
    if not relu and not need_bias and fp8 is None:
        return grad, None
    if not (grad.is_cuda or interpreting()):
        masked = torch.ops.aten.threshold_backward(grad, y, 0) if relu else grad
        if fp8 is not None:
            eager_fused_out(masked, fp8)
        return (None if fp8 is not None else masked), masked.sum(0, dtype=torch.float32) if need_bias else None
    m, n = grad.shape
    if m == 0 or n == 0:
        return (None if fp8 is not None else torch.empty_like(grad) if relu else grad), \
            (grad.new_zeros(n, dtype=torch.float32) if need_bias else None)
    config = config or select_config(m, n, _compute_units(grad.device), fp8 is not None)
    out = torch.empty(m, n, dtype=grad.dtype, device=grad.device) if relu and fp8 is None else grad
    row_blocks = ceil_div(m, config.rows_per_program)
    partials = torch.empty(row_blocks, n, dtype=torch.float32, device=grad.device) if need_bias else out
    y_t = y if relu else grad  # never read without RELU
    grid = (row_blocks, ceil_div(n, config.block_n))
    relu_bias_backward_kernel[grid](
        grad, y_t, out, partials, *(_fp8_pointers(fp8) if fp8 is not None else (out,) * 4), m, n,
        config.rows_per_program, grad.stride(0), grad.stride(1), y_t.stride(0), y_t.stride(1), out.stride(0),
        out.stride(1), RELU=relu, BIAS=need_bias, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        num_warps=config.num_warps, **(_fp8_flags(fp8.fmt, interpreting()) if fp8 is not None else {}),
    )
    return (None if fp8 is not None else out), partials.sum(0) if need_bias else None


def rows_apart(grad: torch.Tensor) -> torch.Tensor:
    """A layer's output gradient as its backward takes it: as given where each row is contiguous (a column
    slice of a wider gradient, such as DLRM-DCNv2's bottom MLP output's part of x0's: this pass, ``cast_fp8``
    and the GEMMs read any row stride), else a contiguous copy. The bottom MLP's [65536, 128] slice cost a
    23 us copy a step (H200 trace, benchmarks/results/cross_output_copies_2026-12-04/)."""
    return grad if grad.dim() == 2 and grad.stride(1) == 1 and grad.stride(0) >= grad.shape[1] else grad.contiguous()


def _fp8_pointers(fp8: Fp8Out) -> tuple[torch.Tensor, ...]:
    return fp8.q, fp8.qt, fp8.scale, fp8.recorded


def _fp8_flags(fmt: Fp8Format, round_in_fp32: bool) -> dict:
    """The kernel's FP8_* constexprs for copies in ``fmt``."""
    return {"FP8_OUT": True, "FP8_MAX": fmt.max_value, "FP8_ROUND_IN_FP32": round_in_fp32,
            "FP8_MANTISSA_BITS": fmt.mantissa_bits, "FP8_MIN_EXPONENT": fmt.min_exponent}


def compile_job(dtype: torch.dtype, config: DenseBackwardConfig, *, relu: bool, need_bias: bool,
                fp8: Fp8Format | None = None) -> CompileJob:
    """The kernel with one tile and flags, launched as on the MLPerf shapes (row-major, 16-byte aligned
    pointers, N and the row strides multiples of 16); ``fp8``: writing the fp8 copies in that format."""
    ptr = _TRITON_TYPES[dtype]
    q = "*" + TRITON_FP8_TYPES[fp8] if fp8 is not None else ptr
    unit = {"stride_gn": 1, "stride_yn": 1, "stride_on": 1}
    constexprs = unit | {"RELU": relu, "BIAS": need_bias, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n}
    constexprs |= _fp8_flags(fp8 or E5M2, round_in_fp32=False) | {"FP8_OUT": fp8 is not None}  # E5M2: unused
    signature = {"grad_ptr": ptr, "y_ptr": ptr, "out_ptr": ptr, "partial_ptr": "*fp32", "q_ptr": q, "qt_ptr": q,
                 "q_scale_ptr": "*fp32", "q_amax_ptr": "*fp32", "M": "i32", "N": "i32", "ROWS_PER_PROGRAM": "i32",
                 "stride_gm": "i32", "stride_ym": "i32", "stride_om": "i32"}
    signature |= {name: "constexpr" for name in constexprs}
    signature = {name: signature[name] for name in relu_bias_backward_kernel.arg_names}
    aligned = tuple(name for name, kind in signature.items() if kind.startswith("*") or name.startswith("stride")
                    or name in ("N", "ROWS_PER_PROGRAM")  # rows per program: a multiple of BLOCK_M >= 32
                    or (name == "M" and fp8 is not None))  # qt's row stride: fp8 layers' batch is a multiple of 16
    flags = ("relu " if relu else "") + ("bias" if need_bias else "") + (f" fp8 {q[1:]}" if fp8 is not None else "")
    return CompileJob(label=f"relu_bias_backward {ptr[1:]} {config.label} {flags.strip()}",
                      kernel=relu_bias_backward_kernel, signature=signature, constexprs=constexprs,
                      num_warps=config.num_warps, num_stages=1, divisible_by_16=aligned)


def compile_jobs(spec: DeviceSpec) -> list[CompileJob]:
    """Every tile ``select_config`` can choose, in bf16 (the autocast dense layers) and fp32, with each
    flag combination the dense backward uses, and the bf16 pass writing the gradient's fp8 copies in
    ``spec``'s gradient format (the fp8 dense layers). The tiles are the same on every device (``spec``
    only sets the row split, a runtime argument)."""
    jobs = []
    for dtype in (torch.bfloat16, torch.float32):
        for block_n in BLOCK_NS:
            config = DenseBackwardConfig(block_m=TILE_ELEMENTS // block_n, block_n=block_n,
                                         rows_per_program=TILE_ELEMENTS // block_n)
            for relu, need_bias in ((True, True), (True, False), (False, True)):
                jobs.append(compile_job(dtype, config, relu=relu, need_bias=need_bias))
    config = DenseBackwardConfig(block_m=FP8_TILE[0], block_n=FP8_TILE[1], rows_per_program=FP8_TILE[0])
    gradient_format = spec_formats(spec)[1]
    return jobs + [compile_job(torch.bfloat16, config, relu=relu, need_bias=True, fp8=gradient_format)
                   for relu in (True, False)]
