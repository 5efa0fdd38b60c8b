"""MovieLens-100k test AUC (dcnv2-small, 400 steps of 1024, Adagrad, 3 seeds, as benchmarks/e2e.py's polyrec path)
with fp32 / fp16 / bf16 embedding rows: HEAD's rounding (base) against the working tree's (vC); one process per
code, its checkout as cwd."""
import json, os, subprocess, sys, statistics
CHILD = r'''
import json, sys
import polyrec.kernels.tbe_optim as o
from polyrec.runtime import TrainConfig, Trainer
for dtype in sys.argv[2].split(","):
    for seed in (0, 1, 2):
        cfg = TrainConfig(preset="dcnv2-small", data="movielens:" + sys.argv[1], steps=400, batch_size=1024, lr=0.01,
                          embedding_optimizer="adagrad", dense_optimizer="adagrad", seed=seed, log_every=400,
                          device="cuda", cuda_graphs=False, embedding_dtype=dtype)
        r = Trainer(cfg, progress=False).train()
        print("ROW " + json.dumps({"module": o.__file__, "dtype": dtype, "seed": seed, "test_auc": r.final_auc}), flush=True)
'''
ml = os.path.abspath(".carry/ml-100k/ml-100k.inter")
rows = []
for code, dtypes in (("base", "fp16,bf16"), ("vC", "fp32,fp16,bf16")):
    here = os.path.abspath(f".carry/{code}")
    p = subprocess.run([sys.executable, "-c", CHILD, ml, dtypes], cwd=here, env={**os.environ, "PYTHONPATH": here},
                       capture_output=True, text=True, timeout=400)
    got = [json.loads(l[4:]) | {"code": code} for l in p.stdout.splitlines() if l.startswith("ROW ")]
    if not got:
        print(p.stderr[-1500:])
    rows += got
    for r in got:
        print(json.dumps(r), flush=True)
with open(os.path.join(os.environ["OUT"], "ml_rows.json"), "w") as f:
    json.dump(rows, f, indent=1)
for code in ("base", "vC"):
    for dtype in ("fp32", "fp16", "bf16"):
        a = [r["test_auc"] for r in rows if r["code"] == code and r["dtype"] == dtype]
        if a:
            print(f"{code} {dtype}: mean test AUC {statistics.mean(a):.5f} ({[round(x, 5) for x in a]})")
