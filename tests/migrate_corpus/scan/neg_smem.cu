// Shared memory that fits every target, sizes unknown at compile time, and guarded opt-ins.
// Pattern: PyTorch's softmax / layer-norm kernels (<= 48 KiB static, dynamic sized from the device).
#include <cuda_runtime.h>
#define BLOCK 256

__global__ void fits(float* out, int n) {
  __shared__ float buf[BLOCK * 16];
  __shared__ double partial[1024];
  extern __shared__ float dyn[];
  out[threadIdx.x] = buf[threadIdx.x] + partial[0] + dyn[0];
}

void launch(float* out, int n, size_t smem, cudaStream_t stream) {
  fits<<<n, BLOCK, smem, stream>>>(out, n);
  fits<<<n, BLOCK, 48 * 1024, stream>>>(out, n);
  cudaFuncSetAttribute(fits, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
#if !defined(USE_ROCM)
  cudaFuncSetAttribute(fits, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
#endif
}
