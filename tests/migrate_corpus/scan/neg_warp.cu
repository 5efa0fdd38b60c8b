// Portable warp code and 32s that are not warp sizes. Pattern: the ported form of PyTorch's block
// reductions (warpSize / C10_WARP_SIZE), and per-platform #ifdef USE_ROCM constants.
#include <cuda_runtime.h>
#ifdef USE_ROCM
#define WARP_SIZE 64
#else
#define WARP_SIZE 32
#endif
#define TILE 32
#define WARP_REDUCE(x) __shfl_down(x, warpSize / 2)
#define LANE_OF(tid) ((tid) % warpSize)
constexpr int kAlign = 32;

__device__ float warp_reduce(float v) {
  for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_down(v, offset);
  }
  return v;
}

__global__ void tiled(const float* x, float* out, int n) {
  int lane = threadIdx.x % warpSize;
  int row = blockIdx.x * TILE + threadIdx.y;
  int chunks = (n + 31) / 32;
  size_t bytes = n % 32;
  for (int i = 16; i > 0; i /= 2) out[i] = x[i];
  out[row] = warp_reduce(x[row]) + lane + chunks + bytes + kAlign;
}
