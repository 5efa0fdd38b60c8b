"""A/B (thirty-second session): the full-size MLPerf step with fp16 / bf16 rows, stochastic rounding of HEAD (base)
against the working tree (new: a per-row hash, bf16 by carried bits). One process per (code, dtype), interleaved."""
import json, os, subprocess, sys, statistics
CHILD = r'''
import json, sys, torch
from polyrec.runtime import TrainConfig
from polyrec.runtime.bench import measure
cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, synthetic_pool=4,
                  device="cuda", cuda_graphs=False, embedding_dtype=sys.argv[1])
row = measure(cfg, label=sys.argv[1], warmup=5, steps=30)
print("ROW " + json.dumps({k: row.get(k) for k in ("path", "ms_per_step", "emb_fwd_ms", "emb_bwd_ms", "dense_ms", "peak_gb")}))
'''
out = os.environ["OUT"]
rows = []
for rnd in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    for code, path in (("base", ".carry/base"), ("new", ".")):
        for dtype in ("fp16", "bf16"):
            env = {**os.environ, "PYTHONPATH": os.path.abspath(path)}
            p = subprocess.run([sys.executable, "-c", CHILD, dtype], env=env, capture_output=True, text=True, timeout=200)
            line = next((l for l in p.stdout.splitlines() if l.startswith("ROW ")), None)
            r = json.loads(line[4:]) if line else {"error": p.stderr[-400:]}
            r.update(code=code, dtype=dtype, round=rnd)
            rows.append(r)
            print(json.dumps(r), flush=True)
with open(os.path.join(out, "rounding_ab.json"), "w") as f:
    json.dump(rows, f, indent=1)
for dtype in ("fp16", "bf16"):
    for code in ("base", "new"):
        ms = [r["ms_per_step"] for r in rows if r["dtype"] == dtype and r["code"] == code and "ms_per_step" in r]
        bwd = [r["emb_bwd_ms"] for r in rows if r["dtype"] == dtype and r["code"] == code and "emb_bwd_ms" in r]
        if ms:
            print(f"{dtype} {code}: step median {statistics.median(ms):.2f} ms, emb bwd {statistics.median(bwd):.2f} ({ms})")
