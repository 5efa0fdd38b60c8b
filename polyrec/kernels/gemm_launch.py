"""Launching the GEMM kernels: the Triton kernel (``gemm_kernels.gemm_kernel``, split-K partials summed by
``split_k_reduce_kernel``, which also applies an epilogue to a library product), and the persistent TMA kernel
(``gemm_tma``) where its operands allow; the epilogue operands and flags both take. ``polyrec.kernels.gemm``
validates, selects and calls these; ``polyrec.kernels.gemm_epilogue`` runs the epilogue pass alone.
"""

from __future__ import annotations

import torch

from polyrec.hardware.types import DeviceSpec
from polyrec.kernels.fp8 import Fp8Out
from polyrec.kernels.gemm_configs import REDUCE_BLOCK_M, REDUCE_BLOCK_N, REDUCE_NUM_WARPS, GemmConfig
from polyrec.kernels.gemm_kernels import gemm_kernel, input_precision, split_k_reduce_kernel
from polyrec.kernels.gemm_tma import TMA_ALIGN_BYTES, TmaGemmConfig, gemm_tma
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.interpreter import interpreting


def call(kernel, grid, warmup: bool):
    """Launch on ``grid``, or with ``warmup`` only compile (in parallel under AsyncCompileMode)."""
    return (lambda *args, **kwargs: kernel.warmup(*args, grid=grid, **kwargs)) if warmup else kernel[grid]


def epilogue_operands(out, bias, cross, residual, cross_grad, activation, row_blocks: int):
    """(tensors bias, x0, x, d_x0, column-sum partials [row_blocks, N] fp32 or None; their strides;
    the kernel's epilogue flags). Unused pointers get ``out`` (never read: their flag is off)."""
    bias_t = bias if bias is not None else out
    x0 = xr = dx0 = out
    db = None
    if cross is not None:
        x0, xr = cross
    if residual is not None:
        xr = residual
    if cross_grad is not None:
        x0, xr, dx0 = cross_grad.x0, cross_grad.grad, cross_grad.d_x0
        if cross_grad.bias_grad is not None:
            db = torch.empty((row_blocks, out.shape[1]), device=out.device, dtype=torch.float32)  # [R, N]
    strides = (x0.stride(0), x0.stride(1), xr.stride(0), xr.stride(1), dx0.stride(0), dx0.stride(1))
    flags = {"HAS_BIAS": bias is not None, "RELU": activation == "relu", "CROSS": cross is not None,
             "RESIDUAL": residual is not None, "CROSS_GRAD": cross_grad is not None,
             "DX0_READ": cross_grad is not None and cross_grad.accumulate,
             "DX0_PLUS_GRAD": cross_grad is not None and cross_grad.plus_grad, "BIAS_GRAD": db is not None}
    return (bias_t, x0, xr, dx0, db if db is not None else out), strides, flags, db


def _tma_view(t: torch.Tensor) -> bool:
    """Whether a 2-D tensor can back a TMA descriptor as it is: row-major, 16-byte aligned base and rows."""
    return (t.stride(1) == 1 and (t.stride(0) * t.element_size()) % TMA_ALIGN_BYTES == 0
            and t.data_ptr() % TMA_ALIGN_BYTES == 0)


def tma_operands(a, b, out_dtype, cross, residual, cross_grad) -> bool:
    """Whether ``gemm_tma`` takes these operands: a [M, K] row-major, b [K, N] row-major or its
    transpose ([N, K] row-major), x0 / x row-major, all 2-byte in a's dtype, the output too, rows
    16-byte aligned; no residual / CrossGrad epilogue. (On a GPU the selector only offers TMA configs
    on sm_90.)"""
    if a.dtype not in (torch.bfloat16, torch.float16) or out_dtype != a.dtype or residual is not None:
        return False
    if cross_grad is not None or (a.shape[1] * a.element_size()) % TMA_ALIGN_BYTES:  # K
        return False
    if (b.shape[1] * b.element_size()) % TMA_ALIGN_BYTES:  # N: the output's rows
        return False
    tensors = [a, b if b.stride(1) == 1 else b.t(), *(cross or ())]
    return all(t.dtype == a.dtype and _tma_view(t) for t in tensors)


def _launch_tma(a, b, out, bias, cross, activation, config: GemmConfig, warmup: bool) -> None:
    """``gemm_tma`` with a TMA config of the selector's space: a [M, K], b [K, N] view (row-major, or
    the transpose of a row-major [N, K]: the forward ``x @ Wᵀ``)."""
    b_k_major = b.stride(1) != 1
    tma_config = TmaGemmConfig(block_m=config.block_m, block_n=config.block_n, block_k=config.block_k,
                               group_m=config.group_m, num_stages=config.num_stages, num_warps=config.num_warps,
                               ctas_per_sm=config.ctas_per_sm, epilogue_subtile=config.epilogue_subtile)
    gemm_tma(a, b.t() if b_k_major else b, b_k_major=b_k_major, config=tma_config, bias=bias, activation=activation,
             cross=cross, out=out, warmup=warmup)


def launch(a, b, out, bias, cross, activation, config: GemmConfig, dtype: str, m, n, k, sa, sb,
            warmup: bool = False, residual=None, cross_grad=None) -> None:
    if config.persistent_tma:
        if residual is not None or cross_grad is not None:
            raise ValueError(f"matmul: the TMA config {config.label} has no residual / cross_grad epilogue")
        _launch_tma(a, b, out, bias, cross, activation, config, warmup)
        return
    backend = "hip" if torch.version.hip else "cuda"
    options = config.launch_options(backend) if a.is_cuda else {"WIDEN_OPERANDS": True}
    precision = input_precision(dtype, device_spec(a).triton if a.is_cuda else None)
    row_block = config.block_m if config.split_k == 1 else REDUCE_BLOCK_M
    ptrs, strides, flags, db = epilogue_operands(out, bias, cross, residual, cross_grad, activation,
                                                  ceil_div(m, row_block))
    tiles = ceil_div(m, config.block_m) * ceil_div(n, config.block_n)
    k_per_split = ceil_div(ceil_div(k, config.split_k), config.block_k) * config.block_k
    tile_args = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                 "GROUP_M": config.group_m, "INPUT_PRECISION": precision}
    if config.split_k == 1:
        call(gemm_kernel, (tiles, 1), warmup)(
            a, b, out, *ptrs, m, n, k, k_per_split, *sa, *sb, 0, out.stride(0), out.stride(1), *strides,
            SPLIT_K=1, **tile_args, **flags, **options)
    else:
        partials = torch.empty((config.split_k, m, n), device=a.device, dtype=torch.float32)  # [S, M, N]
        call(gemm_kernel, (tiles, config.split_k), warmup)(
            a, b, partials, *ptrs, m, n, k, k_per_split, *sa, *sb, *partials.stride(), *strides,
            SPLIT_K=config.split_k, HAS_BIAS=False, RELU=False, CROSS=False, **tile_args, **options)
        reduce_pass(partials, out, ptrs, strides, flags, config.split_k, partials.stride(), warmup)
    if db is not None and not warmup:
        torch.sum(db, 0, out=cross_grad.bias_grad)


def reduce_pass(partials, out, ptrs, strides, flags, split_k: int, partial_strides, warmup: bool,
            per_program: int = 1, fp8: Fp8Out | None = None, num_warps: int = REDUCE_NUM_WARPS) -> None:
    """``split_k_reduce_kernel`` over out [M, N]: partials [S, M, N] (``partial_strides``), or with
    ``split_k`` 1 a library product [M, N] (its strides after a leading 0); each program, of ``num_warps``
    warps, walks ``per_program`` blocks of REDUCE_BLOCK_M x REDUCE_BLOCK_N; ``fp8``: fp8 copies of out
    written too."""
    m, n = out.shape
    grid = (ceil_div(m, REDUCE_BLOCK_M * per_program), ceil_div(n, REDUCE_BLOCK_N))
    fp8_ptrs = (fp8.q, fp8.qt, fp8.scale, fp8.recorded) if fp8 is not None else (out,) * 4  # never read without
    fp8_flags = {} if fp8 is None else {
        "FP8_OUT": True, "FP8_MAX": fp8.fmt.max_value, "FP8_ROUND_IN_FP32": interpreting(),
        "FP8_MANTISSA_BITS": fp8.fmt.mantissa_bits, "FP8_MIN_EXPONENT": fp8.fmt.min_exponent}
    call(split_k_reduce_kernel, grid, warmup)(
        partials, out, *ptrs, *fp8_ptrs, m, n, *partial_strides, out.stride(0), out.stride(1), *strides,
        SPLIT_K=split_k, BLOCK_M=REDUCE_BLOCK_M, BLOCK_N=REDUCE_BLOCK_N, ROW_BLOCKS=per_program,
        num_warps=num_warps, **flags, **fp8_flags)


def device_spec(t: torch.Tensor) -> DeviceSpec:
    from polyrec.hardware.detect import cpu_spec, detect

    index = (t.device.index or 0) if t.is_cuda else -1
    spec = _SPEC_BY_DEVICE.get(index)
    if spec is None:
        spec = detect(index).spec if t.is_cuda else cpu_spec()
        _SPEC_BY_DEVICE[index] = spec
    return spec


_SPEC_BY_DEVICE: dict[int, DeviceSpec] = {}
