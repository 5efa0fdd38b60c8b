import sys, polyrec
from polyrec.runtime import TrainConfig, Trainer
def losses(cuda_graphs):
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=8, device="cuda",
                      embedding_backend="polyrec", dense_backend="polyrec", precision="fp8",
                      log_every=10**9, cuda_graphs=cuda_graphs)
    t = Trainer(cfg, progress=False)
    return t.graphs.on, [float(t.train_step()) for _ in range(8)]
g, a = losses("auto"); e, b = losses(False)
print(polyrec.__file__, g, e, "max rel diff", max(abs(x - y) / abs(y) for x, y in zip(a, b)))
print(" graphed", [round(x, 4) for x in a]); print(" eager  ", [round(x, 4) for x in b])
