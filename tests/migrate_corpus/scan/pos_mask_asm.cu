// 32-bit lane masks and inline PTX. Pattern: HIP guide "Warp cross-lane functions" (64-bit masks);
// vLLM / FasterTransformer kernels guard PTX with #ifndef USE_ROCM when porting.
#include <cuda_runtime.h>
#define FULL_MASK 0xffffffff

__device__ int count_positive(float v) {
  unsigned ballot = __ballot_sync(FULL_MASK, v > 0.f);  // expect: PM102
  return __popc(__ballot_sync(__activemask(), v > 0.f)) + ballot;  // expect: PM102
}

__device__ float bcast(float v) {
  uint32_t active = __activemask();  // expect: PM102
  float w = __shfl_xor_sync(0xFFFFFFFFu, v, 1);  // expect: PM102
  return __shfl_sync(~0u, v, 0) + w + active;  // expect: PM102
}

__device__ unsigned lane_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(id));  // expect: PM103
  return id;
}

__device__ void cp_async(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem), "l"(gmem));  // expect: PM103
}
