"""Host profile of graphed steps (dcnv2-small, batch 16384, tables capped at 4M rows): the benchmark's
per-phase host and GPU times, then cProfile over 30 steps by own and cumulative time; files to argv[1].

    PYTHONPATH=<checkout> python3 graphed_hostprof.py OUT_DIR
"""
import cProfile
import io
import json
import pstats
import sys
import time

import torch

from polyrec.runtime import TrainConfig, Trainer

out = sys.argv[1]
cfg = TrainConfig(preset="dcnv2-small", batch_size=16384, row_cap=4_000_000, steps=10**6, synthetic_pool=4,
                  cuda_graphs=True)
trainer = Trainer(cfg, progress=False)
measured = trainer.benchmark(warmup=5, steps=30)
print(json.dumps({k: round(v, 3) for k, v in measured.items()}))
json.dump(measured, open(f"{out}/graphed_small_16384_benchmark.json", "w"), indent=1)
torch.cuda.synchronize()
profile = cProfile.Profile()
profile.enable()
start = time.perf_counter()
for _ in range(30):
    trainer.train_step()
torch.cuda.synchronize()
profile.disable()
print("ms/step under cProfile", (time.perf_counter() - start) / 30 * 1e3)
for key in ("tottime", "cumulative"):
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats(key).print_stats(60)
    open(f"{out}/graphed_small_16384_{key}.txt", "w").write(text.getvalue())
