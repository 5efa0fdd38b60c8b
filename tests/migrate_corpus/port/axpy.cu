// CUDA kernel to port (the `port` tests' input): out = 2 x + y with a warp-size-32 tail loop.
#include <cuda_runtime.h>

__global__ void axpy(const float* x, const float* y, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x % 32;
  if (i < n) out[i] = 2.0f * x[i] + y[i] + 0 * lane;
}

void launch(const float* x, const float* y, float* out, int n) {
  float* tmp;
  cudaMalloc(&tmp, n * sizeof(float));
  axpy<<<(n + 255) / 256, 256>>>(x, y, out, n);
  cudaFree(tmp);
}
