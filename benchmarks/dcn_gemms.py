"""The cross network's GEMMs one by one: each fused-epilogue GEMM on its Triton config and on the
library path (torch.matmul + one fused Triton epilogue pass), against the same GEMM without its
epilogue and torch.matmul alone, and a sweep of the configs for the fused epilogues.

A diagnostic for the training issue: the fused cross-network backward measured only 1.03x of the
unfused one (``dcn_backward_nvidia-h200_2026-11-29``) where 1.3x was predicted. MLPerf shapes (batch
65536, D 3456, rank 512, bf16). For each GEMM: the selected config's time, the time of the same GEMM
with no epilogue (same config), torch.matmul, the library path with its epilogue pass (forced, so
timed whatever the selector picks; checked against the Triton path first), the floor (FLOPs at the
calibrated bf16 rate + the unique bytes at the copy rate), the model's predictions for both paths,
and the fastest config of a sweep over ``configs_for_shape`` for the fused epilogues. Writes
``dcn_gemms_<gpu>_<date>.json``.

    PYTHONPATH=. python3 benchmarks/dcn_gemms.py [--quick] [--sweep 40]

About 2 minutes on an H200 (mostly compiles of the swept configs; ``--quick`` under a minute).
"""

from __future__ import annotations

import argparse

import torch
from triton.testing import do_bench

from polyrec.hardware.calibrate import ceilings
from polyrec.hardware.detect import detect
from polyrec.kernels.gemm import epilogue_name, matmul
from polyrec.kernels.gemm_configs import config_space, configs_for_shape
from polyrec.kernels.gemm_epilogue import CrossGrad
from polyrec.kernels.gemm_select import select_gemm
from polyrec.results import write_results

BATCH, DIM, RANK = 65536, 3456, 512  # MLPerf DLRM-DCNv2 cross network


def _time(fn) -> float:
    return do_bench(fn, warmup=10, rep=60, return_mode="median")


def _cases(b: int, d: int, r: int) -> dict:
    """Operands of one layer's GEMMs (small values: repeated in-place accumulation stays finite)."""
    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * 0.01

    low, u, v, x0, grad, dx0, bias = rand(b, r), rand(d, r), rand(r, d), rand(b, d), rand(b, d), rand(b, d), rand(d)
    bias_grad = torch.empty(d, device="cuda", dtype=torch.float32)
    return {
        "fwd cross (v Uᵀ + b, cross)": dict(args=(low, u), kw=dict(trans_b=True, bias=bias, cross=(x0, grad)),
                                            plain=dict(trans_b=True), flops=2 * b * d * r, bytes=4 * b * d * 2),
        "bwd CrossGrad (recompute)": dict(
            args=(low, u), kw=dict(trans_b=True, bias=bias, cross_grad=CrossGrad(
                grad=grad, x0=x0, d_x0=dx0, accumulate=True, bias_grad=bias_grad)),
            plain=dict(trans_b=True), flops=2 * b * d * r, bytes=5 * b * d * 2),
        "bwd residual (dv V + G)": dict(args=(low, v), kw=dict(residual=grad), plain={}, flops=2 * b * d * r,
                                        bytes=2 * b * d * 2),
        "bwd dv = g U": dict(args=(grad, u), kw={}, plain={}, flops=2 * b * d * r, bytes=b * d * 2),
        "bwd dU = gᵀ v": dict(args=(grad, low), kw=dict(trans_a=True), plain=dict(trans_a=True),
                               flops=2 * b * d * r, bytes=b * d * 2),
    }


def _library_path(a, w, kw: dict):
    """``matmul`` on the library backend (torch.matmul + the fused epilogue pass), whatever the model
    predicts."""
    return lambda: matmul(a, w, **kw, library=True)


def _check_library(a, w, kw: dict, cfg) -> None:
    """The library path's output (and CrossGrad's d_x0 / bias gradient) against the Triton path's."""
    cg = kw.get("cross_grad")
    saved = cg.d_x0.clone() if cg is not None else None
    outs = []
    for run in (lambda: matmul(a, w, **kw, config=cfg), _library_path(a, w, kw)):
        if cg is not None:
            cg.d_x0.copy_(saved)
        out = run()
        outs.append([out.float()] + ([cg.d_x0.float(), cg.bias_grad.clone()] if cg is not None else []))
    for got, want in zip(*outs):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2 * want.abs().max().item())


def _torch_time(a, b, kw) -> float:
    a_op = a.t() if kw.get("trans_a") else a
    b_op = b.t() if kw.get("trans_b") else b
    return _time(lambda: a_op @ b_op)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 4096, 6 swept configs")
    parser.add_argument("--sweep", type=int, default=40, help="configs swept per fused epilogue (an even sample of the space)")
    args = parser.parse_args()
    b = 4096 if args.quick else BATCH
    sweep_n = 6 if args.quick else args.sweep
    spec = detect(0).spec
    ceil = ceilings(spec)
    flops_rate, copy_rate = ceil.matmul_flops["bf16"].value, ceil.copy_bandwidth.value
    rows = []
    for name, case in _cases(b, DIM, RANK).items():
        a, w = case["args"]
        fused = name.startswith(("fwd cross", "bwd CrossGrad", "bwd residual"))
        k = a.shape[0] if case["kw"].get("trans_a") else a.shape[1]
        m = a.shape[1] if case["kw"].get("trans_a") else a.shape[0]
        n = w.shape[0] if case["kw"].get("trans_b") else w.shape[1]
        kw = case["kw"]
        epilogue = epilogue_name("bias" in kw, "none", "cross" in kw, "residual" in kw, "cross_grad" in kw)
        choice = select_gemm(m, n, k, "bf16", spec, epilogue=epilogue, b_k_major=bool(kw.get("trans_b")))
        cfg = choice.config
        if fused:
            _check_library(a, w, kw, cfg)
        row = {"gemm": name, "m": m, "n": n, "k": k, "epilogue": epilogue, "backend": choice.backend,
               "config": cfg.label,
               "floor_ms": 1e3 * (case["flops"] / flops_rate + case["bytes"] / copy_rate),
               "selected_ms": _time(lambda: matmul(a, w, **case["kw"])),
               "config_with_epilogue_ms": _time(lambda: matmul(a, w, **case["kw"], config=cfg)),
               "config_no_epilogue_ms": _time(lambda: matmul(a, w, **case["plain"], config=cfg)),
               "torch_matmul_ms": _torch_time(a, w, case["plain"]),
               "library_fused_pass_ms": _time(_library_path(a, w, kw)) if fused else None,
               "predicted_triton_ms": 1e3 * choice.triton_seconds, "predicted_library_ms": 1e3 * choice.library_seconds}
        if fused:
            space = configs_for_shape(config_space(spec, "bf16"), m, n, k)
            space = space[:: max(1, len(space) // sweep_n)][:sweep_n]  # an even sample of the space
            swept = []
            for c in space:
                try:
                    swept.append((_time(lambda: matmul(a, w, **case["kw"], config=c)), c.label))
                except Exception as err:  # a config that does not launch is recorded, not fatal
                    swept.append((float("inf"), f"{c.label}: {type(err).__name__}"))
            best = min(swept)
            row |= {"swept": len(swept), "sweep_best_ms": best[0], "sweep_best_config": best[1],
                    "sweep": [{"config": lbl, "ms": ms} for ms, lbl in sorted(swept)]}
        rows.append(row)
        print(f"{name:32s} sel {row['selected_ms']:.3f} ({row['backend']}, {cfg.label})  no-epi "
              f"{row['config_no_epilogue_ms']:.3f}  torch {row['torch_matmul_ms']:.3f}  floor {row['floor_ms']:.3f}"
              + (f"  lib+pass {row['library_fused_pass_ms']:.3f} (pred {row['predicted_library_ms']:.3f}, "
                 f"triton pred {row['predicted_triton_ms']:.3f})  sweep best {row['sweep_best_ms']:.3f} "
                 f"{row['sweep_best_config']}" if fused else ""))
    table = [{k: v for k, v in r.items() if k != "sweep"} for r in rows]
    write_results("dcn_gemms", {"batch": b, "dim": DIM, "rank": RANK, "rows": rows}, rows=table,
                  summary={"batch": b, "quick": args.quick})


if __name__ == "__main__":
    main()
