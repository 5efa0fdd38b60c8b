"""Probe (one H200 run, 2026-12-01): can the embedding backward (memory-bound: sort, permute, lane
update, merge) run beside the dense layers' weight-gradient GEMMs (compute-bound) on one GPU, if the
GEMMs are kept to part of the SMs?

The twelfth session ran the TBE backward on a side stream beside the dense backward and found the two
taking turns (docs/training.md). This probe asks what an SM split changes, before any trainer code: the
MLPerf TBE (full tables, fp32 rows, row-wise Adagrad, bf16 output gradient, batch 65536, uniform ids)
and the 14 weight-gradient GEMMs of ``mlperf-dcnv2`` (cross U/V of 3 layers, top and bottom MLPs; K =
the batch), timed with CUDA events in one process:

- each alone; both one after the other on one stream (today's order);
- on two streams with no split; with the GEMM stream at high priority;
- with cuBLAS kept to ``SMs - c`` SMs (``set_carveout(c)``), high priority;
- the GEMMs on a green context of ``SMs - c`` SMs (``torch.cuda.green_contexts``), where torch has it.

Rounds are interleaved; each row is the median of its rounds. Writes ``$OUT/overlap_probe.json``.

    PYTHONPATH=. OUT=. python3 benchmarks/overlap_probe.py
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import torch

from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tbe import DIM, MLPERF_HOTS, MLPERF_ROWS, make_batch  # noqa: E402

BATCH = 65536
#: (out, in) of every weight-gradient GEMM of mlperf-dcnv2 (docs/training.md's layer sizes): the cross
#: network's U [3456, 512] and V [512, 3456] per layer, the top MLP 3456-1024-1024-512-256-1, the bottom
#: MLP 13-512-256-128. Each is [out, B] @ [B, in].
WGRADS = [(3456, 512), (512, 3456)] * 3 + [(1024, 3456), (1024, 1024), (512, 1024), (256, 512), (1, 256),
                                           (512, 13), (256, 512), (128, 256)]
CARVEOUTS = (16, 32, 48, 66)
ROUNDS = 5


def set_carveout(c: int | None) -> None:
    """SMs cuBLAS(Lt) leaves free (torch's experimental knob; absent in some versions: then a no-op the
    results name)."""
    knob = getattr(torch._C, "_set_sm_carveout_experimental", None)
    if knob is not None:
        knob(c)


def gemm_operands(gen: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per GEMM: the output gradient [B, out] and the layer input [B, in], bf16 (one buffer per shape)."""
    cache: dict[int, torch.Tensor] = {}

    def buf(n: int) -> torch.Tensor:
        if n not in cache:
            cache[n] = torch.randn(BATCH, n, device="cuda", generator=gen).to(torch.bfloat16)
        return cache[n]

    return [(buf(o), buf(i)) for o, i in WGRADS]


def launch_gemms(ops) -> None:
    for grad, x in ops:
        torch.mm(grad.t(), x)


class Case:
    """One way of running the TBE backward and the GEMMs; ``run`` returns (both, tbe, gemm) ms."""

    def __init__(self, name: str, *, mode: str, carveout: int | None = None, gemm_stream=None, priority: int = 0):
        self.name, self.mode, self.carveout = name, mode, carveout
        self.gemm_stream = gemm_stream or (torch.cuda.Stream(priority=priority) if mode != "serial" else None)

    def run(self, module, batch, grad, ops) -> tuple[float, float, float]:
        main = torch.cuda.current_stream()
        with torch.enable_grad():
            out = module(batch)
        torch.cuda.synchronize()
        start, tbe_end, gemm_end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record(main)
        set_carveout(self.carveout)
        try:
            if self.mode == "serial":
                out.backward(grad)
                tbe_end.record(main)
                launch_gemms(ops)
                gemm_end.record(main)
            else:
                self.gemm_stream.wait_stream(main)
                with torch.cuda.stream(self.gemm_stream):
                    launch_gemms(ops)
                    gemm_end.record(self.gemm_stream)
                out.backward(grad)
                tbe_end.record(main)
                main.wait_stream(self.gemm_stream)
        finally:
            set_carveout(None)
        end = torch.cuda.Event(enable_timing=True)
        end.record(main)
        torch.cuda.synchronize()
        return start.elapsed_time(end), start.elapsed_time(tbe_end), start.elapsed_time(gemm_end)


def alone_gemms(ops, carveout, lt: bool) -> float:
    torch.cuda.synchronize()
    set_carveout(carveout)
    before = torch.backends.cuda.preferred_blas_library()
    if lt:
        torch.backends.cuda.preferred_blas_library("cublaslt")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        start.record()
        launch_gemms(ops)
        end.record()
    finally:
        set_carveout(None)
        torch.backends.cuda.preferred_blas_library(before)
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def green_stream(sms: int):
    """(context, stream) of a green context of ``sms`` SMs (the context must outlive the stream), or
    (None, the reason there is none)."""
    gc_mod = getattr(torch.cuda, "green_contexts", None)
    if gc_mod is None or not getattr(gc_mod, "SUPPORTED", False):
        return None, "torch.cuda.green_contexts not available"
    try:
        try:
            ctx = gc_mod.GreenContext.create(num_sms=sms, device_id=0)
        except TypeError:
            ctx = gc_mod.GreenContext.create(sms, 0)
        if hasattr(ctx, "Stream"):
            return (ctx, ctx.Stream()), None
        ctx.set_context()
        stream = torch.cuda.current_stream()
        ctx.pop_context()
        return (ctx, stream), None
    except Exception as e:  # noqa: BLE001 - the probe reports why
        return None, f"{type(e).__name__}: {e}"


def mlperf_tbe(gen: torch.Generator, features: list[int] | None = None):
    """The probes' MLPerf TBE (full tables, fp32 rows, row-wise Adagrad, bf16 output) of ``features``
    (default: all 26), a uniform-ids batch of BATCH and a bf16 output gradient."""
    features = list(range(len(MLPERF_ROWS))) if features is None else features
    rows, hots = [MLPERF_ROWS[f] for f in features], [MLPERF_HOTS[f] for f in features]
    tables = [TableSpec(name=f"t{f}", rows=r, dim=DIM) for f, r in zip(features, rows)]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.01),
                                   output_dtype=torch.bfloat16, device="cuda")
    batch = make_batch(rows, hots, BATCH, False, gen)
    grad = torch.randn(BATCH, DIM * len(tables), device="cuda", generator=gen).to(torch.bfloat16)
    return module, batch, grad


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    module, batch, grad = mlperf_tbe(gen)
    ops = gemm_operands(gen)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flops = sum(2 * o * i * BATCH for o, i in WGRADS)
    res: dict = {"sms": sms, "gemm_tflop": flops / 1e12, "torch": torch.__version__, "rows": [], "notes": [],
                 "carveout_knob": hasattr(torch._C, "_set_sm_carveout_experimental"),
                 "blas_library": str(torch.backends.cuda.preferred_blas_library())}
    cases = [Case("serial", mode="serial"), Case("two streams", mode="streams"),
             Case("two streams, GEMMs high priority", mode="streams", priority=-1)]
    cases += [Case(f"carveout {c}, high priority", mode="streams", carveout=c, priority=-1) for c in CARVEOUTS]
    for c in CARVEOUTS:
        green, why = green_stream(sms - c)
        if green is None:
            res["notes"].append(f"green context of {sms - c} SMs: {why}")
            break
        cases.append(Case(f"green context {sms - c} SMs for GEMMs", mode="streams", gemm_stream=green[1]))
        cases[-1].context = green[0]
    for case in cases:  # warm: compile, select, cuBLAS heuristics
        case.run(module, batch, grad, ops)
    times: dict[str, list] = {c.name: [] for c in cases}
    alone: dict[str, list] = {}
    for _ in range(ROUNDS):
        for case in cases:
            try:
                times[case.name].append(case.run(module, batch, grad, ops))
            except Exception as e:  # noqa: BLE001 - one failing case must not lose the others
                res["notes"].append(f"{case.name}: {type(e).__name__}: {e}")
        for lt in (False, True):
            for c in (None, *CARVEOUTS):
                alone.setdefault(f"gemms alone, carveout {c}{', cublaslt' if lt else ''}", []).append(
                    alone_gemms(ops, c, lt))
    for name, rows in times.items():
        if rows:
            both, tbe, gemm = (statistics.median(x) for x in zip(*rows))
            res["rows"].append({"case": name, "both_ms": both, "tbe_done_ms": tbe, "gemms_done_ms": gemm})
    for name, ms in alone.items():
        res["rows"].append({"case": name, "both_ms": statistics.median(ms)})
    print(f"{'case':<44} {'both ms':>8} {'tbe done':>9} {'gemms done':>11}")
    for r in res["rows"]:
        print(f"{r['case']:<44} {r['both_ms']:>8.3f} {r.get('tbe_done_ms', float('nan')):>9.3f} "
              f"{r.get('gemms_done_ms', float('nan')):>11.3f}")
    for n in res["notes"]:
        print("note:", n)
    (out_dir / "overlap_probe.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
