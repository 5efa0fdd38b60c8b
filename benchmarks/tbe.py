"""Table-batched embedding on the MLPerf DLRM-DCNv2 shapes: forward and forward+backward+update time,
effective bandwidth as a fraction of the copy rate measured in the same run, and the naive PyTorch
path (nn.EmbeddingBag(sparse=True) + torch.optim.Adagrad) in the same run.

    PYTHONPATH=. python3 benchmarks/tbe.py           # full: about 3-5 minutes on one H200
    PYTHONPATH=. python3 benchmarks/tbe.py --quick   # tiny smoke test, well under a minute

Shapes: 26 tables with the MLPerf Criteo 1TB multi-hot row counts (TorchRec DLRM example /
MLPerf training reference ``--num_embeddings_per_feature``: five of 40M rows, 204M in all), D = 128,
multi-hot sizes 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1, batch 65536, rowwise
Adagrad. Indices uniform, or skewed: rank = floor((rows+1)^u) - 1, u ~ U[0,1), scattered as
rank * 2654435761 mod rows. Bytes: forward = rows read + output written; backward = output gradient
read + unique rows read and written + their rowwise state read and written.
The naive path runs on tables capped at 4M rows (its dense Adagrad state would not fit otherwise);
our module is timed on the same capped tables for the ratio, and on the full tables.
"""

from __future__ import annotations

import argparse
import gc
import math

import torch
import triton

from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_reference import init_states, ref_pooled, ref_step
from polyrec.results import write_results

MLPERF_ROWS = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938,
               155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]
MLPERF_HOTS = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
DIM = 128
NAIVE_CAP = 4_000_000
BATCHES = 3  # fresh batches cycled through in the timed loops
SCATTER = 2654435761


def table_ids(rows: int, count: int, skew: bool, gen: torch.Generator) -> torch.Tensor:
    """``count`` ids of a table of ``rows``: uniform, or the skewed ids of the module docstring."""
    if not skew:
        return torch.randint(0, rows, (count,), device=gen.device, generator=gen)
    u = torch.rand(count, dtype=torch.float64, device=gen.device, generator=gen)
    rank = torch.floor(torch.exp(u * math.log(rows + 1))).to(torch.int64) - 1
    return rank.clamp_(0, rows - 1) * SCATTER % rows


def make_batch(rows: list[int], hots: list[int], batch_size: int, skew: bool, gen: torch.Generator) -> JaggedBatch:
    vals = [table_ids(r, batch_size * h, skew, gen) for r, h in zip(rows, hots)]
    lengths = torch.tensor(hots, device=gen.device).repeat_interleave(batch_size)
    return JaggedBatch.from_lengths(values=torch.cat(vals), lengths=lengths, batch_size=batch_size,
                                    num_features=len(rows))


def unique_per_table(batch: JaggedBatch) -> list[int]:
    """Distinct ids of each feature's table in ``batch`` (one feature per table)."""
    bounds = batch.offsets[:: batch.batch_size].tolist()
    return [int(torch.unique(batch.values[a:b]).numel()) for a, b in zip(bounds, bounds[1:])]


def unique_rows(batch: JaggedBatch) -> int:
    return sum(unique_per_table(batch))


def bench_ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def copy_rate() -> float:
    src = torch.rand((2 << 30) // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    del src, dst
    return 2 * (2 << 30) / (ms * 1e-3)


def check_correctness() -> dict:
    """Small config on the GPU vs the float64 reference: forward and two rowwise-Adagrad steps."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    tables = [TableSpec(name=f"t{i}", rows=r, dim=d) for i, (r, d) in enumerate([(1000, 128), (3, 128), (50, 64)])]
    opt = EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.05)
    worst = {}
    for dtype in (torch.float32, torch.float16):
        module = TableBatchedEmbedding(tables, optimizer=opt, weight_dtype=dtype, device="cuda")
        weights = [w.double().clone() for w in module.table_weights()]
        states = init_states(opt, tables, device="cuda")
        err = 0.0
        for step in (1, 2):
            batch = make_batch([t.rows for t in tables], [3, 40, 2], 64, False, gen)
            out = module(batch)
            err = max(err, float((out.detach().double() - ref_pooled(weights, batch, tables, [0, 1, 2])).abs().max()))
            grad = torch.randn(out.shape, device="cuda", generator=gen)
            out.backward(grad)
            weights, states = ref_step(weights, states, batch, grad, opt, step, tables, [0, 1, 2])
            for got, want in zip(module.table_weights(), weights):
                err = max(err, float(((got.double() - want).abs() / want.abs().clamp_min(1e-3)).max()))
            weights = [w.double().clone() for w in module.table_weights()]
        limit = 1e-4 if dtype == torch.float32 else 4e-3
        if not err <= limit:
            raise SystemExit(f"correctness check failed for {dtype}: max error {err} > {limit}")
        worst[str(dtype)] = err
    return worst


def time_module(module: TableBatchedEmbedding, batches: list[JaggedBatch], grad: torch.Tensor) -> tuple[float, float]:
    it = iter(range(10**9))
    pick = lambda: batches[next(it) % len(batches)]  # noqa: E731

    def fwd() -> None:
        with torch.no_grad():
            module(pick())

    def step() -> None:
        module(pick()).backward(grad)

    return bench_ms(fwd), bench_ms(step)


def time_naive(rows: list[int], batches: list[JaggedBatch], grad: torch.Tensor) -> float:
    bags = torch.nn.ModuleList([torch.nn.EmbeddingBag(r, DIM, mode="sum", sparse=True, device="cuda") for r in rows])
    opt = torch.optim.Adagrad(bags.parameters(), lr=0.01)
    it = iter(range(10**9))

    def step() -> None:
        batch = batches[next(it) % len(batches)]
        bounds = batch.offsets[:: batch.batch_size].tolist()
        outs = [bag(batch.values[a:b], batch.offsets[f * batch.batch_size:(f + 1) * batch.batch_size] - a)
                for f, (bag, a, b) in enumerate(zip(bags, bounds, bounds[1:]))]
        opt.zero_grad(set_to_none=True)
        torch.cat(outs, 1).backward(grad)
        opt.step()

    return triton.testing.do_bench(step, warmup=2, rep=2000, return_mode="median")


def run_case(rows: list[int], dtype: torch.dtype, skew: bool, batch_size: int, hots: list[int], copy: float,
             gen: torch.Generator, label: str) -> dict:
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                   weight_dtype=dtype, device="cuda")
    batches = [make_batch(rows, hots, batch_size, skew, gen) for _ in range(BATCHES)]
    grad = torch.randn(batch_size, DIM * len(rows), device="cuda", generator=gen)
    fwd_ms, step_ms = time_module(module, batches, grad)
    esize = module.weights.element_size()
    nnz = batches[0].nnz
    uniq = sum(unique_rows(b) for b in batches) / len(batches)
    fwd_bytes = nnz * DIM * esize + batch_size * DIM * len(rows) * 4
    bwd_bytes = batch_size * DIM * len(rows) * 4 + 2 * uniq * (DIM * esize + 4)
    bwd_ms = step_ms - fwd_ms
    row = {"case": f"{'fp32' if dtype == torch.float32 else 'fp16'} {'skewed' if skew else 'uniform'}",
           "tables": label, "fwd_ms": fwd_ms,
           "fwd_frac": fwd_bytes / (fwd_ms * 1e-3) / copy, "step_ms": step_ms,
           "bwd_frac": bwd_bytes / (bwd_ms * 1e-3) / copy, "nnz": nnz, "unique_rows": uniq,
           "peak_gb": torch.cuda.max_memory_allocated() / 1e9}
    del module, batches, grad
    gc.collect()
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny tables and batch: a smoke test")
    args = parser.parse_args()
    rows = [min(r, 100_000) for r in MLPERF_ROWS] if args.quick else MLPERF_ROWS
    batch_size = 2048 if args.quick else 65536
    gen = torch.Generator(device="cuda").manual_seed(0)
    errors = check_correctness()
    print(f"correctness vs float64 reference: max errors {errors}")
    copy = copy_rate()
    print(f"copy rate: {copy / 1e12:.2f} TB/s")
    capped = [min(r, NAIVE_CAP) for r in rows]
    out_rows = []
    batches = [make_batch(capped, MLPERF_HOTS, batch_size, False, gen) for _ in range(BATCHES)]
    grad = torch.randn(batch_size, DIM * len(rows), device="cuda", generator=gen)
    naive_ms = time_naive(capped, batches, grad)
    del batches, grad
    gc.collect()
    torch.cuda.empty_cache()
    ours_capped = run_case(capped, torch.float32, False, batch_size, MLPERF_HOTS, copy, gen, "capped 4M")
    ours_capped["speedup_vs_naive"] = naive_ms / ours_capped["step_ms"]
    out_rows.append(ours_capped)
    torch.cuda.reset_peak_memory_stats()
    fits = True
    for dtype in (torch.float32, torch.float16):
        for skew in (False, True):
            try:
                out_rows.append(run_case(rows, dtype, skew, batch_size, MLPERF_HOTS, copy, gen, "full"))
            except torch.OutOfMemoryError as err:
                fits = False if dtype == torch.float32 else fits
                out_rows.append({"case": f"{dtype} skew={skew}", "tables": "full", "error": str(err)[:200]})
    summary = {"copy_TBps": copy / 1e12, "naive_capped_step_ms": naive_ms,
               "speedup_vs_naive_capped": ours_capped["speedup_vs_naive"],
               "full_fp32_rowwise_fits": fits and not args.quick, "quick": args.quick,
               "peak_gb_full_fp32": max((r.get("peak_gb", 0) for r in out_rows[1:3]), default=0.0),
               "correctness_max_error": errors, "batch_size": batch_size, "total_rows": sum(rows)}
    write_results("tbe", {"rows": out_rows, "summary": summary}, rows=out_rows, summary=summary)
    print(f"naive nn.EmbeddingBag + Adagrad (tables capped at 4M rows): {naive_ms:.2f} ms per step")
    print(f"{'case':<14}{'tables':<11}{'fwd ms':>8}{'fwd frac':>10}{'step ms':>9}{'bwd frac':>10}{'peak GB':>9}")
    for r in out_rows:
        if "error" in r:
            print(f"{r['case']:<14}{r['tables']:<11} OOM")
            continue
        print(f"{r['case']:<14}{r['tables']:<11}{r['fwd_ms']:>8.2f}{r['fwd_frac']:>10.2f}{r['step_ms']:>9.2f}"
              f"{r['bwd_frac']:>10.2f}{r['peak_gb']:>9.1f}")
    print(f"speedup vs naive (capped tables, fwd+bwd+update): {ours_capped['speedup_vs_naive']:.1f}x")


if __name__ == "__main__":
    main()
