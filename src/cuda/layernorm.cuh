// cuda/layernorm.cuh: the warp-per-row LayerNorm core shared by layernorm.cu, embedding.cu and
// the training forward (train_ops.cu, which also keeps the returned mean and rstd).
//
// One warp normalises one row of C values. The row's input is produced by a functor
// `load(c, v)` that writes kVec fp32 values for columns c .. c+kVec-1 (c a multiple of kVec),
// so the same code serves x + residual (layernorm.cu) and word + pos + type (embedding.cu).
// Three passes over the row:
//   1. mean = sum(v) / C
//   2. var  = sum((v - mean)^2) / C          (centred: no cancellation, as in the CPU kernel)
//   3. y    = (v - mean) * rsqrt(var + eps) * gamma + beta
// Rows up to 1024 columns (kRowCacheFloats per lane) are loaded once into registers (every
// model here: C = 384 .. 1024); longer rows read through `load` again in each pass (L1-resident after the
// first). Either way each column's input is read before the same column is written, so y may
// alias the input rows.
#pragma once
#include "cuda/common.cuh"

namespace unmask::cuda {

/// A row's statistics, as the training backward needs them.
struct RowStats {
  float mean, rstd;
};

/// Values a lane keeps in registers in warp_layernorm_row: rows of up to 32 * kRowCacheFloats =
/// 1024 columns (every model here: 384 .. 1024) are read once, in kRowCacheFloats / kVec chunks;
/// longer rows take the three reading passes.
constexpr int kRowCacheFloats = 32;

/// f(i, c) for each chunk i = 0 .. kChunks - 1 a lane owns in a row of C columns, c = (lane +
/// 32 i) kVec, skipping those past C; unrolled, so per-chunk arrays indexed by i stay in registers.
template <int kChunks, int kVec, typename F>
__device__ __forceinline__ void for_cached_chunks(int lane, int C, F&& f) {
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int c = (lane + i * kWarpSize) * kVec;
    if (c < C) f(i, c);
  }
}

/// row[c .. c + kVec) = v, rounded to T: one scalar store (kVec = 1) or one Packed128.
template <int kVec, typename T>
__device__ __forceinline__ void store_chunk(T* row, int c, const float* v) {
  if constexpr (kVec == 1) {
    row[c] = from_float<T>(v[0]);
  } else {
    Packed128<T> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) out.set(j, v[j]);
    out.store(row + c);
  }
}

/// y[c..c+kVec) = (v - mean) rstd gamma + beta for one chunk.
template <int kVec, typename T, typename TP>
__device__ __forceinline__ void layernorm_store_chunk(T* y, const float* v, const TP* gamma, const TP* beta, int c,
                                                      float mean, float rstd) {
  float g[kVec], b[kVec], out[kVec];
  load_floats<kVec>(gamma, c, g);  // 16-byte loads on the kVec > 1 path (gamma, beta aligned)
  load_floats<kVec>(beta, c, b);
#pragma unroll
  for (int j = 0; j < kVec; ++j) out[j] = (v[j] - mean) * rstd * g[j] + b[j];
  store_chunk<kVec>(y, c, out);
}

/// Writes one normalised row y[0..C) (T storage) and returns its statistics (every lane).
/// gamma, beta: [C] of TP. kVec: 1 or Packed128<T>::size (then C % kVec == 0 and y, gamma and
/// beta are 16-byte aligned). kIeeeRstd: rstd = 1 / sqrtf(var + eps), IEEE-rounded as the CPU's training kernel
/// (train_ops.cu); otherwise the faster rsqrtf (inference).
/// Lane l owns chunks c = (l + 32 i) kVec, i = 0, 1, ...; its sums run over i then j in both
/// paths (cached in registers, or re-read), so both give the same bits.
template <int kVec, typename T, typename TP, bool kIeeeRstd = false, typename Load>
__device__ __forceinline__ RowStats warp_layernorm_row(const Load& load, T* y, const TP* gamma, const TP* beta,
                                                       float eps, int C, int lane) {
  constexpr int kChunks = kRowCacheFloats / kVec;
  if (C <= kChunks * kWarpSize * kVec) {
    // The whole row in registers: one read of the input (all chunk loads issued back to back).
    float v[kChunks][kVec];
    for_cached_chunks<kChunks, kVec>(lane, C, [&](int i, int c) { load(c, v[i]); });
    float sum = 0.0f;
    for_cached_chunks<kChunks, kVec>(lane, C, [&](int i, int) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum += v[i][j];
    });
    const float mean = warp_sum(sum) / float(C);
    float sq = 0.0f;
    for_cached_chunks<kChunks, kVec>(lane, C, [&](int i, int) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) sq += (v[i][j] - mean) * (v[i][j] - mean);
    });
    const float var_eps = warp_sum(sq) / float(C) + eps;
    const float rstd = kIeeeRstd ? 1.0f / sqrtf(var_eps) : rsqrtf(var_eps);
    for_cached_chunks<kChunks, kVec>(lane, C,
                                     [&](int i, int c) { layernorm_store_chunk<kVec>(y, v[i], gamma, beta, c, mean, rstd); });
    return {mean, rstd};
  }
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
    layernorm_store_chunk<kVec>(y, v, gamma, beta, c, mean, rstd);
  }
  return {mean, rstd};
}

}  // namespace unmask::cuda
