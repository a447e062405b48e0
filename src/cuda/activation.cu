// cuda/activation.cu: y = act(x + bias) over rows, and fill_nan (test poisoning).
//
// Memory-bound: one read and one write per element. The vector path moves 16 bytes per thread
// per step (Packed128) when C, the row strides and the pointers allow; the scalar path takes
// everything else. Work is a grid-stride loop over the N x C/V chunks of the matrix.
//
// Dumb reference: ref::bias_act (src/ref) in float64, and the scalar path of this very kernel.
#include <cmath>

#include "cuda/activation_math.cuh"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace unmask::cuda {

namespace {

/// y[n, c] = act(x[n, c] + bias[c]) with kVec elements per step (1 or 16 / sizeof(T)).
///   x: [N, C] (ldx), y: [N, C] (ldy), bias: [C] of TB or null. y may alias x (same index).
/// flat (no bias, ldx = ldy = C: the GEMM's in-place GELU): chunk i is elements kVec i .. of the
/// N C contiguous ones, no row arithmetic.
template <typename T, typename TB, int kVec>
__global__ void bias_act_kernel(T* y, int64_t ldy, const T* x, int64_t ldx, const TB* bias, int64_t N, int64_t C,
                                ops::Activation act, bool flat) {
  const int64_t chunks_per_row = C / kVec;
  const int64_t total = N * chunks_per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c;
    chunk_position<kVec>(i, chunks_per_row, flat, n, c);
    if constexpr (kVec == 1) {
      float v = to_float(x[n * ldx + c]);
      if (bias) v += to_float(bias[c]);
      y[n * ldy + c] = from_float<T>(apply_act<T>(v, act));
    } else {
      Packed128<T> in = Packed128<T>::load(x + n * ldx + c), out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        float v = in.f(j);
        if (bias) v += to_float(bias[c + j]);
        out.set(j, apply_act<T>(v, act));
      }
      out.store(y + n * ldy + c);
    }
  }
}

template <typename T, typename TB>
void bias_act_launch(void* y, int64_t ldy, const void* x, int64_t ldx, const void* bias, int64_t N, int64_t C,
                     ops::Activation act, cudaStream_t stream) {
  constexpr int V = Packed128<T>::size;
  const bool vec = rows_vectorizable<T>(C, {{x, ldx}, {y, ldy}});
  const int threads = 256;
  const int64_t work = N * (vec ? C / V : C);
  const int blocks = int(std::min<int64_t>(ceil_div(work, threads), int64_t(1) << 20));
  const bool flat = !bias && (N <= 1 || (ldx == C && ldy == C));
  if (vec)
    bias_act_kernel<T, TB, V><<<blocks, threads, 0, stream>>>(static_cast<T*>(y), ldy, static_cast<const T*>(x), ldx,
                                                              static_cast<const TB*>(bias), N, C, act, flat);
  else
    bias_act_kernel<T, TB, 1><<<blocks, threads, 0, stream>>>(static_cast<T*>(y), ldy, static_cast<const T*>(x), ldx,
                                                              static_cast<const TB*>(bias), N, C, act, flat);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void bias_act_dispatch_bias(void* y, int64_t ldy, const void* x, int64_t ldx, const void* bias, DType bias_dtype,
                            int64_t N, int64_t C, ops::Activation act, cudaStream_t stream) {
  if (!bias || bias_dtype == DType::f32)
    bias_act_launch<T, float>(y, ldy, x, ldx, bias, N, C, act, stream);
  else
    bias_act_launch<T, T>(y, ldy, x, ldx, bias, N, C, act, stream);
}

/// y[n, c] = act(x[n, c] + bias[c]) with x in f32 and y in T: the epilogue of a low-precision
/// GEMM whose fp32 result went through a workspace, so the pre-activation is rounded once.
template <typename T, typename TB>
__global__ void bias_act_from_f32_kernel(T* y, int64_t ldy, const float* x, int64_t ldx, const TB* bias, int64_t N,
                                         int64_t C, ops::Activation act) {
  const int64_t total = N * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c;
    divmod_nonneg(i, C, n, c);
    float v = x[n * ldx + c];
    if (bias) v += to_float(bias[c]);
    y[n * ldy + c] = from_float<T>(apply_act<T>(v, act));
  }
}

template <typename T>
void bias_act_from_f32_launch(void* y, int64_t ldy, const float* x, int64_t ldx, const void* bias, DType bias_dtype,
                              int64_t N, int64_t C, ops::Activation act, cudaStream_t stream) {
  const int threads = 256;
  const int blocks = int(std::min<int64_t>(ceil_div(N * C, threads), int64_t(1) << 20));
  if (!bias || bias_dtype == DType::f32)
    bias_act_from_f32_kernel<T, float><<<blocks, threads, 0, stream>>>(static_cast<T*>(y), ldy, x, ldx,
                                                                       static_cast<const float*>(bias), N, C, act);
  else
    bias_act_from_f32_kernel<T, T><<<blocks, threads, 0, stream>>>(static_cast<T*>(y), ldy, x, ldx,
                                                                   static_cast<const T*>(bias), N, C, act);
  CUDA_CHECK_LAUNCH();
}

/// p[i] = NaN for i in [0, n); W is the element's bit width type.
template <typename W>
__global__ void fill_bits_kernel(W* p, int64_t n, W bits) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) p[i] = bits;
}

}  // namespace

void bias_act_forward(void* y, int64_t ldy, const void* x, int64_t ldx, const void* bias, DType bias_dtype,
                      int64_t N, int64_t C, ops::Activation act, DType dtype, cudaStream_t stream) {
  UNMASK_CHECK(N >= 0 && C >= 0 && (N <= 1 || (ldx >= C && ldy >= C)), "bias_act (cuda): bad sizes N=", N, " C=", C,
               " ldx=", ldx, " ldy=", ldy);
  UNMASK_CHECK(!bias || bias_dtype == DType::f32 || bias_dtype == dtype, "bias_act (cuda): bias dtype must be f32 or ",
               dtype_name(dtype), ", got ", dtype_name(bias_dtype));
  if (N == 0 || C == 0) return;
  switch (dtype) {
    case DType::f32: return bias_act_launch<float, float>(y, ldy, x, ldx, bias, N, C, act, stream);
    case DType::bf16: return bias_act_dispatch_bias<__nv_bfloat16>(y, ldy, x, ldx, bias, bias_dtype, N, C, act, stream);
    case DType::f16: return bias_act_dispatch_bias<__half>(y, ldy, x, ldx, bias, bias_dtype, N, C, act, stream);
    default: throw Unsupported("bias_act (cuda): dtype ", dtype_name(dtype), " (f32, bf16, f16 only)");
  }
}

void bias_act_forward_from_f32(void* y, int64_t ldy, const float* x, int64_t ldx, const void* bias, DType bias_dtype,
                               int64_t N, int64_t C, ops::Activation act, DType dtype, cudaStream_t stream) {
  UNMASK_CHECK(N >= 0 && C >= 0 && (N <= 1 || (ldx >= C && ldy >= C)), "bias_act (cuda): bad sizes N=", N, " C=", C,
               " ldx=", ldx, " ldy=", ldy);
  if (N == 0 || C == 0) return;
  switch (dtype) {
    case DType::f32: return bias_act_launch<float, float>(y, ldy, x, ldx, bias, N, C, act, stream);
    case DType::bf16: return bias_act_from_f32_launch<__nv_bfloat16>(y, ldy, x, ldx, bias, bias_dtype, N, C, act, stream);
    case DType::f16: return bias_act_from_f32_launch<__half>(y, ldy, x, ldx, bias, bias_dtype, N, C, act, stream);
    default: throw Unsupported("bias_act (cuda): dtype ", dtype_name(dtype), " (f32, bf16, f16 only)");
  }
}

void fill_nan(void* p, int64_t n, DType dtype, cudaStream_t stream) {
  if (n <= 0) return;
  const int threads = 256;
  const int blocks = int(std::min<int64_t>(ceil_div(n, threads), 4096));
  switch (dtype) {
    case DType::f32: fill_bits_kernel<uint32_t><<<blocks, threads, 0, stream>>>(static_cast<uint32_t*>(p), n, 0x7fc00000u); break;
    case DType::bf16: fill_bits_kernel<uint16_t><<<blocks, threads, 0, stream>>>(static_cast<uint16_t*>(p), n, uint16_t(0x7fc0)); break;
    case DType::f16: fill_bits_kernel<uint16_t><<<blocks, threads, 0, stream>>>(static_cast<uint16_t*>(p), n, uint16_t(0x7e00)); break;
    default: throw Unsupported("fill_nan (cuda): dtype ", dtype_name(dtype));
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace unmask::cuda
