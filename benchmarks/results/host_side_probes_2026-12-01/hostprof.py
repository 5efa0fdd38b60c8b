"""Host profile of an eager capped step (diagnostic, session 20)."""
import cProfile, io, pstats, sys, time, torch
from polyrec.runtime import TrainConfig, Trainer
batch = int(sys.argv[1]); out = sys.argv[2]
cfg = TrainConfig(preset="mlperf-dcnv2", batch_size=batch, row_cap=4_000_000, steps=10_000, synthetic_pool=4, cuda_graphs=False)
tr = Trainer(cfg, progress=False)
t = tr.benchmark(warmup=3, steps=10)
print("benchmark", t)
torch.cuda.synchronize()
pr = cProfile.Profile(); pr.enable()
t0 = time.perf_counter()
for _ in range(20): tr.train_step()
torch.cuda.synchronize()
pr.disable()
print("ms/step under cProfile", (time.perf_counter() - t0) / 20 * 1e3)
for key in ("tottime", "cumulative"):
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats(key).print_stats(45)
    open(f"{out}/host_{batch}_{key}.txt", "w").write(s.getvalue())
    print(s.getvalue()[:7000])
