import torch
from polyrec.kernels import gemm
from polyrec.kernels.fp8 import Fp8Out, formats, FORWARD, GRADIENT
m, n = 65536, 3456
r = lambda: torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
p, x0, x, grad, dx0, out = r(), r(), r(), r(), r(), r()
bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
fm = formats(p.device)
def copies(fmt):
    return Fp8Out(q=torch.empty(m, n, dtype=fmt.dtype, device="cuda"), qt=torch.empty(n, m, dtype=fmt.dtype, device="cuda"),
                  scale=torch.ones(1, device="cuda"), recorded=torch.zeros(1, device="cuda"), fmt=fmt)
o4, o5 = copies(fm[FORWARD]), copies(fm[GRADIENT])
for _ in range(2):
    gemm.epilogue_pass(p, bias=bias, cross=(x0, x), out=out)
for _ in range(2):
    gemm.epilogue_pass(p, bias=bias, cross=(x0, x), out=out, fp8=o4)
for _ in range(2):
    cg = gemm.CrossGrad(grad=grad, x0=x0, d_x0=dx0, accumulate=True, bias_grad=torch.empty(n, device="cuda"))
    gemm.epilogue_pass(p, bias=bias, cross_grad=cg, fp8=o5, fp8_only=True)
torch.cuda.synchronize()
