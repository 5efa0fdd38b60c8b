"""The vendor library path of ``polyrec.kernels.gemm`` (torch.matmul: cuBLAS / hipBLASLt, then one
Triton pass for the epilogue), timed from the roofline of the calibrated ceilings: the selector
weighs it against the Triton kernels of ``polyrec.perfmodel.gemm``.
"""

from __future__ import annotations

import math

from polyrec.hardware.types import Ceilings, DeviceSpec
from polyrec.perfmodel.gemm import KERNEL_OVERHEAD_S, TRITON_PASS_HOST_S, GemmProblem, rate_dtype

#: The vendor library against the roofline of the calibrated ceilings: torch.matmul time over max(FLOPs
#: at the calibrated matmul rate, operand + output bytes at the copy rate). Memory 1.30 and fixed 7 us
#: fitted on fold A (shape names sorted, even positions) of
#: benchmarks/results/gemm_selection_nvidia-h200_2026-11-29.json (commit ef4430d; 779.5 TFLOP/s, 4.24 TB/s
#: in calibrate_nvidia-h200_2026-11-29.json) over a grid of 0.01 / 0.1 / 1 us (fold A geomean |error|
#: 12.6%, fold B 6.0%). Compute 1.0 (the calibrated per-call rate): the training step's library GEMMs,
#: timed one by one inside the MLPerf step (benchmarks/dense_ops_check.py, H200, batch 16384 / 32768 /
#: 65536, benchmarks/results/dense_ops_check_2026-12-01/), ran 7-9% faster than priced at the sweep's
#: 1.05 (8.84 ms against 9.63 at 65536; 9.22 at 1.0); the two isolated sweeps (11-29 / 11-30) disagree
#: by 10% on the same shapes (burst and sustained clocks), so they do not pin it closer. No preset GEMM changes backend
#: (810 ops of the three presets at batches 512-131072); 32 of 9185 grid shapes move from Triton to the
#: library, all within 3% by the model. Fitted on cuBLAS on the H200 only; hipBLASLt is assumed to reach
#: its roofline alike (not measured: no AMD GPU here).
LIBRARY_COMPUTE_FACTOR = 1.0
LIBRARY_MEMORY_FACTOR = 1.30
LIBRARY_FIXED_S = 7e-6
#: An operand whose rows are not 16-byte aligned (K=13 bf16) sends cuBLAS to its align-1 kernels:
#: fold A's two such rows (fwd bottom1 B16384 / B65536) ran 1.5x / 2.0x the aligned prediction. 2.0.
LIBRARY_UNALIGNED_FACTOR = 2.0
#: Epilogues the library applies inside its GEMM, so no pass follows (``polyrec.kernels.gemm._library``:
#: ``torch.addmm`` / ``torch._addmm_activation``, cuBLASLt's BIAS / RELU_BIAS epilogues, the
#: ``nvjet_*_relubias`` kernels). H200, bf16, bias + ReLU, library + pass -> in-GEMM: [65536, 1024] x 3456
#: 0.658 -> 0.621 ms, [65536, 256] x 512 0.115 -> 0.042 ms (benchmarks/results/gemm_lt_epilogue_probe_2026-12-01).
#: hipBLASLt has the same epilogues; not measured (no AMD GPU here). A bias in another dtype than the
#: inputs' still takes the pass (the model does not see the bias dtype; DLRM's layers cast it).
LIBRARY_EPILOGUES = frozenset({"none", "bias", "bias_relu"})


def fused_pass_seconds(p: GemmProblem, ceil: Ceilings, row_block: int) -> float:
    """The one Triton pass that applies the epilogue to a library GEMM's product
    (``polyrec.kernels.gemm._library``): the product read (input dtype), the epilogue's tensors and
    C at the copy rate, plus one kernel; CrossGrad also writes fp32 bias-gradient partials per
    ``row_block`` rows, summed by one more kernel. 0 for the epilogues the library applies itself
    (``LIBRARY_EPILOGUES``)."""
    if p.epilogue in LIBRARY_EPILOGUES:
        return 0.0
    moved = p.m * p.n * p.in_bytes + p.epilogue_bytes
    kernels = 1
    if p.epilogue == "cross_grad":
        moved += 2 * math.ceil(p.m / row_block) * p.n * 4  # partials written, then read by the sum
        kernels += 1
    return moved / ceil.copy_bandwidth.value + kernels * KERNEL_OVERHEAD_S


def library_call_seconds(p: GemmProblem, spec: DeviceSpec, ceil: Ceilings, row_block: int, *,
                         adds_residual: bool = False) -> tuple[float, float]:
    """(seconds of one call, GPU seconds) of the library path: the library's GEMM (with a bias / ReLU
    epilogue of its own, ``LIBRARY_EPILOGUES``), then the Triton epilogue pass where ``p`` has another
    epilogue (its launch costs ``TRITON_PASS_HOST_S`` of host time).
    ``adds_residual``: the residual epilogue is the library's own (``residual.addmm_``, beta 1, the
    caller gave the residual's storage up): no pass, and C is read as well as written (its bytes at the
    copy rate on top of the roofline: cuBLAS reads C after its main loop; [65536, 3456] x 512 bf16
    measured 0.42 ms with C read, 0.31 ms without, benchmarks/results/gemm_backends_probe_2026-12-01)."""
    if adds_residual and p.epilogue == "residual":
        gpu = library_seconds(p, spec, ceil) + p.m * p.n * p.c_bytes / ceil.copy_bandwidth.value
        return gpu, gpu
    gpu = library_seconds(p, spec, ceil) + fused_pass_seconds(p, ceil, row_block)
    host = 0.0 if p.epilogue in LIBRARY_EPILOGUES else TRITON_PASS_HOST_S
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
