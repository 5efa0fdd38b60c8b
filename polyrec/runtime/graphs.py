"""Whether the trainer CUDA-graphs its dense half: as asked, or ("auto") where the planner predicts
the eager step bound by the host.

An eager step's CPU issues every kernel from Python. Where that takes longer than the GPU runs them
(small batches; the small presets at any batch) the step waits on the host, and a CUDA graph of the
dense forward and backward replays their ~40 GEMMs and their passes with one launch: MLPerf
DLRM-DCNv2 at batch 16384 (tables capped at 4M rows) ran 5.57 ms per step graphed against 6.88 ms
eager on one H200 and 11.0-11.6 ms eager on another (e2e and checkout_ab, 2026-12-01). Where the GPU
is the bound, the graph costs a little: 19.40 against 19.27 ms at full size, batch 65536 (its GEMMs
are chosen by GPU time; benchmarks/results/graphs_x0_2026-12-04/). "auto" asks
``polyrec.planner.make_plan`` for this run's model, batch, dtypes and optimizers on the detected
device and graphs the dense half when the predicted host time of the eager step exceeds its device
time (``StepBreakdown.host_excess_ms`` > 0); an fp8 run (``--precision fp8``) by the planner's fp8 step
(``planner_dtype``; until the forty-fourth session, by its bf16 step). It stays eager where the planner does
not model the run (the CPU, several ranks, the semi-synchronous pipeline, torch's embedding or dense layers):
there the choice is the user's (``--cuda-graphs``).

The same prediction says whether the step, as it will run (graphed or eager), waits on the host with its
embedding updates selected by GPU time (``GraphChoice.host_bound``: the planner's ``StepBreakdown.host_bound``
or ``graphed_host_bound``): the trainer then has its embedding backward choose fewer launches (longer merge
levels, no lane permute pass where the scan update is as fast; ``TableBatchedEmbedding.host_bound``), the
selection the planner's host time counts. That stays so where the fewer launches leave the step bound by the
GPU.

``capture`` makes the graphed dense half, warmed up with the loss's true gradient (not
make_graphed_callables's uninitialized one, which fp8 scaling would record).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from polyrec.kernels.gemm import selecting_as_captured
from polyrec.kernels.master_copies import keeping_in_capture
from polyrec.models.embeddings import tbe_modules

#: Warm-up passes of the dense half before its capture: ``torch.cuda.make_graphed_callables``'s default
#: (``num_warmup_iters``), run by ``capture`` itself with the loss's true gradient.
WARMUP_PASSES = 3


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphChoice:
    """Whether the dense half runs as a CUDA graph, and why (shown in the run summary and its log)."""

    on: bool
    reason: str
    # the step as it runs would wait on the host with its updates selected by GPU time (False: not modelled)
    host_bound: bool = False


def check_choice(value: object) -> None:
    """``TrainConfig.cuda_graphs`` must be True, False or "auto"."""
    if not (value is True or value is False or value == "auto"):
        raise ValueError(f"cuda_graphs must be True, False or 'auto', got {value!r}")


def not_modelled(cfg, rt, distributed: bool) -> str | None:
    """Why "auto" cannot ask the planner about this run (None: it can)."""
    if rt.device.type != "cuda":
        return "no GPU"
    if distributed:
        return "several ranks"
    if cfg.pipeline != "sync":
        return "semi-sync pipeline"
    if rt.embedding_backend != "polyrec" or rt.dense_backend != "polyrec":
        return "torch layers (the planner models polyrec's)"
    return None


def choose_graphs(cfg, rt, model_config, distributed: bool) -> GraphChoice:
    """The dense half's CUDA graph for this run: ``cfg.cuda_graphs`` if True / False, else by the
    planner's prediction of the eager step on the detected device; and whether the step as it runs
    is host-bound, where the planner models the run."""
    why_not = not_modelled(cfg, rt, distributed)
    try:
        prediction = None if why_not else predicted_ms(cfg, rt, model_config)
    except (ValueError, KeyError) as exc:  # a GPU outside the catalog, a model the planner refuses
        prediction, why_not = None, f"no prediction: {exc}"
    if cfg.cuda_graphs is True or cfg.cuda_graphs is False:
        return GraphChoice(on=cfg.cuda_graphs, reason="asked" if cfg.cuda_graphs else "off",
                           host_bound=prediction is not None and prediction.host_bound(cfg.cuda_graphs))
    if prediction is None:
        return GraphChoice(on=False, reason=f"auto: eager ({why_not})")
    on = prediction.host_ms > prediction.device_ms  # with the selection it would run eager (host_bound's)
    reason = (f"auto: {'graphed' if on else 'eager'}, predicted host {prediction.host_ms:.1f} ms "
              f"{'>' if on else '<='} device {prediction.device_ms:.1f} ms per eager step")
    return GraphChoice(on=on, reason=reason, host_bound=prediction.host_bound(on))


@dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    """The planner's host and device ms of one step of the run, eager and with the dense half graphed, and
    whether each would wait on the host with its embedding updates selected by GPU time."""

    host_ms: float
    graphed_host_ms: float
    device_ms: float
    eager_host_bound: bool
    graphed_host_bound: bool

    def host_bound(self, graphed: bool) -> bool:
        return self.graphed_host_bound if graphed else self.eager_host_bound


def predicted_ms(cfg, rt, model_config) -> Prediction:
    """Host (eager and graphed) and device ms of one step of this run on its GPU, as the planner predicts them."""
    from polyrec.hardware.detect import detect
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet
    from polyrec.runtime.config import row_dtype_names

    spec = detect(rt.device.index or 0).spec
    # per-table row dtypes priced as the planner's choice among them (close: it picks by the same costs)
    weight_dtypes = tuple(dict.fromkeys(row_dtype_names(cfg.embedding_dtype)))
    constraints = PlanConstraints(weight_dtypes=weight_dtypes, optimizers=(cfg.embedding_optimizer,),
                                  batch_per_gpu=cfg.batch_size, allow_host_cache=False,
                                  dense_dtype=planner_dtype(rt),
                                  dense_optimizer=cfg.dense_optimizer, overlap="none")
    step = make_plan(model_spec_from_config(model_config), parse_fleet(spec.name), constraints).step
    return Prediction(host_ms=step.host_ms, graphed_host_ms=step.graphed_host_ms,
                      device_ms=step.total_ms - step.host_excess_ms, eager_host_bound=step.host_bound,
                      graphed_host_bound=step.graphed_host_bound)


def planner_dtype(rt) -> str:
    """The planner's dense dtype of this run: fp8 (its GEMMs in fp8 beside bf16 activations), else the
    compute dtype's."""
    if rt.dense_fp8:
        return "fp8"
    return "bf16" if rt.compute_dtype.itemsize == 2 else "fp32"


def mark_host_bound(model, host_bound: bool) -> None:
    """Tell every polyrec embedding module of ``model`` whether its step waits on the host
    (``TableBatchedEmbedding.host_bound``: its update config weighs its launches' host issue)."""
    for tbe in tbe_modules(model):
        tbe.host_bound = host_bound


def capture(module: nn.Module, sample: tuple[torch.Tensor, ...], *, keep_copies: bool = False) -> nn.Module:
    """``module`` (a scalar loss of ``sample``) as ``torch.cuda.make_graphed_callables`` makes it, warmed up
    here with the loss's true gradient (1), not by make_graphed_callables: its warm-up hands the backward
    uninitialized memory as the gradient (``torch.empty_like``), and fp8 delayed scaling records the
    backward's maxima into its history. One such maximum of 1.2e24 (H200, forty-sixth session) scaled a
    graphed fp8 run's gradients of every layer below the top MLP's second to zero; which memory the warm-up
    got decided whether that happened (a change in the cross network's allocations was enough).
    ``keep_copies``: the dense optimizer writes the masters' compute-dtype copies (``FusedAdagrad``), so the
    graph reads those copies instead of casting each master in every replay
    (``polyrec.kernels.master_copies.keeping_in_capture``); each replay first refreshes any copy a write
    from elsewhere left stale."""
    warm_up(module, sample)
    if not keep_copies:
        return torch.cuda.make_graphed_callables(module, sample, num_warmup_iters=0)
    with keeping_in_capture() as kept:
        graphed = torch.cuda.make_graphed_callables(module, sample, num_warmup_iters=0)
    replay = graphed.forward

    def forward(*args):
        kept.refresh()
        return replay(*args)

    graphed.forward = forward
    return graphed


def warm_up(module: nn.Module, sample: tuple[torch.Tensor, ...]) -> None:
    """What make_graphed_callables's warm-up runs (each lazy initialization and compile before the capture,
    on a side stream, no parameter's ``.grad`` touched), with the loss's gradient 1; its GEMMs selected as
    the capture will select them, so that none is first compiled or loaded inside the capture."""
    inputs = tuple(t for t in (*sample, *module.parameters()) if t.requires_grad)
    torch.cuda.synchronize()
    with torch.cuda.stream(torch.cuda.Stream()), selecting_as_captured():
        for _ in range(WARMUP_PASSES):
            loss = module(*sample)  # []
            if loss.requires_grad:
                torch.autograd.grad(loss, inputs, grad_outputs=torch.ones_like(loss))
    torch.cuda.synchronize()
