"""Table-batched embedding on shapes drawn at random from a seed: does the zero-warmup selection hold up
away from the MLPerf shapes that ``benchmarks/tbe.py`` measures?

    PYTHONPATH=.:benchmarks python3 benchmarks/tbe_shapes.py [--seed N] [--cases N]   # ~3 min on one H200
    PYTHONPATH=.:benchmarks python3 benchmarks/tbe_shapes.py --quick                  # tiny smoke test

Each case draws the table count (2-40), each table's rows (log-uniform, 10 to 20M, all tables scaled to
at most ``MAX_ELEMENTS`` values), the dims (one of ``ONE_DIMS`` for every table, or a mix of
``MIXED_DIMS``), the batch (``BATCHES``), each feature's mean bag (log-uniform, 1-64; fixed lengths or
ragged, uniform in [0, 2 x mean], so some bags are empty), ids uniform or skewed (``tbe.table_ids``),
row precision, optimizer, pooling (sum or mean per table) and per-sample weights (sum pooling only:
``nn.EmbeddingBag`` takes weights with sum alone). Reported per case, as ``tbe.py`` counts bytes: the
forward's and the backward + update's fractions of the copy rate measured in the same run, and the
speed-up of forward + backward + update over the naive path (one ``nn.EmbeddingBag(sparse=True)`` per
table in fp32 and the torch optimizer: SGD, Adagrad for both Adagrads, SparseAdam). Each case's
forward is first checked against the float64 reference (``tbe_reference.ref_pooled``).
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import random
import statistics

import torch
import triton
from tbe import copy_rate, table_ids, unique_per_table

from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_reference import ref_pooled
from polyrec.results import write_results
from polyrec.runtime.config import EMBEDDING_DTYPES as DTYPES  # its order draws a case's dtype: keep it

ONE_DIMS = (16, 24, 32, 64, 96, 128, 256)
MIXED_DIMS = (16, 32, 40, 64, 128)
BATCHES = (1024, 4096, 16384, 65536)
OPTIMIZERS = ("rowwise_adagrad", "sgd", "adagrad", "adam")
#: Table values per case (fp32: 6 GB of rows, the naive path's Adagrad state as much again).
MAX_ELEMENTS = 1_500_000_000
#: fp32 state bytes per row element of each optimizer (rowwise Adagrad: 4 bytes per row, added apart).
STATE_ELEMENT_BYTES = {"rowwise_adagrad": 0, "sgd": 0, "adagrad": 4, "adam": 8}
#: Largest relative forward error allowed against the float64 reference (fp32 accumulation).
FORWARD_TOLERANCE = 1e-4


def draw_case(rng: random.Random, quick: bool) -> dict:
    """One random configuration (plain values, so the results file records it whole)."""
    count = rng.randint(2, 8 if quick else 40)
    rows = [max(1, round(math.exp(rng.uniform(math.log(10), math.log(2e5 if quick else 2e7))))) for _ in range(count)]
    dims = ([rng.choice(ONE_DIMS)] * count if rng.random() < 0.6 else [rng.choice(MIXED_DIMS) for _ in range(count)])
    scale = min(1.0, MAX_ELEMENTS / sum(r * d for r, d in zip(rows, dims)))
    rows = [max(1, int(r * scale)) for r in rows]
    weighted = rng.random() < 0.25
    return {"rows": rows, "dims": dims, "batch": 512 if quick else rng.choice(BATCHES),
            "mean_bag": [round(math.exp(rng.uniform(0, math.log(64))), 1) for _ in range(count)],
            "ragged": rng.random() < 0.5, "skew": rng.random() < 0.5, "dtype": rng.choice(list(DTYPES)),
            "optimizer": rng.choice(OPTIMIZERS), "weighted": weighted,
            "pooling": ["sum" if weighted or rng.random() < 0.6 else "mean" for _ in range(count)]}


@functools.cache
def seed_cases(seed: int, cases: int) -> tuple[dict, ...]:
    """The first ``cases`` full-size cases ``draw_case`` draws from ``seed``, as every run of them drew them."""
    rng = random.Random(seed)
    return tuple(draw_case(rng, False) for _ in range(cases))


def make_batch(case: dict, gen: torch.Generator) -> JaggedBatch:
    """A batch of ``case``: per feature, fixed or ragged bag lengths and its table's ids."""
    b, dev = case["batch"], gen.device
    lengths = []
    for mean in case["mean_bag"]:
        if case["ragged"]:
            lengths.append(torch.randint(0, 2 * math.ceil(mean) + 1, (b,), device=dev, generator=gen))
        else:
            lengths.append(torch.full((b,), max(1, round(mean)), device=dev))
    lengths = torch.cat(lengths)
    per_feature = lengths.view(len(case["rows"]), b).sum(1).tolist()
    values = torch.cat([table_ids(r, n, case["skew"], gen) for r, n in zip(case["rows"], per_feature)])
    weights = torch.rand(values.numel(), device=dev, generator=gen) if case["weighted"] else None
    return JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=b, num_features=len(case["rows"]),
                                    weights=weights)


class _Float64Rows:
    """A table's rows read as float64 on indexing (``ref_pooled`` without a float64 copy of the table)."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table, self.device = table, table.device

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table[ids].double()


def forward_error(module: TableBatchedEmbedding, batch: JaggedBatch, tables: list[TableSpec]) -> float:
    """Largest error of the module's forward against the float64 reference, relative to the largest output."""
    with torch.no_grad():
        got = module(batch).double()
    want = ref_pooled([_Float64Rows(w) for w in module.table_weights()], batch, tables, list(range(len(tables))))
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def naive_step_ms(case: dict, batches: list[JaggedBatch], grad: torch.Tensor) -> float:
    """Forward + backward + optimizer of one fp32 ``nn.EmbeddingBag(sparse=True)`` per table."""
    bags = torch.nn.ModuleList(torch.nn.EmbeddingBag(r, d, mode=p, sparse=True, device="cuda")
                               for r, d, p in zip(case["rows"], case["dims"], case["pooling"]))
    kind = case["optimizer"]
    opt = (torch.optim.SGD(bags.parameters(), lr=0.01) if kind == "sgd" else
           torch.optim.SparseAdam(list(bags.parameters()), lr=0.01) if kind == "adam" else
           torch.optim.Adagrad(bags.parameters(), lr=0.01))
    turn = iter(range(10**9))

    def step() -> None:
        batch = batches[next(turn) % len(batches)]
        bounds = batch.offsets[:: batch.batch_size].tolist()
        outs = []
        for f, (bag, a, b) in enumerate(zip(bags, bounds, bounds[1:])):
            offsets = batch.offsets[f * batch.batch_size:(f + 1) * batch.batch_size] - a
            psw = batch.weights[a:b] if batch.weights is not None else None
            outs.append(bag(batch.values[a:b], offsets, per_sample_weights=psw))
        opt.zero_grad(set_to_none=True)
        torch.cat(outs, 1).backward(grad)
        opt.step()

    ms = triton.testing.do_bench(step, warmup=2, rep=300, return_mode="median")
    del bags, opt
    return ms


def config_label(config) -> str:
    """One update config as "lane t8 c8 m1 w1": variant, tile, chunks, merge chunks, warps."""
    return f"{config.variant} t{config.tile} c{config.chunks} m{config.merge_chunks} w{config.num_warps}"


def update_text(module: TableBatchedEmbedding, nnz: int) -> str:
    """The update config of each update launch ("lane t8 c8 m1 w1": tile, chunks, merge chunks, warps; "D32 ... /
    D128 ..." per dim group)."""
    plan = module.key_plan(nnz)
    texts = [config_label(c) for c in module.plan_configs(plan, nnz)]
    if len(texts) == 1:
        return texts[0]
    return " / ".join(f"D{b} {t}" for b, t in zip(plan.blocks, texts))


def run_case(index: int, case: dict, copy: float, gen: torch.Generator) -> dict:
    tables = [TableSpec(name=f"t{i}", rows=r, dim=d, pooling=p)
              for i, (r, d, p) in enumerate(zip(case["rows"], case["dims"], case["pooling"]))]
    dtype = DTYPES[case["dtype"]]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind=case["optimizer"], lr=0.01),
                                   weight_dtype=dtype, device="cuda")
    batches = [make_batch(case, gen) for _ in range(3)]
    error = forward_error(module, batches[0], tables)
    if not error <= FORWARD_TOLERANCE:
        raise SystemExit(f"case {index}: forward error {error:.3g} > {FORWARD_TOLERANCE} ({case})")
    grad = torch.randn(case["batch"], module.output_dim, device="cuda", generator=gen)
    turn = iter(range(10**9))

    def fwd() -> None:
        with torch.no_grad():
            module(batches[next(turn) % 3])

    def step() -> None:
        module(batches[next(turn) % 3]).backward(grad)

    fwd_ms = triton.testing.do_bench(fwd, warmup=20, rep=150, return_mode="median")
    step_ms = triton.testing.do_bench(step, warmup=20, rep=300, return_mode="median")
    esize = module.weights.element_size()
    lengths = [torch.diff(b.offsets).view(len(tables), -1).sum(1).tolist() for b in batches]
    ids = [statistics.mean(n[t] for n in lengths) for t in range(len(tables))]
    uniq = [statistics.mean(u[t] for u in (unique_per_table(b) for b in batches)) for t in range(len(tables))]
    out_bytes = case["batch"] * module.output_dim * 4
    row_state = 4 if case["optimizer"] == "rowwise_adagrad" else 0
    fwd_bytes = sum(n * t.dim * esize for n, t in zip(ids, tables)) + out_bytes
    bwd_bytes = out_bytes + 2 * sum(u * (t.dim * (esize + STATE_ELEMENT_BYTES[case["optimizer"]]) + row_state)
                                    for u, t in zip(uniq, tables))
    update = update_text(module, batches[0].nnz)
    del module
    gc.collect()
    naive_ms = naive_step_ms(case, batches, grad)
    row = {"case": index, "tables": len(tables), "dims": "/".join(str(d) for d in sorted(set(case["dims"]))),
           "batch": case["batch"], "nnz": sum(ids), "rows_M": sum(case["rows"]) / 1e6, "dtype": case["dtype"],
           "optimizer": case["optimizer"], "ids": "skewed" if case["skew"] else "uniform",
           "bags": "ragged" if case["ragged"] else "fixed", "weighted": case["weighted"],
           "update": update, "fwd_ms": fwd_ms,
           "fwd_frac": fwd_bytes / (fwd_ms * 1e-3) / copy, "step_ms": step_ms,
           "bwd_frac": bwd_bytes / ((step_ms - fwd_ms) * 1e-3) / copy, "naive_ms": naive_ms,
           "speedup": naive_ms / step_ms, "fwd_error": error}
    del batches, grad
    gc.collect()
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="draws the cases (default 1)")
    parser.add_argument("--cases", type=int, default=16, help="how many cases (default 16)")
    parser.add_argument("--quick", action="store_true", help="small tables and batch: a smoke test")
    args = parser.parse_args()
    if args.cases < 1:
        parser.error(f"--cases must be >= 1, got {args.cases}")
    rng = random.Random(args.seed)
    cases = [draw_case(rng, args.quick) for _ in range(args.cases)]
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    copy = copy_rate()
    print(f"copy rate: {copy / 1e12:.2f} TB/s; seed {args.seed}")
    rows = []
    for i, case in enumerate(cases):
        rows.append(run_case(i, case, copy, gen))
        r = rows[-1]
        print(f"{i:>3} {r['tables']:>3} tables dims {r['dims']:<12} B {r['batch']:>6} {r['dtype']} {r['optimizer']:<16}"
              f"{r['ids']:<8} fwd {r['fwd_ms']:7.3f} ms ({r['fwd_frac']:.2f}) step {r['step_ms']:7.3f} ms "
              f"(bwd {r['bwd_frac']:.2f}) naive {r['naive_ms']:8.2f} ms = {r['speedup']:5.1f}x", flush=True)
    speedups = [r["speedup"] for r in rows]
    summary = {"seed": args.seed, "cases": args.cases, "quick": args.quick, "copy_TBps": copy / 1e12,
               "speedup_min": min(speedups), "speedup_geomean": math.exp(statistics.mean(map(math.log, speedups))),
               "fwd_frac_min": min(r["fwd_frac"] for r in rows),
               "fwd_frac_median": statistics.median(r["fwd_frac"] for r in rows),
               "bwd_frac_min": min(r["bwd_frac"] for r in rows),
               "bwd_frac_median": statistics.median(r["bwd_frac"] for r in rows),
               "fwd_error_max": max(r["fwd_error"] for r in rows)}
    write_results("tbe_shapes", {"cases": cases, "rows": rows, "summary": summary}, rows=rows, summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
