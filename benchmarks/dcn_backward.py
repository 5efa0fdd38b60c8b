"""The DCN-v2 cross network's forward+backward: the unfused autograd composition vs the fused backward.

MLPerf DLRM-DCNv2 cross network (D = 3456, rank 512, 3 layers, batch 65536, bf16 compute, fp32 master
weights), run as ``polyrec.models.layers.LowRankCross`` with the polyrec dense backend, ``fused=False``
(per layer ``linear`` + ``cross_linear``: autograd sums the gradients of x0 and each x_l with separate
adds; the cross backward multiplies with torch ops) and ``fused=True`` (``polyrec.kernels.dcn``: the
backward fused into the GEMM epilogues). Both are checked against a float64 reference first (same
shapes), then timed side by side with ``triton.testing.do_bench`` (median) on fresh random inputs; a
torch-profiler table of one step per path shows which kernels remain.

    PYTHONPATH=. python3 benchmarks/dcn_backward.py            # ~1-2 min on an H200, mostly Triton compiles
    PYTHONPATH=. python3 benchmarks/dcn_backward.py --quick    # smoke test, small shapes, < 30 s

Floor (written before measuring), batch 65536: per layer 6 GEMMs of 2 B D r = 231.9 GFLOP (forward
2, backward 4; the fused backward's recompute GEMM is a 7th, not counted) -> 18 x 231.9 = 4.17 TFLOP
/ 780 TFLOP/s = 5.35 ms; unique bytes x0, the output, its gradient and x0's gradient, 4 x 453 MB
[B, D] bf16 = 1.81 GB, plus the weights and their gradients (42 MB), / 4.24 TB/s = 0.44 ms;
floor 5.79 ms.

Prediction (written before measuring, from the selector's model on the H200 and the measured
~0.3 ms per [65536, 3456] bf16 elementwise pass of the e2e profile): forward ~2.7 ms in both paths;
unfused backward ~9.2 ms (5 GEMMs ~1.7 ms + 2 muls, 2 adds and a bias reduction ~1.4 ms per layer);
fused backward ~6.5 ms (recompute GEMM with the CrossGrad epilogue ~0.75 ms, residual dgrad ~0.45 ms,
three plain GEMMs ~0.95 ms per layer). Forward+backward: unfused ~12 ms, fused ~9.3 ms (1.3x; floor 5.8).
"""

from __future__ import annotations

import argparse

import torch
import triton

from polyrec.models.layers import DenseOps, LowRankCross
from polyrec.results import write_results
from profiling import kernel_table

#: H200 bf16 dense matmul rate for the floor, TFLOP/s: the GEMM sweep's calibrated ceiling (788,
#: docs/gemm.md), rounded down as issue 5's brief states it.
MATMUL_TFLOPS = 780.0
#: H200 device-to-device copy, TB/s (DESIGN.md, measured 2026-11-29: 4.25).
COPY_TBPS = 4.24
#: Relative tolerance (of the largest float64 reference value) for bf16 outputs and gradients.
BF16_TOLERANCE = 5e-2


def floor_ms(batch: int, dim: int, rank: int, layers: int, elem_bytes: int = 2) -> float:
    """FLOPs of the 6 GEMMs per layer at MATMUL_TFLOPS + unique bytes (x0, out, their gradients,
    weights and their gradients) at COPY_TBPS."""
    flops = 6 * layers * 2 * batch * dim * rank
    unique = 4 * batch * dim * elem_bytes + 2 * layers * (2 * dim * rank + dim) * elem_bytes
    return (flops / (MATMUL_TFLOPS * 1e12) + unique / (COPY_TBPS * 1e12)) * 1e3


def build(dim: int, rank: int, layers: int, fused: bool) -> LowRankCross:
    cross = LowRankCross(dim, layers, rank, gen=torch.Generator().manual_seed(0)).cuda()
    cross.fused = fused
    return cross


def reference_grads(cross: LowRankCross, x0: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    """float64 output and gradients (x0, then every parameter) of the same network, eager torch."""
    params = [p.detach().double().requires_grad_() for p in cross.parameters()]
    layers = len(cross.v)
    x0_64 = x0.detach().double().requires_grad_()
    x = x0_64
    for l in range(layers):
        low = x @ params[l].T  # [B, r]
        x = x0_64 * (low @ params[layers + l].T + params[2 * layers + l]) + x
    x.backward(grad.double())
    return [x.detach(), x0_64.grad] + [p.grad for p in params]


def run_grads(cross: LowRankCross, ops: DenseOps, x0: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    cross.zero_grad(set_to_none=True)
    leaf = x0.detach().requires_grad_()
    out = cross(leaf, ops)
    out.backward(grad)
    return [out.detach(), leaf.grad] + [p.grad for p in cross.parameters()]


def check(dim: int, rank: int, layers: int, batch: int, ops: DenseOps) -> dict[str, float]:
    """Largest error of each path (relative to the largest float64 reference value) over the output
    and every gradient; raises when one exceeds BF16_TOLERANCE."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    x0 = torch.randn(batch, dim, device="cuda", generator=gen).bfloat16()
    grad = torch.randn(batch, dim, device="cuda", generator=gen).bfloat16()
    errors = {}
    ref = reference_grads(build(dim, rank, layers, True), x0, grad)
    for fused in (False, True):
        got = run_grads(build(dim, rank, layers, fused), ops, x0, grad)
        err = max(((g.double() - r).abs().max() / r.abs().max()).item() for g, r in zip(got, ref))
        errors["fused" if fused else "unfused"] = err
        if not err <= BF16_TOLERANCE:
            raise SystemExit(f"dcn_backward: {'fused' if fused else 'unfused'} path is off the float64 reference: "
                             f"relative error {err:.3g} > {BF16_TOLERANCE}")
    return errors


def time_paths(dim: int, rank: int, layers: int, batch: int, ops: DenseOps, rep_ms: int) -> list[dict]:
    rows = []
    for fused in (False, True):
        cross = build(dim, rank, layers, fused)
        x0 = torch.randn(batch, dim, device="cuda").bfloat16().requires_grad_()  # fresh inputs per path
        grad = torch.randn(batch, dim, device="cuda").bfloat16()

        def forward():
            return cross(x0, ops)

        def step():
            x0.grad = None
            cross.zero_grad(set_to_none=True)
            forward().backward(grad)

        fwd = triton.testing.do_bench(forward, warmup=50, rep=rep_ms, return_mode="median")
        both = triton.testing.do_bench(step, warmup=50, rep=rep_ms, return_mode="median")
        rows.append({"path": "fused" if fused else "unfused", "fwd_ms": fwd, "bwd_ms": both - fwd, "fwd_bwd_ms": both,
                     "kernels": kernel_table(step, reps=2, warmup=1)[:20]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, a smoke test")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("dcn_backward: needs a CUDA or ROCm GPU")
    dim, rank, layers, batch, rep = (384, 64, 2, 2048, 50) if args.quick else (3456, 512, 3, 65536, 300)
    ops = DenseOps("polyrec")
    errors = check(dim, rank, layers, batch, ops)
    rows = time_paths(dim, rank, layers, batch, ops, rep)
    floor = floor_ms(batch, dim, rank, layers)
    table = [{k: v for k, v in r.items() if k != "kernels"} | {"over_floor": r["fwd_bwd_ms"] / floor} for r in rows]
    unfused, fused = (r["fwd_bwd_ms"] for r in rows)
    summary = {"batch": batch, "dim": dim, "rank": rank, "layers": layers, "floor_ms": floor,
               "speedup_fwd_bwd": unfused / fused, "max_rel_error_unfused": errors["unfused"],
               "max_rel_error_fused": errors["fused"]}
    name = "dcn_backward_quick" if args.quick else "dcn_backward"
    json_path, _ = write_results(name, {"paths": rows}, rows=table, summary=summary)
    for r in rows:
        print(f"\n{r['path']} kernels (ms per step):")
        for k in r["kernels"][:12]:
            print(f"  {k['ms_per_step']:7.3f}  x{k['calls_per_step']:<4g} {k['kernel']}")
    print(f"\ncross network B={batch} D={dim} r={rank} L={layers} bf16; floor {floor:.2f} ms; "
          f"max rel. error vs float64: unfused {errors['unfused']:.2g}, fused {errors['fused']:.2g}")
    print(f"{'path':8s} {'fwd ms':>8s} {'bwd ms':>8s} {'fwd+bwd':>8s} {'/floor':>7s}")
    for r in table:
        print(f"{r['path']:8s} {r['fwd_ms']:8.3f} {r['bwd_ms']:8.3f} {r['fwd_bwd_ms']:8.3f} {r['over_floor']:7.2f}")
    print(f"speedup fused/unfused: {unfused / fused:.2f}x   -> {json_path}")


if __name__ == "__main__":
    main()
