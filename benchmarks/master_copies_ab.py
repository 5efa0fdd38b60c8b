"""A/B of the kept compute-dtype copies of the dense masters (``polyrec.kernels.master_copies``: written by
``FusedAdagrad``, handed to the forward instead of a cast) in the training step, eager:

for each of ``--cases`` (default: full-size ``mlperf-dcnv2`` at batch 65536, device-bound, and ``dcnv2-small``
at 4096, host-bound; uniform ids), interleaved rounds of 40 steps (100 below batch 65536) with the copies kept
and with the masters cast every step (the code before), then each way's kernels by the profiler (device ms
per step, the bf16 copy kernels apart).

Writes ``$OUT/master_copies_ab.json``.

    PYTHONPATH=.:benchmarks OUT=. python3 benchmarks/master_copies_ab.py
"""

from __future__ import annotations

import argparse
import gc
import json
import os

import torch

from polyrec.kernels import dcn, gemm_layers, master_copies
from profiling import PROBE_POOL, interleaved_rounds, kernel_table, warm_each

ROUNDS = 6
#: Kernel names of torch's fp32 -> bf16 copies (the casts the kept copies replace).
CAST_KERNEL = "bfloat16_copy_kernel"


def policies(trainer) -> dict:
    def kept() -> None:
        gemm_layers.compute_copy = dcn.compute_copy = master_copies.compute_copy

    def cast() -> None:
        gemm_layers.compute_copy = dcn.compute_copy = master_copies.cast  # a cast every step: the code before
        for p in trainer.model.dense_parameters():
            master_copies.drop(p)  # FusedAdagrad writes no copy then

    return {"kept": kept, "cast": cast}


def rounds(trainer, steps: int) -> dict:
    ways = policies(trainer)
    warm_each(trainer, ways, 3)
    rows = interleaved_rounds(trainer, ways, ROUNDS, key="copies", steps=steps)
    medians = {}
    for name in ways:
        times = sorted(r["ms_per_step"] for r in rows if r["copies"] == name)
        medians[name] = times[len(times) // 2]
    return {"rounds": rows, "median_ms": medians, "ways": ways}


def case_trainer(preset: str, batch: int, row_cap: int | None):
    from polyrec.runtime import TrainConfig, Trainer

    return Trainer(TrainConfig(preset=preset, data="synthetic:uniform", batch_size=batch, steps=10**9, row_cap=row_cap,
                               synthetic_pool=PROBE_POOL, device="cuda", cuda_graphs=False), progress=False)


def measure_case(trainer, steps: int) -> dict:
    """Interleaved rounds of both ways, then each way's kernels by the profiler (the copy kernels apart)."""
    found = rounds(trainer, steps)
    for name, apply in found.pop("ways").items():
        apply()
        kernels = kernel_table(trainer.train_step, reps=5)
        found[f"kernel_ms_per_step_{name}"] = sum(k["ms_per_step"] for k in kernels)
        found[f"cast_kernels_{name}"] = [k for k in kernels if CAST_KERNEL in k["kernel"]]
        print(name, f"kernels {found[f'kernel_ms_per_step_{name}']:.3f} ms per step, casts",
              found[f"cast_kernels_{name}"], flush=True)
    policies(trainer)["kept"]()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="mlperf-dcnv2:65536,dcnv2-small:4096",
                        help="PRESET:BATCH[:ROW_CAP],... (default: the full-size step and a host-bound one)")
    args = parser.parse_args()
    result = {}
    for case in args.cases.split(","):
        preset, batch, *cap = case.split(":")
        trainer = case_trainer(preset, int(batch), int(cap[0]) if cap else None)
        result[case] = measure_case(trainer, 40 if int(batch) >= 65536 else 100)
        del trainer
        gc.collect()
        torch.cuda.empty_cache()
    print({k: v["median_ms"] for k, v in result.items()}, flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "master_copies_ab.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
