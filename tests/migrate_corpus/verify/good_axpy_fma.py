import torch
import triton
import triton.language as tl


@triton.jit
def axpy_fma_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.fma(x, 2.0, y), mask=mask)


def run(x, y):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    axpy_fma_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256, num_warps=2)
    return out
