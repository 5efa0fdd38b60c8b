"""This machine's host speed against the planner's fitted host costs, from one host-bound training step.

The planner prices a step's CPU side as counted launches x fitted seconds per launch
(``polyrec.planner.host``). Those seconds were fitted on one machine; host-bound steps of the same
code measured up to 25% apart on other H200 machines, all rows of a machine moving together
(planner_accuracy at a364e08 and b03e5aa). A per-launch micro-benchmark did not track that; this
probe runs a real step instead: the MLPerf model with tables capped at ``PROBE_ROW_CAP`` rows and
``PROBE_BATCH`` samples, whose GPU work is a small fraction of its host work, and compares its median
step (data phase excluded) with the planner's host prediction. The ratio, times the scale already
stored, is the new scale (so re-running converges rather than compounding).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

#: The probe: MLPerf DLRM-DCNv2's structure (26 tables, 3 cross layers) at a size no benchmark row
#: uses, host-bound by construction.
PROBE_PRESET = "mlperf-dcnv2"
PROBE_ROW_CAP = 1000
PROBE_BATCH = 512
PROBE_WARMUP, PROBE_STEPS = 5, 40
#: The probe must be host-bound: predicted host time at least this multiple of its device time.
MIN_HOST_OVER_DEVICE = 2.0


def measure_host_scale(device_name: str) -> dict[str, Any]:
    """Run the probe on the present GPU; returns the ``host_scale`` entry for the calibration store."""
    from polyrec.models import preset
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet
    from polyrec.planner.host import stored_host_scale
    from polyrec.runtime import TrainConfig, Trainer
    from polyrec.runtime.bench import step_without_data_ms

    model = model_spec_from_config(preset(PROBE_PRESET).with_capped_rows(PROBE_ROW_CAP))
    constraints = PlanConstraints(weight_dtypes=("fp32",), optimizers=("rowwise_adagrad",),
                                  batch_per_gpu=PROBE_BATCH, allow_host_cache=False, dense_dtype="bf16",
                                  overlap="none")
    step = make_plan(model, parse_fleet(device_name), constraints).step
    device_ms = step.total_ms - step.host_excess_ms
    if step.host_ms < MIN_HOST_OVER_DEVICE * device_ms:
        raise RuntimeError(f"host probe: predicted host {step.host_ms:.2f} ms is under {MIN_HOST_OVER_DEVICE}x "
                           f"its device time {device_ms:.2f} ms on {device_name}; the probe would not measure the host")
    cfg = TrainConfig(preset=PROBE_PRESET, data="synthetic:uniform", batch_size=PROBE_BATCH,
                      steps=PROBE_WARMUP + PROBE_STEPS, device="cuda", precision="bf16",
                      embedding_optimizer="rowwise_adagrad", row_cap=PROBE_ROW_CAP, log_every=10**9)
    got = Trainer(cfg, progress=False).benchmark(warmup=PROBE_WARMUP, steps=PROBE_STEPS)
    measured_ms = step_without_data_ms(got)
    current, _ = stored_host_scale(device_name)
    return {"value": current * measured_ms / step.host_ms, "measured_ms": measured_ms,
            "predicted_ms": step.host_ms, "scale_before": current,
            "probe": f"{PROBE_PRESET} rows <= {PROBE_ROW_CAP}, batch {PROBE_BATCH}, median of {PROBE_STEPS} steps",
            "date": dt.date.today().isoformat()}
