// Warp-size-32 assumptions. Pattern: PyTorch replaced literal 32 by C10_WARP_SIZE (64 under USE_ROCM)
// in c10/macros/Macros.h and its reductions; HIP guide: warpSize is 64 on CDNA. Macro bodies are code too.
#include <cuda_runtime.h>
#define WARP_SIZE 32  // expect: PM101
constexpr int kWarpSize = 32;  // expect: PM101
#define WARP_REDUCE(x) __shfl_down_sync(0xffffffff, x, 16)  // expect: PM102
#define LANE_OF(tid) ((tid) % 32)  // expect: PM101
#define WARP_SUM(v) \
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(__activemask(), v, o)  // expect: PM101

__device__ float warp_reduce(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {  // expect: PM101
    v += __shfl_down_sync(0xffffffff, v, offset);  // expect: PM102
  }
  return v;
}

__global__ void row_sum(const float* x, float* out, int n) {
  int lane = threadIdx.x % 32;  // expect: PM101
  int warp = threadIdx.x / 32;  // expect: PM101
  int lane2 = threadIdx.x & 31;  // expect: PM101
  int wid = threadIdx.x >> 5;  // expect: PM101
  float v = warp_reduce(x[blockIdx.x * n + threadIdx.x]);
  if (lane == 0) out[warp] = v + lane2 + wid;
}
