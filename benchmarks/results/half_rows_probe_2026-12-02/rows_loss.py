"""Loss of the full-size MLPerf step over 40 steps with fp32 / fp16 / bf16 rows (synthetic uniform ids, the
benchmarks' 4-batch pool and without it), one process each, to see whether one row dtype trains differently."""
import json, os, subprocess, sys
CHILD = r'''
import json, sys, torch
from polyrec.runtime import TrainConfig, Trainer
pool, dtype = int(sys.argv[1]), sys.argv[2]
cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, synthetic_pool=pool,
                  device="cuda", cuda_graphs=False, embedding_dtype=dtype)
t = Trainer(cfg, progress=False)
losses = [float(t.train_step()) for _ in range(40)]
w = t.model.embeddings.tbe.weights
print("ROW " + json.dumps({"pool": pool, "dtype": dtype, "loss": [round(l, 6) for l in losses[::5]] + [round(losses[-1], 9)],
      "weights_absmax": max(float(c.abs().max()) for c in w.split(1 << 28)),
      "weights_finite": all(bool(torch.isfinite(c).all()) for c in w.split(1 << 28))}))
'''
rows = []
for pool in (4, 0):
    for dtype in ("fp32", "fp16", "bf16"):
        p = subprocess.run([sys.executable, "-c", CHILD, str(pool), dtype], capture_output=True, text=True, timeout=150)
        line = next((l for l in p.stdout.splitlines() if l.startswith("ROW ")), None)
        row = json.loads(line[4:]) if line else {"pool": pool, "dtype": dtype, "error": p.stderr[-300:]}
        print(json.dumps(row), flush=True)
        rows.append(row)
json.dump(rows, open(os.path.join(os.environ["OUT"], "rows_loss.json"), "w"), indent=1)
