"""The MLP layers' backward epilogue: polyrec's fused ReLU mask + bias-gradient pass vs torch's
``threshold_backward`` + ``sum(0, dtype=float32)``.

MLPerf DLRM-DCNv2 MLP layer outputs at batch 65536, bf16 (autocast): bottom 512, 256, 128 and top
1024, 1024, 512, 256 with ReLU, and the top MLP's last layer (N = 1, no ReLU: the bias sum alone).
Each shape is checked first (masked gradient equal to ``threshold_backward``'s, bias gradient within
1e-5 of a float64 sum relative to the column's sum of |grad|), then timed with
``triton.testing.do_bench`` (median, L2 flushed between runs) on fresh random inputs: the fused pass,
torch's two kernels together and apart, and a device copy of grad in the same run (the copy rate the
bytes are held against).

    PYTHONPATH=. python3 benchmarks/dense_backward.py            # ~20-30 s on an H200 (mostly compiles)
    PYTHONPATH=. python3 benchmarks/dense_backward.py --quick    # smoke test, batch 4096, < 15 s

Bytes (written before measuring): torch reads grad and y and writes the mask (3 B N e), then the sum
reads the mask again (B N e): 4 B N e. The fused pass is 3 B N e plus fp32 partials written and read
(2 P N 4, P = B / rows per program, <= 3% here); bias only: B N e + 2 P N 4. Floor = bytes / the copy
rate measured here (DESIGN.md: 4.25 TB/s on the H200). The seven ReLU layers hold sum N = 3712
columns: 3 x 65536 x 3712 x 2 B = 1.46 GB, floor 0.34 ms at 4.25 TB/s. Prediction: fused at ~0.85-0.9
of the copy rate, ~0.40 ms vs torch's 0.78 ms (0.324 + 0.453) in the e2e profile.
"""

from __future__ import annotations

import argparse

import torch
import triton

from polyrec.kernels.dense_backward import relu_bias_backward, select_config
from polyrec.results import write_results

#: MLPerf DLRM-DCNv2 MLP layer outputs (bottom 13-512-256-128, top 1024-1024-512-256-1) as
#: (layer, N, ReLU): issue 5's model spec.
LAYERS = (("bottom1", 512, True), ("bottom2", 256, True), ("bottom3", 128, True), ("top1", 1024, True),
          ("top2", 1024, True), ("top3", 512, True), ("top4", 256, True), ("top5", 1, False))
#: Bias tolerance relative to the column's sum of |grad| (fp32 accumulation of bf16 values).
SUM_TOLERANCE = 1e-5


def fresh(batch: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """grad [batch, n] and a ReLU output y [batch, n] (about half exact zeros), bf16."""
    grad = torch.randn(batch, n, device="cuda").bfloat16()
    y = torch.relu(torch.randn(batch, n, device="cuda")).bfloat16()
    return grad, y


def torch_path(grad: torch.Tensor, y: torch.Tensor, relu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    masked = torch.ops.aten.threshold_backward(grad, y, 0) if relu else grad
    return masked, masked.sum(0, dtype=torch.float32)


def check(batch: int, n: int, relu: bool) -> float:
    """Largest bias error (relative to the column's sum of |grad|); raises on any mismatch."""
    grad, y = fresh(batch, n)
    if relu:  # masked out where y <= 0: must give 0, not NaN
        grad[0, :], y[0, :] = float("nan"), 0.0
    masked, bias = relu_bias_backward(grad, y, relu=relu, need_bias=True)
    if not torch.equal(masked, torch_path(grad, y, relu)[0]):
        raise SystemExit(f"dense_backward: masked gradient differs from threshold_backward at N={n}")
    ref = masked.double().sum(0)
    err = ((bias.double() - ref).abs() / masked.double().abs().sum(0).clamp_min(1.0)).max().item()
    if not err <= SUM_TOLERANCE:
        raise SystemExit(f"dense_backward: bias gradient off the float64 sum at N={n}: {err:.3g} > {SUM_TOLERANCE}")
    return err


def bench_ms(fn, rep: int) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median")


def measure(layer: str, batch: int, n: int, relu: bool, compute_units: int, rep: int) -> dict:
    grad, y = fresh(batch, n)
    copy_dst = torch.empty_like(grad)
    config = select_config(batch, n, compute_units)
    partials = triton.cdiv(batch, config.rows_per_program)
    tensor = batch * n * grad.element_size()
    fused_bytes = (3 if relu else 1) * tensor + 2 * partials * n * 4 + n * 4
    torch_bytes = (4 if relu else 1) * tensor + n * 4
    copy_ms = bench_ms(lambda: copy_dst.copy_(grad), rep)
    copy_rate = 2 * tensor / copy_ms / 1e9  # TB/s: bytes read + written
    fused_ms = bench_ms(lambda: relu_bias_backward(grad, y, relu=relu, need_bias=True), rep)
    torch_ms = bench_ms(lambda: torch_path(grad, y, relu), rep)
    row = {"layer": layer, "n": n, "relu": relu, "config": f"{config.label} R{config.rows_per_program}",
           "fused_ms": fused_ms, "torch_ms": torch_ms, "speedup": torch_ms / fused_ms}
    if relu:
        row["torch_mask_ms"] = bench_ms(lambda: torch.ops.aten.threshold_backward(grad, y, 0), rep)
        masked = torch.ops.aten.threshold_backward(grad, y, 0)
        row["torch_sum_ms"] = bench_ms(lambda: masked.sum(0, dtype=torch.float32), rep)
    else:
        row["torch_mask_ms"], row["torch_sum_ms"] = 0.0, torch_ms
    row |= {"copy_tbps": copy_rate, "fused_floor_ms": fused_bytes / copy_rate / 1e9,
            "torch_floor_ms": torch_bytes / copy_rate / 1e9, "fused_of_copy": fused_bytes / fused_ms / 1e9 / copy_rate}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 4096, short timings: a smoke test")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("dense_backward: needs a CUDA or ROCm GPU")
    batch, rep = (4096, 20) if args.quick else (65536, 200)
    compute_units = torch.cuda.get_device_properties(0).multi_processor_count
    errors = {layer: check(batch, n, relu) for layer, n, relu in LAYERS}
    rows = [measure(layer, batch, n, relu, compute_units, rep) for layer, n, relu in LAYERS]
    relu_rows = [r for r in rows if r["relu"]]
    summary = {"batch": batch, "dtype": "bf16", "max_bias_rel_error": max(errors.values()),
               "relu_layers_fused_ms": sum(r["fused_ms"] for r in relu_rows),
               "relu_layers_torch_ms": sum(r["torch_ms"] for r in relu_rows),
               "relu_layers_fused_floor_ms": sum(r["fused_floor_ms"] for r in relu_rows),
               "all_layers_fused_ms": sum(r["fused_ms"] for r in rows),
               "all_layers_torch_ms": sum(r["torch_ms"] for r in rows)}
    name = "dense_backward_quick" if args.quick else "dense_backward"
    json_path, _ = write_results(name, {"layers": rows, "bias_errors": errors}, rows=rows, summary=summary)
    print(f"MLP backward epilogue, batch {batch}, bf16; copy rate measured per shape; "
          f"max bias rel. error {summary['max_bias_rel_error']:.2g}")
    print(f"{'layer':8s} {'N':>5s} {'config':>18s} {'fused':>7s} {'floor':>7s} {'%copy':>6s} {'torch':>7s} "
          f"{'mask':>7s} {'sum':>7s} {'speedup':>7s}")
    for r in rows:
        print(f"{r['layer']:8s} {r['n']:5d} {r['config']:>18s} {r['fused_ms']:7.4f} {r['fused_floor_ms']:7.4f} "
              f"{100 * r['fused_of_copy']:5.0f}% {r['torch_ms']:7.4f} {r['torch_mask_ms']:7.4f} "
              f"{r['torch_sum_ms']:7.4f} {r['speedup']:6.2f}x")
    print(f"7 ReLU layers: fused {summary['relu_layers_fused_ms']:.3f} ms (floor "
          f"{summary['relu_layers_fused_floor_ms']:.3f}) vs torch {summary['relu_layers_torch_ms']:.3f} ms "
          f"-> {json_path}")


if __name__ == "__main__":
    main()
