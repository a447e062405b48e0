// cuda/layernorm.cuh: the warp-per-row LayerNorm core shared by layernorm.cu, embedding.cu and
// the training forward (train_ops.cu, which also keeps the returned mean and rstd).
//
// One warp normalises one row of C values. The row's input is produced by a functor
// `load(c, v)` that writes kVec fp32 values for columns c .. c+kVec-1 (c a multiple of kVec),
// so the same code serves x + residual (layernorm.cu) and word + pos + type (embedding.cu).
// Three passes, all reading through `load` again (the row is L1-resident after the first):
//   1. mean = sum(v) / C
//   2. var  = sum((v - mean)^2) / C          (centred: no cancellation, as in the CPU kernel)
//   3. y    = (v - mean) * rsqrt(var + eps) * gamma + beta
// Pass 3 reads each column's input just before writing the same column, so y may alias the
// input rows.
#pragma once
#include "cuda/common.cuh"

namespace unmask::cuda {

/// A row's statistics, as the training backward needs them.
struct RowStats {
  float mean, rstd;
};

/// Writes one normalised row y[0..C) (T storage) and returns its statistics (every lane).
/// gamma, beta: [C] of TP. kVec: 1 or Packed128<T>::size (then C % kVec == 0 and y is 16-byte
/// aligned). kIeeeRstd: rstd = 1 / sqrtf(var + eps), IEEE-rounded as the CPU's training kernel
/// (train_ops.cu); otherwise the faster rsqrtf (inference).
template <int kVec, typename T, typename TP, bool kIeeeRstd = false, typename Load>
__device__ __forceinline__ RowStats warp_layernorm_row(const Load& load, T* y, const TP* gamma, const TP* beta,
                                                       float eps, int C, int lane) {
  float v[kVec];
  float sum = 0.0f;
  for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
    load(c, v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) sum += v[j];
  }
  const float mean = warp_sum(sum) / float(C);
  float sq = 0.0f;
  for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
    load(c, v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) sq += (v[j] - mean) * (v[j] - mean);
  }
  const float var_eps = warp_sum(sq) / float(C) + eps;
  const float rstd = kIeeeRstd ? 1.0f / sqrtf(var_eps) : rsqrtf(var_eps);
  for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
    load(c, v);
    if constexpr (kVec == 1) {
      y[c] = from_float<T>((v[0] - mean) * rstd * to_float(gamma[c]) + to_float(beta[c]));
    } else {
      Packed128<T> out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) out.set(j, (v[j] - mean) * rstd * to_float(gamma[c + j]) + to_float(beta[c + j]));
      out.store(y + c);
    }
  }
  return {mean, rstd};
}

}  // namespace unmask::cuda
