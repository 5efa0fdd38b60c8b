"""Exploration: the fp8 cross passes with qt stored for G row blocks at once (stacked tiles: 32*G-byte runs)."""
import json, os, sys
import torch, triton, triton.language as tl
from polyrec.kernels.gemm_kernels import _epilogue
from polyrec.kernels.fp8 import _round_in_fp32
from polyrec.kernels.interpreter import interpreting


@triton.jit
def _stack(a, b):
    """[BM, BN] twice -> [2 BM, BN], a's rows first."""
    j = tl.permute(tl.join(a, b), (2, 0, 1))  # [2, BM, BN]
    return tl.reshape(j, (2 * a.shape[0], a.shape[1]))


@triton.jit
def _block(row0, cols, p_ptr, c_ptr, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, q_ptr, M, N, stride, scale, g_sum, amax,
           BLOCK_M: tl.constexpr, CROSS: tl.constexpr, CROSS_GRAD: tl.constexpr, STORE_C: tl.constexpr,
           FP8_MAX: tl.constexpr, ROUND: tl.constexpr, MB: tl.constexpr, ME: tl.constexpr):
    rows = row0 + tl.arange(0, BLOCK_M)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    acc = tl.load(p_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    acc = _epilogue(acc, rows, cols, mask, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, stride, 1, stride, 1, stride, 1, N,
                    True, False, CROSS, False, CROSS_GRAD, CROSS_GRAD, False)
    if CROSS_GRAD:
        g_sum += acc
    c = acc.to(c_ptr.dtype.element_ty)
    if STORE_C:
        tl.store(c_ptr + rows[:, None] * stride + cols[None, :], c, mask=mask)
    stored = tl.where(mask, c.to(tl.float32), 0.0)
    amax = tl.maximum(amax, tl.abs(stored))
    y = tl.clamp(stored * scale, -FP8_MAX, FP8_MAX)
    if ROUND:
        y = _round_in_fp32(y, MB, ME)
    y = y.to(q_ptr.dtype.element_ty)
    tl.store(q_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], y, mask=mask)
    return y, g_sum, amax


@triton.jit
def grp_kernel(p_ptr, c_ptr, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, db_ptr, q_ptr, qt_ptr, q_scale_ptr, q_amax_ptr,
               M, N, stride,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ROW_BLOCKS: tl.constexpr, GROUP: tl.constexpr,
               CROSS: tl.constexpr, CROSS_GRAD: tl.constexpr, STORE_C: tl.constexpr, FP8_MAX: tl.constexpr,
               TRANS: tl.constexpr, ROUND: tl.constexpr, MB: tl.constexpr, ME: tl.constexpr):
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    g_sum = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    amax = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    scale = tl.load(q_scale_ptr)
    for grp in range(ROW_BLOCKS // GROUP):
        row0 = (tl.program_id(0) * ROW_BLOCKS + grp * GROUP) * BLOCK_M
        y, g_sum, amax = _block(row0, cols, p_ptr, c_ptr, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, q_ptr, M, N, stride,
                                scale, g_sum, amax, BLOCK_M, CROSS, CROSS_GRAD, STORE_C, FP8_MAX, ROUND, MB, ME)
        if GROUP >= 2:
            y1, g_sum, amax = _block(row0 + BLOCK_M, cols, p_ptr, c_ptr, bias_ptr, x0_ptr, xr_ptr, dx0_ptr, q_ptr,
                                     M, N, stride, scale, g_sum, amax, BLOCK_M, CROSS, CROSS_GRAD, STORE_C, FP8_MAX, ROUND, MB, ME)
            y = _stack(y, y1)
        if GROUP == 4:
            y2, g_sum, amax = _block(row0 + 2 * BLOCK_M, cols, p_ptr, c_ptr, bias_ptr, x0_ptr, xr_ptr, dx0_ptr,
                                     q_ptr, M, N, stride, scale, g_sum, amax, BLOCK_M, CROSS, CROSS_GRAD, STORE_C,
                                     FP8_MAX, ROUND, MB, ME)
            y3, g_sum, amax = _block(row0 + 3 * BLOCK_M, cols, p_ptr, c_ptr, bias_ptr, x0_ptr, xr_ptr, dx0_ptr,
                                     q_ptr, M, N, stride, scale, g_sum, amax, BLOCK_M, CROSS, CROSS_GRAD, STORE_C,
                                     FP8_MAX, ROUND, MB, ME)
            y = _stack(y, _stack(y2, y3))
        rows = (row0 + tl.arange(0, GROUP * BLOCK_M)).to(tl.int64)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        if TRANS:
            tl.store(qt_ptr + cols[:, None].to(tl.int64) * M + rows[None, :], tl.trans(y), mask=tl.trans(mask))
        else:
            tl.store(qt_ptr + cols[None, :].to(tl.int64) * M + rows[:, None], y, mask=mask)
    if CROSS_GRAD:
        tl.store(db_ptr + tl.program_id(0) * N + cols, tl.sum(g_sum, axis=0), mask=cols < N)
    tl.atomic_max(q_amax_ptr, tl.max(tl.max(amax, axis=1), axis=0))


def tensors(m, n, device):
    from polyrec.kernels.fp8 import formats, FORWARD, GRADIENT
    gen = torch.Generator(device=device).manual_seed(0)
    r = lambda: torch.randn(m, n, device=device, dtype=torch.bfloat16, generator=gen)
    t = dict(p=r(), x0=r(), x=r(), grad=r(), dx0=r(), out=r(), bias=torch.randn(n, device=device, generator=gen).bfloat16())
    t["db"] = torch.empty(triton.cdiv(m, 32), n, device=device)
    fm = formats(t["p"].device)
    t["f4"], t["f5"] = fm[FORWARD], fm[GRADIENT]
    for k, f in (("4", t["f4"]), ("5", t["f5"])):
        t["q" + k] = torch.empty(m, n, dtype=f.dtype, device=device)
        t["qt" + k] = torch.empty(n, m, dtype=f.dtype, device=device)
    t["scale"] = torch.full((1,), 37.0, device=device); t["amax"] = torch.zeros(1, device=device)
    return t


def run(t, kind, rb, warps, group, trans=False, bm=32, bn=128):
    m, n = t["p"].shape
    k = "5" if kind == "cross_grad" else "4"
    grid = (triton.cdiv(m, bm * rb), triton.cdiv(n, bn))
    grp_kernel[grid](t["p"], t["out"], t["bias"], t["x0"], t["grad"] if kind == "cross_grad" else t["x"], t["dx0"],
                     t["db"], t["q" + k], t["qt" + k], t["scale"], t["amax"], m, n, n,
                     BLOCK_M=bm, BLOCK_N=bn, ROW_BLOCKS=rb, GROUP=group, CROSS=kind == "forward",
                     CROSS_GRAD=kind == "cross_grad", STORE_C=kind == "forward",
                     FP8_MAX=float(t["f" + k].max_value), TRANS=trans, ROUND=interpreting(),
                     MB=t["f" + k].mantissa_bits, ME=t["f" + k].min_exponent, num_warps=warps)


def real(t, kind):
    from polyrec.kernels import gemm
    from polyrec.kernels.fp8 import Fp8Out
    k = "5" if kind == "cross_grad" else "4"
    o = Fp8Out(q=t["q" + k], qt=t["qt" + k], scale=t["scale"], recorded=t["amax"], fmt=t["f" + k])
    if kind == "cross_grad":
        cg = gemm.CrossGrad(grad=t["grad"], x0=t["x0"], d_x0=t["dx0"], accumulate=True,
                            bias_grad=torch.empty(t["p"].shape[1], device=t["p"].device))
        gemm.epilogue_pass(t["p"], bias=t["bias"], cross_grad=cg, fp8=o, fp8_only=True)
    else:
        gemm.epilogue_pass(t["p"], bias=t["bias"], cross=(t["x0"], t["x"]), out=t["out"], fp8=o)


VARIANTS = {"cross_grad": [(8, 8, 1, False), (8, 8, 2, False), (8, 8, 4, False), (8, 8, 1, True), (8, 8, 2, True),
                           (8, 8, 4, True), (8, 4, 4, False), (16, 8, 4, False)],
            "forward": [(1, 4, 1, False), (2, 4, 2, False), (4, 4, 4, False), (4, 8, 4, False), (2, 4, 2, True),
                        (4, 4, 4, True), (4, 8, 4, True)]}


def check(m, n, device):
    """Each variant's q, qt (and out / dx0) equal the real pass's, bit for bit."""
    bad = 0
    for kind, vs in VARIANTS.items():
        k = "5" if kind == "cross_grad" else "4"
        t = tensors(m, n, device)
        dx0 = t["dx0"].clone()
        real(t, kind)
        ref = {x: t[x].clone() for x in ("q" + k, "qt" + k, "out", "dx0")}
        for v in vs:
            if m % (32 * v[0]):
                continue
            t["dx0"].copy_(dx0)
            for x in ("q" + k, "qt" + k):
                t[x].view(torch.uint8).fill_(0x7f)
            run(t, kind, *v)
            same = all(torch.equal(t[x].view(torch.uint8) if t[x].element_size() == 1 else t[x],
                                   ref[x].view(torch.uint8) if ref[x].element_size() == 1 else ref[x]) for x in ref)
            bad += not same
            print(f"check {kind} {v}: {'same' if same else 'DIFFERENT'}", flush=True)
    return bad


def main():
    if not torch.cuda.is_available():
        sys.exit(check(512, 256, "cpu"))
    bad = check(4096, 3456, "cuda")
    from polyrec.hardware import calibrate
    m, n = 65536, 3456
    t = tensors(m, n, "cuda")
    copy_rate = calibrate.measure_copy_bandwidth(1 << 30)
    rows = []
    for rep in range(2):
        for kind, vs in VARIANTS.items():
            nb = m * n * (12 if kind == "cross_grad" else 10)
            ms = calibrate.steady_ms(lambda: real(t, kind))
            rows.append(dict(rep=rep, kind=kind, variant="real", ms=ms, frac=nb / (ms * 1e-3) / copy_rate))
            print(f"{rep} {kind:10s} real                 {ms:.4f} ms {rows[-1]['frac']:.3f}", flush=True)
            for v in vs:
                ms = calibrate.steady_ms(lambda v=v: run(t, kind, *v))
                rows.append(dict(rep=rep, kind=kind, variant=list(v), ms=ms, frac=nb / (ms * 1e-3) / copy_rate))
                print(f"{rep} {kind:10s} rb{v[0]:2d} w{v[1]} G{v[2]} T{int(v[3])}     {ms:.4f} ms {rows[-1]['frac']:.3f}",
                      flush=True)
    json.dump(dict(copy_rate=copy_rate, bad=bad, rows=rows), open(f"{os.environ.get('OUT', '.')}/qtgroup.json", "w"),
              indent=1)


if __name__ == "__main__":
    main()
