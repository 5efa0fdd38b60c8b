"""The dense half of a training step op by op: each GEMM, epilogue pass and ReLU backward timed inside
the step (torch profiler) beside the planner's price for it (``Estimator.dense_op_times``).

The trainer runs the preset's model; every call of ``polyrec.kernels.gemm.matmul`` (GEMM shape and
epilogue), of the cross network's epilogue passes and of the ReLU / bias backward is wrapped in a
profiler range, so the kernels it launches sum to that op's time in the step. The planner prices the
same ops with the calibration stored on this machine (run ``polyrec hw calibrate`` first; the
datasheet ceilings otherwise); the ops are matched by key (GEMM: M x N x K, epilogue, residual added
in place; passes and ReLU backward by kind). The matmul rate is also measured per call (as
``hw calibrate`` stores it) and back to back, in the same process.

    PYTHONPATH=.:benchmarks python3 benchmarks/dense_ops_check.py [--quick] [--batch 65536] [--row-cap 4000000]

About 1 minute on an H200.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import functools
import json
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from polyrec.hardware import calibrate
from polyrec.kernels import dcn, dense_backward, gemm, gemm_layers
from polyrec.planner.estimate import Estimator
from polyrec.planner.types import model_spec_from_config, parse_fleet
from polyrec.results import write_results
from polyrec.runtime import TrainConfig, Trainer
from profiling import PROBE_POOL
from trace_timeline import gpu_events_of

#: Profiler range names start with this (the rest is the op's key).
PREFIX = "op|"
#: The device kind the planner prices (the catalog's name of the GPU this runs on).
DEVICE = "H200"


def gemm_key(m: int, n: int, k: int, epilogue: str, in_place: bool) -> str:
    return f"gemm {m}x{n}x{k} {epilogue}{' in-place' if in_place else ''}"


def pass_key(cross_grad: bool) -> str:
    return "pass cross_grad" if cross_grad else "pass cross"


RELU_KEY = "relu_bias_grad"


def _matmul_key(a, b, *, trans_a=False, trans_b=False, bias=None, activation="none", cross=None, residual=None,
                cross_grad=None, overwrite_residual=False, **_) -> str:
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    epi = gemm.epilogue_name(bias is not None, activation, cross is not None, residual is not None,
                             cross_grad is not None)
    return gemm_key(m, n, k, epi, overwrite_residual and residual is not None)


def _ranged(fn, key_of):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with record_function(PREFIX + key_of(*args, **kwargs)):
            return fn(*args, **kwargs)
    return call


@contextlib.contextmanager
def op_ranges():
    """Wrap the dense half's calls in profiler ranges named by their keys (restored on exit)."""
    patches = [(gemm_layers, "matmul", _matmul_key), (dcn, "matmul", _matmul_key),
               (dcn, "epilogue_pass", lambda y, **kw: pass_key(kw.get("cross_grad") is not None)),
               (gemm_layers, "relu_bias_backward", lambda *a, **kw: RELU_KEY)]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    for mod, name, key_of in patches:
        setattr(mod, name, _ranged(getattr(mod, name), key_of))
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)


#: Trace category of a profiler range's span on the GPU timeline (torch profiler's Chrome export).
ANNOTATION = "gpu_user_annotation"


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def op_kernel_ms(trace: dict) -> tuple[dict[str, list[float]], float]:
    """(ms of each range of each key, in issue order; ms of all GPU events) from a Chrome trace: a
    range's time is the sum of the GPU events that start within its span on the GPU timeline (its
    launch gaps not counted)."""
    events = trace["traceEvents"]
    kernels = gpu_events_of(events)
    starts = [e["ts"] for e in kernels]
    spans = sorted((e for e in events if e.get("cat") == ANNOTATION and e.get("name", "").startswith(PREFIX)),
                   key=lambda e: e["ts"])
    calls = collections.defaultdict(list)
    for span in spans:
        lo, hi = bisect.bisect_left(starts, span["ts"]), bisect.bisect_right(starts, span["ts"] + span["dur"])
        calls[span["name"][len(PREFIX):]].append(sum(k["dur"] for k in kernels[lo:hi]) / 1e3)
    return dict(calls), sum(k["dur"] for k in kernels) / 1e3


def measured_ops(step, steps: int) -> tuple[dict[str, list[float]], float]:
    """(device ms of each call of each key, in issue order; all kernels' ms per step) over ``steps``
    calls of ``step`` under the profiler, the dense half's calls in ranges (``op_ranges``)."""
    with op_ranges():
        step()  # the wrapped calls' first run, outside the profile
        _sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step()
            _sync()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        calls, total = op_kernel_ms(json.loads(path.read_text()))
    return calls, total / steps


def priced_ops(est: Estimator, batch: int) -> dict[str, list[tuple[str, float, str]]]:
    """(planner op, ms, kernel) of each key the runtime's ranges use; the rest under "other"."""
    out = collections.defaultdict(list)
    for t in est.dense_op_times(DEVICE, batch):
        g, name = t.op.gemm, t.op.name
        if g is not None:
            key = gemm_key(g.m, g.n, g.k, t.epilogue, g.library_adds_residual)
        elif name.endswith("cross_grad_pass") or name.endswith("cross_pass"):
            key = pass_key(name.endswith("cross_grad_pass"))
        elif name.endswith("relu_bias_grad"):
            key = RELU_KEY
        else:
            key = "other"
        out[key].append((name, t.seconds * 1e3, t.kernel))
    return dict(out)


def compare(measured: dict[str, list[float]], priced: dict[str, list[tuple[str, float, str]]], steps: int,
            kernels_ms: float) -> list[dict]:
    """One row per key (ms per step measured and priced, calls both sides, the planner's ops and kernels),
    largest price first; then "other": every kernel outside the ranges (the embedding half, the weight
    casts, the column sums) against the planner's dense ops outside them (no error: not the same set)."""
    rows = []
    for key in sorted(set(measured) | set(priced), key=lambda k: -sum(p[1] for p in priced.get(k, []))):
        if key == "other":
            continue
        per_step = sum(measured.get(key, [])) / steps
        price = sum(p[1] for p in priced.get(key, []))
        rows.append({"key": key, "ops": ",".join(p[0] for p in priced.get(key, [])),
                     "kernel": ",".join(sorted({p[2] for p in priced.get(key, []) if p[2]})),
                     "calls_measured": len(measured.get(key, [])) / steps, "calls_priced": len(priced.get(key, [])),
                     "measured_ms": per_step, "priced_ms": price,
                     "error": price / per_step - 1 if per_step else float("nan")})
    rows.append({"key": "other", "ops": "", "kernel": "", "calls_measured": 0,
                 "calls_priced": len(priced.get("other", [])),
                 "measured_ms": kernels_ms - sum(r["measured_ms"] for r in rows),
                 "priced_ms": sum(p[1] for p in priced.get("other", [])), "error": float("nan")})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="dcnv2-small at batch 1024 (smoke test)")
    parser.add_argument("--preset", default="mlperf-dcnv2")
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--row-cap", type=int, default=4_000_000)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    parser.add_argument("--tag", default="", help="suffix of the results name")
    args = parser.parse_args()
    if args.steps < 1:
        raise SystemExit(f"--steps must be at least 1, got {args.steps}")
    if not torch.cuda.is_available():
        raise SystemExit("dense_ops_check times the step on a GPU; none is visible")
    name, batch = ("dcnv2-small", 1024) if args.quick else (args.preset, args.batch)
    cfg = TrainConfig(preset=name, batch_size=batch, row_cap=args.row_cap, steps=10_000, synthetic_pool=PROBE_POOL,
                      cuda_graphs=False)
    trainer = Trainer(cfg, progress=False)
    timing = trainer.benchmark(warmup=3, steps=5)
    measured, kernels_ms = measured_ops(trainer.train_step, args.steps)
    est = Estimator(model_spec_from_config(trainer.model_config), parse_fleet(DEVICE), dense_dtype="bf16",
                    overlap="none")
    rows = compare(measured, priced_ops(est, batch), args.steps, kernels_ms)
    ceil = est.ceilings[DEVICE]
    rates = {"matmul_bf16_per_call": calibrate.measure_matmul("bf16"),
             "matmul_bf16_back_to_back": calibrate.measure_matmul("bf16", timing=calibrate.steady_ms),
             "planner_matmul_bf16": ceil.matmul_flops["bf16"].value,
             "planner_matmul_origin": ceil.matmul_flops["bf16"].origin,
             "planner_copy": ceil.copy_bandwidth.value}
    gemm_rows = [r for r in rows if r["key"].startswith("gemm")]
    summary = {"preset": name, "batch": batch, "row_cap": args.row_cap, "kernels_ms_per_step": kernels_ms,
               "gemm_measured_ms": sum(r["measured_ms"] for r in gemm_rows),
               "gemm_priced_ms": sum(r["priced_ms"] for r in gemm_rows),
               "dense_measured_ms": timing["dense_ms"], **rates}
    write_results("dense_ops_check" + (f"_{args.tag}" if args.tag else ""), {"calls_ms": measured, "timing": timing},
                  rows=rows, summary=summary)
    for r in rows:
        print(f"{r['key']:<44} x{r['calls_measured']:<4.0f}/{r['calls_priced']:<3} meas {r['measured_ms']:7.3f} "
              f"priced {r['priced_ms']:7.3f} ({r['error']:+.1%})  {r['kernel'][:40]}")
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in summary.items()})


if __name__ == "__main__":
    main()
