"""Where the embedding step's time goes on the MLPerf shapes: every forward launch config timed, and
the forward+backward kernels timed one by one with the torch profiler. A diagnostic for tuning the
TBE cost model; it writes ``tbe_breakdown_<gpu>_<date>.json``.

    PYTHONPATH=. python3 benchmarks/tbe_breakdown.py [--quick] [--dtype fp16|bf16] [--skewed] [--skip-sweep] [--optimizer sgd] [--grad-dtype bf16] [--lane-chunks N] [--lane-max-registers N] [--row-cap N] [--merge-ab 1,8 [--rounds 3]]

``--merge-ab 1,8``: an A/B of the merge levels' tiles per program (``UpdateConfig.merge_chunks``) in
one process, on one module and batch: rounds of 1, 8, 1, 8, ..., each the backward's
kernel table and the whole fwd+bwd+update step by ``do_bench``; writes ``tbe_breakdown_..._mergeab``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch
import triton

from polyrec.hardware.calibrate import ceilings
from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import ROUNDED_ROWS, EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_optim import OPTIMIZERS
from polyrec.perfmodel.tbe import merge_seconds
from polyrec.results import write_results
from polyrec.runtime.config import EMBEDDING_DTYPES
from profiling import kernel_table
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch, unique_rows


def sweep_configs(block_d: int, warp_size: int) -> list[tbe_select.ForwardConfig]:
    """Every forward candidate with half, the same and twice its warps."""
    return [tbe_select.ForwardConfig(bags=c.bags, hots=c.hots, num_warps=w)
            for c in tbe_select.forward_candidates(block_d, warp_size)
            for w in sorted({max(1, c.num_warps // 2), c.num_warps, min(16, c.num_warps * 2)})]


def forward_sweep(module: TableBatchedEmbedding, batch: JaggedBatch, warp_size: int) -> list[dict]:
    """Time the pooled lookup as one launch over every feature (``launch_pooled``) with each config of
    ``sweep_configs``; ``selected``: the selector's one-launch config."""
    chosen = module._forward_config(batch, sequence=False)
    out = torch.empty(batch.batch_size, module.output_dim, dtype=module.output_dtype, device=module.weights.device)
    rows = []
    for cfg in sweep_configs(module.block_d, warp_size):
        ms = triton.testing.do_bench(lambda: module.launch_pooled(batch, out, module._pooled_ids, cfg), warmup=20,
                                     rep=100, return_mode="median")
        rows.append({"bags": cfg.bags, "hots": cfg.hots, "warps": cfg.num_warps, "fwd_ms": ms,
                     "selected": cfg == chosen})
    return rows


#: Profiler names of the backward kernels the merge A/B reports: the merge levels and the fused update.
MERGE_KERNEL = "merge_level_kernel"
UPDATE_KERNELS = ("lane_update_kernel", "update_kernel")


def check_merge_chunks(values: list[int], base: tbe_select.UpdateConfig, *, rows: list[int], hots: list[int],
                       batch_size: int, skewed: bool, weight_dtype: torch.dtype, output_dtype: torch.dtype,
                       optimizer: EmbeddingOptimizer) -> dict:
    """One step of a small module (``rows`` per table) from the same start for each merge chunk count:
    the updated weights must equal the first count's to float tolerance and, for fp32 rows with SGD or
    row-wise Adagrad, a float64 reference. Returns the largest differences; raises when off."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    batch = make_batch(rows, hots, batch_size, skewed, gen)
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows)]
    grad = torch.randn(batch_size, DIM * len(tables), device="cuda", generator=gen).to(output_dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if weight_dtype == torch.float32 else dict(rtol=1e-2, atol=1e-3)
    first, start, out = None, None, {"check_batch": batch_size}
    for m in values:
        module = TableBatchedEmbedding(tables, optimizer=optimizer, weight_dtype=weight_dtype,
                                       output_dtype=output_dtype, device="cuda", deterministic=True,
                                       update_config=dataclasses.replace(base, merge_chunks=m))
        start = module.weights.clone() if start is None else start
        module(batch).backward(grad)
        got = module.weights.float()
        if first is None:
            first = got
        torch.testing.assert_close(got, first, **tol, msg=lambda e: f"merge chunks {m} vs {values[0]}: {e}")
        out["check_max_diff_vs_first"] = max(out.get("check_max_diff_vs_first", 0.0), float((got - first).abs().max()))
    if weight_dtype == torch.float32 and optimizer.kind in ("sgd", "rowwise_adagrad") and not optimizer.weight_decay:
        want = _reference_step(start, batch, grad, rows, optimizer).view(-1)
        torch.testing.assert_close(first.double(), want, **tol,
                                   msg=lambda e: f"merge chunks {values[0]} vs float64: {e}")
        out["check_max_diff_vs_float64"] = float((first.double() - want).abs().max())
    return out


def _reference_step(start: torch.Tensor, batch: JaggedBatch, grad: torch.Tensor, rows: list[int],
                    optimizer: EmbeddingOptimizer) -> torch.Tensor:
    """float64 SGD or row-wise Adagrad step of flat weights ``start`` [sum(rows) * DIM] under sum pooling."""
    b, f = batch.batch_size, batch.num_features
    seg = torch.repeat_interleave(torch.arange(f * b, device="cuda"), torch.diff(batch.offsets))  # [nnz] bag of each id
    feat, bag = seg // b, seg % b
    base = torch.tensor([0, *rows[:-1]], device="cuda").cumsum(0)  # [F] first global row of each table
    g = torch.zeros(sum(rows), DIM, dtype=torch.float64, device="cuda")  # [rows, DIM] summed per row
    g.index_add_(0, base[feat] + batch.values, grad.double().view(b, f, DIM)[bag, feat])
    w = start.double().view(-1, DIM)
    if optimizer.kind == "sgd":
        return w - optimizer.lr * g
    s = optimizer.initial_accumulator_value + (g * g).mean(1, keepdim=True)  # [rows, 1]
    return w - optimizer.lr * g / (s.sqrt() + optimizer.eps)


def merge_ab_rounds(module: TableBatchedEmbedding, step, base: tbe_select.UpdateConfig, values: list[int],
                    rounds: int) -> list[dict]:
    """``rounds`` rounds over ``values`` in turn (1, 8, 1, 8, ...): the backward's kernel table and the
    median of the whole ``step`` (fwd + bwd + update) by ``do_bench``, per merge chunk count."""
    out = []
    for r in range(rounds):
        for m in values:
            module.update_config = dataclasses.replace(base, merge_chunks=m)
            table = kernel_table(step)
            step_ms = triton.testing.do_bench(step, warmup=25, rep=200, return_mode="median")
            merge = [k for k in table if k["kernel"].startswith(MERGE_KERNEL)]
            update = [k for k in table if k["kernel"].startswith(UPDATE_KERNELS)]
            out.append({"round": r + 1, "merge_chunks": m, "merge_ms": sum(k["ms_per_step"] for k in merge),
                        "merge_launches": sum(k["calls_per_step"] for k in merge),
                        "update_ms": sum(k["ms_per_step"] for k in update),
                        "kernels_ms": sum(k["ms_per_step"] for k in table), "step_ms": step_ms, "kernels": table})
    return out


def summarize_merge_ab(rounds: list[dict], values: list[int], predicted: dict[int, float]) -> dict:
    """Per merge chunk count: min and median over rounds of the merge, update and step times, the
    merge launches per step and the cost model's merge time."""
    out = {}
    for m in values:
        mine = [r for r in rounds if r["merge_chunks"] == m]
        for key in ("merge_ms", "update_ms", "step_ms"):
            xs = [r[key] for r in mine]
            out[f"chunks{m}_{key}_min"], out[f"chunks{m}_{key}_median"] = min(xs), statistics.median(xs)
        out[f"chunks{m}_merge_launches"] = mine[0]["merge_launches"]
        out[f"chunks{m}_model_merge_ms"] = predicted[m]
    return out


def predicted_merge_ms(module: TableBatchedEmbedding, batch: JaggedBatch, base: tbe_select.UpdateConfig,
                       values: list[int]) -> dict[int, float]:
    """The cost model's merge time (``polyrec.perfmodel.tbe.merge_seconds``) of each merge chunk count
    (half-precision rows: with their stochastic rounding)."""
    spec = tbe_select.selection_spec(module.weights.device)
    unique = unique_rows(batch)
    rounding = ROUNDED_ROWS.get(module.weight_dtype, "")
    return {m: 1e3 * merge_seconds(nnz=batch.nnz, unique=unique, tile=base.span, grad_row_bytes=4 * module.block_d,
                                   spec=spec, ceil=ceilings(spec), chunks=m, rounding=rounding,
                                   rounded_block_d=module.block_d) for m in values}


def print_merge_ab(rows: list[dict], summary: dict, values: list[int]) -> None:
    print(f"{'round':>5} {'chunks':>6} {'merge ms':>9} {'launches':>8} {'update ms':>9} {'step ms':>8}")
    for r in rows:
        print(f"{r['round']:>5} {r['merge_chunks']:>6} {r['merge_ms']:>9.3f} {r['merge_launches']:>8.0f} "
              f"{r['update_ms']:>9.3f} {r['step_ms']:>8.3f}")
    print(f"{'chunks':>6} {'merge min/med':>15} {'model':>7} {'update min/med':>15} {'step min/med':>15}")
    for m in values:
        pairs = [f"{summary[f'chunks{m}_{key}_min']:.3f}/{summary[f'chunks{m}_{key}_median']:.3f}"
                 for key in ("merge_ms", "update_ms", "step_ms")]
        print(f"{m:>6} {pairs[0]:>15} {summary[f'chunks{m}_model_merge_ms']:>7.3f} {pairs[1]:>15} {pairs[2]:>15}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default="fp32",
                        help="weight precision of the tables")
    parser.add_argument("--skip-sweep", action="store_true", help="only the kernel table (no forward sweep)")
    parser.add_argument("--skewed", action="store_true", help="the benchmark's skewed ids (default uniform)")
    parser.add_argument("--init-scale", type=float, default=None,
                        help="rows drawn from U(-s, s) (default: the module's, 1/sqrt(rows) per table)")
    parser.add_argument("--optimizer", default="rowwise_adagrad", choices=OPTIMIZERS,
                        help="the fused optimizer (row-wise Adagrad is MLPerf's)")
    parser.add_argument("--grad-dtype", choices=("fp32", "bf16"), default="fp32",
                        help="the pooled output's (and its gradient's) dtype: bf16 as in training with bf16 dense")
    parser.add_argument("--lane-chunks", type=int, default=None,
                        help="force the lane update's tiles per program for any dtype (default: the selector's)")
    parser.add_argument("--row-cap", type=int, default=None,
                        help="cap every table's rows (Adam's two state arrays do not fit the full tables)")
    parser.add_argument("--lane-max-registers", type=int, default=None,
                        help="cap the lane update's registers per thread (UpdateConfig.max_registers)")
    parser.add_argument("--merge-ab", type=_chunk_list, default=None, metavar="1,8",
                        help="A/B the merge levels' tiles per program, interleaved rounds in this process")
    parser.add_argument("--rounds", type=int, default=3, help="--merge-ab rounds per value (at least 2)")
    args = parser.parse_args()
    if args.merge_ab is not None and args.rounds < 2:
        parser.error("--rounds must be at least 2 (interleaved rounds expose drift)")
    if args.lane_chunks is not None:  # forced for every row and gradient dtype
        tbe_select.LANE_CHUNKS = args.lane_chunks
    if args.lane_max_registers is not None:
        chosen = tbe_select.select_update
        tbe_select.select_update = lambda *a, **kw: dataclasses.replace(chosen(*a, **kw),
                                                                        max_registers=args.lane_max_registers)
    weight_dtype = EMBEDDING_DTYPES[args.dtype]
    batch_size = 2048 if args.quick else 65536
    cap = 100_000 if args.quick else args.row_cap
    rows_per_table = [min(r, cap) for r in MLPERF_ROWS] if cap else MLPERF_ROWS
    gen = torch.Generator(device="cuda").manual_seed(0)
    tables = [TableSpec(name=f"t{i}", rows=r, dim=DIM) for i, r in enumerate(rows_per_table)]
    out_dtype = EMBEDDING_DTYPES[args.grad_dtype]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind=args.optimizer, lr=0.01),
                                   output_dtype=out_dtype, init_scale=args.init_scale,
                                   weight_dtype=weight_dtype, device="cuda")
    batch = make_batch(rows_per_table, MLPERF_HOTS, batch_size, args.skewed, gen)
    grad = torch.randn(batch_size, DIM * len(tables), device="cuda", generator=gen).to(out_dtype)
    with torch.no_grad():
        module(batch)
    sweep = [] if args.skip_sweep else forward_sweep(module, batch, torch.cuda.get_device_properties(0).warp_size)
    if args.merge_ab is not None:
        merge_ab(args, module, batch, grad, rows_per_table, sweep)
        return
    kernels = kernel_table(lambda: module(batch).backward(grad))[:25]
    sort_keys = torch.randint(0, sum(rows_per_table), (batch.nnz,), device="cuda", dtype=torch.int32)
    sort_ms = triton.testing.do_bench(lambda: torch.sort(sort_keys), warmup=10, rep=100, return_mode="median")
    name = _result_name(args)
    update = next(c for key, c in module._configs.items() if key[0] == "upd")  # what the backward ran
    summary = {"sort_int32_ms": sort_ms, "update_variant": update.variant, "update_tile": update.tile,
               "lane_chunks": update.chunks, "lane_max_registers": update.max_registers}
    write_results(name, {"dtype": args.dtype, "skewed": args.skewed, "optimizer": args.optimizer,
                         "grad_dtype": args.grad_dtype, "row_cap": args.row_cap, "forward_sweep": sweep,
                         "kernels": kernels,
                         "nnz": batch.nnz} | summary, rows=kernels, summary=summary)
    print(f"{'bags':>5} {'hots':>5} {'warps':>5} {'fwd ms':>8}")
    for r in sorted(sweep, key=lambda r: r["fwd_ms"]):
        print(f"{r['bags']:>5} {r['hots']:>5} {r['warps']:>5} {r['fwd_ms']:>8.3f}{'  <- selected' if r['selected'] else ''}")
    print(f"torch.sort of {batch.nnz} int32 keys: {sort_ms:.3f} ms")
    for r in kernels:
        print(f"{r['ms_per_step']:8.3f} ms  x{r['calls_per_step']:.0f}  {r['kernel']}")


def merge_ab(args, module: TableBatchedEmbedding, batch, grad: torch.Tensor, rows_per_table: list[int],
             sweep: list[dict]) -> None:
    """Check every merge chunk count against the first (and a float64 reference where it applies), then
    time them in interleaved rounds on ``module`` and ``batch``; write ``<name>_mergeab``."""
    base = module._update_config(batch.nnz)  # the selector's config; only merge_chunks changes
    check = check_merge_chunks(args.merge_ab, base, rows=[min(r, 20_000) for r in rows_per_table],
                               hots=MLPERF_HOTS, batch_size=512 if args.quick else 4096, skewed=args.skewed,
                               weight_dtype=module.weight_dtype, output_dtype=module.output_dtype,
                               optimizer=module.optimizer)
    predicted = predicted_merge_ms(module, batch, base, args.merge_ab)
    rounds = merge_ab_rounds(module, lambda: module(batch).backward(grad), base, args.merge_ab, args.rounds)
    module.update_config = None
    summary = {"update_variant": base.variant, "update_tile": base.tile, "lane_chunks": base.chunks,
               "nnz": batch.nnz, **check, **summarize_merge_ab(rounds, args.merge_ab, predicted)}
    rows = [{k: v for k, v in r.items() if k != "kernels"} for r in rounds]
    write_results(_result_name(args) + "_mergeab",
                  {"dtype": args.dtype, "skewed": args.skewed, "optimizer": args.optimizer,
                   "grad_dtype": args.grad_dtype, "forward_sweep": sweep, "rounds": rounds} | summary,
                  rows=rows, summary=summary)
    print_merge_ab(rows, summary, args.merge_ab)


def _result_name(args) -> str:
    return (f"tbe_breakdown_{args.dtype}" + ("_skewed" if args.skewed else "")
            + ("" if args.optimizer == "rowwise_adagrad" else f"_{args.optimizer}")
            + ("" if args.grad_dtype == "fp32" else f"_grad{args.grad_dtype}")
            + (f"_chunks{args.lane_chunks}" if args.lane_chunks is not None else "")
            + (f"_init{args.init_scale:g}" if args.init_scale is not None else ""))


def _chunk_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if len(set(values)) < 2 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--merge-ab wants two or more distinct counts >= 1, got '{text}'")
    return values


if __name__ == "__main__":
    main()
