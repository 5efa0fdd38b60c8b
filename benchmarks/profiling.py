"""The GPU kernels of a repeated step, by the torch profiler, and its host functions, by cProfile: one
format of each for the benchmarks."""

from __future__ import annotations

import cProfile
import io
from pathlib import Path
import pstats
import time
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

#: Synthetic batches the probes' step cycles: as many as e2e.py's measured runs (its SYNTHETIC_POOL; e2e.py is
#: not imported, it points Triton at a cold cache). The probes cycled 4 until the forty-fourth session: a
#: 4-batch pool is memorised within ~15 steps, and the memorised step ran 1.7% faster than one on new batches
#: (benchmarks/results/data_pool_probe_nvidia-h200_2026-12-02, capped tables), so their absolute times flattered.
PROBE_POOL = 45


def kernel_table(step: Callable[[], object], *, reps: int = 3, warmup: int = 2, trace: Path | None = None) -> list[dict]:
    """Run ``step`` ``warmup`` times, then ``reps`` times under the profiler; rows of the CUDA kernels
    grouped by name with their calls and milliseconds per step, largest first. ``trace``: also write
    the timeline there (Chrome trace JSON: every kernel with its stream, start and duration)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    rows = []
    for evt in prof.key_averages():
        cuda_us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if cuda_us > 0 and evt.device_type == torch.autograd.DeviceType.CUDA:
            rows.append({"kernel": evt.key[:110], "calls_per_step": evt.count / reps, "ms_per_step": cuda_us / 1e3 / reps})
    return sorted(rows, key=lambda r: -r["ms_per_step"])


def host_profile(step: Callable[[], object], steps: int) -> str:
    """The Python functions that take the host's time in ``steps`` calls of ``step`` (cProfile, by own
    time, the top 30), the device idle before and after."""
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
    return text.getvalue()


def step_ms(trainer, *, steps: int = 20, warmup: int = 3) -> float:
    """Milliseconds per ``trainer.train_step()`` over ``steps`` steps after ``warmup`` untimed ones, the
    device drained before and after (the probes' interleaved A/B rounds)."""
    for _ in range(warmup):
        trainer.train_step()
    trainer.sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.train_step()
    trainer.sync()
    return (time.perf_counter() - t0) / steps * 1e3


def mlperf_trainer():
    """The probes' full-size step: ``mlperf-dcnv2`` at batch 65536 on uniform synthetic ids (a pool of
    ``PROBE_POOL`` batches), on the GPU."""
    from polyrec.runtime import TrainConfig, Trainer

    cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9,
                      synthetic_pool=PROBE_POOL, device="cuda", cuda_graphs=False)
    return Trainer(cfg, progress=False)


def warm_each(trainer, policies: dict, steps: int) -> None:
    """Put each of ``policies`` (name -> a callable that puts it in place) in place in turn and run
    ``steps`` training steps under it (its kernels compiled and selected), then drain the device."""
    for apply in policies.values():
        apply()
        for _ in range(steps):
            trainer.train_step()
    trainer.sync()


def interleaved_rounds(trainer, policies: dict, rounds: int, *, key: str = "policy", steps: int = 20) -> list[dict]:
    """``rounds`` rounds over ``policies`` in turn (name -> a callable that puts that policy in place),
    each timed by ``step_ms``: rows {"round", ``key``: the name, "ms_per_step"}, printed as they come."""
    rows = []
    for r in range(rounds):
        for name, apply in policies.items():
            apply()
            rows.append({"round": r, key: name, "ms_per_step": step_ms(trainer, steps=steps)})
            print(rows[-1], flush=True)
    return rows
