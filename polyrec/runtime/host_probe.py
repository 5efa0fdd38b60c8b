"""This machine's host speed against the planner's fitted host costs, from one host-bound training step.

The planner prices a step's CPU side as counted launches x fitted seconds per launch
(``polyrec.planner.host``). Those seconds were fitted on one machine; host-bound steps of the same
code measured up to 25% apart on other H200 machines, all rows of a machine moving together
(planner_accuracy at a364e08 and b03e5aa). A per-launch micro-benchmark did not track that; this
probe runs a real step instead: the MLPerf model with tables capped at ``PROBE_ROW_CAP`` rows and
``PROBE_BATCH`` samples, whose GPU work is a small fraction of its host work, and compares its median
step (data phase excluded) with the planner's host prediction. The ratio, times the scale already
stored, is the new scale (so re-running converges rather than compounding).

The host's speed is not steady: on the H200 VM a fixed pure-Python workload took 21-50 ms in trials
seconds apart, and host-bound steps followed it (benchmarks/results/host_jitter_nvidia-h200_2026-11-30,
correlation 0.72 for dcnv2-small). One window of steps is one moment's speed; the probe takes the
median over several windows, and ``benchmarks/planner_accuracy.py`` spreads windows over its run.
"""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any

#: The probe: MLPerf DLRM-DCNv2's structure (26 tables, 3 cross layers) at a size no benchmark row
#: uses, host-bound by construction.
PROBE_PRESET = "mlperf-dcnv2"
PROBE_ROW_CAP = 1000
PROBE_BATCH = 512
PROBE_WARMUP, PROBE_STEPS = 5, 40
#: Windows of ``PROBE_STEPS`` steps whose median is the probe's step (``hw calibrate``).
PROBE_WINDOWS = 5
#: The probe must be host-bound: predicted host time at least this multiple of its device time.
MIN_HOST_OVER_DEVICE = 2.0


def probe_prediction_ms(device_name: str) -> float:
    """The planner's host time of the probe step on ``device_name`` (at the stored host scale), ms;
    raises where the probe would not be host-bound."""
    from polyrec.models import preset
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet

    model = model_spec_from_config(preset(PROBE_PRESET).with_capped_rows(PROBE_ROW_CAP))
    constraints = PlanConstraints(weight_dtypes=("fp32",), optimizers=("rowwise_adagrad",),
                                  batch_per_gpu=PROBE_BATCH, allow_host_cache=False, dense_dtype="bf16",
                                  overlap="none")
    step = make_plan(model, parse_fleet(device_name), constraints).step
    device_ms = step.total_ms - step.host_excess_ms
    if step.host_ms < MIN_HOST_OVER_DEVICE * device_ms:
        raise RuntimeError(f"host probe: predicted host {step.host_ms:.2f} ms is under {MIN_HOST_OVER_DEVICE}x "
                           f"its device time {device_ms:.2f} ms on {device_name}; the probe would not measure the host")
    return step.host_ms


def probe_windows_ms(windows: int) -> list[float]:
    """Median step (data phase excluded) of each of ``windows`` back-to-back windows of the probe, ms."""
    from polyrec.runtime import TrainConfig, Trainer
    from polyrec.runtime.bench import step_without_data_ms

    if windows < 1:
        raise ValueError(f"host probe: windows must be >= 1, got {windows}")
    cfg = TrainConfig(preset=PROBE_PRESET, data="synthetic:uniform", batch_size=PROBE_BATCH,
                      steps=PROBE_WARMUP + windows * PROBE_STEPS, device="cuda", precision="bf16",
                      embedding_optimizer="rowwise_adagrad", row_cap=PROBE_ROW_CAP, log_every=10**9)
    trainer = Trainer(cfg, progress=False)
    return [step_without_data_ms(trainer.benchmark(warmup=PROBE_WARMUP if w == 0 else 0, steps=PROBE_STEPS))
            for w in range(windows)]


def host_scale_entry(device_name: str, windows_ms: list[float], predicted_ms: float) -> dict[str, Any]:
    """The ``host_scale`` calibration entry from probe windows: the stored scale times the median
    window over the prediction made at that scale."""
    from polyrec.planner.host import stored_host_scale

    if not windows_ms:
        raise ValueError("host probe: no window was measured")
    measured_ms = statistics.median(windows_ms)
    current, _ = stored_host_scale(device_name)
    return {"value": current * measured_ms / predicted_ms, "measured_ms": measured_ms,
            "windows_ms": list(windows_ms), "predicted_ms": predicted_ms, "scale_before": current,
            "probe": f"{PROBE_PRESET} rows <= {PROBE_ROW_CAP}, batch {PROBE_BATCH}, median of "
                     f"{len(windows_ms)} windows of {PROBE_STEPS} steps",
            "date": dt.date.today().isoformat()}


def measure_host_scale(device_name: str, windows: int = PROBE_WINDOWS) -> dict[str, Any]:
    """Run the probe on the present GPU; returns the ``host_scale`` entry for the calibration store."""
    predicted_ms = probe_prediction_ms(device_name)
    return host_scale_entry(device_name, probe_windows_ms(windows), predicted_ms)
