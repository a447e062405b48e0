// cuda/cast.cu: f32 -> bf16/f16 matrix casts (the bf16 autocast of f32 GEMMs, ops_cuda.cc).
#include <algorithm>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace unmask::cuda {

namespace {

// dst[b][r][c] = T(src[b * sstride + r * lds + c]) (round to nearest even), dst packed
// [batches, rows, cols]. One thread per element, grid-stride.
template <typename T>
__global__ void cast_2d_kernel(T* __restrict__ dst, const float* __restrict__ src, int64_t lds, int64_t sstride,
                               int64_t rows, int64_t cols, int64_t batches) {
  const int64_t n = batches * rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / (rows * cols), rc = i % (rows * cols), r = rc / cols, c = rc % cols;
    dst[i] = from_float<T>(src[b * sstride + r * lds + c]);
  }
}

}  // namespace

void cast_f32_2d(void* dst, DType dtype, const float* src, int64_t lds, int64_t batch_stride, int64_t rows,
                 int64_t cols, int64_t batches, cudaStream_t stream) {
  UNMASK_CHECK(rows >= 0 && cols >= 0 && batches >= 1 && lds >= cols, "cast_f32_2d: bad sizes rows ", rows, " cols ",
               cols, " ld ", lds, " batches ", batches);
  const int64_t n = batches * rows * cols;
  if (n == 0) return;
  const int threads = 256;
  const int blocks = int(std::min<int64_t>(ceil_div(n, int64_t(threads)), 65535 * 8));
  switch (dtype) {
    case DType::bf16:
      cast_2d_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), src, lds, batch_stride, rows,
                                                     cols, batches);
      break;
    case DType::f16:
      cast_2d_kernel<<<blocks, threads, 0, stream>>>(static_cast<__half*>(dst), src, lds, batch_stride, rows, cols,
                                                     batches);
      break;
    default:
      throw Error("cast_f32_2d: the target dtype must be bf16 or f16, got ", dtype_name(dtype));
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace unmask::cuda
