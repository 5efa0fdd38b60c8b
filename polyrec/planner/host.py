"""CPU time to issue one training step: launches per phase x host seconds per launch, scaled, plus a fixed part.

The trainer runs eagerly: Python issues every kernel, asynchronously. A phase whose kernels finish
faster than the CPU issues them is host-bound (the small presets at any batch). The counts come from
the model's structure: ``planner.ops`` (the dense ops), the GEMM selector's choice per GEMM (a Triton
launch, plus a reduce launch under split-K, or torch.matmul and its epilogue ops), the TBE's launches
(``polyrec.kernels.tbe``: forward ``pooled_forward_kernel``; backward ``sort_keys_kernel``, torch.sort,
``permute_kernel`` / ``lane_update_kernel`` (or ``update_kernel``), one ``merge_level_kernel`` per
merge level) and the dense optimizer (torch's foreach Adagrad / Adam).

Costs per launch (:class:`HostCosts`), seconds: a Python-level Triton launch and an eager torch op
(dispatcher + CUDA launch), from ``measure_host_costs`` on the GPU's host where it was run (stored
next to the device calibration, ``<device>-host.json``), else the defaults below with their sources.
The scale and the fixed part are fitted on measured host-bound steps (``HOST_LAUNCH_SCALE``).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass
from typing import Any

from polyrec.hardware.calibrate import load_calibration, save_calibration
from polyrec.perfmodel.tbe import merge_levels

#: Seconds per Python-level Triton launch of a cached kernel (JITFunction.run: binder, specialization
#: key, launcher): 13.2 us with 19 arguments, Triton 3.5 (meta-pytorch/tritonbench PR #669,
#: ``nop_triton_kernel`` walltime); polyrec's GEMM / TBE kernels take 20-30 arguments. Default only:
#: ``measure_host_costs`` replaces it.
DEFAULT_TRITON_LAUNCH_S = 13.2e-6
#: Seconds per eager torch op on a CUDA tensor (dispatch + launch), used when no host calibration:
#: ``hw calibrate``'s ``launch_latency`` (a host-bound loop of ``x.add_(1)``; 7.1 us on the H200
#: machine, benchmarks/results/calibrate_nvidia-h200_2026-11-29) where present, else this estimate.
DEFAULT_TORCH_OP_S = 7.1e-6
#: Host time per step = HOST_LAUNCH_SCALE x (counted launches x their measured per-launch cost) +
#: DEFAULT_STEP_FIXED_S. Both fitted by least squares on the host-bound even rows (0, 14, 16, 18, 20,
#: 22: predicted device time under half the host time) of
#: benchmarks/results/planner_accuracy_nvidia-h200_2026-11-30 (run alone on GPU 0, host costs
#: calibrated in that run, 691c40d): 0.72 ms and 2.98. The scale says the counted launches stand for
#: about 3x their own cost: per op the step also runs autograd nodes, module Python and allocator calls
#: the count does not see, in proportion to the model's size (measured host-bound steps: MLPerf
#: DCNv2 11.4 ms, dcnv2-small 7.8-8.7, DLRM Kaggle 6.4-8.2 against 286 / 215 / 175 counted torch ops).
#: The odd rows check the fit; the earlier fixed-part-only fit (7.17 ms) predated the trainer's
#: host-overhead fixes and over-predicted the small presets by 15-48%.
DEFAULT_STEP_FIXED_S = 0.72e-3
HOST_LAUNCH_SCALE = 2.98
#: Torch ops per TBE module per step besides its Triton launches (polyrec.kernels.tbe): forward
#: JaggedBatch + validation, output and anchor allocation, autograd apply, the flags' pinned copy and
#: event (8); backward key / source / partial buffers, torch.sort, the permute's outputs, the seed,
#: ``grad.contiguous`` (9).
TBE_FWD_TORCH_OPS = 8
TBE_BWD_TORCH_OPS = 9
#: Triton launches per TBE module per step: forward 1; backward sort keys, permute, lane update, then
#: the merge levels (``polyrec.perfmodel.tbe.merge_levels``).
TBE_FWD_LAUNCHES = 1
TBE_BWD_LAUNCHES = 3
#: Sorted positions per update program, for counting merge levels (the lane update's TILE, 8).
TBE_UPDATE_TILE = 8
#: Torch ops of one dense optimizer step with torch's foreach implementation (torch/optim/adagrad.py
#: ``_multi_tensor_adagrad``: step counts, addcmul, sqrt, add, addcdiv; adam.py about twice), plus
#: per parameter tensor the optimizer's Python and ``zero_grad(set_to_none=True)``.
OPTIMIZER_FOREACH_OPS = {"sgd": 2, "adagrad": 6, "adam": 12}
OPTIMIZER_OPS_PER_TENSOR = 1
#: Torch-op equivalents per GEMM call besides its Triton launch: the output allocation and polyrec's
#: Python wrapper (selection cache lookup, stride checks) (estimate).
GEMM_CALL_TORCH_OPS = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class HostCosts:
    """Seconds per launch on the CPU, each with where it came from."""

    triton_launch_s: float
    torch_op_s: float
    step_fixed_s: float
    origin: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Launches:
    """Kernel launches one phase issues from Python."""

    triton: int = 0
    torch_ops: int = 0

    def __add__(self, other: Launches) -> Launches:
        return Launches(triton=self.triton + other.triton, torch_ops=self.torch_ops + other.torch_ops)

    def seconds(self, costs: HostCosts) -> float:
        """Host seconds of these launches at the measured per-launch costs (not scaled)."""
        return self.triton * costs.triton_launch_s + self.torch_ops * costs.torch_op_s

    def step_seconds(self, costs: HostCosts) -> float:
        """Host seconds of a step that issues these launches: scaled, plus the fixed part."""
        return HOST_LAUNCH_SCALE * self.seconds(costs) + costs.step_fixed_s


def host_calibration_name(device: str) -> str:
    return f"{device}-host"


def host_costs(device: str, launch_latency: float | None = None,
               measured: dict[str, Any] | None = None) -> HostCosts:
    """The host costs of ``device``'s machine: measured where ``measure_host_costs`` ran, else defaults
    (torch op = the calibrated ``launch_latency`` when given)."""
    measured = load_calibration(host_calibration_name(device)) if measured is None else measured
    if measured and measured.get("triton_launch_s") and measured.get("torch_op_s"):
        return HostCosts(triton_launch_s=float(measured["triton_launch_s"]), torch_op_s=float(measured["torch_op_s"]),
                         step_fixed_s=DEFAULT_STEP_FIXED_S,
                         origin=f"calibrated {measured.get('date', '?')} (host costs); per-step fixed part fitted")
    op = launch_latency if launch_latency else DEFAULT_TORCH_OP_S
    return HostCosts(triton_launch_s=DEFAULT_TRITON_LAUNCH_S, torch_op_s=op, step_fixed_s=DEFAULT_STEP_FIXED_S,
                     origin="estimate: Triton launch 13.2 us (tritonbench #669), torch op = launch latency, "
                            "per-step fixed part fitted")


def gemm_launches(backend: str, split_k: int, epilogue: str) -> Launches:
    """Launches of one ``polyrec.kernels.gemm.matmul`` call as the selector runs it."""
    if backend == "library":  # torch.matmul, then one Triton pass for the epilogue (gemm._library)
        fused_pass = 0 if epilogue == "none" else 1
        bias_sum = 1 if epilogue == "cross_grad" else 0  # torch.sum of the pass's bias-gradient partials
        return Launches(triton=fused_pass, torch_ops=GEMM_CALL_TORCH_OPS + bias_sum)
    return Launches(triton=2 if split_k > 1 else 1, torch_ops=GEMM_CALL_TORCH_OPS + (1 if split_k > 1 else 0))


def tbe_launches(modules: int, nnz: float) -> tuple[Launches, Launches]:
    """(forward, backward) launches of ``modules`` table-batched embedding modules over ``nnz`` ids."""
    levels = merge_levels(max(1, math.ceil(nnz / max(modules, 1) / TBE_UPDATE_TILE))) if modules else 0
    return (Launches(triton=TBE_FWD_LAUNCHES * modules, torch_ops=TBE_FWD_TORCH_OPS * modules),
            Launches(triton=(TBE_BWD_LAUNCHES + levels) * modules, torch_ops=TBE_BWD_TORCH_OPS * modules))


def optimizer_launches(optimizer: str, tensors: int) -> Launches:
    return Launches(torch_ops=OPTIMIZER_FOREACH_OPS[optimizer] + OPTIMIZER_OPS_PER_TENSOR * tensors)


def _wall_per_call(fn, calls: int) -> float:
    """Seconds per call of ``fn`` in a host-bound loop (the device work is tiny), after warmup."""
    import torch

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def measure_host_costs(calls: int = 2000) -> dict[str, Any]:
    """Measure the host costs on this machine's GPU (a few seconds): a polyrec Triton GEMM launch on a
    64^3 bf16 problem with a fixed config (no selection), minus nothing, and ``x.add_(1)``."""
    import torch

    from polyrec.kernels import gemm
    from polyrec.kernels.gemm_configs import GemmConfig

    if not torch.cuda.is_available():
        raise RuntimeError("measure_host_costs needs a GPU")
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    cfg = GemmConfig(block_m=64, block_n=64, block_k=32, group_m=8, num_warps=4, num_stages=2)
    x = torch.zeros(1, device="cuda")
    gemm_call = _wall_per_call(lambda: gemm.matmul(a, b, config=cfg), calls)
    torch_op = _wall_per_call(lambda: x.add_(1.0), calls)
    # a Triton GEMM call = one launch + GEMM_CALL_TORCH_OPS torch-op equivalents (allocation, wrapper)
    return {"date": dt.date.today().isoformat(), "gemm_call_s": gemm_call, "torch_op_s": torch_op,
            "triton_launch_s": max(gemm_call - GEMM_CALL_TORCH_OPS * torch_op, 0.25 * gemm_call)}


def ensure_host_calibration(device: str) -> str:
    """Measure and store the host costs of ``device``'s machine unless stored; says which."""
    if load_calibration(host_calibration_name(device)) is not None:
        return "stored host calibration"
    save_calibration(host_calibration_name(device), measure_host_costs())
    return "host calibrated in this run"
