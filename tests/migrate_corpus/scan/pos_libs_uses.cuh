// Library use in a header that gets its includes elsewhere (first use is flagged).
#pragma once
template <typename T>
void lt_matmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc) {  // expect: PM106 (a type is a use)
  cublasLtMatmul(handle, desc, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                 nullptr, nullptr, nullptr, nullptr, 0, 0);
}
inline void conv(cudnnHandle_t h) { cudnnCreate(&h); }  // expect: PM107
inline float reduce(const float* x, int n) { return cute::size(n) + cub::Sum()(x[0], x[1]); }  // expect: PM104, PM105
