// cuda_fp8.h's OCP fp8 types. Pattern: fp8 quantize epilogues clamped at 448 (TransformerEngine, vLLM);
// ROCm's TransformerEngine picks __hip_fp8_e4m3_fnuz or __hip_fp8_e4m3 per HIP version and target.
#include <cuda_fp8.h>  // expect: PM112

__global__ void quantize(const float* x, __nv_fp8_e4m3* out, float scale, int n) {  // expect: PM112
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __nv_fp8_e4m3(fminf(x[i] * scale, 448.0f));  // expect: PM112
}

__device__ __nv_fp8x2_storage_t pack(float2 v) {
  return __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E5M2);  // expect: PM112
}
