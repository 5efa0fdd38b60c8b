// fp8 code already ported, and format-neutral fp8 helpers. Pattern: ROCm TransformerEngine's
// hip_float8.h typedefs the fp8 type per platform; storage types and conversions take the format as an
// argument, so only the caller's choice of format matters.
#ifdef USE_ROCM
#include <hip/hip_fp8.h>
typedef __hip_fp8_e4m3_fnuz fp8_t;
#else
#include <cuda_fp8.h>
typedef __nv_fp8_e4m3 fp8_t;
#endif

// __nv_fp8_e4m3 in a comment is not a use
__device__ __nv_fp8_storage_t to_fp8(float v, __nv_fp8_interpretation_t format) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, format);
}
