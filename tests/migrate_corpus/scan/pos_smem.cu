// Shared memory above the AMD LDS (64 KiB gfx942, 160 KiB gfx950). Pattern: Hopper-tuned GEMM and
// attention kernels that opt in to >100 KiB of dynamic shared memory (FlashAttention-2 hdim 256).
#include <cuda_runtime.h>
#define BLOCK_M 128
#define BLOCK_K 64
#define STAGES 4
constexpr int kSmemBytes = 2 * BLOCK_M * BLOCK_K * sizeof(float) * STAGES;

__global__ void big_static(float* out) {
  __shared__ float a_tile[BLOCK_M][BLOCK_K];
  __shared__ float b_tile[BLOCK_M][BLOCK_K * 2];  // expect: PM108
  out[threadIdx.x] = a_tile[0][threadIdx.x] + b_tile[0][threadIdx.x];
}

__global__ void dyn(float* out) {
  extern __shared__ float smem[];
  out[threadIdx.x] = smem[threadIdx.x];
}

void launch(float* out, cudaStream_t stream) {
  cudaFuncSetAttribute(dyn, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);  // expect: PM109
  dyn<<<132, 256, kSmemBytes, stream>>>(out);  // expect: PM109
  dyn<<<132, 256, 200 * 1024, stream>>>(out);  // expect: PM109
}
