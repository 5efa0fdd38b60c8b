"""Does FusedAdagrad rebuild its tables every step, and does a pinned staging buffer change the step? (session 20)"""
import statistics, time, torch
from polyrec.kernels import dense_optim
from polyrec.runtime import TrainConfig, Trainer
real = dense_optim.FusedAdagrad._device_tables
count = [0]
def pageable(key, dev):
    count[0] += 1
    return real(key, dev)
def pinned(key, dev):
    count[0] += 1
    params, grads, sums, sizes, clrs = key
    starts, programs = [], 0
    for size in sizes:
        starts.append(programs); programs += (size + dense_optim.BLOCK - 1) // dense_optim.BLOCK
    ints = torch.tensor([params, grads, sums, sizes, starts], dtype=torch.int64).pin_memory()
    clr = torch.tensor(clrs, dtype=torch.float32).pin_memory()
    return ints.to(dev, non_blocking=True), clr.to(dev, non_blocking=True), programs
for batch in (16384, 65536):
    cfg = TrainConfig(preset="mlperf-dcnv2", batch_size=batch, row_cap=4_000_000, steps=10_000, synthetic_pool=4, cuda_graphs=False)
    tr = Trainer(cfg, progress=False)
    tr.benchmark(warmup=5, steps=5)
    res = {}
    for r in range(3):
        for name, fn in (("pageable", pageable), ("pinned", pinned)):
            dense_optim.FusedAdagrad._device_tables = staticmethod(fn)
            count[0] = 0
            m = tr.benchmark(warmup=2, steps=30)
            res.setdefault(name, []).append(m["median_step_ms"])
            print(batch, r, name, "rebuilds", count[0], "of 32 steps", {k: round(v, 3) for k, v in m.items() if k.endswith("ms")}, flush=True)
    print(batch, {k: statistics.median(v) for k, v in res.items()})
    del tr; torch.cuda.empty_cache()
