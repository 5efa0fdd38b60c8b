"""Probe (one H200 run, 2026-12-01): the DCN-v2 cross forward at [65536, 3456, 512] bf16 three ways, and
the full-size trainer step with and without x0 assembled in the lookup's buffer.

1. today's path (library GEMM writing p, then the cross epilogue pass), the TMA cross kernel
   (``gemm_tma``, no p: the backward needs it), and ``keep_kernel``: a persistent TMA GEMM that stores
   p and x_next, with x0 / x read by plain loads issued before (EARLY) or after its main loop;
2. ``mlperf-dcnv2`` full size, batch 65536: interleaved rounds of ``PolyrecEmbeddings.lead_columns``
   0 (``torch.cat`` into x0) and 128 (``polyrec.models.layers.beside``), 20 timed steps each.

    PYTHONPATH=. OUT=benchmarks/results python3 benchmarks/cross_forward_probe.py   # ~35 s; writes probe_cross.json
"""
import functools
import json
import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor
from polyrec.kernels.gemm import matmul
from polyrec.kernels.gemm_epilogue import epilogue_pass
from polyrec.kernels.gemm_tma import TmaGemmConfig, gemm_tma, _tile_origin

@triton.jit
def keep_kernel(a_desc, b_desc, c_desc, p_desc, bias_ptr, x0_ptr, xr_ptr, M, N, K, stride_x, num_programs,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                EARLY: tl.constexpr, FLATTEN: tl.constexpr):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, num_programs, flatten=FLATTEN):
        off_m, off_n = _tile_origin(tile, tiles_m, tiles_n, BLOCK_M, BLOCK_N, GROUP_M)
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        offs = rows[:, None].to(tl.int64) * stride_x + cols[None, :]
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        if EARLY:
            x0 = tl.load(x0_ptr + offs, mask=mask, other=0.0)
            xr = tl.load(xr_ptr + offs, mask=mask, other=0.0)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(k_steps):
            off_k = step * BLOCK_K
            a = a_desc.load([off_m, off_k])
            b = b_desc.load([off_n, off_k]).T
            acc = tl.dot(a, b, acc)
        if not EARLY:
            x0 = tl.load(x0_ptr + offs, mask=mask, other=0.0)
            xr = tl.load(xr_ptr + offs, mask=mask, other=0.0)
        p_desc.store([off_m, off_n], acc.to(p_desc.dtype))
        bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        y = x0.to(tl.float32) * (acc + bias[None, :]) + xr.to(tl.float32)
        c_desc.store([off_m, off_n], y.to(c_desc.dtype))

def keep(a, u, bias, x0, xr, bm, bn, bk, g, warps, stages, early, flatten, ctas=1):
    m, k = a.shape
    n = u.shape[0]
    out = torch.empty(m, n, device=a.device, dtype=a.dtype)
    p = torch.empty_like(out)
    ad = TensorDescriptor.from_tensor(a, [bm, bk])
    bd = TensorDescriptor.from_tensor(u, [bn, bk])
    cd = TensorDescriptor.from_tensor(out, [bm, bn])
    pd = TensorDescriptor.from_tensor(p, [bm, bn])
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    progs = min(tiles, 132 * ctas)
    keep_kernel[(progs,)](ad, bd, cd, pd, bias, x0, xr, m, n, k, x0.stride(0), progs, BLOCK_M=bm, BLOCK_N=bn,
                          BLOCK_K=bk, GROUP_M=g, EARLY=early, FLATTEN=flatten, num_warps=warps, num_stages=stages)
    return out, p

def alloc_fn(size, alignment, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)
triton.set_allocator(alloc_fn)

res = {"rows": []}
torch.manual_seed(0)
M, N, K = 65536, 3456, 512
low = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
u = (torch.randn(N, K, device="cuda") / K**0.5).to(torch.bfloat16)
bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
x0 = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
xr = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
ref_p = (low.float() @ u.float().t())
ref_y = x0.float() * (ref_p + bias.float()) + xr.float()

def today():
    p = matmul(low, u, trans_b=True)
    return epilogue_pass(p, bias=bias, cross=(x0, xr)), p
def tma_cross():
    return gemm_tma(low, u, b_k_major=True, config=TmaGemmConfig(block_m=128, block_n=256, block_k=64, num_stages=3, num_warps=8, epilogue_subtile=True), bias=bias, cross=(x0, xr)), None
variants = {"library+pass (today)": today, "tma cross (no p)": tma_cross}
for bm, bn, warps, stages, early, flatten, ctas in [(128, 128, 8, 3, True, False, 1), (128, 128, 8, 3, False, False, 1),
                                                   (64, 128, 4, 3, True, False, 2), (64, 128, 4, 3, False, False, 2)]:
    name = f"keep BM{bm} BN{bn} w{warps} s{stages} early={early} flat={flatten} c{ctas}"
    variants[name] = (lambda bm=bm, bn=bn, warps=warps, stages=stages, early=early, flatten=flatten, ctas=ctas:
                      keep(low, u, bias, x0, xr, bm, bn, 64, 8, warps, stages, early, flatten, ctas))
for name, fn in variants.items():
    try:
        y, p = fn()
        err = ((y.float() - ref_y).abs().max() / ref_y.abs().max()).item()
        perr = None if p is None else ((p.float() - ref_p).abs().max() / ref_p.abs().max()).item()
        ms = triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")
        row = {"variant": name, "ms": ms, "rel_err_y": err, "rel_err_p": perr}
    except Exception as e:
        row = {"variant": name, "error": f"{type(e).__name__}: {e}"[:300]}
    res["rows"].append(row)
    print(row, flush=True)
    json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_cross.json"), "w"), indent=1)
del low, u, x0, xr, ref_p, ref_y
torch.cuda.empty_cache()

# x0 assembly A/B in the full-size trainer
sys.path.insert(0, "benchmarks")
from profiling import interleaved_rounds, mlperf_trainer
tr = mlperf_trainer()
emb = tr.model.embeddings
for _ in range(5):
    tr.train_step()
tr.sync()
res["x0_ab"] = interleaved_rounds(tr, {lead: functools.partial(setattr, emb, "lead_columns", lead) for lead in (0, 128)},
                                  3, key="lead_columns")
res["peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe_cross.json"), "w"), indent=1)
