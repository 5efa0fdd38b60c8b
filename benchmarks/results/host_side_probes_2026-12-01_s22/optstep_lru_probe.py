"""Host time of the dense optimizer's step inside eager training steps (60 timed), its address-table builds and the
gradients' address sets, per config; run from a checkout (PYTHONPATH=<checkout>), JSON to argv[1].

    PYTHONPATH=<checkout> python3 optstep_probe.py OUT.json
"""
import json
import statistics
import sys
import time

import torch

from polyrec.kernels import dense_optim
from polyrec.runtime import TrainConfig, Trainer

CONFIGS = (("mlperf-dcnv2", 16384, False), ("dcnv2-small", 16384, False))
WARMUP, STEPS = 5, 60


def count_builds() -> list[int]:
    """Wrap the address-table builder (a module function since 496b722, a staticmethod before)."""
    builds = [0]
    owner = dense_optim if hasattr(dense_optim, "_device_tables") else dense_optim.FusedAdagrad
    real = owner.__dict__["_device_tables"]
    real = real.__func__ if isinstance(real, staticmethod) else real

    def counted(*args, **kwargs):
        builds[0] += 1
        return real(*args, **kwargs)

    setattr(owner, "_device_tables", staticmethod(counted) if owner is not dense_optim else counted)
    return builds


def probe(preset: str, batch: int, graphs: bool, builds: list[int]) -> dict:
    cfg = TrainConfig(preset=preset, batch_size=batch, row_cap=4_000_000, steps=10**6, synthetic_pool=4,
                      cuda_graphs=graphs)
    trainer = Trainer(cfg, progress=False)
    host_s, pointers = [], []
    real_step = trainer.optimizer.step

    def step(*args, **kwargs):
        pointers.append(tuple(p.grad.data_ptr() for g in trainer.optimizer.param_groups for p in g["params"]
                              if p.grad is not None))
        start = time.perf_counter()
        out = real_step(*args, **kwargs)
        host_s.append(time.perf_counter() - start)
        return out

    trainer.optimizer.step = step
    before = builds[0]
    measured = trainer.benchmark(warmup=WARMUP, steps=STEPS)
    row = {"preset": preset, "batch": batch, "cuda_graphs": graphs, "optimizer": type(trainer.optimizer).__name__,
           "optimizer_step_host_us_median": 1e6 * statistics.median(host_s[WARMUP:]),
           "table_builds": builds[0] - before, "optimizer_steps": len(host_s),
           "grad_address_sets_timed_steps": len(set(pointers[WARMUP:])),
           "median_step_ms": measured["median_step_ms"], "ms_per_step": measured["ms_per_step"]}
    del trainer
    torch.cuda.empty_cache()
    return row


def main() -> None:
    builds = count_builds()
    rows = []
    for preset, batch, graphs in CONFIGS:
        rows.append(probe(preset, batch, graphs, builds))
        print(json.dumps(rows[-1]), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
