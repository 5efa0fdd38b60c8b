import torch
import triton
import triton.language as tl


@triton.jit
def axpy_one_block(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(x, y):
    out = torch.empty_like(x)
    axpy_one_block[(1,)](x, y, out, x.numel(), BLOCK=1024)
    return out
