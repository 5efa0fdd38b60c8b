"""Probe (one H200 run, 2026-12-01): the vendor library's own bias / bias+ReLU epilogue (``torch.addmm`` /
``torch._addmm_activation``: cuBLASLt's BIAS / RELU_BIAS epilogues) against the library GEMM followed
by polyrec's epilogue pass, and against the selector's pick, on the MLPerf DLRM-DCNv2 MLP shapes (bf16).
``do_bench`` medians (host launch included, so short Triton launches read slower than their GPU time)
and each variant's kernels from the torch profiler.

    PYTHONPATH=. OUT=. python3 benchmarks/gemm_lt_epilogue_probe.py   # ~20 s; writes $OUT/probe_lt.json
"""
import json
import os

import torch
import triton
from torch.profiler import ProfilerActivity, profile

from polyrec.kernels.gemm import matmul

rows = []
for m, n, k, relu in ((65536, 1024, 3456, True), (65536, 1024, 1024, True), (65536, 512, 1024, True),
                      (65536, 256, 512, True), (65536, 128, 256, True), (65536, 512, 13, True), (65536, 1, 256, False)):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ w.float().t() + b.float()
    ref = ref.relu() if relu else ref
    act = "relu" if relu else "none"
    variants = {
        "library+pass": lambda: matmul(a, w, trans_b=True, bias=b, activation=act, library=True),
        "selector": lambda: matmul(a, w, trans_b=True, bias=b, activation=act),
        "lt epilogue": (lambda: torch._addmm_activation(b, a, w.t())) if relu else (lambda: torch.addmm(b, a, w.t())),
    }
    for name, fn in variants.items():
        y = fn()
        err = ((y.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
        ms = triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e.key[:70] for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        row = {"m": m, "n": n, "k": k, "relu": relu, "variant": name, "ms": ms, "rel_err": err, "kernels": kernels}
        rows.append(row)
        print(row, flush=True)
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_lt.json"), "w"), indent=1)
