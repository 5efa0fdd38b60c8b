"""Driver for ncu: the MLPerf DLRM-DCNv2 step (batch 65536, tables capped at 1M rows, eager, bf16 dense)."""
import sys, torch
from polyrec.runtime import TrainConfig, Trainer
cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, synthetic_pool=4,
                  device="cuda", cuda_graphs=False, row_cap=1_000_000)
t = Trainer(cfg, progress=False)
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 4):
    t.train_step()
torch.cuda.synchronize()
print("done")
