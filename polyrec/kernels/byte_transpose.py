"""The transpose of a matrix of one- or two-byte elements (an fp8 copy, a bf16 weight) in one Triton launch.

``cast_fp8`` makes an fp32 master weight's transposed fp8 copy from its plain one (Triton's transposed store
from an fp32 load left elements unwritten on sm_90, ``polyrec.kernels.fp8.cast_fp8``). torch's
``q.t().contiguous()`` of an fp8 tensor runs an elementwise kernel, one byte per thread: its 9 copies took
0.082 ms of a graphed MLPerf DLRM-DCNv2 step at batch 65536 (22 us for the top MLP's [1024, 3456]), this
kernel at the best of four tiles for each weight 0.016 ms (2.7 us; each timed in a CUDA graph on one H200,
forty-sixth session, ``benchmarks/results/byte_transpose_2026-12-04/``). The cross network's backward takes
each V_l [512, 3456] in bf16 transposed (``polyrec.kernels.dcn``): torch's copy took 14 us each in the
forty-seventh session's eager trace (``benchmarks/results/cross_output_copies_2026-12-04/eager_trace/``). A
program moves a BLOCK x BLOCK tile: read along the rows, written along the columns (Triton stages it through
shared memory).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.interpreter import interpreting

#: Tile side in elements and the warps that move it (4 KB of shared memory): of 32 x 32 at 4 warps and
#: 64 x 64 at 4 / 8 and 128 x 128 at 8, 64 x 64 was the fastest for the four largest fp8 weights of the MLPerf
#: step (8 warps for three of them), 32 x 32 for the two smallest, [128, 256] and [256, 512], at 1.2-1.3 us
#: (benchmarks/results/byte_transpose_2026-12-04/).
BLOCK = 64
NUM_WARPS = 8


@triton.jit
def byte_transpose_kernel(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    """y [N, M] = xᵀ for x [M, N], both contiguous, of one integer type (uint8 or int16: the elements' bits);
    one BLOCK x BLOCK tile per program."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK] of x
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK] of x
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tile = tl.load(x_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], mask=mask)
    tl.store(y_ptr + cols.to(tl.int64)[None, :] * M + rows[:, None], tile, mask=mask)


#: The integer type that carries each element size's bits through the kernel.
_BITS = {1: torch.uint8, 2: torch.int16}


def transpose(x: torch.Tensor) -> torch.Tensor:
    """``x.t().contiguous()`` for a contiguous 2-D tensor of one- or two-byte elements (fp8, uint8, int8, bf16,
    fp16, int16); torch's copy where Triton cannot run (the CPU without the interpreter)."""
    if x.dim() != 2 or not x.is_contiguous() or x.element_size() not in _BITS:
        raise ValueError(f"transpose: x must be a contiguous 2-D tensor of one- or two-byte elements, got shape "
                         f"{tuple(x.shape)}, stride {x.stride()}, {x.dtype}")
    if not (x.is_cuda or interpreting()):
        return x.t().contiguous()
    m, n = x.shape
    y = torch.empty(n, m, dtype=x.dtype, device=x.device)  # [N, M]
    if m and n:
        bits = _BITS[x.element_size()]
        byte_transpose_kernel[(ceil_div(m, BLOCK), ceil_div(n, BLOCK))](
            x.view(bits), y.view(bits), m, n, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return y


def compile_jobs(spec: DeviceSpec) -> list[CompileJob]:
    """The kernel as ``transpose`` launches it, for both element sizes (pointers and sizes 16-divisible: fp8
    GEMM operands and the cross network's V)."""
    return [CompileJob(label=f"byte_transpose {bits}", kernel=byte_transpose_kernel,
                       signature={"x_ptr": f"*{bits}", "y_ptr": f"*{bits}", "M": "i32", "N": "i32", "BLOCK": "constexpr"},
                       constexprs={"BLOCK": BLOCK}, num_warps=NUM_WARPS, num_stages=1,
                       divisible_by_16=("x_ptr", "y_ptr", "M", "N"))
            for bits in ("u8", "i16")]
