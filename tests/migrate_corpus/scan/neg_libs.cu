// Portable or already-ported library use: hipCUB / hipBLASLt behind the HIP build, libraries in
// comments and strings, and look-alike names. Pattern: PyTorch's #ifdef USE_ROCM include blocks.
#ifdef USE_ROCM
#include <hipcub/hipcub.hpp>
#include <hipblaslt/hipblaslt.h>
#else
#include <cub/cub.cuh>
#include <cublasLt.h>
#endif
#include <vector>
// cutlass::gemm would be faster here; see cudnn docs.
static const char* kWhy = "cudnn and cutlass are NVIDIA-only";
int cutlass_like_tile(int cubic) { return cubic * 2; }
