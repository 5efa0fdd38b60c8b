"""First 5 steps of the best configuration (full size, bf16 rows, fp8 dense, CUDA graphs) in a fresh process,
with the Triton cache given by the environment; prints JSON (build_s, first_steps_s, per step s)."""
import json, time, torch
from polyrec.runtime import TrainConfig, Trainer
cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, device="cuda",
                  embedding_dtype="bf16", precision="fp8", cuda_graphs=True, log_every=10**9)
t0 = time.perf_counter()
trainer = Trainer(cfg, progress=False)
trainer.sync()
t1 = time.perf_counter()
per = []
for _ in range(5):
    s = time.perf_counter()
    trainer.train_step()
    trainer.sync()
    per.append(round(time.perf_counter() - s, 3))
print(json.dumps({"build_s": round(t1 - t0, 2), "first_steps_s": round(time.perf_counter() - t1, 2), "per_step_s": per}))
