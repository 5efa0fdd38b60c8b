"""Fused TBE backward with each update-kernel config forced (``TableBatchedEmbedding.update_config``):
the old default ("scan": perm -> source row -> column -> gradient chain) and the "lane" variant
(permute pass + two-round-trip update), on the MLPerf DLRM-DCNv2 shapes (26 tables, 204M rows,
D = 128, batch 65536, fp32 rows, rowwise Adagrad, uniform ids). Correctness first (every config's
update against the scan config's on capped tables), then backward time = median(forward + backward)
- median(forward), with ``triton.testing.do_bench``, and a per-kernel profile of two steps. Writes
``tbe_update_variants_<gpu>_<date>.json``. Expected run time on the H200: about 60-90 s.

    PYTHONPATH=. python3 benchmarks/tbe_update_variants.py [--quick]
"""

from __future__ import annotations

import argparse

import torch
import triton
from torch.profiler import ProfilerActivity, profile

from polyrec.kernels import tbe_select
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.results import write_results
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch

#: Rows per table in the correctness check (all configs start from the same weights).
CHECK_ROWS = 50_000
CHECK_BATCH = 4096


def configs(warp_size: int) -> list[tbe_select.UpdateConfig]:
    return tbe_select.update_candidates(DIM, warp_size)


def module_for(rows: list[int], cfg: tbe_select.UpdateConfig | None) -> TableBatchedEmbedding:
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)]
    return TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                 device="cuda", deterministic=True, update_config=cfg)


def check(cands: list[tbe_select.UpdateConfig]) -> dict[str, float]:
    """Max |difference| of weights and state after two steps, each config vs the first scan config."""
    rows = [min(r, CHECK_ROWS) for r in MLPERF_ROWS]
    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [make_batch(rows, MLPERF_HOTS, CHECK_BATCH, False, gen) for _ in range(2)]
    grads = [torch.randn(CHECK_BATCH, DIM * len(rows), device="cuda", generator=gen) for _ in range(2)]
    results = {}
    for cfg in cands:
        module = module_for(rows, cfg)
        for batch, grad in zip(batches, grads):
            module(batch).backward(grad)
        results[label(cfg)] = (module.weights.clone(), module.state1.clone())
        del module
    ref_w, ref_s = results[label(cands[0])]
    assert ref_s.abs().sum() > 0, "no row was updated"
    errors = {}
    for name, (w, s) in results.items():
        errors[name] = max(float((w - ref_w).abs().max()), float((s - ref_s).abs().max() / ref_s.abs().max()))
        assert errors[name] < 1e-5, f"{name} differs from {label(cands[0])}: {errors[name]}"
    return errors


def label(cfg: tbe_select.UpdateConfig) -> str:
    return f"{cfg.variant} tile{cfg.tile} w{cfg.num_warps}"


def kernel_ms(module: TableBatchedEmbedding, batch, grad) -> dict[str, float]:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            module(batch).backward(grad)
        torch.cuda.synchronize()
    out = {}
    for evt in prof.key_averages():
        us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        name = evt.key.split("(")[0][:40]
        if us > 0 and ("kernel" in name or "Radix" in evt.key):
            out[name] = out.get(name, 0.0) + us / 1e3 / 2
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny tables and batch: a smoke test")
    args = parser.parse_args()
    warp_size = torch.cuda.get_device_properties(0).warp_size
    cands = configs(warp_size)
    errors = check(cands)
    batch_size = 2048 if args.quick else 65536
    rows = [min(r, 100_000) for r in MLPERF_ROWS] if args.quick else MLPERF_ROWS
    module = module_for(rows, None)
    selected = module._update_config(batch_size * sum(MLPERF_HOTS))
    gen = torch.Generator(device="cuda").manual_seed(0)
    batch = make_batch(rows, MLPERF_HOTS, batch_size, False, gen)
    grad = torch.randn(batch_size, DIM * len(rows), device="cuda", generator=gen)
    with torch.no_grad():
        fwd_ms = triton.testing.do_bench(lambda: module(batch), warmup=5, rep=50, return_mode="median")
    table = []
    for cfg in cands:
        module.update_config = cfg
        step_ms = triton.testing.do_bench(lambda: module(batch).backward(grad), warmup=3, rep=150,
                                          return_mode="median")
        table.append({"config": label(cfg), "variant": cfg.variant, "tile": cfg.tile, "warps": cfg.num_warps,
                      "bwd_ms": step_ms - fwd_ms, "step_ms": step_ms, "selected": cfg == selected,
                      "max_error_vs_scan": errors[label(cfg)], "kernels_ms": kernel_ms(module, batch, grad)})
    best = min(table, key=lambda r: r["bwd_ms"])
    write_results("tbe_update_variants", {"rows": table, "fwd_ms": fwd_ms, "nnz": batch.nnz, "quick": args.quick},
                  rows=[{k: v for k, v in r.items() if k != "kernels_ms"} for r in table],
                  summary={"fwd_ms": fwd_ms, "best": best["config"], "best_bwd_ms": best["bwd_ms"],
                           "selected": label(selected), "quick": args.quick})
    print(f"forward {fwd_ms:.3f} ms, nnz {batch.nnz}")
    for r in table:
        top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["kernels_ms"].items(), key=lambda kv: -kv[1])[:4])
        print(f"{r['config']:>18} bwd {r['bwd_ms']:7.3f} ms{'  <- selected' if r['selected'] else ''}   [{top}]")


if __name__ == "__main__":
    main()
