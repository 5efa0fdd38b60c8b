"""Prototype: a persistent Hopper (sm_90) GEMM with TMA tensor descriptors and fused epilogues.

``gemm_tma(a, b, b_k_major=..., config=...)`` computes ``epilogue(A @ op(B))`` for A [M, K] row-major
and B either [N, K] row-major (``b_k_major=True``: the forward ``x @ Wᵀ``) or [K, N] row-major, bf16
or fp16 in, fp32 accumulation, output in A's dtype. Epilogues: none, ``+ bias`` then ReLU, and the
DCN-v2 cross update ``x0 * (acc + bias) + x``. A, B, x0, x and the output all move through TMA
descriptors (host-side ``triton.tools.tensor_descriptor.TensorDescriptor``); the bias is a plain load.

The grid is ``SMs x ctas_per_sm`` programs; each walks the output tiles ``tile = pid, pid + grid, ...``
in grouped order (``group_m`` row-tiles walk down M together, for L2 reuse of B) inside one
``tl.range(flatten=True)`` loop nest, which lets Triton's pipeliner overlap the next tile's first
loads with this tile's epilogue. ``epilogue_subtile`` finishes the accumulator in two [BM, BN/2]
halves (half the epilogue registers and store buffer). The x0 / x loads of the cross epilogue are
TMA loads too, but Triton 3.6 waits on each one's barrier right where it is issued (TTGIR on sm_90:
``async_tma_copy_global_to_local`` then ``wait_barrier``), so moving them before the main loop would
only move the stall; ``l2_prefetch`` instead asks L2 for them (``prefetch.global.L2``, nothing waits)
when the tile starts, so that the epilogue's TMA loads hit L2; ``ctas_per_sm`` 2 lets one program's
epilogue overlap the other's main loop where shared memory allows. ``warp_specialize`` passes
``tl.range(warp_specialize=True)``: on sm_90 Triton 3.6 compiles it but leaves this loop unpartitioned
(the TTGIR differs only by the ``tt.warp_specialize`` attribute; its docs: Blackwell only), so the
probe measures it to confirm, not to win.

Hopper only: AMD keeps ``polyrec.kernels.gemm_kernels.gemm_kernel``. The launcher refuses other
devices with a clear error; on the CPU it runs under the Triton interpreter (``TRITON_INTERPRET=1``).
``polyrec.kernels.gemm.matmul`` runs it for the selector's TMA configs (``GemmConfig.persistent_tma``,
priced by ``polyrec.perfmodel.gemm_tma``); ``benchmarks/gemm_tma_probe.py`` measured it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from polyrec.hardware.compile import CompileJob
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.interpreter import interpreting

EPILOGUES = ("none", "bias_relu", "cross")
#: TMA: global strides (all but the last dimension) must be multiples of 16 bytes (CUDA driver API,
#: ``cuTensorMapEncodeTiled``: "globalStrides ... must be a multiple of 16"), and the base 16-byte aligned.
TMA_ALIGN_BYTES = 16
_TRITON_DTYPE = {torch.bfloat16: "bf16", torch.float16: "fp16"}


@dataclass(frozen=True, kw_only=True, slots=True)
class TmaGemmConfig:
    """One launch configuration of ``gemm_tma_kernel``."""

    block_m: int = 128  # rows of C per tile
    block_n: int = 128  # columns of C per tile
    block_k: int = 64  # depth of one main-loop step (one TMA load of A and of B)
    group_m: int = 8  # row-tiles that walk down M together before moving along N (L2 reuse of B)
    num_stages: int = 3  # shared-memory buffers of the A / B tiles in the software pipeline
    num_warps: int = 8  # warps per program (two warpgroups at 8)
    ctas_per_sm: int = 1  # persistent programs per SM: grid = min(tiles, SMs x ctas_per_sm)
    warp_specialize: bool = False  # tl.range(warp_specialize=True) on the tile loop
    epilogue_subtile: bool = False  # finish and store the tile in two [BM, BN/2] halves
    l2_prefetch: bool = False  # cross: prefetch x0 / x into L2 when the tile starts (no-op in the interpreter)

    @property
    def label(self) -> str:
        flags = "".join(name for on, name in ((self.warp_specialize, " ws"), (self.epilogue_subtile, " sub"),
                                              (self.l2_prefetch, " l2")) if on)
        return (f"BM{self.block_m} BN{self.block_n} BK{self.block_k} G{self.group_m} w{self.num_warps} "
                f"s{self.num_stages} c{self.ctas_per_sm}{flags}")

    @property
    def store_block_n(self) -> int:
        """Columns of one epilogue piece (the output / x0 / x descriptors' block width)."""
        return self.block_n // 2 if self.epilogue_subtile else self.block_n


@triton.jit
def _tile_origin(tile, tiles_m, tiles_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(first row, first column) of output tile ``tile`` in grouped order."""
    in_group = GROUP_M * tiles_n
    first_m = (tile // in_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % in_group) % group_rows
    pid_n = (tile % in_group) // group_rows
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def _prefetch_l2(ptr, stride_m, off_m, off_n, M, N, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Ask L2 for the [ROWS, COLS] piece at (off_m, off_n) of a row-major 2-byte [M, N] tensor: one
    ``prefetch.global.L2`` per 128-byte line (PTX ISA, "prefetch, prefetchu"); nothing waits on it."""
    LINE: tl.constexpr = 64  # 2-byte elements per 128-byte L2 cache line (CUDA C++ Programming Guide)
    rows = tl.minimum(off_m + tl.arange(0, ROWS), M - 1)  # [ROWS], clamped into the tensor
    cols = tl.minimum(off_n + tl.arange(0, COLS // LINE) * LINE, N - 1)  # [COLS / LINE]
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l",
                              [ptr + rows[:, None] * stride_m + cols[None, :]], dtype=tl.int32, is_pure=False,
                              pack=1)


@triton.jit
def _finish(acc, off_m, off_n, bias_ptr, x0_desc, xr_desc, c_desc, N, HAS_BIAS: tl.constexpr,
            RELU: tl.constexpr, CROSS: tl.constexpr):
    """Epilogue of one piece acc [BM, W] (fp32) at (off_m, off_n): + bias, ReLU, ``x0 * y + x``
    (x0 / x through their descriptors), then the TMA store."""
    width: tl.constexpr = acc.shape[1]
    if HAS_BIAS:
        cols = off_n + tl.arange(0, width)  # [W]
        acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0, propagate_nan=tl.PropagateNan.ALL)  # NaN stays NaN, as torch.relu
    if CROSS:
        x0 = x0_desc.load([off_m, off_n])  # [BM, W]
        xr = xr_desc.load([off_m, off_n])  # [BM, W]
        acc = x0.to(tl.float32) * acc + xr.to(tl.float32)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def gemm_tma_kernel(
    a_desc, b_desc, c_desc, x0_desc, xr_desc, bias_ptr, x0_ptr, xr_ptr,
    M, N, K, stride_x0m, stride_xrm, num_programs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    B_K_MAJOR: tl.constexpr, HAS_BIAS: tl.constexpr, RELU: tl.constexpr,
    CROSS: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr, L2_PREFETCH: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, WIDEN_OPERANDS: tl.constexpr,
):
    """C[M, N] = epilogue(A[M, K] @ B) with B [N, K] (B_K_MAJOR) or [K, N]; persistent over tiles.

    Descriptor blocks: A [BM, BK]; B [BN, BK] or [BK, BN]; C, x0, x [BM, BN] or, with
    EPILOGUE_SUBTILE, [BM, BN/2]. x0_ptr / xr_ptr (row strides stride_x0m / stride_xrm) are the same
    x0 / x, for L2_PREFETCH's addresses. WIDEN_OPERANDS (interpreter only): Triton 3.6's interpreter
    multiplies bf16 bit patterns as integers, so operands are widened to fp32 there (exact products).
    """
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    HALF: tl.constexpr = BLOCK_N // 2
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, num_programs, flatten=True,
                         warp_specialize=WARP_SPECIALIZE):
        off_m, off_n = _tile_origin(tile, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        if CROSS and L2_PREFETCH:  # x0 / x head for L2 while the main loop runs
            _prefetch_l2(x0_ptr, stride_x0m, off_m, off_n, M, N, BLOCK_M, BLOCK_N)
            _prefetch_l2(xr_ptr, stride_xrm, off_m, off_n, M, N, BLOCK_M, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(k_steps):
            off_k = step * BLOCK_K
            a = a_desc.load([off_m, off_k])  # [BM, BK]
            if B_K_MAJOR:
                b = b_desc.load([off_n, off_k]).T  # [BK, BN]
            else:
                b = b_desc.load([off_k, off_n])  # [BK, BN]
            if WIDEN_OPERANDS:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc)
        if EPILOGUE_SUBTILE:
            left, right = acc.reshape(BLOCK_M, 2, HALF).permute(0, 2, 1).split()  # 2 x [BM, BN/2]
            _finish(left, off_m, off_n, bias_ptr, x0_desc, xr_desc, c_desc, N, HAS_BIAS, RELU, CROSS)
            _finish(right, off_m, off_n + HALF, bias_ptr, x0_desc, xr_desc, c_desc, N, HAS_BIAS, RELU, CROSS)
        else:
            _finish(acc, off_m, off_n, bias_ptr, x0_desc, xr_desc, c_desc, N, HAS_BIAS, RELU, CROSS)


def check_device(t: torch.Tensor) -> None:
    """Refuse anything but an NVIDIA sm_90 GPU (or the CPU under the interpreter)."""
    if interpreting() and not t.is_cuda:
        return
    if not t.is_cuda or torch.version.hip:
        where = "a ROCm GPU" if torch.version.hip else f"device {t.device}"
        raise RuntimeError(f"gemm_tma: Hopper (sm_90) only, got {where}; use polyrec.kernels.gemm.matmul")
    major, minor = torch.cuda.get_device_capability(t.device)
    if major != 9:
        raise RuntimeError(f"gemm_tma: Hopper (sm_90) only, got sm_{major}{minor} on {t.device}; "
                           "use polyrec.kernels.gemm.matmul")


def _check_operand(name: str, t: torch.Tensor, shape: tuple[int, int], dtype: torch.dtype) -> None:
    if tuple(t.shape) != shape:
        raise ValueError(f"gemm_tma: {name} must have shape {list(shape)}, got {list(t.shape)}")
    if t.dtype != dtype:
        raise TypeError(f"gemm_tma: {name} must be {dtype} like a, got {t.dtype}")
    if t.stride(1) != 1 or (t.stride(0) * t.element_size()) % TMA_ALIGN_BYTES:
        raise ValueError(f"gemm_tma: {name} must be row-major with a row stride of a multiple of "
                         f"{TMA_ALIGN_BYTES} bytes (TMA), got strides {t.stride()} of {t.element_size()}-byte elements")
    if t.data_ptr() % TMA_ALIGN_BYTES:
        raise ValueError(f"gemm_tma: {name} must start {TMA_ALIGN_BYTES}-byte aligned (TMA)")


def _validate(a, b, b_k_major: bool, bias, activation: str, cross) -> tuple[int, int, int]:
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"gemm_tma: a and b must be 2-D, got {a.dim()}-D and {b.dim()}-D")
    if a.dtype not in _TRITON_DTYPE:
        raise TypeError(f"gemm_tma: dtype {a.dtype} is not supported; use bfloat16 or float16")
    m, k = a.shape
    n = b.shape[0] if b_k_major else b.shape[1]
    _check_operand("a [M, K]", a, (m, k), a.dtype)
    _check_operand("b [N, K]" if b_k_major else "b [K, N]", b, (n, k) if b_k_major else (k, n), a.dtype)
    if activation not in ("none", "relu"):
        raise ValueError(f"gemm_tma: activation must be 'none' or 'relu', got {activation!r}")
    if bias is not None and (tuple(bias.shape) != (n,) or not bias.is_floating_point() or bias.device != a.device
                             or not bias.is_contiguous()):
        raise ValueError(f"gemm_tma: bias must be a contiguous float [{n}] on {a.device}, got {list(bias.shape)} "
                         f"{bias.dtype} with stride {bias.stride()} on {bias.device}")
    if cross is not None:
        if activation != "none":
            raise ValueError("gemm_tma: cross and relu together are not a supported epilogue")
        _check_operand("cross x0 [M, N]", cross[0], (m, n), a.dtype)
        _check_operand("cross x [M, N]", cross[1], (m, n), a.dtype)
    return m, n, k


def sm_count(t: torch.Tensor) -> int:
    """Streaming multiprocessors of t's GPU (1 on the CPU: the interpreter runs one program at a time)."""
    return torch.cuda.get_device_properties(t.device).multi_processor_count if t.is_cuda else 1


def gemm_tma(a: torch.Tensor, b: torch.Tensor, *, b_k_major: bool, config: TmaGemmConfig,
             bias: torch.Tensor | None = None, activation: str = "none",
             cross: tuple[torch.Tensor, torch.Tensor] | None = None, out: torch.Tensor | None = None,
             num_programs: int | None = None, warmup: bool = False) -> torch.Tensor:
    """``epilogue(a @ op(b))`` -> [M, N] in a's dtype.

    a: [M, K]; b: [N, K] (``b_k_major``) or [K, N]; bias: [N] (any float dtype, added in fp32);
    ``activation`` "relu" after the bias;
    cross = (x0, x), both [M, N]: ``out = x0 * (acc + bias) + x``. All row-major with 16-byte aligned
    rows (K and N multiples of 8 for 2-byte types). ``num_programs`` overrides the persistent grid
    size (default ``SMs x config.ctas_per_sm``, at most the number of tiles). ``warmup`` only
    compiles (in parallel under Triton's ``AsyncCompileMode``) and returns ``out`` unwritten.
    """
    check_device(a)
    m, n, k = _validate(a, b, b_k_major, bias, activation, cross)
    if out is None:
        out = torch.empty((m, n), device=a.device, dtype=a.dtype)  # [M, N]
    _check_operand("out [M, N]", out, (m, n), a.dtype)
    c = config
    store_block = [c.block_m, c.store_block_n]
    a_desc = TensorDescriptor.from_tensor(a, [c.block_m, c.block_k])
    b_desc = TensorDescriptor.from_tensor(b, [c.block_n, c.block_k] if b_k_major else [c.block_k, c.block_n])
    c_desc = TensorDescriptor.from_tensor(out, store_block)
    x0_desc, xr_desc = (TensorDescriptor.from_tensor(t, store_block) for t in cross) if cross else (c_desc, c_desc)
    tiles = ceil_div(m, c.block_m) * ceil_div(n, c.block_n)
    programs = min(tiles, num_programs or sm_count(a) * c.ctas_per_sm)
    options = {"num_warps": c.num_warps, "num_stages": c.num_stages} if a.is_cuda else {}
    x0, xr = cross if cross is not None else (out, out)
    launch = (lambda *args, **kw: gemm_tma_kernel.warmup(*args, grid=(programs,), **kw)) if warmup \
        else gemm_tma_kernel[(programs,)]
    launch(
        a_desc, b_desc, c_desc, x0_desc, xr_desc, bias if bias is not None else out, x0, xr, m, n, k,
        x0.stride(0), xr.stride(0), programs,
        BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k, GROUP_M=c.group_m,
        B_K_MAJOR=b_k_major, HAS_BIAS=bias is not None, RELU=activation == "relu", CROSS=cross is not None,
        EPILOGUE_SUBTILE=c.epilogue_subtile, L2_PREFETCH=c.l2_prefetch and a.is_cuda,
        WARP_SPECIALIZE=c.warp_specialize, WIDEN_OPERANDS=not a.is_cuda, **options)
    return out


def compile_job(config: TmaGemmConfig, *, epilogue: str = "cross", b_k_major: bool = True,
                dtype: str = "bf16") -> CompileJob:
    """The kernel with one config for ``polyrec.hardware.compile.compile_for`` (sm_90 only)."""
    if epilogue not in EPILOGUES:
        raise ValueError(f"compile_job: epilogue must be one of {EPILOGUES}, got {epilogue!r}")
    c = config

    def desc(rows: int, cols: int) -> str:
        return f"tensordesc<{dtype}[{rows}, {cols}]>"

    signature = {"a_desc": desc(c.block_m, c.block_k),
                 "b_desc": desc(c.block_n, c.block_k) if b_k_major else desc(c.block_k, c.block_n),
                 "c_desc": desc(c.block_m, c.store_block_n), "x0_desc": desc(c.block_m, c.store_block_n),
                 "xr_desc": desc(c.block_m, c.store_block_n), "bias_ptr": f"*{dtype}",
                 "x0_ptr": f"*{dtype}", "xr_ptr": f"*{dtype}", "M": "i32", "N": "i32", "K": "i32",
                 "stride_x0m": "i32", "stride_xrm": "i32", "num_programs": "i32"}
    constexprs = {"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "BLOCK_K": c.block_k, "GROUP_M": c.group_m,
                  "B_K_MAJOR": b_k_major, "HAS_BIAS": epilogue != "none",
                  "RELU": epilogue == "bias_relu", "CROSS": epilogue == "cross",
                  "EPILOGUE_SUBTILE": c.epilogue_subtile, "L2_PREFETCH": c.l2_prefetch,
                  "WARP_SPECIALIZE": c.warp_specialize, "WIDEN_OPERANDS": False}
    signature |= {name: "constexpr" for name in constexprs}
    return CompileJob(label=f"gemm_tma {dtype} {c.label} {epilogue} {'NT' if b_k_major else 'NN'}",
                      kernel=gemm_tma_kernel, signature=signature, constexprs=constexprs, num_warps=c.num_warps,
                      num_stages=c.num_stages, divisible_by_16=("bias_ptr", "x0_ptr", "xr_ptr", "M", "N", "K",
                                                       "stride_x0m", "stride_xrm"))
