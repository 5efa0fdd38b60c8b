# Triton code tuned for NVIDIA. Patterns: num_warps=32 configs from Hopper autotune lists; PTX via
# tl.inline_asm_elementwise (fast conversions in fp8 GEMMs, tanh.approx activations); warp counts turned
# into thread counts; CuPy RawKernel strings with PTX and 32-bit masks (cupy on ROCm compiles them with hiprtc).
import cupy as cp
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 256, "BLOCK_N": 256}, num_warps=32, num_stages=2),  # expect: PM110
]
WARP_SIZE = 32  # expect: PM101
THREADS_PER_WARP: int = 32  # expect: PM101

_SRC = r'''
extern "C" __global__ void lane_sum(const float* x, float* out) {
  float v = x[threadIdx.x];
  v += __shfl_down_sync(0xffffffff, v, 16);
  out[threadIdx.x] = v;
}
'''
lane_sum = cp.RawKernel(_SRC, "lane_sum")  # expect: PM206


@triton.jit
def fast_cvt(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = tl.inline_asm_elementwise("cvt.rn.f16.f32 $0, $1;", "=h,r", [x], dtype=tl.float16, is_pure=True,  # expect: PM103
                                  pack=1)
    tl.store(out_ptr + offs, y.to(tl.float8e4nv), mask=offs < n)  # expect: PM201


def launch(x, out, num_warps: int):
    threads = num_warps * 32  # expect: PM101
    fast_cvt[(triton.cdiv(x.numel(), threads),)](x, out, x.numel(), BLOCK=threads, num_warps=32)  # expect: PM110


@triton.jit
def fast_gelu(x):
    t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,  # expect: PM103
                                  is_pure=True, pack=1)
    e = tl.inline_asm_elementwise("{ sin.approx.ftz.f32 $0, $1; }", "=r,r", [t], dtype=tl.float32,  # expect: PM103
                                  is_pure=True, pack=1)
    return 0.5 * x * (1 + t) + e
