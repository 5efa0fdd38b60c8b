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


def kernel_table(step: Callable[[], object], *, reps: int = 3, warmup: int = 2, trace: Path | None = None,
                 per_call: tuple[str, ...] = ()) -> list[dict]:
    """Run ``step`` ``warmup`` times, then ``reps`` times under the profiler; rows of the CUDA kernels
    grouped by name with their calls and milliseconds per step, largest first. ``trace``: also write
    the timeline there (Chrome trace JSON: every kernel with its stream, start and duration). The kernels
    named in ``per_call`` also get ``call_ms``: each launch of a step apart, in launch order (``calls_in_order``)."""
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
    if per_call:
        launches = [(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in prof.events()
                    if e.device_type == torch.autograd.DeviceType.CUDA]
        calls = calls_in_order(launches, per_call, reps)
        for row in rows:
            if row["kernel"] in calls:
                row["call_ms"] = calls[row["kernel"]]  # None: not as many launches in every step
    return sorted(rows, key=lambda r: -r["ms_per_step"])


def calls_in_order(launches: list[tuple[str, float, float]], names: tuple[str, ...],
                   reps: int) -> dict[str, list[float] | None]:
    """Milliseconds of each launch of a step of the kernels ``names``, by its place in the step's launches of that
    kernel (the mean over ``reps`` steps): ``launches`` (name, start us, duration us) of ``reps`` steps, a kernel
    launched as many times in every step. None for a kernel whose launches do not divide evenly over the steps
    (its places would not line up)."""
    durations: dict[str, list[float]] = {}
    for name, _, us in sorted(launches, key=lambda launch: launch[1]):
        if name in names:
            durations.setdefault(name, []).append(us)
    calls: dict[str, list[float] | None] = {}
    for name, seen in durations.items():
        per_step = len(seen) // reps
        calls[name] = [sum(seen[i::per_step]) / reps / 1e3 for i in range(per_step)] if len(seen) % reps == 0 else None
    return calls


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
