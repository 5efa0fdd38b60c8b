"""What fp8 GEMMs would buy the dense half of full-size ``mlperf-dcnv2`` (batch 65536): a price, not a build.

The step's dense GEMMs run in bf16 at ~the measured matmul rate (docs/training.md), so a faster dense
half needs a faster number format. This probe times every GEMM of the step as the planner lists it
(``polyrec.planner.ops.dense_inventory``, the shapes the code runs) in bf16 (``torch.mm``) and in fp8
(``torch._scaled_mm``, per-tensor scales, bf16 out: e4m3 x e4m3 forward, e5m2 gradient x e4m3 backward,
as mixed-fp8 training recipes pair them), with and without fast accumulation, on the GPU it runs on.

fp8 is not free outside the GEMM: on sm_90 both fp8 operands must be K-contiguous, so a weight-gradient
GEMM (K = batch) needs transposed copies of the layer's input and of its output gradient. The lower
bound priced here: each batch-sized activation and gradient read once in bf16 and written twice in fp8
(plain and transposed, the scale taken from the previous step's amax): 4 bytes per element at the copy
rate measured in the same run (``cast_floor_ms``); written by the kernel that makes the tensor (the
cross network's passes, the ReLU backward), only the 2 bytes of fp8 writes (``fused_cast_floor_ms``).
``cast_eager_ms`` times torch's own unfused casts of the largest tensor for comparison. GEMMs whose dims are not multiples of 16 stay bf16 in the sum.

    PYTHONPATH=.:benchmarks python3 benchmarks/fp8_dense_probe.py [--batch 65536]

Writes ``fp8_dense_probe_<gpu>_<date>.{json,md}``.
"""

from __future__ import annotations

import argparse

from polyrec.models.config import mlperf_dcnv2
from polyrec.planner.dense import dense_matmuls, padded_in_dim
from polyrec.planner.ops import dense_inventory
from polyrec.planner.types import model_spec_from_config

#: Bytes per element of a cast of one bf16 tensor to fp8, plain and transposed: 2 read + 1 + 1 written.
CAST_BYTES_PER_ELEMENT = 4
#: The same two fp8 copies written by the kernel that makes the tensor in bf16: the writes alone.
FUSED_CAST_BYTES_PER_ELEMENT = 2
#: fp8 GEMM dims must be multiples of this many elements (cuBLASLt's fp8 alignment, 16 bytes).
FP8_ALIGN = 16


def gemm_rows(batch: int) -> list[dict]:
    """Each GEMM of the step: op name, M, N, K and whether it is a backward GEMM (gradient operand)."""
    inv = dense_inventory(model_spec_from_config(mlperf_dcnv2()), batch, 2, x0_in_lookup=True, kept_copies=True)
    return [{"op": o.name, "m": o.gemm.m, "n": o.gemm.n, "k": o.gemm.k, "backward": o.phase == "bwd",
             "fp8_ok": all(v % FP8_ALIGN == 0 for v in (o.gemm.m, o.gemm.n, o.gemm.k))}
            for o in inv.ops if o.gemm is not None]


def cast_elements(batch: int) -> int:
    """Elements of every batch-sized tensor an fp8 step would cast: each layer's input and the gradient of
    its output (both are operands of its weight-gradient GEMM), for layers whose GEMMs can run in fp8."""
    total = 0
    for mat in dense_matmuls(model_spec_from_config(mlperf_dcnv2())):
        k = padded_in_dim(mat, FP8_ALIGN)
        if mat.out_dim % FP8_ALIGN == 0:
            total += batch * (k + mat.out_dim)
    return total


def summarize(rows: list[dict], elements: int, copy_tbps: float) -> dict:
    """Sums over the step: bf16, fp8 (fast accumulation forward only, the usual recipe, and fp8 everywhere
    exact), the cast floors at the copy rate, and the net change of the step's time with each floor."""
    bf16 = sum(r["bf16_ms"] for r in rows)
    recipe = sum(r.get("fp8_fast_ms" if not r["backward"] else "fp8_ms", r["bf16_ms"]) for r in rows)
    exact = sum(r.get("fp8_ms", r["bf16_ms"]) for r in rows)
    ms_per_byte = 1e3 / (copy_tbps * 1e12)
    floor = CAST_BYTES_PER_ELEMENT * elements * ms_per_byte
    fused = FUSED_CAST_BYTES_PER_ELEMENT * elements * ms_per_byte
    return {"gemms": len(rows), "fp8_gemms": sum(r["fp8_ok"] for r in rows), "bf16_gemm_ms": bf16,
            "fp8_gemm_ms": recipe, "fp8_exact_accum_gemm_ms": exact, "cast_elements": elements,
            "copy_tbps": copy_tbps, "cast_floor_ms": floor, "fused_cast_floor_ms": fused,
            "net_change_ms": recipe + floor - bf16, "net_change_fused_ms": recipe + fused - bf16}


def _time_row(row: dict, bench) -> dict:
    import torch

    m, n, k = row["m"], row["n"], row["k"]
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    out = dict(row, bf16_ms=bench(lambda: torch.mm(a, b.t())))
    if not row["fp8_ok"]:
        return out
    a_type = torch.float8_e5m2 if row["backward"] else torch.float8_e4m3fn
    a8, b8 = a.to(a_type), b.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    for key, fast in (("fp8_ms", False), ("fp8_fast_ms", True)):
        out[key] = bench(lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16,
                                                  use_fast_accum=fast))
    ref = a.double() @ b.double().t()
    got = torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16).double()
    out["fp8_rel_error"] = float((got - ref).norm() / ref.norm())
    out["bf16_rel_error"] = float((torch.mm(a, b.t()).double() - ref).norm() / ref.norm())
    return out


def _eager_cast_ms(batch: int, width: int, bench) -> float:
    import torch

    x = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16)

    def cast():
        scale = 448.0 / x.abs().amax().float()
        return (x * scale).to(torch.float8_e4m3fn), (x.t() * scale).contiguous().to(torch.float8_e4m3fn)

    return bench(cast)


def main() -> None:
    import triton

    from polyrec.results import write_results
    from tbe import copy_rate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=65536)
    args = parser.parse_args()
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")  # noqa: E731
    rows = []
    for row in gemm_rows(args.batch):
        rows.append(_time_row(row, bench))
        print(rows[-1]["op"], round(rows[-1]["bf16_ms"], 3), round(rows[-1].get("fp8_fast_ms", 0), 3), flush=True)
    copy = copy_rate() / 1e12
    summary = summarize(rows, cast_elements(args.batch), copy)
    summary["batch"] = args.batch
    widest = max(m.in_dim for m in dense_matmuls(model_spec_from_config(mlperf_dcnv2())))
    summary[f"cast_eager_ms_{args.batch}x{widest}"] = _eager_cast_ms(args.batch, widest, bench)
    print(summary, flush=True)
    write_results("fp8_dense_probe", {"rows": rows}, rows=rows, summary=summary)


if __name__ == "__main__":
    main()
