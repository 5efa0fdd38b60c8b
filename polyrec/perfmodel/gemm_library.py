"""The vendor library path of ``polyrec.kernels.gemm`` (torch.matmul: cuBLAS / hipBLASLt, then one
Triton pass for the epilogue), timed from the roofline of the calibrated ceilings: the selector
weighs it against the Triton kernels of ``polyrec.perfmodel.gemm``.
"""

from __future__ import annotations

import math

from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.perfmodel.gemm import KERNEL_OVERHEAD_S, TRITON_PASS_HOST_S, GemmProblem, rate_dtype

#: The vendor library against the roofline of the calibrated ceilings: torch.matmul time over max(FLOPs
#: at the calibrated matmul rate, operand + output bytes at the copy rate), fitted on fold A (shape
#: names sorted, even positions) of benchmarks/results/gemm_selection_nvidia-h200_2026-11-29.json
#: (commit ef4430d; 779.5 TFLOP/s, 4.24 TB/s in calibrate_nvidia-h200_2026-11-29.json) over a grid
#: of 0.01 / 0.1 / 1 us: compute 1.05, memory 1.30, fixed 7 us. Fold A geomean |error| 12.6% (worst:
#: the K=13 first layer before the unaligned factor), fold B 6.0% (worst 12%). Fitted on cuBLAS on the
#: H200 only; hipBLASLt is assumed to reach its roofline alike (not measured: no AMD GPU here).
LIBRARY_COMPUTE_FACTOR = 1.05
LIBRARY_MEMORY_FACTOR = 1.30
LIBRARY_FIXED_S = 7e-6
#: An operand whose rows are not 16-byte aligned (K=13 bf16) sends cuBLAS to its align-1 kernels:
#: fold A's two such rows (fwd bottom1 B16384 / B65536) ran 1.5x / 2.0x the aligned prediction. 2.0.
LIBRARY_UNALIGNED_FACTOR = 2.0


def fused_pass_seconds(p: GemmProblem, ceil: Ceilings, row_block: int) -> float:
    """The one Triton pass that applies the epilogue to a library GEMM's product
    (``polyrec.kernels.gemm._library``): the product read (input dtype), the epilogue's tensors and
    C at the copy rate, plus one kernel; CrossGrad also writes fp32 bias-gradient partials per
    ``row_block`` rows, summed by one more kernel. 0 when there is no epilogue."""
    if p.epilogue == "none":
        return 0.0
    moved = p.m * p.n * p.in_bytes + p.epilogue_bytes
    kernels = 1
    if p.epilogue == "cross_grad":
        moved += 2 * math.ceil(p.m / row_block) * p.n * 4  # partials written, then read by the sum
        kernels += 1
    return moved / ceil.copy_bandwidth.value + kernels * KERNEL_OVERHEAD_S


def library_call_seconds(p: GemmProblem, spec: DeviceSpec, ceil: Ceilings, row_block: int) -> tuple[float, float]:
    """(seconds of one call, GPU seconds) of the library path: torch.matmul, then the Triton epilogue
    pass where ``p`` has an epilogue (its launch costs ``TRITON_PASS_HOST_S`` of host time)."""
    gpu = library_seconds(p, spec, ceil) + fused_pass_seconds(p, ceil, row_block)
    host = TRITON_PASS_HOST_S if p.epilogue != "none" else 0.0
    return max(gpu, host), gpu


def library_seconds(p: GemmProblem, spec: DeviceSpec, ceil: Ceilings) -> float:
    """The vendor library (cuBLAS / hipBLASLt) on ``p`` without its epilogue: its own kernels run near
    the roofline of the calibrated ceilings (``LIBRARY_COMPUTE_FACTOR`` over the FLOPs at the matmul
    rate, ``LIBRARY_MEMORY_FACTOR`` over the operands and the output at the copy rate, doubled for an
    operand whose rows are not 16-byte aligned), plus ``LIBRARY_FIXED_S``."""
    compute = p.flops / ceil.matmul_flops[rate_dtype(p.dtype, spec)].value
    moved = (p.m * p.k + p.k * p.n) * p.in_bytes + p.m * p.n * p.c_bytes
    unaligned = 1 if p.a_aligned and p.b_aligned else LIBRARY_UNALIGNED_FACTOR
    memory = moved / ceil.copy_bandwidth.value * LIBRARY_MEMORY_FACTOR * unaligned
    return max(compute * LIBRARY_COMPUTE_FACTOR, memory) + LIBRARY_FIXED_S
