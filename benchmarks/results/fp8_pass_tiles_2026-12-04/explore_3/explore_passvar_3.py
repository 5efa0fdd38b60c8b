"""Exploration: the fp8 cross passes' variants (scratch, not committed)."""
import json, os, sys, itertools
import torch, triton, triton.language as tl
from polyrec.kernels.gemm_kernels import _epilogue
from polyrec.kernels.fp8 import quantize_store

@triton.jit
def var_kernel(p_ptr, c_ptr, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, db_ptr, q_ptr, qt_ptr, q_scale_ptr, q_amax_ptr,
               M, N, stride_pm, stride_x0m, stride_xrm, stride_dx0m,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ROW_BLOCKS: tl.constexpr,
               CROSS: tl.constexpr, CROSS_GRAD: tl.constexpr, STORE_C: tl.constexpr,
               PLAIN: tl.constexpr, TRANSPOSED: tl.constexpr, AMAX: tl.constexpr, FP8_MAX: tl.constexpr,
               STAGES: tl.constexpr, PLAIN_VEC: tl.constexpr = 0):
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    g_sum = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    amax_c = tl.zeros((BLOCK_N,), dtype=tl.float32)
    amax_t = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    scale = tl.load(q_scale_ptr)
    for block in tl.range(ROW_BLOCKS, num_stages=STAGES):
        rows = (tl.program_id(0) * ROW_BLOCKS + block) * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        acc = tl.load(p_ptr + rows[:, None] * stride_pm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        acc = _epilogue(acc, rows, cols, mask, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, stride_x0m, 1,
                        stride_xrm, 1, stride_dx0m, 1, N, True, False, CROSS, False,
                        CROSS_GRAD, CROSS_GRAD, False)
        if CROSS_GRAD:
            g_sum += acc
        c = acc.to(c_ptr.dtype.element_ty)
        if STORE_C:
            tl.store(c_ptr + rows[:, None] * stride_pm + cols[None, :], c, mask=mask)
        if PLAIN or TRANSPOSED:
            stored = tl.where(mask, c.to(tl.float32), 0.0)
            if AMAX == 1:
                amax_c = tl.maximum(amax_c, tl.max(tl.abs(stored), axis=0))
            if AMAX == 2:
                amax_t = tl.maximum(amax_t, tl.abs(stored))
            y = tl.clamp(stored * scale, -FP8_MAX, FP8_MAX).to(q_ptr.dtype.element_ty)
            if PLAIN:
                if PLAIN_VEC > 0:
                    tl.store(q_ptr + rows.to(tl.int64)[:, None] * N + tl.max_contiguous(cols, PLAIN_VEC)[None, :], y, mask=mask)
                else:
                    tl.store(q_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], y, mask=mask)
            if TRANSPOSED:
                tl.store(qt_ptr + cols[None, :].to(tl.int64) * M + rows.to(tl.int64)[:, None], y, mask=mask)
    if CROSS_GRAD:
        tl.store(db_ptr + tl.program_id(0) * N + cols, tl.sum(g_sum, axis=0), mask=cols < N)
    if AMAX == 1:
        tl.atomic_max(q_amax_ptr, tl.max(amax_c, axis=0))
    if AMAX == 2:
        tl.atomic_max(q_amax_ptr, tl.max(tl.max(amax_t, axis=1), axis=0))

def run_variant(t, kind, bm, bn, rb, warps, store_c, plain, trans, amax, stages=1, warmup=False, vec=0):
    m, n = t["p"].shape
    fp8 = t["q5"] if kind == "cross_grad" else t["q4"]
    fp8t = t["qt5"] if kind == "cross_grad" else t["qt4"]
    grid = (triton.cdiv(m, bm * rb), triton.cdiv(n, bn))
    db = t["db"]
    xr = t["grad"] if kind == "cross_grad" else t["x"]
    fn = var_kernel[grid] if not warmup else None
    var_kernel[grid](t["p"], t["out"], t["bias"], t["x0"], xr, t["dx0"], db, fp8, fp8t, t["scale"], t["amax"],
                     m, n, n, n, n, n, BLOCK_M=bm, BLOCK_N=bn, ROW_BLOCKS=rb, CROSS=kind == "forward",
                     CROSS_GRAD=kind == "cross_grad", STORE_C=store_c, PLAIN=plain, TRANSPOSED=trans, AMAX=amax,
                     FP8_MAX=float(torch.finfo(fp8.dtype).max), STAGES=stages, PLAIN_VEC=vec, num_warps=warps)

def main():
    from polyrec.hardware import calibrate
    from polyrec.kernels import gemm
    from polyrec.kernels.fp8 import Fp8Out, formats, FORWARD, GRADIENT
    m, n = 65536, 3456
    r = lambda: torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    t = dict(p=r(), x0=r(), x=r(), grad=r(), dx0=r(), out=r(), bias=torch.randn(n, device="cuda", dtype=torch.bfloat16))
    t["db"] = torch.empty(m // 32, n, device="cuda")
    fm = formats(t["p"].device)
    f4, f5 = fm[FORWARD], fm[GRADIENT]
    t["q4"] = torch.empty(m, n, dtype=f4.dtype, device="cuda"); t["qt4"] = torch.empty(n, m, dtype=f4.dtype, device="cuda")
    t["q5"] = torch.empty(m, n, dtype=f5.dtype, device="cuda"); t["qt5"] = torch.empty(n, m, dtype=f5.dtype, device="cuda")
    t["scale"] = torch.ones(1, device="cuda"); t["amax"] = torch.zeros(1, device="cuda")
    copy_rate = calibrate.measure_copy_bandwidth(1 << 30)
    el = m * n
    rows = []
    def rec(name, fn, nbytes):
        ms = calibrate.steady_ms(fn)
        rows.append(dict(name=name, ms=ms, frac=nbytes / (ms * 1e-3) / copy_rate))
        print(f"{name:60s} {ms:.4f} ms  {rows[-1]['frac']:.3f}", flush=True)
    cg = lambda: gemm.CrossGrad(grad=t["grad"], x0=t["x0"], d_x0=t["dx0"], accumulate=True, bias_grad=torch.empty(n, device="cuda"))
    o5 = Fp8Out(q=t["q5"], qt=t["qt5"], scale=t["scale"], recorded=t["amax"], fmt=f5)
    o4 = Fp8Out(q=t["q4"], qt=t["qt4"], scale=t["scale"], recorded=t["amax"], fmt=f4)
    B6, B5 = 12 * el, 10 * el
    rec("real cross_grad bf16", lambda: gemm.epilogue_pass(t["p"], bias=t["bias"], cross_grad=cg(), out=t["out"]), B6)
    rec("real cross_grad fp8-only", lambda: gemm.epilogue_pass(t["p"], bias=t["bias"], cross_grad=cg(), fp8=o5, fp8_only=True), B6)
    rec("real forward bf16", lambda: gemm.epilogue_pass(t["p"], bias=t["bias"], cross=(t["x0"], t["x"]), out=t["out"]), 8 * el)
    rec("real forward fp8", lambda: gemm.epilogue_pass(t["p"], bias=t["bias"], cross=(t["x0"], t["x"]), out=t["out"], fp8=o4), B5)
    cgv = [  # (bm, bn, rb, warps, store_c, plain, trans, amax, stages, vec)
        (32, 128, 8, 8, False, True, True, 2, 1, 0),
        (64, 128, 4, 16, False, True, True, 2, 1, 0),
        (128, 128, 2, 16, False, True, True, 2, 1, 0),
        (128, 128, 2, 32, False, True, True, 2, 1, 0),
        (64, 256, 4, 16, False, True, True, 2, 1, 0),
        (128, 64, 2, 16, False, True, True, 2, 1, 0),
        (32, 128, 8, 8, False, True, True, 2, 1, 0),
    ]
    for v in cgv:
        bm, bn, rb, w, sc, pl, tr, am, st, vec = v
        nb = el * (10 + (2 if sc else 0) + (1 if pl else 0) + (1 if tr else 0))
        rec(f"var cg {bm}x{bn} rb{rb} w{w} c{int(sc)} p{int(pl)} t{int(tr)} a{am} s{st} v{vec}",
            lambda v=v: run_variant(t, "cross_grad", *v[:8], stages=v[8], vec=v[9]), nb)
    fwv = [
        (32, 128, 1, 4, True, True, True, 2, 1, 0),
        (32, 128, 1, 4, True, True, True, 2, 1, 8),
        (64, 128, 1, 8, True, True, True, 2, 1, 0),
        (64, 128, 1, 16, True, True, True, 2, 1, 0),
        (128, 128, 1, 16, True, True, True, 2, 1, 0),
        (128, 128, 1, 32, True, True, True, 2, 1, 0),
        (128, 64, 1, 16, True, True, True, 2, 1, 0),
        (64, 256, 1, 16, True, True, True, 2, 1, 0),
        (32, 128, 1, 4, True, True, True, 2, 1, 0),
    ]
    for v in fwv:
        bm, bn, rb, w, sc, pl, tr, am, st, vec = v
        nb = el * (8 + (1 if pl else 0) + (1 if tr else 0))
        rec(f"var fw {bm}x{bn} rb{rb} w{w} c{int(sc)} p{int(pl)} t{int(tr)} a{am} s{st} v{vec}",
            lambda v=v: run_variant(t, "forward", *v[:8], stages=v[8], vec=v[9]), nb)
    out = os.environ.get("OUT", ".")
    json.dump(dict(copy_rate=copy_rate, rows=rows), open(f"{out}/passvar.json", "w"), indent=1)

if __name__ == "__main__":
    main()
