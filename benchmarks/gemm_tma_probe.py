"""Probe: the persistent TMA GEMM prototype (``polyrec.kernels.gemm_tma``) on the DLRM-DCNv2 shapes,
against torch.matmul alone, torch.matmul + its eager epilogue, and ``polyrec.kernels.gemm.matmul``
(the selected path, and the library path: torch.matmul + one Triton epilogue pass).

For each shape, on fresh random bf16 inputs: every variant is first checked against a float32 torch
reference (outputs poisoned with NaN first; the TMA kernel, whose epilogue runs in fp32 and rounds
once, must be within one bf16 ulp elementwise, the others within 2% of the largest |value|), then
timed with ``triton.testing.do_bench`` (median, L2 flushed before each run). A config that fails to
compile or launch (e.g. out of shared memory) is recorded with its error and skipped. Floors: FLOPs
at the calibrated bf16 matmul rate and unique bytes (A, B, x0, x, output) at the copy rate
(``polyrec.hardware.calibrate.ceilings``). Writes ``gemm_tma_probe_<gpu>_<date>.json`` + ``.md``.

    PYTHONPATH=. python3 benchmarks/gemm_tma_probe.py [--quick] [--budget-s 200]

About 2-3 minutes on one H200 (about 50 compiles of the swept configs, in parallel threads per shape,
then ~130 timings);
``--quick`` (two small shapes, three configs) well under a minute. NVIDIA sm_90 only.

``--fit RESULTS.json`` (offline, CPU, ~1 minute) fits the TMA model's constants
(``polyrec.perfmodel.gemm_tma``: main-loop efficiency, held buffers, host seconds per call,
co-resident overlap) over a grid on fold A of a results file, split two ways (alternate configs of
each shape; or alternate shapes), and prints the geomean |error| of the predicted time on fold A and
fold B, and per shape the measured time of the predicted-best config over the measured best.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch
from triton.testing import do_bench

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.detect import detect
from polyrec.kernels.gemm import matmul
from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.kernels.gemm_tma import TmaGemmConfig, check_device, gemm_tma
from polyrec.perfmodel import gemm_tma as tma_model
from polyrec.perfmodel.gemm import GemmProblem
from polyrec.results import write_results

#: Elementwise tolerance of the TMA kernel: one bf16 ulp (2^-7 of the value) plus 1e-3 of the
#: largest |value| for entries near zero; baselines that round the product before their epilogue
#: get 2% of the largest |value|.
ULP_BF16 = 2.0**-7
BASELINE_TOL = 2e-2


@dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """One GEMM of DLRM-DCNv2 training (MLPerf sizes): out [m, n] = epilogue(a [m, k] @ op(b))."""

    name: str
    m: int
    n: int
    k: int
    b_k_major: bool  # b stored [n, k] row-major (forward x @ Wᵀ); else [k, n]
    epilogue: str  # "none", "bias_relu" or "cross"


SHAPES = [
    Shape(name="cross fwd B65536", m=65536, n=3456, k=512, b_k_major=True, epilogue="cross"),
    Shape(name="cross GEMM alone B65536", m=65536, n=3456, k=512, b_k_major=True, epilogue="none"),
    Shape(name="top1 fwd B65536", m=65536, n=1024, k=3456, b_k_major=True, epilogue="bias_relu"),
    Shape(name="top2 fwd B65536", m=65536, n=1024, k=1024, b_k_major=True, epilogue="bias_relu"),
    Shape(name="cross-U dgrad B65536 (B [K,N])", m=65536, n=512, k=3456, b_k_major=False, epilogue="none"),
    Shape(name="cross fwd B16384", m=16384, n=3456, k=512, b_k_major=True, epilogue="cross"),
    Shape(name="cross fwd B2048", m=2048, n=3456, k=512, b_k_major=True, epilogue="cross"),
]
QUICK_SHAPES = [Shape(name="cross fwd B2048", m=2048, n=3456, k=512, b_k_major=True, epilogue="cross"),
                Shape(name="top2 fwd B2048", m=2048, n=1024, k=1024, b_k_major=True, epilogue="bias_relu")]

#: Swept for every shape: the Hopper tiles (BM 128, BN 128/256, BK 64), pipeline depth, warps, the
#: subtiled epilogue, two programs per SM where shared memory allows, warp specialization on/off.
CONFIGS = [
    TmaGemmConfig(),
    TmaGemmConfig(num_stages=4),
    TmaGemmConfig(num_warps=4, num_stages=4),
    TmaGemmConfig(epilogue_subtile=True),
    TmaGemmConfig(block_n=256),
    TmaGemmConfig(block_n=256, epilogue_subtile=True),
    TmaGemmConfig(block_n=256, num_stages=4, epilogue_subtile=True),
    TmaGemmConfig(block_m=256, epilogue_subtile=True),
    TmaGemmConfig(num_stages=2, epilogue_subtile=True, ctas_per_sm=2),
    TmaGemmConfig(block_k=32, epilogue_subtile=True, ctas_per_sm=2),
    TmaGemmConfig(block_n=64, num_warps=4, ctas_per_sm=2),
    TmaGemmConfig(warp_specialize=True),
]
#: Swept for the cross epilogue only: x0 / x prefetched into L2 when the tile starts.
CROSS_CONFIGS = [
    TmaGemmConfig(l2_prefetch=True),
    TmaGemmConfig(epilogue_subtile=True, l2_prefetch=True),
    TmaGemmConfig(block_n=256, epilogue_subtile=True, l2_prefetch=True),
    TmaGemmConfig(num_stages=2, epilogue_subtile=True, ctas_per_sm=2, l2_prefetch=True),
]
QUICK_CONFIGS = [TmaGemmConfig(), TmaGemmConfig(block_n=256, epilogue_subtile=True),
                 TmaGemmConfig(num_stages=2, epilogue_subtile=True, ctas_per_sm=2)]


def _inputs(s: Shape) -> dict:
    """Fresh random operands of one shape (bf16 on the GPU)."""
    def rand(*shape):
        return torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    inp = {"a": rand(s.m, s.k), "b": rand(s.n, s.k) if s.b_k_major else rand(s.k, s.n)}
    if s.epilogue != "none":
        inp["bias"] = rand(s.n)  # [N]
    if s.epilogue == "cross":
        inp["cross"] = (rand(s.m, s.n), rand(s.m, s.n))  # x0, x: [M, N]
    return inp


def _epilogue_kwargs(s: Shape, inp: dict) -> dict:
    kw = {k: inp[k] for k in ("bias", "cross") if k in inp}
    return kw | ({"activation": "relu"} if s.epilogue == "bias_relu" else {})


def _b_op(s: Shape, inp: dict) -> torch.Tensor:
    return inp["b"].t() if s.b_k_major else inp["b"]  # [K, N] view


def _reference(s: Shape, inp: dict) -> torch.Tensor:
    """float32 epilogue(a @ op(b)) (full fp32 matmul, no TF32)."""
    y = inp["a"].float() @ _b_op(s, inp).float()  # [M, N]
    if "bias" in inp:
        y += inp["bias"].float()
    if s.epilogue == "bias_relu":
        y.relu_()
    if s.epilogue == "cross":
        y = inp["cross"][0].float() * y + inp["cross"][1].float()
    return y


def _torch_fns(s: Shape, inp: dict):
    """(torch.matmul alone, torch.matmul + the eager epilogue)."""
    a, b = inp["a"], _b_op(s, inp)

    def alone():
        return torch.matmul(a, b)

    def with_epilogue():
        if s.epilogue == "bias_relu":
            return torch.relu(torch.addmm(inp["bias"], a, b))
        if s.epilogue == "cross":
            return torch.addcmul(inp["cross"][1], inp["cross"][0], torch.matmul(a, b) + inp["bias"])
        return torch.matmul(a, b)

    return alone, with_epilogue


def _error(out: torch.Tensor, ref: torch.Tensor, strict: bool) -> tuple[float, bool]:
    """(error, ok): strict: the worst |out - ref| over its elementwise bound (ok when <= 1); else the
    worst |out - ref| over max |ref| (ok when <= BASELINE_TOL)."""
    scale = ref.abs().max()
    diff = (out.float() - ref).abs()
    if not torch.isfinite(out).all():
        return float("nan"), False
    if strict:
        err = float((diff / (ULP_BF16 * ref.abs() + 1e-3 * scale)).max())
        return err, err <= 1.0
    err = float(diff.max() / scale)
    return err, err <= BASELINE_TOL


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160] if text else ''}"


def _time(fn, quick: bool) -> float:
    return do_bench(fn, warmup=5 if quick else 25, rep=20 if quick else 100, return_mode="median")


def _measure(label: str, kind: str, fn, ref, strict: bool, quick: bool, poison=None) -> dict:
    """Check one variant (poisoning ``poison`` first when given), then time it."""
    row = {"variant": label, "kind": kind, "ms": None, "err": None, "status": "ok"}
    try:
        if poison is not None:
            poison.fill_(float("nan"))
        out = fn()
        torch.cuda.synchronize()
    except Exception as e:  # a config that does not compile or launch is a result, not a crash
        row["status"] = _first_line(e)
        return row
    row["err"], ok = _error(out, ref, strict)
    if not ok:
        row["status"] = "WRONG"
        return row
    row["ms"] = _time(fn, quick)
    return row


def _precompile(warm, configs: list[TmaGemmConfig]) -> None:
    """Compile the configs in parallel threads (Triton's AsyncCompileMode); a config that fails shows
    its error again when ``_measure`` launches it."""
    from triton.runtime._async_compile import AsyncCompileMode

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool, AsyncCompileMode(pool, ignore_errors=True):
        for cfg in configs:
            try:
                warm(cfg)
            except Exception:  # noqa: BLE001 - reported by _measure
                continue


def _shape_rows(s: Shape, configs: list[TmaGemmConfig], quick: bool, deadline: float) -> list[dict]:
    inp = _inputs(s)
    ref = _reference(s, inp)
    kw = _epilogue_kwargs(s, inp)
    alone, with_epi = _torch_fns(s, inp)
    product = ref if s.epilogue == "none" else inp["a"].float() @ _b_op(s, inp).float()  # [M, N] fp32
    rows = [_measure("torch.matmul", "torch", alone, product, False, quick),
            _measure("torch.matmul + eager epilogue", "torch+epilogue", with_epi, ref, False, quick),
            _measure("polyrec matmul (selected)", "polyrec",
                     lambda: matmul(inp["a"], inp["b"], trans_b=s.b_k_major, **kw), ref, False, quick),
            _measure("polyrec matmul (library=True)", "polyrec library",
                     lambda: matmul(inp["a"], inp["b"], trans_b=s.b_k_major, library=True, **kw), ref, False,
                     quick)]
    out = torch.empty((s.m, s.n), device="cuda", dtype=torch.bfloat16)  # [M, N]
    _precompile(lambda cfg: gemm_tma(inp["a"], inp["b"], b_k_major=s.b_k_major, config=cfg, out=out, warmup=True,
                                     **kw), configs)
    for cfg in configs:
        if time.monotonic() > deadline:
            rows.append({"variant": cfg.label, "kind": "tma", "ms": None, "err": None,
                         "status": "skipped: time budget"})
            continue
        rows.append(_measure(cfg.label, "tma", lambda cfg=cfg: gemm_tma(
            inp["a"], inp["b"], b_k_major=s.b_k_major, config=cfg, out=out, **kw), ref, True, quick, poison=out))
    return rows


def _floors(s: Shape, flops_rate: float, copy_rate: float) -> dict:
    flops = 2 * s.m * s.n * s.k
    tensors = s.m * s.k + s.n * s.k + s.m * s.n * (3 if s.epilogue == "cross" else 1)  # A, B, (x0, x), out
    compute_ms, memory_ms = 1e3 * flops / flops_rate, 1e3 * 2 * tensors / copy_rate
    return {"compute_floor_ms": compute_ms, "memory_floor_ms": memory_ms, "floor_ms": max(compute_ms, memory_ms)}


def _summary_row(s: Shape, rows: list[dict], floors: dict) -> dict:
    def ms(kind):
        times = [r["ms"] for r in rows if r["kind"] == kind and r["ms"] is not None]
        return min(times) if times else None

    tma = [r for r in rows if r["kind"] == "tma" and r["ms"] is not None]
    best = min(tma, key=lambda r: r["ms"]) if tma else None
    row = {"shape": s.name, "mnk": f"{s.m}x{s.n}x{s.k}", "epilogue": s.epilogue,
           "b": "[N,K]" if s.b_k_major else "[K,N]", "best_tma_config": best["variant"] if best else "none ran",
           "tma_ms": best["ms"] if best else None, "torch_ms": ms("torch"), "torch_epilogue_ms": ms("torch+epilogue"),
           "polyrec_ms": ms("polyrec"), "polyrec_library_ms": ms("polyrec library"), "floor_ms": floors["floor_ms"]}
    base = row["torch_epilogue_ms"]
    row["torch_epi_over_tma"] = base / row["tma_ms"] if base and row["tma_ms"] else None
    return row


#: The fit's grids (see ``polyrec.perfmodel.gemm_tma``).
FIT_EFFICIENCIES = tuple(0.60 + 0.025 * i for i in range(17))
FIT_HELD_BUFFERS = (0, 1)
FIT_HOST_S = tuple(1e-5 * i for i in range(4, 13))
FIT_CORESIDENT = (0.0, 0.25, 0.5, 0.75, 1.0)


def _fit_rows(path: str) -> list[tuple[str, GemmProblem, GemmConfig, float]]:
    """(shape, problem, config as the selector's GemmConfig, measured seconds) of every timed TMA row
    of a results file whose config the model covers (not warp-specialized: a no-op on sm_90; not L2
    prefetch: not in the space)."""
    import json

    by_label = {c.label: c for c in CONFIGS + CROSS_CONFIGS}
    out = []
    for r in json.loads(open(path).read())["rows"]:
        cfg = by_label.get(r["variant"])
        if r["kind"] != "tma" or r["ms"] is None or cfg is None or cfg.warp_specialize or cfg.l2_prefetch:
            continue
        m, n, k = (int(x) for x in r["mnk"].split("x"))
        problem = GemmProblem(m=m, n=n, k=k, dtype="bf16", epilogue=r["epilogue"], b_k_major=r["b"] == "[N,K]")
        config = GemmConfig(block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k, group_m=cfg.group_m,
                            num_warps=cfg.num_warps, num_stages=cfg.num_stages, ctas_per_sm=cfg.ctas_per_sm,
                            epilogue_subtile=cfg.epilogue_subtile, persistent_tma=True)
        out.append((r["shape"], problem, config, r["ms"] * 1e-3))
    return out


def _log_error(rows, spec, ceil, **params) -> float:
    """Geomean |predicted / measured - 1| (in log space) over the rows the model deems runnable (a
    config over its register estimate is left out: the compiler fit it, the model keeps a margin)."""
    import math

    predicted = [(tma_model.estimate(p, c, spec, ceil, **params).seconds, t) for _, p, c, t in rows]
    logs = [abs(math.log(s / t)) for s, t in predicted if math.isfinite(s)]
    return math.exp(sum(logs) / len(logs)) - 1


def _folds(rows: list, by: str) -> dict[str, list]:
    """Two halves of the rows: ``by`` "row" alternates configs within each shape (fold A: even
    positions in file order); "shape" splits the shapes (names sorted, fold A: even positions)."""
    if by == "shape":
        names = sorted({r[0] for r in rows})
        first = [names.index(r[0]) % 2 == 0 for r in rows]
    else:
        first = [[q[0] for q in rows[:i]].count(r[0]) % 2 == 0 for i, r in enumerate(rows)]
    return {"A": [r for r, a in zip(rows, first) if a], "B": [r for r, a in zip(rows, first) if not a]}


def fit(path: str, calibration: str) -> None:
    """Grid-fit the TMA model on fold A of ``path`` at the ceilings of ``calibration`` (a
    ``polyrec hw calibrate`` results file), for both fold splits; print both folds' errors, then
    per shape the measured time of the config the model (its current constants) ranks first."""
    import itertools
    import json

    from polyrec.hardware.catalog import get_device

    spec = get_device("H200")
    ceil = ceilings(spec, json.loads(open(calibration).read())["results"]["measured"])
    rows = _fit_rows(path)
    current = {"efficiency": tma_model.TMA_MAINLOOP_EFFICIENCY, "held_buffers": tma_model.TMA_HELD_BUFFERS,
               "host_s": tma_model.TMA_HOST_S, "coresident": tma_model.TMA_CORESIDENT_OVERLAP}
    for by in ("row", "shape"):
        folds = _folds(rows, by)
        grid = itertools.product(FIT_EFFICIENCIES, FIT_HELD_BUFFERS, FIT_HOST_S, FIT_CORESIDENT)
        keys = ("efficiency", "held_buffers", "host_s", "coresident")
        best = min(grid, key=lambda g: _log_error(folds["A"], spec, ceil, **dict(zip(keys, g))))
        params = {k: round(v, 6) for k, v in zip(keys, best)}
        for label, p in ((f"split by {by}, fitted on fold A", params), (f"split by {by}, in the model", current)):
            errors = "  ".join(f"fold {f} {100 * _log_error(rs, spec, ceil, **p):.1f}%" for f, rs in folds.items())
            print(f"{label}: {p}  geomean |error| {errors}")
    for name in sorted({r[0] for r in rows}):
        shape_rows = [r for r in rows if r[0] == name]
        picked = min(shape_rows, key=lambda r: tma_model.estimate(r[1], r[2], spec, ceil).seconds)
        fastest = min(r[3] for r in shape_rows)
        print(f"{name:<32} predicted best {picked[2].label:<36} measured best/picked {fastest / picked[3]:.3f}")


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small shapes, three configs")
    parser.add_argument("--budget-s", type=float, default=200.0,
                        help="stop sweeping TMA configs after this many seconds (baselines still run)")
    parser.add_argument("--fit", metavar="RESULTS_JSON", help="offline: fit the TMA model on a results file")
    parser.add_argument("--calibration", default="benchmarks/results/calibrate_nvidia-h200_2026-11-29.json",
                        help="--fit: the ceilings, as calibrated on the GPU that ran the probe")
    args = parser.parse_args()
    if args.fit:
        fit(args.fit, args.calibration)
        return
    if not torch.cuda.is_available():
        raise SystemExit("gemm_tma_probe: needs an NVIDIA sm_90 GPU")
    check_device(torch.empty(1, device="cuda"))
    torch.set_float32_matmul_precision("highest")  # the float32 references: no TF32
    start = time.monotonic()
    deadline = start + args.budget_s
    ceil = ceilings(detect(0).spec)
    flops_rate, copy_rate = ceil.matmul_flops["bf16"].value, ceil.copy_bandwidth.value
    shapes = QUICK_SHAPES if args.quick else SHAPES
    all_rows, summary_rows = [], []
    for s in shapes:
        configs = QUICK_CONFIGS if args.quick else CONFIGS + (CROSS_CONFIGS if s.epilogue == "cross" else [])
        rows = _shape_rows(s, configs, args.quick, deadline)
        torch.cuda.empty_cache()  # the shape's operands and references are gone
        floors = _floors(s, flops_rate, copy_rate)
        all_rows += [{"shape": s.name, "mnk": f"{s.m}x{s.n}x{s.k}", "epilogue": s.epilogue,
                      "b": "[N,K]" if s.b_k_major else "[K,N]", **r,
                      "tflops": 2e-9 * s.m * s.n * s.k / r["ms"] if r["ms"] else None} for r in rows]
        summary_rows.append(_summary_row(s, rows, floors)
                            | {k: floors[k] for k in ("compute_floor_ms", "memory_floor_ms")})
        for r in rows:
            print(f"{s.name:<32} {r['variant']:<42} {_fmt(r['ms']):>8} ms  err {_fmt(r['err']):>8}  {r['status']}")
        print(f"-- {s.name} done at {time.monotonic() - start:.0f} s", flush=True)
    payload = {"ceilings": {"bf16_flops": flops_rate, "copy_bytes_per_s": copy_rate,
                            "origin": [ceil.matmul_flops["bf16"].origin, ceil.copy_bandwidth.origin]},
               "summary_rows": summary_rows, "quick": args.quick, "seconds": time.monotonic() - start}
    paths = write_results("gemm_tma_probe" + ("_quick" if args.quick else ""), payload, rows=all_rows,
                          summary={r["shape"]: f"TMA {_fmt(r['tma_ms'])} ms ({r['best_tma_config']}) vs "
                                   f"torch+epilogue {_fmt(r['torch_epilogue_ms'])} ms" for r in summary_rows})
    print()
    head = ["shape", "best TMA config", "TMA ms", "torch ms", "torch+epi ms", "polyrec ms", "polyrec lib ms",
            "floor ms"]
    print(f"{head[0]:<32} {head[1]:<40} " + " ".join(f"{h:>14}" for h in head[2:]))
    for r in summary_rows:
        cells = [r["tma_ms"], r["torch_ms"], r["torch_epilogue_ms"], r["polyrec_ms"], r["polyrec_library_ms"],
                 r["floor_ms"]]
        print(f"{r['shape']:<32} {r['best_tma_config']:<40} " + " ".join(f"{_fmt(c):>14}" for c in cells))
    print(f"wrote {paths[0]} in {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
