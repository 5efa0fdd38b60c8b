"""A/B (one H200 run): the dense layers' weight gradients deferred and run on a high-priority side
stream beside the embedding backward (``polyrec.kernels.wgrad``, the trainer's default on one GPU)
against computed in the dense backward. First two ``dcnv2-small`` trainers, one per policy, 5 steps
from the same seed (losses and dense parameters bitwise); then full-size ``mlperf-dcnv2``, batch
65536, interleaved rounds of 20 steps. Writes ``$OUT/probe_wgrad_defer.json``.

    PYTHONPATH=. OUT=. python3 benchmarks/wgrad_defer_ab.py
"""
import json
import os
import sys
from pathlib import Path

import torch

from polyrec.runtime import TrainConfig, Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profiling import step_ms  # noqa: E402


def deferring(trainer: Trainer, on: bool) -> None:
    """Turn the deferral on or off (off: the layers return their weight gradients to autograd)."""
    trainer.model.ops.deferred = trainer._deferred if on else None


res: dict = {"rounds": []}
small = TrainConfig(preset="dcnv2-small", data="synthetic", batch_size=4096, steps=10**9, device="cuda")
runs = {}
for on in (True, False):
    tr = Trainer(small, progress=False)
    assert tr._deferred is not None
    deferring(tr, on)
    runs[on] = ([float(tr.train_step()) for _ in range(5)], [p.detach().clone() for p in tr.model.dense_parameters()])
res["small_losses_bitwise"] = runs[True][0] == runs[False][0]
res["small_params_bitwise"] = all(torch.equal(a, b) for a, b in zip(runs[True][1], runs[False][1]))
print({k: v for k, v in res.items() if k != "rounds"}, flush=True)
del runs, tr
cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, synthetic_pool=4,
                  device="cuda")
tr = Trainer(cfg, progress=False)
for on in (True, False):
    deferring(tr, on)
    for _ in range(3):
        tr.train_step()
tr.sync()
for r in range(3):
    for on in (False, True):
        deferring(tr, on)
        row = {"round": r, "deferred": on, "ms_per_step": step_ms(tr)}
        res["rounds"].append(row)
        print(row, flush=True)
for on in (False, True):  # each policy's own peak over 3 steps
    deferring(tr, on)
    tr.sync()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        tr.train_step()
    tr.sync()
    res[f"peak_gb_{'deferred' if on else 'in_backward'}"] = torch.cuda.max_memory_allocated() / 1e9
print({k: v for k, v in res.items() if k.startswith("peak")}, flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_wgrad_defer.json"), "w"), indent=1)
