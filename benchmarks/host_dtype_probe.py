"""Why an eager DLRM Kaggle step with an fp32 dense half issues faster than the same step in bf16.

planner_accuracy at 64ef26b measured the Kaggle row with an fp32 dense half at 5.2-5.8 ms in every pass
against 5.8-9.2 ms for the bf16 rows, where the host model prices the two within 1%
(``planner_accuracy_runs_2026-12-02``). Here, in one process, DLRM Kaggle at batch 16384, eager, bf16 and
fp32 dense halves: interleaved rounds of wall-clock steps, then for each the host time per step by
cProfile (the functions that take it) and the kernels and torch ops it issues per step (profiler).

Writes ``$OUT/host_dtype_probe.json`` and ``$OUT/host_dtype_probe_<dtype>.txt`` (cProfile).

    PYTHONPATH=.:benchmarks OUT=. python3 benchmarks/host_dtype_probe.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from profiling import PROBE_POOL, host_profile, step_ms

PRESET, BATCH = "dlrm-criteo-kaggle", 16384
PRECISIONS = ("bf16", "fp32")


def trainer(precision: str):
    from polyrec.runtime import TrainConfig, Trainer

    cfg = TrainConfig(preset=PRESET, data="synthetic:uniform", batch_size=BATCH, steps=10**9, synthetic_pool=PROBE_POOL,
                      device="cuda", precision=precision, cuda_graphs=False)
    return Trainer(cfg, progress=False)


def ops_per_step(step, reps: int = 5) -> dict:
    """Torch ops (CPU side) and kernels (GPU side) per step, by the profiler."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
    cpu = {e.key: e.count / reps for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CPU
           and e.key.startswith("aten::")}
    kernels = sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA) / reps
    return {"aten_ops_per_step": sum(cpu.values()), "kernels_per_step": kernels,
            "aten_ops": dict(sorted(cpu.items(), key=lambda kv: -kv[1])[:40])}


def main() -> None:
    out = Path(os.environ.get("OUT", "."))
    trainers = {p: trainer(p) for p in PRECISIONS}
    result: dict = {"rounds": []}
    for r in range(6):
        for p, t in trainers.items():
            result["rounds"].append({"round": r, "precision": p, "ms_per_step": step_ms(t, steps=60)})
            print(result["rounds"][-1], flush=True)
    for p, t in trainers.items():
        times = sorted(x["ms_per_step"] for x in result["rounds"] if x["precision"] == p)
        result[f"median_ms_{p}"] = times[len(times) // 2]
        result[f"ops_{p}"] = ops_per_step(t.train_step)
        (out / f"host_dtype_probe_{p}.txt").write_text(host_profile(t.train_step, 100))
        print(p, result[f"median_ms_{p}"], {k: v for k, v in result[f"ops_{p}"].items() if k != "aten_ops"}, flush=True)
    with open(out / "host_dtype_probe.json", "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
