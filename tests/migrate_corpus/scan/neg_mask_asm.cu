// Ported lane masks and guarded assembly. Pattern: 64-bit masks as in ROCm's hipCUB warp primitives;
// PTX kept only behind __CUDA_ARCH__ / USE_ROCM guards (PyTorch ATen's CUDA/HIP split).
#include <hip/hip_runtime.h>

__device__ int count_positive(float v) {
  unsigned long long ballot = __ballot_sync(0xffffffffffffffffull, v > 0.f);
  uint64_t active = __activemask();
  return __popcll(ballot) + __popcll(active);
}

__device__ float bcast(float v, unsigned long long mask) {
  return __shfl_sync(mask, v, 0) + __shfl_xor_sync(__activemask(), v, 1);
}

__device__ unsigned lane_id() {
#if defined(__CUDA_ARCH__)
  unsigned id;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(id));
  return id;
#else
  return __lane_id();
#endif
}

__device__ void fence() {
#ifndef USE_ROCM
  asm volatile("membar.gl;");
#else
  __threadfence();
#endif
  unsigned flags = 0xffffffff;
  (void)flags;
}
