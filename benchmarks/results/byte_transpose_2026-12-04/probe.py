"""Probe: torch's column sums of bias-gradient partials and fp8 master transposes vs simple Triton kernels."""
import json, os, sys
import torch, triton, triton.language as tl


@triton.jit
def colsum_kernel(p_ptr, out_ptr, R, N, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_R, BLOCK_N), tl.float32)
    for r0 in range(0, R, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        acc += tl.load(p_ptr + rows[:, None] * N + cols[None, :], mask=(rows[:, None] < R) & (cols[None, :] < N),
                       other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0), mask=cols < N)


@triton.jit
def transpose_kernel(x_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask)
    tl.store(y_ptr + cols[None, :] * M + rows[:, None], x, mask=mask)


def colsum(p, bn, br, w):
    r, n = p.shape
    out = torch.empty(n, device=p.device)
    colsum_kernel[(triton.cdiv(n, bn),)](p, out, r, n, BLOCK_R=br, BLOCK_N=bn, num_warps=w)
    return out


def transpose(q, block, w):
    m, n = q.shape
    y = torch.empty(n, m, dtype=torch.uint8, device=q.device)
    transpose_kernel[(triton.cdiv(m, block), triton.cdiv(n, block))](q.view(torch.uint8), y, m, n, BLOCK=block,
                                                                    num_warps=w)
    return y


SUMS = [(256, 3456)] * 3 + [(1024, n) for n in (512, 256, 128, 1024, 1024, 512, 256)]
WEIGHTS = [(1024, 3456), (1024, 1024), (512, 1024), (256, 512), (256, 512), (128, 256)] + [(3456, 512)] * 3
SUM_CFGS = [(32, 64, 4), (64, 32, 4), (32, 128, 4), (16, 256, 4), (64, 64, 8)]
T_CFGS = [(64, 4), (64, 8), (128, 8), (32, 4)]


def graph_ms(fn, calls=50, replays=20):
    """Per-call device ms of ``fn`` replayed in a CUDA graph of ``calls`` calls (as in the graphed step)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (calls * replays)


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for r, n in [(100, 70), (256, 300)]:
        p = torch.randn(r, n, device=dev)
        for c in SUM_CFGS:
            assert torch.allclose(colsum(p, *c), p.sum(0), atol=1e-4), c
    q = torch.randn(300, 200, device=dev).to(torch.float8_e4m3fn)
    for c in T_CFGS:
        assert torch.equal(transpose(q, *c), q.t().contiguous().view(torch.uint8)), c
    print("correct", flush=True)
    if dev == "cpu":
        return
    rows = []
    for r, n in sorted(set(SUMS)):
        p = torch.randn(r, n, device=dev)
        out = torch.empty(n, device=dev)
        t = graph_ms(lambda: torch.sum(p, 0, out=out))
        best = min((graph_ms(lambda c=c: colsum(p, *c)), c) for c in SUM_CFGS)
        rows.append(dict(kind="sum", shape=[r, n], torch_ms=t, triton_ms=best[0], cfg=best[1]))
        print(rows[-1], flush=True)
    for m, n in sorted(set(WEIGHTS)):
        q = torch.randn(m, n, device=dev).to(torch.float8_e4m3fn)
        t = graph_ms(lambda: q.t().contiguous())
        best = min((graph_ms(lambda c=c: transpose(q, *c)), c) for c in T_CFGS)
        rows.append(dict(kind="transpose", shape=[m, n], torch_ms=t, triton_ms=best[0], cfg=best[1]))
        print(rows[-1], flush=True)
    per_step = {k: sum(next(x for x in rows if x["kind"] == kind and x["shape"] == list(s))[k]
                       for kind, shapes in (("sum", SUMS), ("transpose", WEIGHTS)) for s in shapes)
                for k in ("torch_ms", "triton_ms")}
    print("per step", per_step)
    json.dump(dict(rows=rows, per_step=per_step), open(f"{os.environ.get('OUT', '.')}/micro.json", "w"), indent=1)


if __name__ == "__main__":
    main()
