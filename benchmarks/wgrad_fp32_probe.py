"""Weight gradients written in fp32 by their GEMM against a bf16 product cast to the fp32 master.

1. Each weight-gradient GEMM of MLPerf DLRM-DCNv2 ([out, B] x [B, in], B = 65536, bf16 operands):
   ``torch.mm`` then ``.float()`` (what autocast's cast backward did) against ``torch.mm(...,
   out_dtype=torch.float32)`` (the library writing fp32), ``do_bench`` medians, and each one's error
   against float64 (max |error| / max |reference|).
2. Full-size ``mlperf-dcnv2`` at batch 65536: the step's kernels by the profiler with the layers
   taking the fp32 masters (the weight gradients fp32 from their GEMMs, no cast kernels) and with the
   masters cast to bf16 before the layers (the code before: bf16 weight gradients, cast back by
   autograd), 5 steps each in two interleaved rounds, then interleaved wall-clock rounds.

Writes ``wgrad_fp32_probe_<gpu>_<date>.{json,md}``.

    PYTHONPATH=.:benchmarks python3 benchmarks/wgrad_fp32_probe.py
"""

from __future__ import annotations

import torch
import triton

from polyrec.models.layers import DenseOps
from polyrec.results import write_results
from profiling import interleaved_rounds, kernel_table, mlperf_trainer

BATCH = 65536
#: (out, in) of every weight with a gradient: bottom MLP 13(->16)-512-256-128, the three cross layers'
#: V [512, 3456] and U [3456, 512], top MLP 3456-1024-1024-512-256-1.
SHAPES = ((512, 16), (256, 512), (128, 256), (512, 3456), (3456, 512), (1024, 3456), (1024, 1024), (512, 1024),
          (256, 512), (1, 256))


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got.double() - ref).abs().max() / ref.abs().max()).item()


def micro() -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for out_dim, in_dim in SHAPES:
        g = torch.randn(BATCH, out_dim, device="cuda", generator=gen).bfloat16()
        x = torch.randn(BATCH, in_dim, device="cuda", generator=gen).bfloat16()
        ref = g.double().T @ x.double()
        bench = lambda fn: triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")  # noqa: E731
        rows.append({"out": out_dim, "in": in_dim,
                     "bf16_then_cast_ms": bench(lambda: torch.mm(g.T, x).float()),
                     "fp32_out_ms": bench(lambda: torch.mm(g.T, x, out_dtype=torch.float32)),
                     "bf16_then_cast_error": relative_error(torch.mm(g.T, x).float(), ref),
                     "fp32_out_error": relative_error(torch.mm(g.T, x, out_dtype=torch.float32), ref)})
        print(rows[-1], flush=True)
    return rows


def _policies() -> dict:
    """name -> a callable putting it in place: the layers take the masters (the code now), or get them
    cast to the compute dtype by a differentiable ``.to`` first (the code before)."""
    linear, cross_network = DenseOps.linear, DenseOps.cross_network

    def cast_linear(self, x, weight, bias, relu):
        return linear(self, x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype), relu)

    def cast_cross_network(self, x0, vs, us, bs, on_input_grad=None, owns_output_grad=False):
        def cast(ts):
            return [t.to(x0.dtype) for t in ts]
        return cross_network(self, x0, cast(vs), cast(us), cast(bs), on_input_grad, owns_output_grad)

    def put(lin, cross):
        def apply():
            DenseOps.linear, DenseOps.cross_network = lin, cross
        return apply

    return {"bf16 wgrad + casts": put(cast_linear, cast_cross_network), "fp32 wgrad": put(linear, cross_network)}


def main() -> None:
    shapes = micro()
    summary = {"wgrad_bf16_then_cast_ms": sum(r["bf16_then_cast_ms"] for r in shapes),
               "wgrad_fp32_out_ms": sum(r["fp32_out_ms"] for r in shapes)}
    policies = _policies()
    tr = mlperf_trainer()
    for r in range(2):  # interleaved: the first profile after the trainer's start runs slower
        for name, apply in policies.items():
            apply()
            kernels = kernel_table(tr.train_step, reps=5, warmup=5)
            summary[f"kernel_ms_per_step_{name}_{r}"] = sum(k["ms_per_step"] for k in kernels)
            summary[f"copy_kernel_calls_{name}_{r}"] = sum(k["calls_per_step"] for k in kernels
                                                            if "elementwise" in k["kernel"] or "copy" in k["kernel"])
            print(name, r, round(summary[f"kernel_ms_per_step_{name}_{r}"], 3), flush=True)
    rounds = interleaved_rounds(tr, policies, 4, steps=40)
    policies["fp32 wgrad"]()
    print(summary, flush=True)
    write_results("wgrad_fp32_probe", {"shapes": shapes, "rounds": rounds}, rows=shapes + rounds, summary=summary)


if __name__ == "__main__":
    main()
