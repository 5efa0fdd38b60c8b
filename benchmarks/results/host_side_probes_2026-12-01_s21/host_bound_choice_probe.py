"""What the trainer chooses under --cuda-graphs auto on this GPU, per config: graphed or not, whether the
step is predicted host-bound, and the TBE update config its backward then ran; JSON to argv[1]."""
import dataclasses
import json
import sys

import torch

from polyrec.runtime import TrainConfig, Trainer

CONFIGS = (("dcnv2-small", 16384), ("mlperf-dcnv2", 16384), ("mlperf-dcnv2", 65536))

rows = []
for preset, batch in CONFIGS:
    trainer = Trainer(TrainConfig(preset=preset, batch_size=batch, row_cap=4_000_000, steps=10**6, synthetic_pool=4),
                      progress=False)
    measured = trainer.benchmark(warmup=3, steps=20)
    tbe = trainer.model.embeddings.tbe
    update = next(v for k, v in tbe._configs.items() if k[0] == "upd")
    rows.append({"preset": preset, "batch": batch, "graphs": trainer.graphs.on, "reason": trainer.graphs.reason,
                 "host_bound": trainer.graphs.host_bound, "update": dataclasses.asdict(update),
                 "median_step_ms": measured["median_step_ms"]})
    print(json.dumps(rows[-1]), flush=True)
    del trainer
    torch.cuda.empty_cache()
with open(sys.argv[1], "w") as f:
    json.dump(rows, f, indent=1)
