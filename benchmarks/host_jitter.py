"""How steady a host-bound training step is, and what steadies it: CPU affinity, the garbage collector.

Host-bound planner_accuracy rows of the same launch count measured 7.7-10.3 ms (minus data) in one run
(planner_accuracy_nvidia-h200_2026-11-30 at e4b13d9), and one rank of a two-GPU step is behind the
other by milliseconds with the slow rank changing between runs (multi_gpu_world2_profile). Both point
at the CPU side. This diagnostic builds fresh trainers for host-bound configurations, interleaving
modes within each repetition so that drift over time hits every mode alike:

- ``free``: as the trainer runs today (the OS may move the Python thread between CPUs);
- ``core``: the Python thread bound to one CPU (the first of the GPU's local CPUs);
- ``node``: the process bound to the GPU's local CPUs (``/sys/bus/pci/devices/<gpu>/local_cpulist``);
- ``nogc``: free, with the cyclic garbage collector off while timing (objects frozen after the build).

Each trial reports the median step interval (``Trainer.benchmark``) and the time of a fixed pure-Python
workload run just before it (a CPU-speed probe). Run on the GPU machine:
``PYTHONPATH=. python3 benchmarks/host_jitter.py`` (about 1.5 minutes), ``--quick`` for a smoke test.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import time
from pathlib import Path

CONFIGS = (("dcnv2-small", 16384), ("dlrm-criteo-kaggle", 65536))
MODES = ("free", "core", "node", "nogc")
#: Iterations of the pure-Python workload (about 20 ms on a 2020s server core).
PROBE_ITERS = 200_000


def gpu_local_cpus() -> set[int] | None:
    """CPUs local to GPU 0 of this process (its PCI device's ``local_cpulist``), or None if unknown."""
    try:
        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    domain, rest = bus.lower().split(":", 1)
    path = Path(f"/sys/bus/pci/devices/{int(domain, 16):04x}:{rest}/local_cpulist")
    if not path.exists():
        return None
    cpus: set[int] = set()
    for part in path.read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_probe_ms() -> float:
    """A fixed pure-Python workload (dict and list traffic, like the trainer's Python): milliseconds."""
    t0 = time.perf_counter()
    table: dict[int, int] = {}
    for i in range(PROBE_ITERS):
        table[i & 1023] = table.get((i * 7) & 1023, 0) + 1
    return 1e3 * (time.perf_counter() - t0)


def trial(preset: str, batch: int, mode: str, *, local: set[int] | None, steps: int) -> dict:
    import torch

    from polyrec.runtime import TrainConfig, Trainer

    everything = os.sched_getaffinity(0)
    if mode == "core":
        os.sched_setaffinity(0, {min(local or everything)})
    elif mode == "node":
        os.sched_setaffinity(0, local or everything)
    cfg = TrainConfig(preset=preset, data="synthetic:uniform", batch_size=batch, steps=10**6, device="cuda",
                      precision="bf16", embedding_optimizer="rowwise_adagrad", log_every=10**9,
                      cuda_graphs=False)
    try:
        trainer = Trainer(cfg, progress=False)
        trainer.sync()
        probe = cpu_probe_ms()
        if mode == "nogc":
            gc.collect()
            gc.freeze()
            gc.disable()
        got = trainer.benchmark(warmup=5, steps=steps)
    finally:
        gc.enable()
        gc.unfreeze()
        os.sched_setaffinity(0, everything)
    del trainer
    gc.collect()
    torch.cuda.empty_cache()
    host = sum(v for k, v in got.items() if k.endswith("_host_ms"))
    return {"preset": preset, "batch": batch, "mode": mode, "median_step_ms": got["median_step_ms"],
            "mean_step_ms": got["ms_per_step"], "host_phases_ms": host, "data_ms": got.get("data_ms", 0.0),
            "data_host_ms": got.get("data_host_ms", 0.0), "cpu_probe_ms": probe}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition, small batches")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    import torch

    from polyrec.results import write_results

    if not torch.cuda.is_available():
        raise SystemExit("host_jitter needs a GPU")
    local = gpu_local_cpus()
    configs = (("dcnv2-small", 2048),) if args.quick else CONFIGS
    reps = 1 if args.quick else args.reps
    rows = []
    for rep in range(reps):
        for preset, batch in configs:
            for mode in MODES:
                row = {"rep": rep, **trial(preset, batch, mode, local=local, steps=args.steps)}
                rows.append(row)
                print(f"rep {rep} {preset:<20} B={batch:<6} {mode:<5} median {row['median_step_ms']:7.2f} ms  "
                      f"mean {row['mean_step_ms']:7.2f}  host phases {row['host_phases_ms']:7.2f}  "
                      f"cpu probe {row['cpu_probe_ms']:6.2f} ms", flush=True)
    summary: dict = {"cpus": len(os.sched_getaffinity(0)), "gpu_local_cpus": len(local) if local else None}
    for preset, batch in configs:
        for mode in MODES:
            got = [r["median_step_ms"] for r in rows if r["preset"] == preset and r["mode"] == mode]
            key = f"{preset}_{batch}_{mode}"
            summary[f"{key}_median_ms"] = statistics.median(got)
            summary[f"{key}_spread"] = (max(got) - min(got)) / statistics.median(got)
    write_results("host_jitter", {"rows": rows}, rows=rows, summary=summary)
    for k, v in summary.items():
        print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")


if __name__ == "__main__":
    main()
