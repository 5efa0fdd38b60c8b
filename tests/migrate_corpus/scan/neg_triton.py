# Portable Triton: configs within 16 warps, AMDGCN inline asm, warp size from the target, CuPy kernels
# without CUDA-only intrinsics. Pattern: Triton's AMD matmul tutorial configs (num_warps <= 8).
import cupy as cp
import triton
import triton.language as tl
from triton.language.extra import libdevice

CONFIGS = [triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=2),
           triton.Config({"BLOCK_M": 256, "BLOCK_N": 128}, num_warps=16, num_stages=2)]
NUM_WARPS = 32 // 4
BLOCK_K: int = 32
WARP_SIZE: int = 64
BLOCK = 32 * 4

_SRC = r'''
extern "C" __global__ void scale(const float* x, float* out, float a) {
  out[threadIdx.x] = a * x[threadIdx.x];
}
'''
scale = cp.RawKernel(_SRC, "scale")


@triton.jit
def amd_cvt(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.inline_asm_elementwise("v_cvt_f16_f32 $0, $1", "=v,v", [x], dtype=tl.float16, is_pure=True, pack=1)
    tl.store(out_ptr + offs, y + libdevice.tanh(x), mask=offs < n)


def launch(x, out, warp_size: int, num_warps: int = 4):
    threads = num_warps * warp_size
    amd_cvt[(triton.cdiv(x.numel(), threads),)](x, out, x.numel(), BLOCK=threads, num_warps=num_warps)
