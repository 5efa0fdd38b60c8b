"""Zero-warmup GEMM selection against an exhaustive sweep, torch.matmul and triton.autotune.

For every shape of ``dlrm_suite()`` (DLRM-DCNv2 forward / dgrad / wgrad, square, skinny, odd): times
every config of ``configs_for_shape(config_space(spec, dtype))`` with ``triton.testing.do_bench``
(median, L2 flushed between runs), the selector's config, torch.matmul alone and with the epilogue as
torch ops, and records each config's measured and predicted time (for checking the model offline).
On sm_90 the space includes the persistent TMA kernel's configs (where it can run: row-major A,
aligned rows, bias / ReLU / cross epilogues), timed through ``matmul(config=...)`` like the rest; each
row says which kind won (classic Triton, TMA, library) and which the selector chose.
Summary: geomean best/selected, p10, worst, Kendall tau predicted vs measured, rank of the best, and
the library choice against min(best Triton, torch). The finalists of each shape (the sweep's best,
the selected config, the library path, torch.matmul) are re-timed in interleaved rounds two ways:
replayed from a CUDA graph (``do_bench_cudagraph``: the kernels' device time, with no host launch
cost and a warm L2, as training runs them with CUDA graphs) and eagerly (``do_bench``: host launch
included, L2 flushed); the library choice in graph times is the selector's for a call being captured
(``graphed``: by GPU time), in eager times its default. The summary's headline ratios use the graph times: a config is the kernel's
launch parameters, and on launch-bound shapes the eager time is the host's launch rate, the same
code for every config, which varied 2x between configs in one run (17x33x29 at 8cd3e5a: 41 vs 20
us). The eager ratios are reported beside them (``*_eager``). The sweep's single samples are kept
as ``*_sweep_ms``.
``triton.autotune``'s wall time on two shapes is the baseline (constructed here only).

Run on the GPU machine: ``PYTHONPATH=. python3 benchmarks/gemm_selection.py`` (about 8 minutes,
``--budget-s`` caps the sweeps: shapes that would overrun are skipped and listed); ``--quick`` runs 3
shapes x 10 configs (about 1 minute, mostly compiles).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import triton
from triton.runtime.errors import OutOfResources
from triton.testing import do_bench, do_bench_cudagraph

from polyrec.hardware.calibrate import calibrate, ceilings, save_calibration
from polyrec.hardware.detect import detect
from polyrec.kernels import gemm_select
from polyrec.kernels.gemm import matmul, reference_matmul
from polyrec.kernels.gemm_kernels import gemm_kernel
from polyrec.kernels.gemm_configs import GemmConfig, GemmShape, config_space, configs_for_shape, dlrm_suite
from polyrec.kernels.gemm_select import problem_tma, select_gemm
from polyrec.perfmodel.gemm import GemmProblem, estimate, operand_alignment
from polyrec.results import write_results
from stats import kendall_tau

DTYPES = {"bf16": torch.bfloat16}
#: do_bench settings (ms): short, since each config is one of ~150 per shape; median of the reps.
BENCH_WARMUP_MS, BENCH_REP_MS = 1, 4
#: Interleaved re-timing rounds of the finalists (the sweep's best, the selected config, the library
#: path, torch.matmul): each is the minimum over rounds of its do_bench median. One sweep sample is
#: not enough for them: at 691c40d, 17x33x29 and square 1024 measured 45 us for the selected config in
#: the sweep against 9-12 us for its neighbours (gemm_selection_nvidia-h200_2026-11-30 as committed in
#: that run), the "contiguous slow blocks" seen before.
RETIME_ROUNDS = 5
#: do_bench_cudagraph repetition time (ms) of one finalist in one round: the graph holds
#: ``rep / estimate`` unrolled calls, replayed 10 times, median.
GRAPH_REP_MS = 10
#: Shapes whose triton.autotune wall time is measured (its compiles are already cached, so this is
#: the timed-trial part alone).
AUTOTUNE_SHAPES = ("fwd top1 B65536", "wgrad cross-U B65536")
COMPILE_THREADS = 16


def _inputs(shape: GemmShape, dtype: torch.dtype) -> dict:
    """Fresh random operands in the shape's layout, and the epilogue's tensors."""
    m, n, k = shape.m, shape.n, shape.k
    a = torch.randn((k, m) if shape.layout[0] == "T" else (m, k), device="cuda", dtype=dtype)
    b = torch.randn((n, k) if shape.layout[1] == "T" else (k, n), device="cuda", dtype=dtype)
    args = {"a": a, "b": b, "trans_a": shape.layout[0] == "T", "trans_b": shape.layout[1] == "T"}
    if shape.epilogue in ("bias", "bias_relu", "cross"):
        args["bias"] = torch.randn(n, device="cuda", dtype=dtype)
    if shape.epilogue in ("relu", "bias_relu"):
        args["activation"] = "relu"
    if shape.epilogue == "cross":
        args["cross"] = (torch.randn(m, n, device="cuda", dtype=dtype), torch.randn(m, n, device="cuda", dtype=dtype))
    return args


def _torch_plain(args: dict):
    """torch.matmul of the shape's operands, no epilogue."""
    a = args["a"].t() if args["trans_a"] else args["a"]
    b = args["b"].t() if args["trans_b"] else args["b"]
    return lambda: torch.matmul(a, b)


def _error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Max abs error relative to the reference's max magnitude."""
    return ((out.float() - ref).abs().max() / (ref.abs().max() + 1e-6)).item()


def _reference(args: dict) -> torch.Tensor:
    """float64 on the GPU (tens of ms for the largest suite shape), returned as fp32."""
    return reference_matmul(**args).float()


def _precompile(shape_args: list[tuple[dict, list[GemmConfig]]]) -> float:
    """Compile every (shape, config) in parallel threads; returns wall seconds."""
    from triton.runtime._async_compile import AsyncCompileMode

    start = time.perf_counter()
    with ThreadPoolExecutor(COMPILE_THREADS) as pool, AsyncCompileMode(pool):
        for args, configs in shape_args:
            for config in configs:
                matmul(**args, config=config, warmup=True)
    return time.perf_counter() - start


def _select(shape: GemmShape, dtype: str, spec, graphed: bool = False):
    """select_gemm as ``matmul`` asks it for this shape's layout (contiguous operands); ``graphed`` as
    ``matmul`` asks it while a CUDA graph is being captured."""
    return select_gemm(shape.m, shape.n, shape.k, dtype, spec, epilogue=shape.epilogue,
                       b_k_major=shape.layout[1] == "T", a_row_major=shape.layout[0] == "N", graphed=graphed)


def _problem(shape: GemmShape, dtype: str) -> GemmProblem:
    a_aligned, b_aligned = operand_alignment(shape.m, shape.n, shape.k, shape.layout)
    return GemmProblem(m=shape.m, n=shape.n, k=shape.k, dtype=dtype, epilogue=shape.epilogue,
                       b_k_major=shape.layout[1] == "T", a_aligned=a_aligned, b_aligned=b_aligned)


def _kind(config: GemmConfig) -> str:
    return "tma" if config.persistent_tma else "triton"


def _selection_times(shape: GemmShape, dtype: str, spec) -> tuple[float, float]:
    """(cold seconds, warm median seconds) of select_gemm for one shape."""
    gemm_select.clear_cache()
    select_gemm(1, 1, 1, dtype, spec)  # ceilings loaded once, as in a process
    start = time.perf_counter()
    _select(shape, dtype, spec)
    cold = time.perf_counter() - start
    warm = []
    for _ in range(200):
        start = time.perf_counter()
        _select(shape, dtype, spec)
        warm.append(time.perf_counter() - start)
    return cold, statistics.median(warm)


def sweep_shape(shape: GemmShape, dtype: str, spec, configs: list[GemmConfig], args: dict) -> dict:
    """Time every config of one shape; correctness of each against the reference first."""
    ceil = ceilings(spec)
    problem = _problem(shape, dtype)
    ref = _reference(args)
    records = []
    for config in configs:
        try:
            out = matmul(**args, config=config)
        except OutOfResources as exc:  # an exhaustive sweep meets configs the target cannot hold
            records.append({"config": config.label, "kind": _kind(config), "measured_ms": math.nan,
                            "predicted_ms": estimate(problem, config, spec, ceil).seconds * 1e3, "error": None,
                            "failure": str(exc)})
            continue
        err = _error(out, ref)
        ms = do_bench(lambda: matmul(**args, config=config), warmup=BENCH_WARMUP_MS, rep=BENCH_REP_MS,
                      return_mode="median") if err < 2e-2 else float("nan")
        est = estimate(problem, config, spec, ceil)
        records.append({"config": config.label, "kind": _kind(config), "measured_ms": ms,
                        "predicted_ms": est.seconds * 1e3,
                        "error": err, "parts": {k: round(v, 9) for k, v in est.parts.items()}})
    choice = _select(shape, dtype, spec)
    selected = next((r for r, c in zip(records, configs) if c == choice.config), None)
    if selected is None:  # outside the sweep: timed with the finalists below
        selected = {"config": choice.config.label, "kind": _kind(choice.config), "measured_ms": math.nan}
    library_err = _error(matmul(**args), ref)
    valid = [r for r in records if math.isfinite(r["measured_ms"])]
    best = min(valid, key=lambda r: r["measured_ms"])
    best_config = configs[records.index(best)]
    finalists = {"best": lambda: matmul(**args, config=best_config),
                 "library": lambda: matmul(**args, library=True),  # torch.matmul + one epilogue pass
                 "torch": _torch_plain(args)}
    if choice.config != best_config:  # the same config is timed once (twice, it differed by up to 12%)
        finalists["selected"] = lambda: matmul(**args, config=choice.config)
    graph, eager = _retime(finalists)
    labels = {"best": best, "selected": selected}
    best_name = "selected" if graph.get("selected", math.inf) < graph["best"] else "best"
    best = labels[best_name]  # the selected config was outside the sweep, or it won
    by_prediction = sorted(valid, key=lambda r: r["predicted_ms"])  # finite for the configs that ran
    rank = next((i + 1 for i, r in enumerate(by_prediction) if r["config"] == best["config"]), 0)
    cold, warm = _selection_times(shape, dtype, spec)
    graphed_backend = _select(shape, dtype, spec, graphed=True).backend  # the same config, chosen as captured
    winner = "library" if graph["library"] < graph[best_name] else best["kind"]
    return {
        "shape": shape.name, "m": shape.m, "n": shape.n, "k": shape.k, "layout": shape.layout,
        "epilogue": shape.epilogue, "configs": len(configs), "failed_configs": len(records) - len(valid),
        "best_config": best["config"], "best_kind": best["kind"],
        "best_classic_ms": _best_sweep_ms(valid, "triton"), "best_tma_ms": _best_sweep_ms(valid, "tma"),
        "winner_kind": winner, "selected_config": selected["config"],
        **_finalist_times(graph, graphed_backend, ""), **_finalist_times(eager, choice.backend, "_eager"),
        "rank_of_best_in_prediction": rank, "best_sweep_ms": best["measured_ms"],
        "selected_sweep_ms": selected["measured_ms"],
        "kendall_tau": kendall_tau([r["predicted_ms"] for r in valid], [r["measured_ms"] for r in valid]),
        "backend_chosen": choice.backend, "backend_chosen_graphed": graphed_backend, "kernel_chosen": choice.kernel,
        "predicted_selected_ms": choice.triton_seconds * 1e3, "predicted_library_ms": choice.library_seconds * 1e3,
        "library_path_error": library_err, "select_cold_us": cold * 1e6, "select_warm_us": warm * 1e6,
        "sweep": records,
    }


def _best_sweep_ms(valid: list[dict], kind: str) -> float:
    """The sweep's fastest single sample among configs of one kind (classic "triton" or "tma")."""
    return min((r["measured_ms"] for r in valid if r["kind"] == kind), default=math.nan)


def _finalist_times(final: dict[str, float], backend: str, suffix: str) -> dict[str, float]:
    """One timing mode's row fields: the best and selected configs (the faster of the two is the
    best), torch.matmul alone and as the library path, the backend chosen and the oracle."""
    selected = final.get("selected", final["best"])
    best = min(final["best"], selected)
    choice = selected if backend == "triton" else final["library"]
    return {f"best_ms{suffix}": best, f"selected_ms{suffix}": selected,
            f"best_over_selected{suffix}": best / selected, f"torch_ms{suffix}": final["torch"],
            f"torch_epilogue_ms{suffix}": final["library"], f"choice_ms{suffix}": choice,
            f"oracle_ms{suffix}": min(best, final["library"])}


def _retime(calls: dict) -> tuple[dict[str, float], dict[str, float]]:
    """(graph, eager): each call's minimum over RETIME_ROUNDS interleaved rounds of its median (ms)
    replayed from a CUDA graph and timed eagerly by do_bench."""
    graph = {name: math.inf for name in calls}
    eager = dict(graph)
    for _ in range(RETIME_ROUNDS):
        for name, fn in calls.items():
            graph[name] = min(graph[name], do_bench_cudagraph(fn, rep=GRAPH_REP_MS, return_mode="median"))
            eager[name] = min(eager[name], do_bench(fn, warmup=BENCH_WARMUP_MS, rep=BENCH_REP_MS,
                                                    return_mode="median"))
    return graph, eager


def autotune_wall(shape: GemmShape, configs: list[GemmConfig], args: dict) -> dict:
    """Wall seconds of triton.autotune's first call over the split_k = 1 configs (compiles cached)."""
    plain = [c for c in configs if c.split_k == 1 and not c.persistent_tma]
    tuned = triton.autotune(
        configs=[triton.Config({"BLOCK_M": c.block_m, "BLOCK_N": c.block_n, "BLOCK_K": c.block_k,
                                "GROUP_M": c.group_m, "SPLIT_K": 1}, num_warps=c.num_warps, num_stages=c.num_stages)
                 for c in plain],
        key=["M", "N", "K"])(gemm_kernel)
    a = args["a"].t() if args["trans_a"] else args["a"]
    b = args["b"].t() if args["trans_b"] else args["b"]
    m, n, k = shape.m, shape.n, shape.k
    out = torch.empty((m, n), device="cuda", dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), 1)  # noqa: E731
    torch.cuda.synchronize()
    start = time.perf_counter()
    tuned[grid](a, b, out, out, out, out, out, out, m, n, k, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), 0,
                out.stride(0), out.stride(1), 0, 0, 0, 0, 0, 0, HAS_BIAS=False, RELU=False, CROSS=False,
                INPUT_PRECISION="ieee")
    torch.cuda.synchronize()
    return {"shape": shape.name, "configs": len(plain), "autotune_wall_s": time.perf_counter() - start}


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _ratio_summary(rows: list[dict], suffix: str) -> dict:
    """Selection and library-choice ratios over the suite, for one timing mode."""
    ratios = sorted(r[f"best_over_selected{suffix}"] for r in rows)
    return {
        f"geomean_best_over_selected{suffix}": _geomean(ratios),
        f"p10_best_over_selected{suffix}": ratios[max(0, math.ceil(0.1 * len(ratios)) - 1)] if ratios else math.nan,
        f"worst_best_over_selected{suffix}": ratios[0] if ratios else math.nan,
        f"geomean_oracle_over_choice{suffix}": _geomean([r[f"oracle_ms{suffix}"] / r[f"choice_ms{suffix}"] for r in rows]),
        f"geomean_best_triton_over_torch{suffix}": _geomean([r[f"torch_ms{suffix}"] / r[f"best_ms{suffix}"] for r in rows]),
    }


def summarize(rows: list[dict]) -> dict:
    return {
        "shapes": len(rows),
        "timing": "headline ratios: CUDA-graph replay (device time); *_eager: do_bench (host launch included)",
        **_ratio_summary(rows, ""),
        **_ratio_summary(rows, "_eager"),
        "median_kendall_tau": statistics.median(r["kendall_tau"] for r in rows) if rows else math.nan,
        "median_rank_of_best": statistics.median(r["rank_of_best_in_prediction"] for r in rows) if rows else math.nan,
        "max_select_cold_us": max((r["select_cold_us"] for r in rows), default=math.nan),
        "median_select_warm_us": statistics.median(r["select_warm_us"] for r in rows) if rows else math.nan,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 shapes x 10 configs (smoke test)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall seconds for compiles + sweeps")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--skip-autotune", action="store_true",
                        help="skip the triton.autotune wall-time comparison (~150 s; measured 2026-11-29: 72-80 s per shape)")
    opts = parser.parse_args()
    start = time.perf_counter()
    spec = detect().spec
    save_calibration(spec.name, calibrate(spec))  # the model divides by this GPU's measured ceilings
    gemm_select.clear_cache()
    dtype = opts.dtype
    space = config_space(spec, dtype)
    suite = dlrm_suite()
    if opts.quick:
        suite = [s for s in suite if s.name in ("fwd cross-U B16384", "wgrad top1 B16384", "odd 17x33x29")]
    rows, skipped, compile_s = [], [], 0.0
    for shape in suite:
        torch.manual_seed(len(rows))
        tma = problem_tma(_problem(shape, dtype), a_row_major=shape.layout[0] == "N")
        configs = configs_for_shape(space, shape.m, shape.n, shape.k, tma=tma)
        if opts.quick:
            ranked = gemm_select.rank_configs(_problem(shape, dtype), spec, configs=configs)
            configs = [c for _, c in ranked[:5]] + [c for _, c in ranked[5::max(1, len(ranked) // 5)]][:5]
        elapsed = time.perf_counter() - start
        if rows and elapsed + 1.5 * (elapsed / (len(rows) + len(skipped))) > opts.budget_s:
            skipped.append(shape.name)
            continue
        args = _inputs(shape, DTYPES[dtype])
        compile_s += _precompile([(args, configs)])
        row = sweep_shape(shape, dtype, spec, configs, args)
        rows.append(row)
        print(f"{shape.name:24s} best {row['best_ms']:.4f} ms  selected {row['selected_ms']:.4f} ms  "
              f"ratio {row['best_over_selected']:.3f}  torch {row['torch_ms']:.4f}  tau {row['kendall_tau']:.2f}  "
              f"[{time.perf_counter() - start:.0f} s]", flush=True)
        del args
    autotune = []
    for shape in suite:
        if (shape.name in AUTOTUNE_SHAPES and time.perf_counter() - start < opts.budget_s + 50 and not opts.quick
                and not opts.skip_autotune):
            args = _inputs(shape, DTYPES[dtype])
            autotune.append(autotune_wall(shape, configs_for_shape(space, shape.m, shape.n, shape.k), args))
    summary = summarize(rows) | {"compile_wall_s": compile_s, "skipped_shapes": skipped,
                                 "total_wall_s": time.perf_counter() - start, "dtype": dtype,
                                 "space_size": len(space), "ceilings": str(ceilings(spec))}
    for a in autotune:
        summary[f"autotune_wall_s {a['shape']}"] = a["autotune_wall_s"]
    table = [{k: v for k, v in r.items() if k != "sweep"} for r in rows]
    write_results("gemm_selection" + ("_quick" if opts.quick else ""), {"rows": rows, "autotune": autotune},
                  rows=table, summary=summary)
    print()
    print(f"{'shape':24s} {'best/sel':>8s} {'tau':>5s} {'rank':>4s} {'chosen':>8s} {'won':>8s} {'classic':>8s} "
          f"{'tma':>8s} {'library':>8s} {'oracle/choice':>13s} {'eager b/s':>9s}")
    for r in rows:
        print(f"{r['shape']:24s} {r['best_over_selected']:8.3f} {r['kendall_tau']:5.2f} "
              f"{r['rank_of_best_in_prediction']:4d} {r['kernel_chosen']:>8s} {r['winner_kind']:>8s} "
              f"{r['best_classic_ms']:8.4f} {r['best_tma_ms']:8.4f} {r['torch_epilogue_ms']:8.4f} "
              f"{r['oracle_ms'] / r['choice_ms']:13.3f} {r['best_over_selected_eager']:9.3f}")
    for key, value in summary.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
