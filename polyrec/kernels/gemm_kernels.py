"""The Triton kernels of ``polyrec.kernels.gemm`` and their compile jobs.

``gemm_kernel``: C = epilogue(A @ B) with fp32 accumulation, grouped tile order, split-K partials;
``split_k_reduce_kernel``: sums split-K partials (or, with ``SPLIT_K=1``, reads a library GEMM's
product) and applies the epilogue. ``compile_job_for`` / ``reduce_compile_job`` describe them for
``polyrec.hardware.compile.compile_for`` (compile-only checks for sm_90 / gfx942 / gfx950).
"""

from __future__ import annotations

import triton
import triton.language as tl

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec, TritonTarget
from polyrec.kernels.fp8 import E4M3, TRITON_FP8_TYPES, Fp8Format, quantize_store
from polyrec.kernels.gemm_configs import (FP8_ONLY_PASS_NUM_WARPS, PASS_ROW_BLOCKS, REDUCE_BLOCK_M, REDUCE_BLOCK_N,
                                          REDUCE_NUM_WARPS, GemmConfig)

_TRITON_TYPES = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32", "tf32": "*fp32"}
#: Why the pointer kernel's configs may spill on NVIDIA (ptxas's stack frame: 8-1664 B per thread for the
#: selector's H200 configs with Triton 3.6): they were timed on the H200, spills and all, beside every
#: config of the space (148-195 a shape), and the selected ran within 0.977 geomean of the measured best,
#: which for several NT shapes spills itself (BM256 BN128 BK32 w8 s3, 88 B per thread, the bottom MLP's
#: first layer at batch 65536): benchmarks/results/gemm_selection_nvidia-h200_2026-11-30.
NVIDIA_POINTER_SPILLS = "timed with its spill among the whole config space on the H200 " \
    "(gemm_selection_nvidia-h200_2026-11-30)"


@triton.jit
def _cross_grad(y, offs_m, offs_n, mask, x0_ptr, grad_ptr, dx0_ptr, stride_x0m, stride_x0n,
                stride_gm, stride_gn, stride_dx0m, stride_dx0n, DX0_READ: tl.constexpr,
                DX0_PLUS_GRAD: tl.constexpr):
    """The cross layer's backward on y [BM, BN] = v @ Wᵀ + b (fp32): returns g = grad * x0 (0 on masked
    rows and columns), updates d_x0 (+)= grad * y (+ grad) in place."""
    grad = tl.load(grad_ptr + offs_m[:, None] * stride_gm + offs_n[None, :] * stride_gn, mask=mask,
                   other=0.0).to(tl.float32)
    x0 = tl.load(x0_ptr + offs_m[:, None] * stride_x0m + offs_n[None, :] * stride_x0n, mask=mask,
                 other=0.0).to(tl.float32)
    g = grad * x0
    if DX0_PLUS_GRAD:
        y = y + 1.0
    term = grad * y
    dx0_ptrs = dx0_ptr + offs_m[:, None] * stride_dx0m + offs_n[None, :] * stride_dx0n
    if DX0_READ:
        term += tl.load(dx0_ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(dx0_ptrs, term.to(dx0_ptr.dtype.element_ty), mask=mask)
    return g


@triton.jit
def _epilogue(acc, offs_m, offs_n, mask, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, stride_x0m,
              stride_x0n, stride_xrm, stride_xrn, stride_dx0m, stride_dx0n, N, HAS_BIAS: tl.constexpr,
              RELU: tl.constexpr, CROSS: tl.constexpr, RESIDUAL: tl.constexpr, CROSS_GRAD: tl.constexpr,
              DX0_READ: tl.constexpr, DX0_PLUS_GRAD: tl.constexpr):
    """acc [BM, BN] fp32 -> (+ bias[N]) -> ReLU, cross ``x0 * y + x``, residual ``y + x`` or the cross
    backward (``_cross_grad``, x is the gradient there: returns g, whose column sums the caller writes
    as the bias-gradient partial), in fp32."""
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)  # [BN]
        acc = acc + bias[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)  # NaN stays NaN, as torch.relu
    if CROSS:
        x0 = tl.load(x0_ptr + offs_m[:, None] * stride_x0m + offs_n[None, :] * stride_x0n, mask=mask)
        xr = tl.load(xr_ptr + offs_m[:, None] * stride_xrm + offs_n[None, :] * stride_xrn, mask=mask)
        acc = x0.to(tl.float32) * acc + xr.to(tl.float32)
    if RESIDUAL:
        xr = tl.load(xr_ptr + offs_m[:, None] * stride_xrm + offs_n[None, :] * stride_xrn, mask=mask)
        acc = acc + xr.to(tl.float32)
    if CROSS_GRAD:
        acc = _cross_grad(acc, offs_m, offs_n, mask, x0_ptr, xr_ptr, dx0_ptr, stride_x0m,
                          stride_x0n, stride_xrm, stride_xrn, stride_dx0m, stride_dx0n, DX0_READ,
                          DX0_PLUS_GRAD)
    return acc


@triton.jit
def gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, db_ptr,
    M, N, K, K_PER_SPLIT,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cs, stride_cm, stride_cn,
    stride_x0m, stride_x0n, stride_xrm, stride_xrn, stride_dx0m, stride_dx0n,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, RELU: tl.constexpr, CROSS: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, RESIDUAL: tl.constexpr = False, CROSS_GRAD: tl.constexpr = False,
    DX0_READ: tl.constexpr = False, DX0_PLUS_GRAD: tl.constexpr = False, BIAS_GRAD: tl.constexpr = False,
    WIDEN_OPERANDS: tl.constexpr = False,
):
    """C[M, N] (or fp32 partials [SPLIT_K, M, N]) of A[M, K] @ B[K, N]; program (pid, split).

    WIDEN_OPERANDS (interpreter only): Triton 3.6's interpreter multiplies bf16 bit patterns as
    integers (``interpreter.py``, ``create_dot``), so on the CPU the operands are widened to fp32
    first; bf16/fp16 products are exact in fp32, so the result is what the matrix unit computes.
    """
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * tiles_n
    first_m = (pid // in_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_rows
    pid_n = (pid % in_group) // group_rows

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    offs_k = tl.arange(0, BLOCK_K)  # [BK]
    k_start = tl.multiple_of(pid_k * K_PER_SPLIT, BLOCK_K)  # K_PER_SPLIT is a multiple of BLOCK_K
    k_left = tl.minimum(K - k_start, K_PER_SPLIT)  # this split's depth
    # Out-of-range rows / columns wrap (loads stay in bounds without masks); the store masks them.
    # M, N and K must stay specializable (no do_not_specialize): when they are multiples of 16 the
    # compiler knows ``rows % M`` / ``cols % N`` and the masks keep 16-element runs, so loads along
    # a contiguous M or N (the TN / NN layouts) and the epilogue stay vectorized. Unspecialized, a
    # bf16 8192^3 NN product ran at 36 TFLOP/s on the H200 instead of hundreds.
    a_ptrs = a_ptr + (rows % M)[:, None] * stride_am + (k_start + offs_k)[None, :] * stride_ak  # [BM, BK]
    b_ptrs = b_ptr + (k_start + offs_k)[:, None] * stride_bk + (cols % N)[None, :] * stride_bn  # [BK, BN]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(k_left, BLOCK_K)):
        k_mask = offs_k < k_left - step * BLOCK_K
        a = tl.load(a_ptrs, mask=k_mask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_mask[:, None], other=0.0)
        if WIDEN_OPERANDS:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    mask = (rows[:, None] < M) & (cols[None, :] < N)
    c_ptrs = c_ptr + pid_k * stride_cs + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    if SPLIT_K == 1:
        acc = _epilogue(acc, rows, cols, mask, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, stride_x0m,
                        stride_x0n, stride_xrm, stride_xrn, stride_dx0m, stride_dx0n, N, HAS_BIAS, RELU, CROSS,
                        RESIDUAL, CROSS_GRAD, DX0_READ, DX0_PLUS_GRAD)
        if CROSS_GRAD and BIAS_GRAD:  # this row block's column sums of g
            tl.store(db_ptr + pid_m * N + cols, tl.sum(acc, axis=0), mask=cols < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def split_k_reduce_kernel(
    p_ptr, c_ptr, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, db_ptr, q_ptr, qt_ptr, q_scale_ptr, q_amax_ptr,
    M, N,
    stride_ps, stride_pm, stride_pn, stride_cm, stride_cn, stride_x0m, stride_x0n, stride_xrm, stride_xrn,
    stride_dx0m, stride_dx0n,
    SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_BIAS: tl.constexpr, RELU: tl.constexpr, CROSS: tl.constexpr, RESIDUAL: tl.constexpr = False,
    CROSS_GRAD: tl.constexpr = False, DX0_READ: tl.constexpr = False, DX0_PLUS_GRAD: tl.constexpr = False,
    BIAS_GRAD: tl.constexpr = False, ROW_BLOCKS: tl.constexpr = 1, FP8_OUT: tl.constexpr = False,
    FP8_MAX: tl.constexpr = 448.0, FP8_ROUND_IN_FP32: tl.constexpr = False, FP8_MANTISSA_BITS: tl.constexpr = 3,
    FP8_MIN_EXPONENT: tl.constexpr = -6, STORE_C: tl.constexpr = True,
):
    """C = epilogue(sum over s of partials[s]) for ROW_BLOCKS blocks of [BLOCK_M, BLOCK_N], one after
    another down the rows: the split-K reduction (fp32 partials), and with SPLIT_K=1 the epilogue pass
    over a library GEMM's product (any float dtype, summed in fp32; C may be the product itself: each
    element is read, then written, by the same program). With CROSS_GRAD and BIAS_GRAD the column sums
    of g over the program's rows go to partial row ``program_id(0)`` of db. With FP8_OUT, C as stored
    (rounded to its dtype) is also written as fp8 (``polyrec.kernels.fp8.quantize_store``: q [M, N] and
    qt [N, M] at scale q_scale) and its absolute maximum goes to q_amax by one atomic max per program; without
    STORE_C only those copies are written (c_ptr gives the dtype C is rounded to, nothing is stored there)."""
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    g_sum = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # |C|'s running maximum per tile element, reduced once at the end: a column reduction per row block
    # (across warps, through shared memory) made the 8-warp CrossGrad pass 1.02 ms instead of 0.74 on the
    # H200 (benchmarks/results/fp8_pass_tiles_2026-12-04/)
    amax = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for block in range(ROW_BLOCKS):
        rows = (tl.program_id(0) * ROW_BLOCKS + block) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        ptrs = p_ptr + rows[:, None] * stride_pm + cols[None, :] * stride_pn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for s in range(SPLIT_K):
            acc += tl.load(ptrs + s * stride_ps, mask=mask, other=0.0)
        acc = _epilogue(acc, rows, cols, mask, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, stride_x0m, stride_x0n,
                        stride_xrm, stride_xrn, stride_dx0m, stride_dx0n, N, HAS_BIAS, RELU, CROSS, RESIDUAL,
                        CROSS_GRAD, DX0_READ, DX0_PLUS_GRAD)
        if CROSS_GRAD and BIAS_GRAD:
            g_sum += acc
        c = acc.to(c_ptr.dtype.element_ty)
        if STORE_C:
            tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, c, mask=mask)
        if FP8_OUT:
            stored = tl.where(mask, c.to(tl.float32), 0.0)
            amax = tl.maximum(amax, tl.abs(stored))
            quantize_store(stored, rows.to(tl.int64), cols, mask, q_ptr, qt_ptr, M, N, tl.load(q_scale_ptr), True,
                           True, FP8_MAX, FP8_ROUND_IN_FP32, FP8_MANTISSA_BITS, FP8_MIN_EXPONENT)
    if CROSS_GRAD and BIAS_GRAD:
        tl.store(db_ptr + tl.program_id(0) * N + cols, tl.sum(g_sum, axis=0), mask=cols < N)
    if FP8_OUT:
        tl.atomic_max(q_amax_ptr, tl.max(tl.max(amax, axis=1), axis=0))


def input_precision(dtype: str, target: TritonTarget | None) -> str:
    """tl.dot's input_precision: "tf32" for a tf32 GEMM where the target has a TF32 dot (every CUDA target,
    gfx942's XF32: ``TritonTarget.tf32_dot``), else IEEE fp32 (gfx950; the interpreter, target None)."""
    return "tf32" if dtype == "tf32" and target is not None and target.tf32_dot else "ieee"


def compile_job_for(config: GemmConfig, dtype: str, spec: DeviceSpec, *, epilogue: str = "cross",
                    trans_b: bool = True) -> CompileJob:
    """The GEMM kernel with one config, for ``polyrec.hardware.compile.compile_for`` (A row-major, B
    given as [N, K] row-major with ``trans_b``, else [K, N]; ``epilogue`` "none", "bias_relu", "cross",
    "residual" or "cross_grad" (its largest form: d_x0 read and the bias-gradient partials written)).
    A persistent TMA config compiles ``polyrec.kernels.gemm_tma.gemm_tma_kernel`` (sm_90; epilogues
    "none", "bias_relu" and "cross")."""
    if config.persistent_tma:
        return _tma_compile_job(config, dtype, epilogue, trans_b)
    ptr = _TRITON_TYPES[dtype]
    fused = config.split_k == 1
    ints = ["M", "N", "K", "K_PER_SPLIT", "stride_am", "stride_bk", "stride_bn", "stride_cs", "stride_cm",
            "stride_x0m", "stride_xrm", "stride_dx0m"]
    unit = {"stride_ak": 1, "stride_cn": 1, "stride_x0n": 1, "stride_xrn": 1, "stride_dx0n": 1}  # row-major
    unit["stride_bk" if trans_b else "stride_bn"] = 1
    constexprs = unit | {
        "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
        "GROUP_M": config.group_m, "SPLIT_K": config.split_k,
        "INPUT_PRECISION": input_precision(dtype, spec.triton),
        "WIDEN_OPERANDS": False} | _epilogue_flags(epilogue if fused else "none")
    signature = {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": ptr if fused else "*fp32", "bias_ptr": ptr,
                 "x0_ptr": ptr, "xr_ptr": ptr, "dx0_ptr": ptr, "db_ptr": "*fp32"}
    signature |= {name: "i32" for name in ints if name not in unit}
    signature |= {name: "constexpr" for name in constexprs}
    order = list(gemm_kernel.arg_names)
    signature = {name: signature[name] for name in order}
    options = config.launch_options("hip")
    del options["num_warps"], options["num_stages"]
    # As launched on the DLRM shapes: 16-byte aligned pointers, M, N, K and the strides multiples of 16.
    aligned = tuple(n for n, kind in signature.items()
                    if kind.startswith("*") or n.startswith("stride") or n in ("M", "N", "K"))
    return CompileJob(label=f"gemm {dtype} {config.label} {epilogue}", kernel=gemm_kernel, signature=signature,
                      constexprs=constexprs, num_warps=config.num_warps, num_stages=config.num_stages,
                      options=options, divisible_by_16=tuple(n for n in aligned if signature[n] != "constexpr"),
                      known_spill=NVIDIA_POINTER_SPILLS if spec.vendor == "nvidia" else "")


def _tma_compile_job(config: GemmConfig, dtype: str, epilogue: str, trans_b: bool) -> CompileJob:
    from polyrec.kernels.gemm_tma import TmaGemmConfig, compile_job

    tma_config = TmaGemmConfig(block_m=config.block_m, block_n=config.block_n, block_k=config.block_k,
                               group_m=config.group_m, num_stages=config.num_stages, num_warps=config.num_warps,
                               ctas_per_sm=config.ctas_per_sm, epilogue_subtile=config.epilogue_subtile)
    return compile_job(tma_config, epilogue=epilogue, b_k_major=trans_b, dtype=dtype)


def _epilogue_flags(epilogue: str) -> dict[str, bool]:
    """The kernels' epilogue constexprs for a compile job's epilogue name (see ``compile_job_for``)."""
    return {"HAS_BIAS": epilogue in ("bias_relu", "cross", "cross_grad"), "RELU": epilogue == "bias_relu",
            "CROSS": epilogue == "cross", "RESIDUAL": epilogue == "residual", "CROSS_GRAD": epilogue == "cross_grad",
            "DX0_READ": epilogue == "cross_grad", "DX0_PLUS_GRAD": False, "BIAS_GRAD": epilogue == "cross_grad"}


def reduce_compile_job(dtype: str, split_k: int = 4, epilogue: str = "cross",
                       fp8: Fp8Format | None = None, copies_only: bool = False) -> CompileJob:
    """The split-K reduction kernel with an epilogue (``compile_job_for``'s names); ``split_k`` 1 is
    the epilogue pass after a library GEMM (it reads the product in ``dtype``). ``fp8``: the pass also
    writes fp8 copies of its output in that format (the fp8 dense layers' fused casts); ``copies_only``:
    it writes only those copies (``epilogue_pass``'s ``fp8_only``). Specialized as
    ``gemm_launch.reduce_pass`` launches it on row-major tensors: the column strides 1 (Triton's JIT makes an
    int argument of 1 a constant), the other integers multiples of 16 and the pointers 16-byte aligned. Compiled with the column strides as
    arguments, the passes would vectorize along the rows and take 164-255 registers on sm_90 (CrossGrad
    spilling 792 B) against the 40-166 they launch with."""
    ptr = _TRITON_TYPES[dtype]
    unit = ("stride_pn", "stride_cn", "stride_x0n", "stride_xrn", "stride_dx0n")
    names = ["M", "N", "stride_ps", "stride_pm", "stride_cm", "stride_x0m", "stride_xrm", "stride_dx0m"]
    signature = {"p_ptr": "*fp32" if split_k > 1 else ptr, "c_ptr": ptr, "bias_ptr": ptr, "x0_ptr": ptr, "xr_ptr": ptr, "dx0_ptr": ptr,
                 "db_ptr": "*fp32", "q_ptr": ptr, "qt_ptr": ptr, "q_scale_ptr": "*fp32", "q_amax_ptr": "*fp32"}
    signature |= {n: "i32" for n in names}
    divisible = tuple(signature)
    per_program = PASS_ROW_BLOCKS if epilogue == "cross_grad" and split_k == 1 else 1  # as gemm_epilogue.apply_epilogue
    constexprs = {n: 1 for n in unit} | {"SPLIT_K": split_k, "BLOCK_M": REDUCE_BLOCK_M, "BLOCK_N": REDUCE_BLOCK_N,
                                         "ROW_BLOCKS": per_program} | _epilogue_flags(epilogue)
    fmt = fp8 or E4M3  # the kernel's defaults when no copies are written
    constexprs |= {"FP8_OUT": fp8 is not None, "FP8_MAX": fmt.max_value, "FP8_ROUND_IN_FP32": False,
                   "FP8_MANTISSA_BITS": fmt.mantissa_bits, "FP8_MIN_EXPONENT": fmt.min_exponent,
                   "STORE_C": not copies_only}
    if copies_only and fp8 is None:
        raise ValueError("reduce_compile_job: copies_only needs an fp8 format")
    if fp8 is not None:
        signature["q_ptr"] = signature["qt_ptr"] = "*" + TRITON_FP8_TYPES[fp8]
    signature |= {k: "constexpr" for k in constexprs}
    signature = {name: signature[name] for name in split_k_reduce_kernel.arg_names}
    suffix = ("" if epilogue == "cross" else f" {epilogue}") + (f" fp8 {TRITON_FP8_TYPES[fp8]}" if fp8 else "") \
        + (" copies only" if copies_only else "")
    kind = "split-k reduce" if split_k > 1 else "library epilogue pass"
    return CompileJob(label=f"gemm {kind} {dtype}{suffix}", kernel=split_k_reduce_kernel, signature=signature,
                      constexprs=constexprs, num_warps=FP8_ONLY_PASS_NUM_WARPS if copies_only else REDUCE_NUM_WARPS,
                      num_stages=1, divisible_by_16=divisible)
