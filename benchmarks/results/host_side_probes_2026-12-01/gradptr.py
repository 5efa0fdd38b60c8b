"""Graphed dense half: are the dense gradients the same tensors' storage every step? (session 20)"""
import torch
from polyrec.runtime import TrainConfig, Trainer
for preset, batch in (("dcnv2-small", 16384), ("mlperf-dcnv2", 16384)):
    for graphs in (True, False):
        cfg = TrainConfig(preset=preset, batch_size=batch, row_cap=4_000_000, steps=10**6, synthetic_pool=4, cuda_graphs=graphs)
        tr = Trainer(cfg, progress=False)
        seen = []
        orig = tr.optimizer.step
        def step(*a, **k):
            seen.append(tuple(p.grad.data_ptr() for g in tr.optimizer.param_groups for p in g["params"] if p.grad is not None))
            return orig(*a, **k)
        tr.optimizer.step = step
        m = tr.benchmark(warmup=5, steps=30)
        distinct = len(set(seen[5:]))
        print(preset, batch, "graphs" if graphs else "eager", "distinct grad-pointer sets over", len(seen) - 5, "steps:", distinct,
              {k: round(v, 3) for k, v in m.items() if k.endswith("_ms")}, flush=True)
        del tr; torch.cuda.empty_cache()
