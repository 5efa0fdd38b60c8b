"""A/B of the full-size MLPerf DLRM-DCNv2 training step (batch 65536, uniform ids, eager, bf16 dense) with half-
precision rows: HEAD's stochastic rounding (base) against the working tree's (vC), one process per (code, row
dtype), interleaved; fp32 rows (no rounding) of the working tree beside. Each child runs with its checkout as
cwd: `python -c` puts the cwd first on sys.path, ahead of PYTHONPATH."""
import json, os, subprocess, sys, statistics
CHILD = r'''
import json, sys, torch
import polyrec.kernels.tbe_optim as o
from polyrec.runtime import TrainConfig
from polyrec.runtime.bench import measure
cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=65536, steps=10**9, synthetic_pool=4,
                  device="cuda", cuda_graphs=False, embedding_dtype=sys.argv[1])
row = measure(cfg, label=sys.argv[1], warmup=5, steps=30)
print("ROW " + json.dumps({"module": o.__file__} | {k: row.get(k) for k in ("path", "ms_per_step", "samples_per_s", "emb_fwd_ms", "emb_bwd_ms", "dense_ms", "peak_gb", "last_loss")}))
'''
out = os.environ["OUT"]
plan = [("base", "fp16"), ("vC", "fp16"), ("base", "bf16"), ("vC", "bf16"), ("vC", "fp32")]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
rows = []
for rnd in range(rounds):
    for code, dtype in plan:
        here = os.path.abspath(f".carry/{code}")
        p = subprocess.run([sys.executable, "-c", CHILD, dtype], cwd=here, env={**os.environ, "PYTHONPATH": here},
                           capture_output=True, text=True, timeout=200)
        line = next((l for l in p.stdout.splitlines() if l.startswith("ROW ")), None)
        r = json.loads(line[4:]) if line else {"error": p.stderr[-600:]}
        r.update(code=code, dtype=dtype, round=rnd)
        rows.append(r)
        print(json.dumps(r), flush=True)
        with open(os.path.join(out, "step_ab.json"), "w") as f:
            json.dump(rows, f, indent=1)
for code, dtype in plan:
    mine = [r for r in rows if r["dtype"] == dtype and r["code"] == code and "ms_per_step" in r]
    if mine:
        print(f"{dtype} {code}: step {statistics.median(r['ms_per_step'] for r in mine):.2f} ms, emb bwd "
              f"{statistics.median(r['emb_bwd_ms'] for r in mine):.2f}, emb fwd {statistics.median(r['emb_fwd_ms'] for r in mine):.2f}")
