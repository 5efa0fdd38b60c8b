"""This machine's host speed against the planner's fitted host costs, from host-bound training steps.

The planner prices a step's CPU side as counted launches x fitted seconds per launch, plus a fixed
part per step (``polyrec.planner.host``). Those seconds were fitted on one machine; host-bound steps
of the same code measured up to 25% apart on other H200 machines. A per-launch micro-benchmark did
not track that; the probes run real steps instead, at sizes no benchmark row uses and whose GPU work
is a small fraction of their host work: the MLPerf model (the most launches of the presets) and the
DLRM Kaggle model (the fewest), tables capped at ``PROBE_ROW_CAP`` rows, ``PROBE_BATCH`` samples.

Two op mixes give two numbers per machine, ``host = fixed + scale x launches``: the launches'
scale against the fitted costs and the step's fixed part. One scale alone did not follow the
machines: the small models' host time measured 0.6-0.8x the MLPerf-structure probe's on one
machine and 0.75-1.0x on another, where the model says 0.50-0.60x (planner_accuracy at 0bd841d and
944f979). Where the two probes give no usable fit (a scale or fixed part below zero: noise larger
than the probes' difference), the MLPerf probe alone sets one scale for both, as before.

The host's speed is not steady either: on the H200 VM a fixed pure-Python workload took 21-50 ms in
trials seconds apart, and host-bound steps followed it (benchmarks/results/host_jitter_nvidia-h200_2026-11-30,
correlation 0.72 for dcnv2-small). One window of steps is one moment's speed; each probe takes the
median over several windows, and ``benchmarks/planner_accuracy.py`` spreads windows over its run.
"""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any

#: The probes: the presets with the most and the fewest launches per step, at a size no benchmark
#: row uses, host-bound by construction. The first also sets the scale alone when the fit fails.
PROBE_PRESETS = ("mlperf-dcnv2", "dlrm-criteo-kaggle")
PROBE_ROW_CAP = 1000
PROBE_BATCH = 512
PROBE_WARMUP, PROBE_STEPS = 5, 40
#: Windows of ``PROBE_STEPS`` steps per probe whose median is its step (``hw calibrate``).
PROBE_WINDOWS = 5
#: A probe must be host-bound: predicted host time at least this multiple of its device time.
MIN_HOST_OVER_DEVICE = 2.0


def probe_launches_ms(device_name: str, preset: str) -> float:
    """The planner's host time of ``preset``'s probe step without the fixed part, at the fitted launch
    costs (scale 1), ms; raises where the probe would not be host-bound."""
    from polyrec.models import preset as model_preset
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet
    from polyrec.planner.host import FITTED_TRITON_LAUNCH_S, host_costs

    model = model_spec_from_config(model_preset(preset).with_capped_rows(PROBE_ROW_CAP))
    constraints = PlanConstraints(weight_dtypes=("fp32",), optimizers=("rowwise_adagrad",),
                                  batch_per_gpu=PROBE_BATCH, allow_host_cache=False, dense_dtype="bf16",
                                  overlap="none")
    step = make_plan(model, parse_fleet(device_name), constraints).step
    device_ms = step.total_ms - step.host_excess_ms
    if step.host_ms < MIN_HOST_OVER_DEVICE * device_ms:
        raise RuntimeError(f"host probe {preset}: predicted host {step.host_ms:.2f} ms is under "
                           f"{MIN_HOST_OVER_DEVICE}x its device time {device_ms:.2f} ms on {device_name}; "
                           "the probe would not measure the host")
    costs = host_costs(device_name)
    return (step.host_ms - 1e3 * costs.step_fixed_s) * FITTED_TRITON_LAUNCH_S / costs.triton_launch_s


def probe_windows_ms(preset: str, windows: int) -> list[float]:
    """Median step (data phase excluded) of each of ``windows`` back-to-back windows of ``preset``'s
    probe, ms."""
    from polyrec.runtime import TrainConfig, Trainer
    from polyrec.runtime.bench import step_without_data_ms

    if windows < 1:
        raise ValueError(f"host probe: windows must be >= 1, got {windows}")
    cfg = TrainConfig(preset=preset, data="synthetic:uniform", batch_size=PROBE_BATCH,
                      steps=PROBE_WARMUP + windows * PROBE_STEPS, device="cuda", precision="bf16",
                      embedding_optimizer="rowwise_adagrad", row_cap=PROBE_ROW_CAP, log_every=10**9,
                      cuda_graphs=False)
    trainer = Trainer(cfg, progress=False)
    return [step_without_data_ms(trainer.benchmark(warmup=PROBE_WARMUP if w == 0 else 0, steps=PROBE_STEPS))
            for w in range(windows)]


def _fit(points: list[tuple[float, float]]) -> tuple[float, float, str]:
    """(scale, fixed ms, how) from (launches ms at scale 1, measured ms) per probe, first probe first."""
    from polyrec.planner.host import DEFAULT_STEP_FIXED_S

    (l1, m1), *rest = points
    if rest:
        l2, m2 = rest[0]
        if l1 != l2:
            scale = (m1 - m2) / (l1 - l2)
            fixed = m1 - scale * l1
            if scale > 0 and 0 <= fixed <= min(m1, m2):
                return scale, fixed, "two probes"
    fixed_default = 1e3 * DEFAULT_STEP_FIXED_S
    scale = m1 / (l1 + fixed_default)
    return scale, fixed_default * scale, "one probe" + (" (the two probes gave no positive fit)" if rest else "")


def host_scale_entry(probes: dict[str, tuple[list[float], float]]) -> dict[str, Any]:
    """The ``host_scale`` calibration entry from each probe's (windows ms, launches ms at scale 1), in
    ``PROBE_PRESETS`` order: ``value`` the launch costs' scale, ``fixed_ms`` the step's fixed part."""
    if not probes or any(not windows for windows, _ in probes.values()):
        raise ValueError("host probe: no window was measured")
    measured = {name: statistics.median(windows) for name, (windows, _) in probes.items()}
    scale, fixed, how = _fit([(launches, measured[name]) for name, (_, launches) in probes.items()])
    windows = min(len(w) for w, _ in probes.values())
    return {"value": scale, "fixed_ms": fixed, "fit": how,
            "probes": {name: {"windows_ms": list(w), "measured_ms": measured[name], "launches_ms": launches}
                       for name, (w, launches) in probes.items()},
            "probe": f"{' and '.join(probes)} rows <= {PROBE_ROW_CAP}, batch {PROBE_BATCH}, median of "
                     f"{windows}+ windows of {PROBE_STEPS} steps ({how})",
            "date": dt.date.today().isoformat()}


def measure_host_scale(device_name: str, windows: int = PROBE_WINDOWS) -> dict[str, Any]:
    """Run the probes on the present GPU; returns the ``host_scale`` entry for the calibration store."""
    return host_scale_entry({name: (probe_windows_ms(name, windows), probe_launches_ms(device_name, name))
                             for name in PROBE_PRESETS})
