"""CPU time to issue one training step: launches per phase x host seconds per launch, plus a fixed part.

The trainer runs eagerly: Python issues every kernel, asynchronously. A phase whose kernels finish
faster than the CPU issues them is host-bound (the small presets at any batch). The counts come from
the model's structure: ``planner.ops`` (the dense ops), the GEMM selector's choice per GEMM (a Triton
launch, plus a reduce launch under split-K, or torch.matmul and its epilogue ops), the TBE's launches
(``polyrec.kernels.tbe``: forward ``pooled_forward_kernel``, which writes the sort keys; backward torch.sort,
``permute_kernel`` / ``lane_update_kernel`` (or ``update_kernel``), one ``merge_level_kernel`` per
merge level) and the dense optimizer (torch's foreach Adagrad / Adam).

Costs per counted launch (:class:`HostCosts`), seconds: a Python-level Triton launch and an eager
torch op, each with the untracked work around it, and a fixed part per step, all fitted on measured
host-bound steps (``FITTED_TRITON_LAUNCH_S``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from polyrec.hardware.calibrate import finite_number, load_calibration
from polyrec.perfmodel.gemm_library import LIBRARY_EPILOGUES

#: Host seconds per counted Triton launch and per counted torch op, and per step besides them: 42.6 us,
#: 31.6 us and 0.72 ms. Fitted on the host-bound even rows (0, 14, 16, 18, 20, 22: predicted device
#: time under half the host time) of benchmarks/results/planner_accuracy_nvidia-h200_2026-11-30 as
#: committed in 98b6be5 (691c40d, run alone on GPU 0): the fixed part and one scale (2.98) on the
#: launches by least squares, the launches priced at that run's measured per-launch costs (14.3 us per
#: Triton launch, 10.6 us per torch op, back-solved from its predictions). Each counted op stands for about 3x a
#: bare launch (13.2 us per Triton launch with 19 arguments, meta-pytorch/tritonbench PR #669; ~7-11 us
#: per eager torch op measured here): the step also runs autograd nodes, module Python and allocator
#: calls the count does not see, in proportion to the model's size. Measured host-bound steps: MLPerf
#: DCNv2 10.6-14.1 ms, dcnv2-small 7.3-11.1, DLRM Kaggle 6.4-10.4 over three runs on three machines,
#: against 286 / 215 / 175 counted torch ops. Per-launch micro-benchmarks on the same machines
#: (a 64^3 GEMM call, ``x.add_``) varied 2x between machines without tracking the step time, so the
#: model keeps these fitted costs rather than a per-machine calibration.
FITTED_TRITON_LAUNCH_S = 42.6e-6
FITTED_TORCH_OP_S = 31.6e-6
DEFAULT_STEP_FIXED_S = 0.72e-3
#: Host seconds of the dense half of a step when it runs as a CUDA graph (``polyrec.runtime.trainer``: the
#: batch copied into the graph's inputs, the replay, the loss and the gradient hand-off around it), in
#: place of its launches: 0.88 ms, the median of the dense phase's host time in 12 trials of 30 graphed
#: steps (dcnv2-small 0.81 ms, MLPerf DLRM-DCNv2 0.91 ms, batch 16384, one H200; benchmarks/results/
#: checkout_ab_runs_2026-12-01/checkout_ab_nvidia-h200_merge_issue_graphed.json). Scaled as the launches.
GRAPHED_DENSE_HOST_S = 0.88e-3
#: Torch ops per TBE module per step besides its Triton launches (polyrec.kernels.tbe): forward
#: JaggedBatch + validation, output and anchor allocation, autograd apply, the flags' pinned copy and
#: event, the sort-key and source buffers (10); backward partial buffers, torch.sort, the permute's
#: outputs, the seed, ``grad.contiguous`` (7).
TBE_FWD_TORCH_OPS = 10
TBE_BWD_TORCH_OPS = 7
#: Triton launches per TBE module per step: forward 2 (the lookup, which writes the sort keys too, and
#: the one-program check of the offsets' ends); backward the permute where a selected update config is the
#: lane update's (TBE_PERMUTE_LAUNCHES), then the update launches (one, or one per dim group) and the merge
#: levels of the selected update configs (``tbe_launches``).
TBE_FWD_LAUNCHES = 2
TBE_PERMUTE_LAUNCHES = 1
#: Torch ops of a lookup split between TBE modules (tables of several row dtypes, polyrec.models.mixed_embeddings):
#: once, the whole batch's validation and its host bounds compared with its offsets on the device (the bounds'
#: page-locked copy, the comparison, ``any``, the flag's ``logical_or_``); per module, its ids joined, its offsets'
#: shifts copied to the device (page-locked, then moved), its bags' first positions gathered, shifted and joined.
SPLIT_TORCH_OPS = 6
SPLIT_TORCH_OPS_PER_MODULE = 6
#: Torch ops of one dense optimizer step: Adagrad's ``FusedAdagrad`` (two table copies to the device,
#: one launch), SGD and Adam with torch's foreach implementation (step counts and the foreach ops;
#: adam.py ``_multi_tensor_adam``), plus per parameter tensor the optimizer's Python and
#: ``zero_grad(set_to_none=True)``.
OPTIMIZER_FOREACH_OPS = {"sgd": 2, "adagrad": 3, "adam": 12}
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
    graphed_dense_s: float = GRAPHED_DENSE_HOST_S  # the dense half's host time when CUDA-graphed


@dataclass(frozen=True, kw_only=True, slots=True)
class Launches:
    """Kernel launches one phase issues from Python."""

    triton: int = 0
    torch_ops: int = 0

    def __add__(self, other: Launches) -> Launches:
        return Launches(triton=self.triton + other.triton, torch_ops=self.torch_ops + other.torch_ops)

    def seconds(self, costs: HostCosts) -> float:
        """Host seconds of these launches."""
        return self.triton * costs.triton_launch_s + self.torch_ops * costs.torch_op_s

    def step_seconds(self, costs: HostCosts) -> float:
        """Host seconds of a step that issues these launches: theirs plus the fixed part."""
        return self.seconds(costs) + costs.step_fixed_s


def host_costs(device: str | None = None) -> HostCosts:
    """The fitted host costs (``FITTED_TRITON_LAUNCH_S``, ``FITTED_TORCH_OP_S``, ``DEFAULT_STEP_FIXED_S``,
    ``GRAPHED_DENSE_HOST_S``)
    as measured on ``device``'s host where its calibration has a ``host_scale``
    (``polyrec.runtime.host_probe``): the launch costs times its ``value``, and the fixed part per
    step its ``fixed_ms`` where two probes measured one (else the fitted fixed part times the scale)."""
    scale, fixed_s, origin = stored_host_scale(device)
    return HostCosts(triton_launch_s=FITTED_TRITON_LAUNCH_S * scale, torch_op_s=FITTED_TORCH_OP_S * scale,
                     step_fixed_s=fixed_s, origin=origin, graphed_dense_s=GRAPHED_DENSE_HOST_S * scale)


def check_host_scale(device: str, stored: Any) -> None:
    """A stored ``host_scale`` (a hand-edited or damaged calibration file): a table with a finite scale
    above 0, a finite ``fixed_ms`` >= 0 where present, and a date; ValueError naming what is wrong."""
    def number(key: str, low_ok: bool) -> bool:
        value = stored.get(key)
        return finite_number(value) and (value >= 0 if low_ok else value > 0)

    where = f"calibration of {device}: 'host_scale'"
    if not isinstance(stored, dict):
        raise ValueError(f"{where} must be a table, got {stored!r}")
    if not number("value", low_ok=False):
        raise ValueError(f"{where}.value must be a positive number, got {stored.get('value')!r}")
    if "fixed_ms" in stored and not number("fixed_ms", low_ok=True):
        raise ValueError(f"{where}.fixed_ms must be a number >= 0, got {stored['fixed_ms']!r}")
    if not isinstance(stored.get("date"), str):
        raise ValueError(f"{where} has no date; run `polyrec hw calibrate` again")


def stored_host_scale(device: str | None) -> tuple[float, float, str]:
    """(launch-cost scale, fixed seconds per step, origin) of this machine's host against the fitted
    costs: 1 and ``DEFAULT_STEP_FIXED_S`` without a measurement."""
    fitted = "calibrated: fitted on measured host-bound steps (H200 machine, planner_accuracy 2026-11-30)"
    stored = (load_calibration(device) or {}).get("host_scale") if device else None
    if not stored:
        return 1.0, DEFAULT_STEP_FIXED_S, fitted + ", used for every host"
    check_host_scale(device, stored)
    scale = float(stored["value"])
    if "fixed_ms" in stored:
        fixed_s = float(stored["fixed_ms"]) / 1e3
        measured = f"launches x {scale:.3f} and {1e3 * fixed_s:.2f} ms per step"
    else:
        fixed_s = DEFAULT_STEP_FIXED_S * scale
        measured = f"x {scale:.3f}"
    return scale, fixed_s, f"{fitted}, {measured} measured on this host {stored['date']}"


def gemm_launches(backend: str, split_k: int, epilogue: str) -> Launches:
    """Launches of one ``polyrec.kernels.gemm.matmul`` call as the selector runs it."""
    if backend == "library":  # the library GEMM, then one Triton pass for the epilogue (gemm._library)
        fused_pass = 0 if epilogue in LIBRARY_EPILOGUES else 1
        bias_sum = 1 if epilogue == "cross_grad" else 0  # torch.sum of the pass's bias-gradient partials
        return Launches(triton=fused_pass, torch_ops=GEMM_CALL_TORCH_OPS + bias_sum)
    return Launches(triton=2 if split_k > 1 else 1, torch_ops=GEMM_CALL_TORCH_OPS + (1 if split_k > 1 else 0))


def tbe_launches(merge_levels: Sequence[int], update_variants: Sequence[Sequence[str]]) -> tuple[Launches, Launches]:
    """(forward, backward) launches of table-batched embedding modules, one per entry of
    ``merge_levels`` (the merge levels its selected update configs launch) and of ``update_variants``
    (the variant of each of its update launches: one, or one per dim group; a "lane" one needs the permute)."""
    modules = len(merge_levels)
    permutes = sum(TBE_PERMUTE_LAUNCHES for variants in update_variants if "lane" in variants)
    updates = sum(len(variants) for variants in update_variants)
    return (Launches(triton=TBE_FWD_LAUNCHES * modules, torch_ops=TBE_FWD_TORCH_OPS * modules),
            Launches(triton=permutes + updates + sum(merge_levels), torch_ops=TBE_BWD_TORCH_OPS * modules))


def split_launches(modules: int) -> Launches:
    """Torch ops of one lookup split between ``modules`` TBE modules (tables of several row dtypes,
    ``polyrec.models.mixed_embeddings``): SPLIT_TORCH_OPS_PER_MODULE each and SPLIT_TORCH_OPS once; none for one
    module."""
    if modules < 2:
        return Launches()
    return Launches(torch_ops=SPLIT_TORCH_OPS + SPLIT_TORCH_OPS_PER_MODULE * modules)


def optimizer_launches(optimizer: str, tensors: int) -> Launches:
    return Launches(torch_ops=OPTIMIZER_FOREACH_OPS[optimizer] + OPTIMIZER_OPS_PER_TENSOR * tensors)
