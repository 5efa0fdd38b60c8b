"""A/B of the kept compute-dtype copies of the dense masters (``polyrec.kernels.master_copies``: written by
``FusedAdagrad``, handed to the forward instead of a cast) in the training step, eager:

1. full-size ``mlperf-dcnv2`` at batch 65536 (``profiling.mlperf_trainer``, device-bound): interleaved rounds
   of 40 steps with the copies kept and with the masters cast every step (the code before), then each way's
   kernels by the profiler (device ms per step, the bf16 copy kernels apart);
2. ``dcnv2-small`` at batch 4096, uniform ids (host-bound eager): interleaved rounds of 100 steps.

Writes ``$OUT/master_copies_ab.json``.

    PYTHONPATH=.:benchmarks OUT=. python3 benchmarks/master_copies_ab.py
"""

from __future__ import annotations

import gc
import json
import os

import torch

from polyrec.kernels import dcn, gemm, master_copies
from profiling import interleaved_rounds, kernel_table, mlperf_trainer, warm_each

ROUNDS = 6
#: Kernel names of torch's fp32 -> bf16 copies (the casts the kept copies replace).
CAST_KERNEL = "bfloat16_copy_kernel"


def _cast(t, dtype):
    """The cast every step (``compute_copy`` before the copies were kept)."""
    return t if t is None or t.dtype == dtype else t.to(dtype)


def policies(trainer) -> dict:
    def kept() -> None:
        gemm.compute_copy = dcn.compute_copy = master_copies.compute_copy

    def cast() -> None:
        gemm.compute_copy = dcn.compute_copy = _cast
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


def main() -> None:
    result = {}
    trainer = mlperf_trainer()
    full = rounds(trainer, 40)
    for name, apply in full.pop("ways").items():
        apply()
        kernels = kernel_table(trainer.train_step, reps=5)
        casts = [k for k in kernels if CAST_KERNEL in k["kernel"]]
        full[f"kernel_ms_per_step_{name}"] = sum(k["ms_per_step"] for k in kernels)
        full[f"cast_kernels_{name}"] = casts
        print(name, f"kernels {full[f'kernel_ms_per_step_{name}']:.3f} ms per step, casts", casts, flush=True)
    result["mlperf_full_65536"] = full
    policies(trainer)["kept"]()
    del trainer
    gc.collect()
    torch.cuda.empty_cache()
    from polyrec.runtime import TrainConfig, Trainer

    small = Trainer(TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=4096, steps=10**9,
                                synthetic_pool=4, device="cuda", cuda_graphs=False), progress=False)
    host = rounds(small, 100)
    host.pop("ways")
    result["dcnv2_small_4096"] = host
    policies(small)["kept"]()
    print({k: v["median_ms"] for k, v in result.items()}, flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "master_copies_ab.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
