"""A/B of UpdateConfig.solo (rows of one id updated in input order) off / on, interleaved rounds, on the
MLPerf shapes (tbe.py's batches), after a bitwise check on capped tables. Writes $OUT/probe_solo.json.

    PYTHONPATH=. OUT=. python3 benchmarks/tbe_solo_ab.py
"""
import sys, json, os, gc, dataclasses, torch, triton
sys.path.insert(0, "benchmarks")
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from profiling import kernel_table
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch

res = {"check": {}, "cases": []}
# bitwise check on capped tables, two modules
for skew in (False, True):
    rows = [min(r, 1_000_000) for r in MLPERF_ROWS]
    gen = torch.Generator(device="cuda").manual_seed(1)
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)]
    mods = [TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                  device="cuda", seed=5, deterministic=True) for _ in range(2)]
    mods[1].weights.copy_(mods[0].weights)
    b0 = make_batch(rows, MLPERF_HOTS, 8192, skew, gen)
    cfg = mods[0]._update_config(b0.nnz)
    mods[0].update_config = dataclasses.replace(cfg, solo=True)
    mods[1].update_config = dataclasses.replace(cfg, solo=False)
    for step in range(2):
        b = make_batch(rows, MLPERF_HOTS, 8192, skew, gen)
        g = torch.randn(8192, DIM * 26, device="cuda", generator=gen)
        for m in mods:
            m(b).backward(g)
    res["check"]["skewed" if skew else "uniform"] = bool(torch.equal(mods[0].weights, mods[1].weights) and torch.equal(mods[0].state1, mods[1].state1))
    print("bitwise", skew, res["check"], flush=True)
    del mods, b0, b, g
    gc.collect(); torch.cuda.empty_cache()

for name, wdt, gdt, skew in (("fp32", torch.float32, torch.float32, False), ("fp32_skewed", torch.float32, torch.float32, True),
                             ("fp16", torch.float16, torch.float32, False), ("fp16_skewed", torch.float16, torch.float32, True),
                             ("fp32_gradbf16", torch.float32, torch.bfloat16, False)):
    gen = torch.Generator(device="cuda").manual_seed(0)
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(MLPERF_ROWS)]
    m = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                              output_dtype=gdt, weight_dtype=wdt, device="cuda")
    batch = make_batch(MLPERF_ROWS, MLPERF_HOTS, 65536, skew, gen)
    grad = torch.randn(65536, DIM * 26, device="cuda", generator=gen).to(gdt)
    cfg = m._update_config(batch.nnz)
    step = lambda: m(batch).backward(grad)
    fwd = lambda: m(batch)
    for r in range(3):
        for solo in (False, True):
            m.update_config = dataclasses.replace(cfg, solo=solo)
            kt = kernel_table(step)
            ms = triton.testing.do_bench(step, warmup=5, rep=60, return_mode="median")
            get = lambda k: sum(x["ms_per_step"] for x in kt if k in x["kernel"])
            row = {"case": name, "round": r, "solo": solo, "step_ms": ms, "lane_ms": get("lane_update"),
                   "solo_ms": get("solo_update"), "permute_ms": get("permute_kernel"), "merge_ms": get("merge_level"),
                   "kernels": kt[:14]}
            res["cases"].append(row)
            print(f"{name:14s} r{r} solo={solo!s:5s} step {ms:.3f} lane {row['lane_ms']:.3f} solo {row['solo_ms']:.3f} "
                  f"permute {row['permute_ms']:.3f} merge {row['merge_ms']:.3f}", flush=True)
    res.setdefault("fwd_ms", {})[name] = triton.testing.do_bench(lambda: m(batch), warmup=5, rep=60, return_mode="median")
    del m, batch, grad, step, fwd, kt
    gc.collect(); torch.cuda.empty_cache()
print(res["fwd_ms"])
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_solo.json"), "w"), indent=1)
