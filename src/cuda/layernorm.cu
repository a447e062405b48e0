// cuda/layernorm.cu: y = LayerNorm(x + residual) * gamma + beta, one warp per row.
//
// BERT's post-LN blocks call this with the projection output as x and the block input as the
// residual, writing over the residual (y aliases residual). fp32 statistics, two-pass (see
// layernorm.cuh). Memory-bound; rows are read with 128-bit loads when C and the strides allow.
//
// Dumb reference: ref::layernorm (src/ref) in float64, and this kernel's scalar path.
#include "cuda/kernels.h"
#include "cuda/layernorm.cuh"

namespace unmask::cuda {

namespace {

constexpr int kLnWarpsPerBlock = 8;

/// x, residual, y: [N, C] with row strides; gamma, beta: [C].
template <typename T, typename TP, int kVec>
__global__ void __launch_bounds__(kLnWarpsPerBlock * kWarpSize)
    layernorm_kernel(T* y, int64_t ldy, const T* x, int64_t ldx, const T* residual, int64_t ldr, const TP* gamma,
                     const TP* beta, float eps, int64_t N, int C) {
  const int64_t row = int64_t(blockIdx.x) * kLnWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= N) return;
  const T* xr = x + row * ldx;
  const T* rr = residual ? residual + row * ldr : nullptr;
  auto load = [&](int c, float* v) {
    if constexpr (kVec == 1) {
      v[0] = to_float(xr[c]) + (rr ? to_float(rr[c]) : 0.0f);
    } else {
      const Packed128<T> a = Packed128<T>::load(xr + c);
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[j] = a.f(j);
      if (rr) {
        const Packed128<T> b = Packed128<T>::load(rr + c);
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[j] += b.f(j);
      }
    }
  };
  warp_layernorm_row<kVec, T, TP>(load, y + row * ldy, gamma, beta, eps, C, lane);
}

template <typename T, typename TP>
void layernorm_launch(void* y, int64_t ldy, const void* x, int64_t ldx, const void* residual, int64_t ldr,
                      const void* gamma, const void* beta, float eps, int64_t N, int64_t C, cudaStream_t stream) {
  constexpr int V = Packed128<T>::size;
  // gamma and beta in the list: the kVec path reads them 16 bytes at a time (load_floats)
  const bool vec = rows_vectorizable<T>(C, {{x, ldx}, {y, ldy}, {residual, ldr}, {gamma, 0}, {beta, 0}});
  const dim3 block(kLnWarpsPerBlock * kWarpSize);
  const dim3 grid(unsigned(ceil_div(N, kLnWarpsPerBlock)));
  auto args = [&](auto kernel) {
    kernel<<<grid, block, 0, stream>>>(static_cast<T*>(y), ldy, static_cast<const T*>(x), ldx,
                                       static_cast<const T*>(residual), ldr, static_cast<const TP*>(gamma),
                                       static_cast<const TP*>(beta), eps, N, int(C));
  };
  if (vec)
    args(layernorm_kernel<T, TP, V>);
  else
    args(layernorm_kernel<T, TP, 1>);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_dispatch_param(DType param_dtype, void* y, int64_t ldy, const void* x, int64_t ldx, const void* r,
                              int64_t ldr, const void* g, const void* b, float eps, int64_t N, int64_t C,
                              cudaStream_t stream) {
  if (param_dtype == DType::f32)
    layernorm_launch<T, float>(y, ldy, x, ldx, r, ldr, g, b, eps, N, C, stream);
  else
    layernorm_launch<T, T>(y, ldy, x, ldx, r, ldr, g, b, eps, N, C, stream);
}

}  // namespace

void layernorm_forward(void* y, int64_t ldy, const void* x, int64_t ldx, const void* residual, int64_t ldr,
                       const void* gamma, const void* beta, DType param_dtype, float eps, int64_t N, int64_t C,
                       DType dtype, cudaStream_t stream) {
  UNMASK_CHECK(N >= 0 && C >= 1 && C < (int64_t(1) << 31), "layernorm (cuda): bad sizes N=", N, " C=", C);
  UNMASK_CHECK(N <= 1 || (ldx >= C && ldy >= C && (!residual || ldr >= C)), "layernorm (cuda): row strides ldx=", ldx,
               " ldr=", ldr, " ldy=", ldy, " smaller than C=", C);
  UNMASK_CHECK(param_dtype == DType::f32 || param_dtype == dtype, "layernorm (cuda): gamma/beta dtype must be f32 or ",
               dtype_name(dtype), ", got ", dtype_name(param_dtype));
  UNMASK_CHECK(gamma && beta, "layernorm (cuda): gamma and beta are required");
  UNMASK_CHECK(ceil_div(N, kLnWarpsPerBlock) < (int64_t(1) << 31), "layernorm (cuda): too many rows N=", N);
  if (N == 0) return;
  switch (dtype) {
    case DType::f32: return layernorm_launch<float, float>(y, ldy, x, ldx, residual, ldr, gamma, beta, eps, N, C, stream);
    case DType::bf16:
      return layernorm_dispatch_param<__nv_bfloat16>(param_dtype, y, ldy, x, ldx, residual, ldr, gamma, beta, eps, N, C,
                                                     stream);
    case DType::f16:
      return layernorm_dispatch_param<__half>(param_dtype, y, ldy, x, ldx, residual, ldr, gamma, beta, eps, N, C,
                                              stream);
    default: throw Unsupported("layernorm (cuda): dtype ", dtype_name(dtype), " (f32, bf16, f16 only)");
  }
}

}  // namespace unmask::cuda
