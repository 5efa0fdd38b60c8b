"""Whether the trainer CUDA-graphs its dense half: as asked, or ("auto") where the planner predicts
the eager step bound by the host.

An eager step's CPU issues every kernel from Python. Where that takes longer than the GPU runs them
(small batches; the small presets at any batch) the step waits on the host, and a CUDA graph of the
dense forward and backward replays their ~40 GEMMs and their passes with one launch: MLPerf
DLRM-DCNv2 at batch 16384 (tables capped at 4M rows) ran 5.57 ms per step graphed against 6.88 ms
eager on one H200 and 11.0-11.6 ms eager on another (e2e and checkout_ab, 2026-12-01). Where the GPU
is the bound, the graph costs a little: 20.22 against 19.51 ms at full size, batch 65536 (its GEMMs
are chosen by GPU time). "auto" asks ``polyrec.planner.make_plan`` for this run's model, batch,
dtypes and optimizers on the detected device and graphs the dense half when the predicted host time
of the eager step exceeds its device time (``StepBreakdown.host_excess_ms`` > 0). It stays eager
where the planner does not model the run (the CPU, several ranks, the semi-synchronous pipeline,
torch's embedding or dense layers): there the choice is the user's (``--cuda-graphs``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphChoice:
    """Whether the dense half runs as a CUDA graph, and why (shown in the run summary and its log)."""

    on: bool
    reason: str


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
    planner's prediction of the eager step on the detected device."""
    if cfg.cuda_graphs is True or cfg.cuda_graphs is False:
        return GraphChoice(on=cfg.cuda_graphs, reason="asked" if cfg.cuda_graphs else "off")
    why_not = not_modelled(cfg, rt, distributed)
    if why_not:
        return GraphChoice(on=False, reason=f"auto: eager ({why_not})")
    try:
        host_ms, device_ms = predicted_host_and_device_ms(cfg, rt, model_config)
    except (ValueError, KeyError) as exc:  # a GPU outside the catalog, a model the planner refuses
        return GraphChoice(on=False, reason=f"auto: eager (no prediction: {exc})")
    on = host_ms > device_ms
    return GraphChoice(on=on, reason=f"auto: {'graphed' if on else 'eager'}, predicted host {host_ms:.1f} ms "
                                     f"{'>' if on else '<='} device {device_ms:.1f} ms per eager step")


def predicted_host_and_device_ms(cfg, rt, model_config) -> tuple[float, float]:
    """(host, device) ms of one eager step of this run on its GPU, as the planner predicts them."""
    from polyrec.hardware.detect import detect
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet

    spec = detect(rt.device.index or 0).spec
    constraints = PlanConstraints(weight_dtypes=(cfg.embedding_dtype,), optimizers=(cfg.embedding_optimizer,),
                                  batch_per_gpu=cfg.batch_size, allow_host_cache=False,
                                  dense_dtype="bf16" if rt.compute_dtype.itemsize == 2 else "fp32",
                                  dense_optimizer=cfg.dense_optimizer, overlap="none")
    step = make_plan(model_spec_from_config(model_config), parse_fleet(spec.name), constraints).step
    return step.host_ms, step.total_ms - step.host_excess_ms
