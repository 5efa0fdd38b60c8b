"""A/B on commit e9e6541's tree (one H200 run): the deferred weight gradients' side stream at high
priority (the commit's) and at the default priority, against no deferral. Full-size ``mlperf-dcnv2``,
batch 65536, interleaved rounds of 20 steps. Writes ``$OUT/probe_wgrad_defer_priority.json``.

    PYTHONPATH=. OUT=. python3 benchmarks/wgrad_defer_priority_ab.py
"""
import json
import os
import sys
from pathlib import Path

import torch

from polyrec.runtime import TrainConfig, Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profiling import step_ms  # noqa: E402

cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, synthetic_pool=4,
                  device="cuda")
tr = Trainer(cfg, progress=False)
queue = tr._deferred
streams = {"high": torch.cuda.Stream(priority=-1), "default": torch.cuda.Stream()}


def policy(name: str) -> None:
    tr.model.ops.deferred = None if name == "off" else queue
    if name != "off":
        queue._stream = streams[name]


res = {"rounds": []}
for name in ("off", "high", "default"):
    policy(name)
    for _ in range(3):
        tr.train_step()
tr.sync()
for r in range(3):
    for name in ("off", "high", "default"):
        policy(name)
        row = {"round": r, "side_stream": name, "ms_per_step": step_ms(tr)}
        res["rounds"].append(row)
        print(row, flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_wgrad_defer_priority.json"), "w"), indent=1)
