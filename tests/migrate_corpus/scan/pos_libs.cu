// NVIDIA-only libraries. Pattern: FlashAttention-2 / xformers kernels built on CUTLASS/CuTe;
// TransformerEngine on cuBLASLt; cuDNN convolutions in custom extensions.
#include <cutlass/gemm/device/gemm.h>  // expect: PM104
#include <cute/tensor.hpp>  // expect: PM104
#include <cub/block/block_reduce.cuh>  // expect: PM105
#include <cublasLt.h>  // expect: PM106
#include <cudnn.h>  // expect: PM107

using Gemm = cutlass::gemm::device::Gemm<float, cutlass::layout::RowMajor, float, cutlass::layout::RowMajor,
                                         float, cutlass::layout::RowMajor>;
__global__ void block_sum(const float* x, float* out) {
  using BlockReduce = cub::BlockReduce<float, 256>;
  __shared__ typename BlockReduce::TempStorage tmp;
  out[blockIdx.x] = BlockReduce(tmp).Sum(x[threadIdx.x]);
}
