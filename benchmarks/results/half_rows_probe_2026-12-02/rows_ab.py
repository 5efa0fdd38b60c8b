"""The full-size MLPerf step with fp32 / fp16 / bf16 rows at HEAD, one process each, 3 interleaved rounds on one
machine (a tie-breaker for half_rows_probe_2026-12-02: which half precision is faster in the step)."""
import json, os, subprocess, sys, statistics
CHILD = r'''
import json, sys
from polyrec.runtime import TrainConfig
from polyrec.runtime.bench import measure
cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, synthetic_pool=4,
                  device="cuda", cuda_graphs=False, embedding_dtype=sys.argv[1])
row = measure(cfg, label=sys.argv[1], warmup=5, steps=30)
print("ROW " + json.dumps({k: row.get(k) for k in ("path", "ms_per_step", "emb_fwd_ms", "emb_bwd_ms", "dense_ms", "peak_gb")}))
'''
rows = []
for rnd in range(3):
    for dtype in ("fp32", "fp16", "bf16"):
        p = subprocess.run([sys.executable, "-c", CHILD, dtype], capture_output=True, text=True, timeout=120)
        line = next((l for l in p.stdout.splitlines() if l.startswith("ROW ")), None)
        r = json.loads(line[4:]) if line else {"error": p.stderr[-300:]}
        r.update(dtype=dtype, round=rnd)
        rows.append(r)
        print(json.dumps(r), flush=True)
json.dump(rows, open(os.path.join(os.environ["OUT"], "rows_ab.json"), "w"), indent=1)
for d in ("fp32", "fp16", "bf16"):
    ms = [r["ms_per_step"] for r in rows if r["dtype"] == d and "ms_per_step" in r]
    bwd = [r["emb_bwd_ms"] for r in rows if r["dtype"] == d and "emb_bwd_ms" in r]
    print(f"{d}: step {statistics.median(ms):.2f} ms {[round(x, 2) for x in ms]}, emb bwd {statistics.median(bwd):.2f}")
