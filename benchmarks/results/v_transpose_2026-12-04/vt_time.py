import torch, triton
from polyrec.kernels.byte_transpose import transpose
v = torch.randn(512, 3456, device="cuda").to(torch.bfloat16)
assert torch.equal(transpose(v), v.t().contiguous())
for name, f in (("torch", lambda: v.t().contiguous()), ("triton", lambda: transpose(v))):
    g = torch.cuda.CUDAGraph()
    f(); torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for _ in range(20):
            f()
    ms = triton.testing.do_bench(g.replay, warmup=5, rep=100) / 20
    print(f"V^T [512, 3456] bf16 {name}: {ms * 1e3:.2f} us")
