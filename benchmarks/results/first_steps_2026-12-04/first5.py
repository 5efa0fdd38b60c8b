"""First 5 steps of full-size MLPerf DLRM-DCNv2 (batch 65536) in a fresh process, the Triton cache given by the
environment; argv[1]: "best" (bf16 rows, fp8 dense, CUDA graphs) or "issue" (fp32 rows, bf16 dense, eager).
Prints JSON (build_s, first_steps_s, per step s)."""
import json, sys, time
from polyrec.runtime import TrainConfig, Trainer
options = {"best": dict(embedding_dtype="bf16", precision="fp8", cuda_graphs=True),
           "issue": dict(embedding_dtype="fp32", precision="auto", cuda_graphs=False)}[sys.argv[1]]
cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, device="cuda",
                  log_every=10**9, **options)
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
print(json.dumps({"config": sys.argv[1], "build_s": round(t1 - t0, 2), "first_steps_s": round(time.perf_counter() - t1, 2),
                  "per_step_s": per}))
