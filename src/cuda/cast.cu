// cuda/cast.cu: float matrix casts: f32 -> bf16/f16 (the autocast of f32 GEMMs, ops_cuda.cc) and
// between any two of f32, bf16, f16 over row views (ops::copy with a dtype change: the boundaries
// of bf16 training activations).
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
    int64_t b, rc, r, c;
    divmod_nonneg(i, rows * cols, b, rc);
    divmod_nonneg(rc, cols, r, c);
    dst[i] = from_float<T>(src[b * sstride + r * lds + c]);
  }
}

// dst[r * ldd + c] = To(src[r * lds + c]) (fp32 in between: exact for the widening casts,
// one rounding to nearest even for the narrowing ones). Grid-stride over rows * cols; flat
// (ldd = lds = cols): element i is i of both, no row arithmetic.
template <typename To, typename From>
__global__ void cast_rows_kernel(To* __restrict__ dst, int64_t ldd, const From* __restrict__ src, int64_t lds,
                                 int64_t rows, int64_t cols, bool flat) {
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (flat) {
      dst[i] = from_float<To>(to_float(src[i]));
      continue;
    }
    int64_t r, c;
    divmod_nonneg(i, cols, r, c);
    dst[r * ldd + c] = from_float<To>(to_float(src[r * lds + c]));
  }
}

template <typename From>
void launch_cast_rows(void* dst, DType dst_dtype, int64_t ldd, const From* src, int64_t lds, int64_t rows,
                      int64_t cols, int blocks, int threads, cudaStream_t stream) {
  const bool flat = rows <= 1 || (ldd == cols && lds == cols);
  switch (dst_dtype) {
    case DType::f32:
      cast_rows_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(dst), ldd, src, lds, rows, cols, flat);
      break;
    case DType::bf16:
      cast_rows_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), ldd, src, lds, rows, cols,
                                                        flat);
      break;
    case DType::f16:
      cast_rows_kernel<<<blocks, threads, 0, stream>>>(static_cast<__half*>(dst), ldd, src, lds, rows, cols, flat);
      break;
    default:
      throw Error("cast_rows: the target dtype must be f32, bf16 or f16, got ", dtype_name(dst_dtype));
  }
}

}  // namespace

void cast_rows(void* dst, DType dst_dtype, int64_t ldd, const void* src, DType src_dtype, int64_t lds, int64_t rows,
               int64_t cols, cudaStream_t stream) {
  UNMASK_CHECK(rows >= 0 && cols >= 0 && (rows <= 1 || (ldd >= cols && lds >= cols)), "cast_rows: bad sizes rows ",
               rows, " cols ", cols, " ldd ", ldd, " lds ", lds);
  const int64_t n = rows * cols;
  if (n == 0) return;
  const int threads = 256;
  const int blocks = int(std::min<int64_t>(ceil_div(n, int64_t(threads)), 65535 * 8));
  switch (src_dtype) {
    case DType::f32:
      launch_cast_rows(dst, dst_dtype, ldd, static_cast<const float*>(src), lds, rows, cols, blocks, threads, stream);
      break;
    case DType::bf16:
      launch_cast_rows(dst, dst_dtype, ldd, static_cast<const __nv_bfloat16*>(src), lds, rows, cols, blocks, threads,
                       stream);
      break;
    case DType::f16:
      launch_cast_rows(dst, dst_dtype, ldd, static_cast<const __half*>(src), lds, rows, cols, blocks, threads, stream);
      break;
    default:
      throw Error("cast_rows: the source dtype must be f32, bf16 or f16, got ", dtype_name(src_dtype));
  }
  CUDA_CHECK_LAUNCH();
}

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
