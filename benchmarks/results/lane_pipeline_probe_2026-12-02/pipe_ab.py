"""A/B of stochastic-rounding variants: the MLPerf TBE (full tables, uniform ids, batch 65536, bf16 output
gradient, row-wise Adagrad) per row dtype, one process per (variant, dtype), interleaved rounds.
Variants: base = HEAD's tbe_optim; vA = per-row hash + xorshift, dither fp16 / carry bf16; vB = per-element
finaliser + the new rounding; vC = vA without the xorshift."""
import json, os, statistics, subprocess, sys
CHILD = r'''
import json, sys, torch, triton
sys.path.insert(0, sys.argv[2])
import polyrec.kernels.tbe_optim as _o
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch
from profiling import kernel_table
wd = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[sys.argv[1]]
gen = torch.Generator(device="cuda").manual_seed(0)
m = TableBatchedEmbedding([TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(MLPERF_ROWS)],
                          optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01), output_dtype=torch.bfloat16,
                          weight_dtype=wd, device="cuda")
b = make_batch(MLPERF_ROWS, MLPERF_HOTS, 65536, False, gen)
g = torch.randn(65536, DIM * 26, device="cuda", generator=gen).to(torch.bfloat16)
step = lambda: m(b).backward(g)
for _ in range(3): step()
torch.cuda.synchronize()
sample0 = float(m.weights[::997].double().sum()) + float(m.state1[::997].double().sum())
t = kernel_table(step, reps=5)
lane = sum(r["ms_per_step"] for r in t if r["kernel"].startswith("lane_update"))
merge = sum(r["ms_per_step"] for r in t if r["kernel"].startswith("merge_level"))
fwd = sum(r["ms_per_step"] for r in t if r["kernel"].startswith("pooled_forward"))
ms = triton.testing.do_bench(step, warmup=10, rep=200, return_mode="median")
print("ROW " + json.dumps({"module": _o.__file__, "checksum_after_3": sample0, "lane_ms": lane, "merge_ms": merge, "fwd_ms": fwd, "step_ms": ms, "kernels": t[:12]}))
'''
out = os.environ["OUT"]
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
variants = sys.argv[2].split(",") if len(sys.argv) > 2 else ["base", "vA", "vB", "vC"]
dtypes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["fp16", "bf16"]
rows = []
for rnd in range(rounds):
    for dtype in dtypes:
        for v in variants:
            here = os.path.abspath(f".carry/{v}")  # the child's cwd: python -c puts it first on sys.path
            env = {**os.environ, "PYTHONPATH": here}
            p = subprocess.run([sys.executable, "-c", CHILD, dtype, os.path.abspath("benchmarks")], cwd=here, env=env,
                               capture_output=True, text=True, timeout=240)
            line = next((l for l in p.stdout.splitlines() if l.startswith("ROW ")), None)
            r = json.loads(line[4:]) if line else {"error": p.stderr[-600:]}
            r.update(variant=v, dtype=dtype, round=rnd)
            rows.append(r)
            print(json.dumps({k: r.get(k) for k in ("variant", "checksum_after_3", "dtype", "round", "lane_ms", "merge_ms", "fwd_ms", "step_ms", "error")}), flush=True)
            with open(os.path.join(out, "pipe_ab.json"), "w") as f:
                json.dump(rows, f, indent=1)
for dtype in dtypes:
    for v in variants:
        mine = [r for r in rows if r["dtype"] == dtype and r["variant"] == v and "step_ms" in r]
        if mine:
            print(f"{dtype} {v}: lane {statistics.median(r['lane_ms'] for r in mine):.3f} merge "
                  f"{statistics.median(r['merge_ms'] for r in mine):.3f} step {statistics.median(r['step_ms'] for r in mine):.3f}"
                  f"  (steps {[round(r['step_ms'], 3) for r in mine]})")
