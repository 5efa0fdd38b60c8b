"""Driver for ncu: the MLPerf TBE (rows capped) fwd+bwd a few times; ncu picks the kernels."""
import argparse, torch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch
p = argparse.ArgumentParser()
p.add_argument("--dtype", default="fp32"); p.add_argument("--grad", default="bf16")
p.add_argument("--cap", type=int, default=4_000_000); p.add_argument("--steps", type=int, default=4)
a = p.parse_args()
wd = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
gd = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.grad]
rows = [min(r, a.cap) for r in MLPERF_ROWS] if a.cap else MLPERF_ROWS
gen = torch.Generator(device="cuda").manual_seed(0)
m = TableBatchedEmbedding([TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)],
                          optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01), output_dtype=gd,
                          weight_dtype=wd, device="cuda")
b = make_batch(rows, MLPERF_HOTS, 65536, False, gen)
g = torch.randn(65536, DIM * len(rows), device="cuda", generator=gen).to(gd)
for _ in range(a.steps):
    m(b).backward(g)
torch.cuda.synchronize()
print("done", a, "update config", next(c for k, c in m._configs.items() if k[0] == "upd"))
