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
``cast_eager_ms`` times torch's own unfused casts of the largest tensor for comparison. GEMMs whose dims
are not multiples of 16 stay bf16 in the sums.

``--operands step`` times the same comparison on the operands of one real training step instead of
random ones (``mlperf-dcnv2`` with tables capped at 4M rows, uniform ids, after ``WARM_STEPS`` steps: every
``polyrec.kernels.gemm.matmul`` call of the step recorded with its operands as the step laid them out; bf16
as recorded, fp8 with per-tensor scales from each operand's amax): back to back and alone, random operands
run the library at ~600 TFLOP/s where the step runs it at ~710 (``dense_ops_check``); this asks whether
the operands' values are why.

    PYTHONPATH=.:benchmarks python3 benchmarks/fp8_dense_probe.py [--batch 65536] [--operands random|step]

Writes ``fp8_dense_probe_<gpu>_<date>.{json,md}`` (``fp8_dense_probe_step_...`` with ``--operands step``).
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
#: Training steps before the one whose operands ``--operands step`` records (kernels selected, weights moved).
WARM_STEPS = 10
#: Largest finite magnitudes of e4m3 and e5m2 (OCP 8-bit floating point specification v1.0).
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}


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
    one = torch.ones((), device="cuda")
    ref = a.double() @ b.double().t()
    out |= _fp8_times(a.to(a_type), one, b.to(torch.float8_e4m3fn), one, ref, bench)
    out["bf16_rel_error"] = float((torch.mm(a, b.t()).double() - ref).norm() / ref.norm())
    return out


def _fp8_times(a8, sa, b8, sb, ref, bench) -> dict:
    """``_scaled_mm`` of a8 [M, K] (row-major) by b8 [N, K] (row-major, passed transposed) under scales sa, sb:
    its time with and without fast accumulation, and its error against ``ref`` (float64, [M, N])."""
    import torch

    out = {key: bench(lambda: torch._scaled_mm(a8, b8.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast))
           for key, fast in (("fp8_ms", False), ("fp8_fast_ms", True))}
    got = torch._scaled_mm(a8, b8.t(), sa, sb, out_dtype=torch.bfloat16).double()
    out["fp8_rel_error"] = float((got - ref).norm() / ref.norm())
    return out


def _scaled(x, fmt: str):
    """x [M, K] (any layout) as fp8 of format ``fmt`` under one scale from its amax, and that scale."""
    import torch

    dtype = torch.float8_e5m2 if fmt == "e5m2" else torch.float8_e4m3fn
    scale = (x.abs().amax().float() / FP8_MAX[fmt]).clamp(min=1e-12)
    return (x.float() / scale).to(dtype), scale


def _time_recorded(call: dict, bench) -> dict:
    """bf16 and fp8 times of one recorded GEMM ``A @ B`` (A [M, K], B [K, N] as the step laid them out)."""
    import torch

    a, b = call.pop("a"), call.pop("b")
    out = dict(call, bf16_ms=bench(lambda: torch.mm(a, b)))
    if not call["fp8_ok"]:
        return out
    a8, sa = _scaled(a.contiguous(), "e5m2" if call["backward"] else "e4m3")  # row-major [M, K]
    b8, sb = _scaled(b.t().contiguous(), "e4m3")  # [N, K] row-major: B column-major
    return out | _fp8_times(a8, sa, b8, sb, a.double() @ b.double(), bench)


def record_step(batch: int) -> list[dict]:
    """Every ``matmul`` call of one training step of ``mlperf-dcnv2`` (tables capped at 4M rows) with
    copies of its operands as ``A [M, K] @ B [K, N]`` views, in call order; backward calls flagged."""
    import torch

    import polyrec.kernels.dcn as dcn
    import polyrec.kernels.gemm_layers as gemm_layers
    from polyrec.runtime import TrainConfig, Trainer
    from profiling import PROBE_POOL

    cfg = TrainConfig(preset="mlperf-dcnv2", data="synthetic:uniform", batch_size=batch, steps=10**9,
                      synthetic_pool=PROBE_POOL, device="cuda", cuda_graphs=False, row_cap=4_000_000)
    trainer = Trainer(cfg, progress=False)
    for _ in range(WARM_STEPS):
        trainer.train_step()
    calls, original = [], gemm_layers.matmul

    def recording(a, b, *, trans_a=False, trans_b=False, **kw):
        A, B = (a.t() if trans_a else a), (b.t() if trans_b else b)
        (m, k), n = A.shape, B.shape[1]
        calls.append({"call": len(calls), "m": m, "n": n, "k": k, "a": A.clone(), "b": B.clone(),
                      "backward": torch._C._current_graph_task_id() != -1,
                      "fp8_ok": all(v % FP8_ALIGN == 0 for v in (m, n, k))})
        return original(a, b, trans_a=trans_a, trans_b=trans_b, **kw)

    gemm_layers.matmul = dcn.matmul = recording
    try:
        trainer.train_step()
        trainer.sync()
    finally:
        gemm_layers.matmul = dcn.matmul = original
    del trainer
    return calls


def _eager_cast_ms(batch: int, width: int, bench) -> float:
    import torch

    x = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16)

    def cast():
        scale = FP8_MAX["e4m3"] / x.abs().amax().float()
        return (x * scale).to(torch.float8_e4m3fn), (x.t() * scale).contiguous().to(torch.float8_e4m3fn)

    return bench(cast)


def main() -> None:
    import triton

    from polyrec.results import write_results
    from tbe import copy_rate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--operands", choices=("random", "step"), default="random",
                        help="random operands of the planner's shapes, or those of one recorded training step")
    args = parser.parse_args()
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")  # noqa: E731
    rows = []
    if args.operands == "step":
        calls = record_step(args.batch)
        while calls:
            rows.append(_time_recorded(calls.pop(0), bench))
            print(rows[-1]["call"], rows[-1]["m"], rows[-1]["n"], rows[-1]["k"], round(rows[-1]["bf16_ms"], 3),
                  round(rows[-1].get("fp8_fast_ms", 0), 3), flush=True)
    else:
        for row in gemm_rows(args.batch):
            rows.append(_time_row(row, bench))
            print(rows[-1]["op"], round(rows[-1]["bf16_ms"], 3), round(rows[-1].get("fp8_fast_ms", 0), 3),
                  flush=True)
    copy = copy_rate() / 1e12
    summary = summarize(rows, cast_elements(args.batch), copy)
    summary["batch"] = args.batch
    widest = max(m.in_dim for m in dense_matmuls(model_spec_from_config(mlperf_dcnv2())))
    summary[f"cast_eager_ms_{args.batch}x{widest}"] = _eager_cast_ms(args.batch, widest, bench)
    print(summary, flush=True)
    summary["operands"] = args.operands
    name = "fp8_dense_probe" if args.operands == "random" else "fp8_dense_probe_step"
    write_results(name, {"rows": rows}, rows=rows, summary=summary)


if __name__ == "__main__":
    main()
