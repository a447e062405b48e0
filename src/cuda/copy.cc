// cuda/copy.cc: see copy.h.
#include "cuda/copy.h"

#include "cuda/check.h"

namespace unmask::cuda {

void memset_zero(void* p, size_t bytes) {
  if (bytes) CUDA_CHECK(cudaMemset(p, 0, bytes));
}

void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width_bytes, size_t rows) {
  if (width_bytes == 0 || rows == 0) return;
  if (rows == 1) {
    CUDA_CHECK(cudaMemcpy(dst, src, width_bytes, cudaMemcpyDefault));
    return;
  }
  CUDA_CHECK(cudaMemcpy2D(dst, dpitch, src, spitch, width_bytes, rows, cudaMemcpyDefault));
}

}  // namespace unmask::cuda
