// cuda/softmax.cu: row softmax, one warp per row, fp32 arithmetic.
//
// Three passes over the row (max, sum of exp(x - max), write), reading through L1. y may
// alias x: the last pass reads each element just before writing it. Attention does not use
// this op (flash attention keeps its own online softmax); it serves the softmax op.
//
// Dumb reference: ref::softmax (src/ref) in float64.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace unmask::cuda {

namespace {

constexpr int kSmWarpsPerBlock = 8;

/// x, y: [N, C] with row strides.
template <typename T>
__global__ void __launch_bounds__(kSmWarpsPerBlock * kWarpSize)
    softmax_kernel(T* y, int64_t ldy, const T* x, int64_t ldx, int64_t N, int C) {
  const int64_t row = int64_t(blockIdx.x) * kSmWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= N) return;
  const T* xr = x + row * ldx;
  T* yr = y + row * ldy;
  float mx = -INFINITY;
  for (int c = lane; c < C; c += kWarpSize) mx = fmaxf(mx, to_float(xr[c]));
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) sum += expf(to_float(xr[c]) - mx);
  const float inv = 1.0f / warp_sum(sum);
  for (int c = lane; c < C; c += kWarpSize) yr[c] = from_float<T>(expf(to_float(xr[c]) - mx) * inv);
}

template <typename T>
void softmax_launch(void* y, int64_t ldy, const void* x, int64_t ldx, int64_t N, int64_t C, cudaStream_t stream) {
  const dim3 block(kSmWarpsPerBlock * kWarpSize), grid(unsigned(ceil_div(N, kSmWarpsPerBlock)));
  softmax_kernel<T><<<grid, block, 0, stream>>>(static_cast<T*>(y), ldy, static_cast<const T*>(x), ldx, N, int(C));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax_forward(void* y, int64_t ldy, const void* x, int64_t ldx, int64_t N, int64_t C, DType dtype,
                     cudaStream_t stream) {
  UNMASK_CHECK(N >= 0 && C >= 1 && C < (int64_t(1) << 31), "softmax (cuda): bad sizes N=", N, " C=", C);
  UNMASK_CHECK(N <= 1 || (ldx >= C && ldy >= C), "softmax (cuda): row strides ldx=", ldx, " ldy=", ldy,
               " smaller than C=", C);
  UNMASK_CHECK(ceil_div(N, kSmWarpsPerBlock) < (int64_t(1) << 31), "softmax (cuda): too many rows N=", N);
  if (N == 0) return;
  switch (dtype) {
    case DType::f32: return softmax_launch<float>(y, ldy, x, ldx, N, C, stream);
    case DType::bf16: return softmax_launch<__nv_bfloat16>(y, ldy, x, ldx, N, C, stream);
    case DType::f16: return softmax_launch<__half>(y, ldy, x, ldx, N, C, stream);
    default: throw Unsupported("softmax (cuda): dtype ", dtype_name(dtype), " (f32, bf16, f16 only)");
  }
}

}  // namespace unmask::cuda
