// cuda/train_ops.cu: the training row kernels: LayerNorm forward with statistics and its
// backward, activation backward, bias gradient, softmax backward, dropout.
//
// Memory-bound row and column sweeps with fp32 arithmetic on f32/bf16/f16 storage. The
// parameter gradients (dgamma, dbeta, dbias) are column sums over all rows, formed without
// atomics in two stages so that the bits never depend on scheduling:
//   1. column_partials_kernel: block (column tile, row chunk) sums its chunk's rows for 32
//      groups of 1 or 16 / sizeof(T) columns (8 row lanes in a fixed interleave, combined in a
//      fixed order) into partial[chunk, c];
//   2. finish_columns_kernel: one thread per column adds partial[0..chunks) in order to out[c].
// The chunking depends on N only (kChunkRows, at most kMaxChunks chunks).
//
// Float64 references: ref::layernorm_forward/backward (src/ref/ref_ops.h), ref::dropout_forward
// (train_ref.h); the CPU kernels (cpu/kernels_train_impl.inc) use the same formulas.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/philox.h"
#include "cuda/activation_math.cuh"
#include "cuda/common.cuh"
#include "cuda/layernorm.cuh"
#include "cuda/train_kernels.h"

namespace unmask::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;  // row kernels: one warp per row, 8 rows per block
constexpr int kColTile = 32;       // column reductions: 32 columns x 8 row lanes per block
constexpr int kRowLanes = 8;
constexpr int64_t kChunkRows = 128;
// Rows a column_partials thread loads before it adds them: 4 for the bias gradient (bf16: 40 ->
// 59 registers, 6 -> 4 blocks an SM, 4x the loads in flight a thread); 1 with LayerNorm's x and
// residual too, whose three loads a row already go out together (2 rows took the bf16 kernel
// from 64 to 95 registers, half the blocks an SM: the same loads in flight).
template <bool kLayerNorm>
inline constexpr int kColumnIlp = kLayerNorm ? 1 : 4;
constexpr int64_t kMaxChunks = 1024;

/// Rows per chunk of the column reductions: a function of N only (determinism).
int64_t chunk_rows_for(int64_t N) { return std::max<int64_t>(kChunkRows, ceil_div(N, kMaxChunks)); }

void check_rows(const char* op, int64_t N, int64_t C) {
  UNMASK_CHECK(N >= 0 && C >= 0 && C < (int64_t(1) << 31), op, " (cuda): bad sizes N=", N, " C=", C);
  UNMASK_CHECK(ceil_div(N, kWarpsPerBlock) < (int64_t(1) << 31), op, " (cuda): too many rows N=", N);
}

// ---- layernorm ------------------------------------------------------------------------------

/// v[0..kVec) = row[c .. c + kVec) as floats: one scalar load (kVec = 1) or one Packed128.
template <typename T, int kVec>
__device__ __forceinline__ void load_row(float* v, const T* row, int c) {
  if constexpr (kVec == 1) {
    v[0] = to_float(row[c]);
  } else {
    const Packed128<T> p = Packed128<T>::load(row + c);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = p.f(j);
  }
}

/// v = x[c ..] + residual[c ..] (the LayerNorm input s; residual may be null).
template <typename T, int kVec>
__device__ __forceinline__ void load_sum(float* v, const T* x, const T* residual, int c) {
  load_row<T, kVec>(v, x, c);
  if (residual) {
    float r[kVec];
    load_row<T, kVec>(r, residual, c);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] += r[j];
  }
}

/// y, mean, rstd from x (+ residual): one warp per row, the two-pass statistics of
/// warp_layernorm_row (layernorm.cuh) with an IEEE rstd, as the CPU.
///   x, residual, y: [N, C] (ld*); gamma, beta: [C]; mean, rstd: [N].
template <typename T, int kVec>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    layernorm_stats_kernel(T* y, int64_t ldy, float* mean, float* rstd, const T* x, int64_t ldx, const T* residual,
                           int64_t ldr, const float* gamma, const float* beta, float eps, int64_t N, int C) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= N) return;
  const T* xr = x + row * ldx;
  const T* rr = residual ? residual + row * ldr : nullptr;
  const RowStats st = warp_layernorm_row<kVec, T, float, true>(
      [&](int c, float* v) { load_sum<T, kVec>(v, xr, rr, c); }, y + row * ldy, gamma, beta, eps, C, lane);
  if (lane == 0) {
    mean[row] = st.mean;
    rstd[row] = st.rstd;
  }
}

/// Stores dx = rstd (g - mg - xhat mgx) for one chunk of kVec columns at row dxr, column c (or
/// adds it to the old dx in fp32 when accumulate: one rounding of the sum). The last step of
/// layernorm_backward_dx_kernel (both of its paths).
template <typename T, int kVec>
__device__ __forceinline__ void store_layernorm_dx(T* dxr, int c, const float* xh, const float* g, float rs, float mg,
                                                   float mgx, bool accumulate) {
  float d[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) d[j] = rs * (g[j] - mg - xh[j] * mgx);
  if (accumulate) {
    float old[kVec];
    load_row<T, kVec>(old, dxr, c);
#pragma unroll
    for (int j = 0; j < kVec; ++j) d[j] += old[j];
  }
  store_chunk<kVec>(dxr, c, d);
}

/// One row of the LayerNorm backward with the row in registers (C <= 32 kChunks kVec): xhat
/// and g = dy gamma chunk by chunk (gamma in 16-byte loads, load_floats), then the row means of
/// g and g xhat and dx (store_layernorm_dx). Lane chunks as in warp_layernorm_row; each lane
/// loads all its chunks before storing any (dx may alias dy).
template <typename T, int kVec, int kChunks>
__device__ __forceinline__ void layernorm_backward_cached_row(T* dxr, const T* xr, const T* rr, const T* dyr,
                                                              const float* gamma, float mu, float rs, int C, int lane,
                                                              bool accumulate) {
  float xh[kChunks][kVec], g[kChunks][kVec];
  for_cached_chunks<kChunks, kVec>(lane, C, [&](int i, int c) {
    float gm[kVec];
    load_sum<T, kVec>(xh[i], xr, rr, c);
    load_row<T, kVec>(g[i], dyr, c);
    load_floats<kVec>(gamma, c, gm);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      xh[i][j] = (xh[i][j] - mu) * rs;
      g[i][j] *= gm[j];
    }
  });
  float sum_g = 0.0f, sum_gx = 0.0f;
  for_cached_chunks<kChunks, kVec>(lane, C, [&](int i, int) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      sum_g += g[i][j];
      sum_gx += g[i][j] * xh[i][j];
    }
  });
  const float mg = warp_sum(sum_g) / float(C), mgx = warp_sum(sum_gx) / float(C);
  for_cached_chunks<kChunks, kVec>(lane, C, [&](int i, int c) {
    store_layernorm_dx<T, kVec>(dxr, c, xh[i], g[i], rs, mg, mgx, accumulate);
  });
}

/// dx of LayerNorm, one warp per row (the parameter sums are column_partials_kernel's):
///   xhat = (s - mean) rstd, g = dy gamma, dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)).
/// Lane chunks of kVec columns as in warp_layernorm_row. dx may alias dy: each lane reads its
/// chunk of dy before writing that chunk of dx (in the cached path, all its chunks first).
/// accumulate: dx += the gradient (dx then does not alias dy: the front-end checks).
/// kChunks: the chunks of kVec columns a lane keeps in registers (rows of up to 32 kChunks kVec
/// columns; longer rows are read twice). The launcher takes half of kRowCacheFloats / kVec when
/// the row fits: on an H200 the full cache (64 floats) made the bf16 kernel 92 registers, 2
/// blocks (16 warps) per SM, and ViT-B's decoder rows of 384 ran at 39% of DRAM bandwidth.
template <typename T, int kVec, int kChunks>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    layernorm_backward_dx_kernel(T* dx, int64_t lddx, const T* x, int64_t ldx, const T* residual, int64_t ldr,
                                 const float* gamma, const float* mean, const float* rstd, const T* dy, int64_t lddy,
                                 int64_t N, int C, bool accumulate) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= N) return;
  const T* xr = x + row * ldx;
  const T* rr = residual ? residual + row * ldr : nullptr;
  const T* dyr = dy + row * lddy;
  const float mu = mean[row], rs = rstd[row];
  auto load = [&](float* xh, float* g, int c) {  // xhat and g = dy gamma of one chunk
    float gm[kVec];
    load_sum<T, kVec>(xh, xr, rr, c);
    load_row<T, kVec>(g, dyr, c);
    load_floats<kVec>(gamma, c, gm);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      xh[j] = (xh[j] - mu) * rs;
      g[j] *= gm[j];
    }
  };
  T* dxr = dx + row * lddx;
  if (C <= kChunks * kVec * kWarpSize) {
    // xhat and g in registers: one read of x, residual and dy; the same sums in the same order.
    layernorm_backward_cached_row<T, kVec, kChunks>(dxr, xr, rr, dyr, gamma, mu, rs, C, lane, accumulate);
    return;
  }
  float sum_g = 0.0f, sum_gx = 0.0f;
  float xh[kVec], g[kVec];
  for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
    load(xh, g, c);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      sum_g += g[j];
      sum_gx += g[j] * xh[j];
    }
  }
  const float mg = warp_sum(sum_g) / float(C), mgx = warp_sum(sum_gx) / float(C);
  for (int c = lane * kVec; c < C; c += kWarpSize * kVec) {
    load(xh, g, c);
    store_layernorm_dx<T, kVec>(dxr, c, xh, g, rs, mg, mgx, accumulate);
  }
}

// ---- deterministic column sums ----------------------------------------------------------------

/// The end of a block of column sums (column_partials_kernel's shape: kColTile column groups of
/// kVec columns x kRowLanes row lanes, thread tx + kColTile ty): the row lanes' sums b, and a
/// with kTwo, added in lane order through shared memory; row lane 0 stores them into the
/// chunk's partial row: [b] of C floats, or [a | b] of 2C with kTwo. c0: the thread's first column.
template <int kVec, bool kTwo>
__device__ __forceinline__ void store_column_partials(float* partial, int64_t chunk, int64_t C, int64_t c0,
                                                      float (&a)[kVec], float (&b)[kVec]) {
  constexpr int kCols = kColTile * kVec;
  __shared__ float s_a[kTwo ? kRowLanes : 1][kCols + 1], s_b[kRowLanes][kCols + 1];
  const int tx = threadIdx.x % kColTile, ty = threadIdx.x / kColTile;
  // column j of thread tx at [j kColTile + tx]: a warp's stores and loads hit 32 banks
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    if constexpr (kTwo) s_a[ty][j * kColTile + tx] = a[j];
    s_b[ty][j * kColTile + tx] = b[j];
  }
  __syncthreads();
  if (ty != 0 || c0 >= C) return;
  for (int k = 1; k < kRowLanes; ++k) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if constexpr (kTwo) a[j] += s_a[k][j * kColTile + tx];
      b[j] += s_b[k][j * kColTile + tx];
    }
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    if (kVec == 1 && c0 + j >= C) break;
    if constexpr (kTwo) {
      partial[chunk * 2 * C + c0 + j] = a[j];
      partial[chunk * 2 * C + C + c0 + j] = b[j];
    } else {
      partial[chunk * C + c0 + j] = b[j];
    }
  }
}

/// Stage 1 of the column sums. Block (column tile bx, chunk by), threads (32 column groups of
/// kVec columns, 8 row lanes): row lane ty sums rows r0+ty, r0+ty+8, ... of the chunk; the 8 lane
/// sums are added in lane order. kLayerNorm: partial[chunk][0..C) = sum dy xhat (dgamma),
/// [C..2C) = sum dy (dbeta), partial rows of 2C; otherwise partial[chunk][0..C) = sum dy (dbias),
/// rows of C. kVec = 16 / sizeof(T) moves 16 bytes per thread and row (a warp reads 512
/// contiguous bytes of a row, not 64); each column's sum is the same sequence of adds for any kVec.
template <typename T, bool kLayerNorm, int kVec>
__global__ void __launch_bounds__(kColTile * kRowLanes)
    column_partials_kernel(float* partial, const T* dy, int64_t lddy, const T* x, int64_t ldx, const T* residual,
                           int64_t ldr, const float* mean, const float* rstd, int64_t N, int64_t C,
                           int64_t chunk_rows) {
  constexpr int kCols = kColTile * kVec;  // columns per block
  const int tx = threadIdx.x % kColTile, ty = threadIdx.x / kColTile;
  const int64_t c0 = int64_t(blockIdx.x) * kCols + tx * kVec;  // this thread's first column
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows, r1 = min(N, r0 + chunk_rows);
  float a[kVec], b[kVec];  // a: sum dy xhat (layernorm only), b: sum dy
#pragma unroll
  for (int j = 0; j < kVec; ++j) a[j] = b[j] = 0.0f;
  if (c0 < C) {  // kVec > 1: C % kVec == 0, so the whole group is inside the row
    // kColumnIlp<kLayerNorm> of this lane's rows at a time: their loads all go out before the first add (one
    // load in flight per thread had this kernel at ~42% of DRAM bandwidth on BERT-large's bias
    // gradients, H200 2026-11-27); the adds keep the row order, so the bits do not change.
    constexpr int kIlp = kColumnIlp<kLayerNorm>;
    for (int64_t n0 = r0 + ty; n0 < r1; n0 += kRowLanes * kIlp) {
      float d[kIlp][kVec], s[kLayerNorm ? kIlp : 1][kVec], mu[kIlp], rs[kIlp];
#pragma unroll
      for (int u = 0; u < kIlp; ++u) {
        const int64_t n = n0 + int64_t(u) * kRowLanes;
        if (n >= r1) break;
        load_row<T, kVec>(d[u], dy + n * lddy, int(c0));
        if constexpr (kLayerNorm) {
          load_sum<T, kVec>(s[u], x + n * ldx, residual ? residual + n * ldr : nullptr, int(c0));
          mu[u] = mean[n], rs[u] = rstd[n];
        }
      }
#pragma unroll
      for (int u = 0; u < kIlp; ++u) {
        if (n0 + int64_t(u) * kRowLanes >= r1) break;
#pragma unroll
        for (int j = 0; j < kVec; ++j) b[j] += d[u][j];
        if constexpr (kLayerNorm) {
#pragma unroll
          for (int j = 0; j < kVec; ++j) a[j] += d[u][j] * ((s[u][j] - mu[u]) * rs[u]);
        }
      }
    }
  }
  store_column_partials<kVec, kLayerNorm>(partial, chunk, C, c0, a, b);
}

/// activation_backward_kernel's dx (and y with kWithY) over the rows of column_partials_kernel's
/// blocks, lanes and chunks, and the column partials of the rounded dx as that kernel forms them
/// for bias_grad (each lane's rows in order, then the 8 lanes in order): the bits of
/// activation_backward followed by bias_grad over dx, without bias_grad's read of dx. For the
/// first linear layer of an MLP, whose bias gradient is the column sum of the activation's input
/// gradient. dx may alias dy (each element read, then written, by one thread).
template <typename T, int kVec, bool kWithY>
__global__ void __launch_bounds__(kColTile * kRowLanes)
    activation_backward_columns_kernel(float* partial, T* dx, int64_t lddx, T* y, int64_t ldy, const T* x,
                                       int64_t ldx, const T* dy, int64_t lddy, int64_t N, int64_t C,
                                       int64_t chunk_rows, ops::Activation act) {
  constexpr int kCols = kColTile * kVec;
  constexpr int kIlp = 2;  // rows whose loads go out together (the adds keep the row order whatever it is)
  const int tx = threadIdx.x % kColTile, ty = threadIdx.x / kColTile;
  const int64_t c0 = int64_t(blockIdx.x) * kCols + tx * kVec;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows, r1 = min(N, r0 + chunk_rows);
  float b[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) b[j] = 0.0f;
  if (c0 < C) {
    for (int64_t n0 = r0 + ty; n0 < r1; n0 += kRowLanes * kIlp) {
      float xs[kIlp][kVec], d[kIlp][kVec];
#pragma unroll
      for (int u = 0; u < kIlp; ++u) {
        const int64_t n = n0 + int64_t(u) * kRowLanes;
        if (n >= r1) break;
        load_row<T, kVec>(xs[u], x + n * ldx, int(c0));
        load_row<T, kVec>(d[u], dy + n * lddy, int(c0));
      }
#pragma unroll
      for (int u = 0; u < kIlp; ++u) {
        const int64_t n = n0 + int64_t(u) * kRowLanes;
        if (n >= r1) break;
        float out[kVec], yv[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          if constexpr (kWithY) yv[j] = apply_act<T>(xs[u][j], act);
          out[j] = to_float(from_float<T>(d[u][j] * act_grad<T>(xs[u][j], act)));  // dx as stored
          b[j] = __fadd_rn(b[j], out[j]);  // never contracted with the product (T = float): the sum of the stored dx
        }
        if constexpr (kWithY) store_chunk<kVec>(y + n * ldy, int(c0), yv);
        store_chunk<kVec>(dx + n * lddx, int(c0), out);
      }
    }
  }
  store_column_partials<kVec, false>(partial, chunk, C, c0, b, b);  // (a: unused without kTwo)
}

/// Stage 2: out[c] += sum_{k < chunks} partial[k * pstride + c], in chunk order. The loads go
/// out 8 at a time ahead of their adds (the adds keep their order): a thread waits for memory
/// once per 8 chunks instead of once per chunk (ViT-B's decoder LayerNorms have 1,024 chunks,
/// and only C threads, a few blocks, do this).
__global__ void finish_columns_kernel(float* out, const float* partial, int64_t pstride, int64_t chunks, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  int64_t k = 0;
  for (; k + 8 <= chunks; k += 8) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = partial[(k + u) * pstride + c];
#pragma unroll
    for (int u = 0; u < 8; ++u) s += v[u];
  }
  for (; k < chunks; ++k) s += partial[k * pstride + c];
  out[c] += s;
}

void finish_columns(float* out, const float* partial, int64_t pstride, int64_t chunks, int64_t C, cudaStream_t stream) {
  finish_columns_kernel<<<unsigned(ceil_div(C, 256)), 256, 0, stream>>>(out, partial, pstride, chunks, C);
  CUDA_CHECK_LAUNCH();
}

// ---- activation backward, softmax backward ------------------------------------------------------


/// dx[n, c] = dy[n, c] * act'(x[n, c]), and with kWithY also y[n, c] = act(x[n, c]) (the
/// forward kernel's apply_act: its bits); grid-stride over the N x C/kVec chunks of kVec elements
/// (1, or 16 / sizeof(T) with one 16-byte load per operand: on an H200 the scalar kernel moved
/// ~1.1 TB/s, a quarter of the HBM's). The same arithmetic per element either way.
/// flat (every ld = C): chunk i is elements kVec i .. of the N C contiguous ones, no row arithmetic.
template <typename T, int kVec, bool kWithY>
__global__ void activation_backward_kernel(T* dx, int64_t lddx, T* y, int64_t ldy, const T* x, int64_t ldx,
                                           const T* dy, int64_t lddy, int64_t N, int64_t C, ops::Activation act,
                                           bool flat) {
  const int64_t chunks_per_row = C / kVec, total = N * chunks_per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c;
    chunk_position<kVec>(i, chunks_per_row, flat, n, c);
    if constexpr (kVec == 1) {
      const float xf = to_float(x[n * ldx + c]);
      if constexpr (kWithY) y[n * ldy + c] = from_float<T>(apply_act<T>(xf, act));
      dx[n * lddx + c] = from_float<T>(to_float(dy[n * lddy + c]) * act_grad<T>(xf, act));
    } else {
      const Packed128<T> xv = Packed128<T>::load(x + n * ldx + c), dyv = Packed128<T>::load(dy + n * lddy + c);
      Packed128<T> out, yv;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        if constexpr (kWithY) yv.set(j, apply_act<T>(xv.f(j), act));  // Phi(x) shared with act_grad's
        out.set(j, dyv.f(j) * act_grad<T>(xv.f(j), act));
      }
      if constexpr (kWithY) yv.store(y + n * ldy + c);
      out.store(dx + n * lddx + c);
    }
  }
}

/// dx = y * (dy - sum_c dy y), one warp per row. dx may alias dy (read before written, same lane).
template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    softmax_backward_kernel(T* dx, int64_t lddx, const T* y, int64_t ldy, const T* dy, int64_t lddy, int64_t N,
                            int C) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= N) return;
  const T* yr = y + row * ldy;
  const T* dyr = dy + row * lddy;
  float dot = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) dot += to_float(dyr[c]) * to_float(yr[c]);
  dot = warp_sum(dot);
  T* dxr = dx + row * lddx;
  for (int c = lane; c < C; c += kWarpSize) dxr[c] = from_float<T>(to_float(yr[c]) * (to_float(dyr[c]) - dot));
}

// ---- dropout ----------------------------------------------------------------------------------

/// One Philox block (four consecutive counters) per thread step. Element j of the flat N x C
/// range has counter offset + j; thread step t covers the counters of block (offset >> 2) + t,
/// i.e. j = 4t + w - (offset & 3) for w = 0..3 (those inside [0, N*C)). Block numbers wrap
/// modulo 2^62 exactly as the counters wrap modulo 2^64 (philox_uniform(seed, counter) uses
/// block counter >> 2).
template <typename T>
__global__ void dropout_kernel(T* y, int64_t ldy, const T* x, int64_t ldx, int64_t N, int64_t C, float p, float scale,
                               uint64_t seed, uint64_t offset, int64_t nblocks) {
  const uint64_t first = offset >> 2;
  const int64_t head = int64_t(offset & 3), total = N * C;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < nblocks; t += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t block = (first + uint64_t(t)) & ((uint64_t(1) << 62) - 1);
    const Philox4x32 r = philox_block(seed, block);
    // the block's first element's row, found with one division; the next three step along it
    const int64_t j0 = 4 * t - head;
    int64_t n = j0 >= 0 ? j0 / C : 0, c = j0 >= 0 ? j0 - n * C : j0;
#pragma unroll
    for (int w = 0; w < 4; ++w, ++c) {
      if (c == C) n += 1, c = 0;
      const int64_t j = j0 + w;
      if (j < 0 || j >= total) continue;
      const float u = philox_uniform_from_bits(r.w[w]);
      const float v = to_float(x[n * ldx + c]);
      y[n * ldy + c] = from_float<T>(u >= p ? v * scale : 0.0f);
    }
  }
}

/// The layers' case: contiguous rows (ld = C), 16-byte aligned, C a multiple of the 16-byte
/// chunk and offset a multiple of 4. Element j = V t + 4 b + w of chunk t then has counter
/// block (offset >> 2) + (V / 4) t + b and lane w: one 16-byte load and store per V elements, no
/// row arithmetic. (The general kernel above costs a 64-bit division per four elements and
/// 2-byte accesses: 31 us per call on BERT-large's [8192, 1024] bf16 rows on an H200, against a
/// ~10 us floor for its 33.6 MB and 2.1 M Philox blocks.)
template <typename T>
__global__ void dropout_chunks_kernel(T* y, const T* x, int64_t chunks, float p, float scale, uint64_t seed,
                                      uint64_t first_block) {
  constexpr int V = Packed128<T>::size, kBlocksPerChunk = V / 4;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < chunks; t += int64_t(gridDim.x) * blockDim.x) {
    const Packed128<T> in = Packed128<T>::load(x + t * V);
    Packed128<T> out;
#pragma unroll
    for (int b = 0; b < kBlocksPerChunk; ++b) {
      const uint64_t block = (first_block + uint64_t(t) * kBlocksPerChunk + uint64_t(b)) & ((uint64_t(1) << 62) - 1);
      const Philox4x32 r = philox_block(seed, block);
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float u = philox_uniform_from_bits(r.w[w]);
        out.v[4 * b + w] = from_float<T>(u >= p ? in.f(4 * b + w) * scale : 0.0f);
      }
    }
    out.store(y + t * V);
  }
}

/// Calls f(T{}) with T the storage type of dtype.
template <typename F>
void dispatch_storage(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::bf16: return f(__nv_bfloat16{});
    case DType::f16: return f(__half{});
    default: throw Unsupported(op, " (cuda): dtype ", dtype_name(dtype), " (f32, bf16, f16 only)");
  }
}

/// f(std::integral_constant<int, kVec>{}) with kVec = Packed128<T>::size when `vec`
/// (rows_vectorizable), else 1: one launch statement serves both instances of a kVec kernel.
template <typename T, typename F>
void with_vec(bool vec, F&& f) {
  if (vec)
    f(std::integral_constant<int, Packed128<T>::size>{});
  else
    f(std::integral_constant<int, 1>{});
}

/// Stage 1 of the column sums (column_partials_kernel) into partial, 16 bytes a thread and row
/// where dy (and for LayerNorm x and the residual) allow.
template <typename T, bool kLayerNorm>
void column_partials(float* partial, const T* dy, int64_t lddy, const T* x, int64_t ldx, const T* residual, int64_t ldr,
                     const float* mean, const float* rstd, int64_t N, int64_t C, int64_t chunk_rows, int64_t chunks,
                     cudaStream_t stream) {
  with_vec<T>(rows_vectorizable<T>(C, {{dy, lddy}, {x, ldx}, {residual, ldr}}), [&](auto kvec) {
    constexpr int V = decltype(kvec)::value;
    column_partials_kernel<T, kLayerNorm, V>
        <<<dim3(unsigned(ceil_div(C, kColTile * V)), unsigned(chunks)), kColTile * kRowLanes, 0, stream>>>(
            partial, dy, lddy, x, ldx, residual, ldr, mean, rstd, N, C, chunk_rows);
  });
  CUDA_CHECK_LAUNCH();
}

int grid_stride_blocks(int64_t work, int threads) {
  return int(std::max<int64_t>(1, std::min<int64_t>(ceil_div(work, threads), int64_t(1) << 16)));
}

}  // namespace

void layernorm_forward_stats(void* y, int64_t ldy, float* mean, float* rstd, const void* x, int64_t ldx,
                             const void* residual, int64_t ldr, const float* gamma, const float* beta, float eps,
                             int64_t N, int64_t C, DType dtype, cudaStream_t stream) {
  check_rows("layernorm", N, C);
  UNMASK_CHECK(N <= 1 || (ldx >= C && ldy >= C && (!residual || ldr >= C)), "layernorm (cuda): row strides ldx=", ldx,
               " ldr=", ldr, " ldy=", ldy, " smaller than C=", C);
  UNMASK_CHECK(gamma && beta && mean && rstd, "layernorm (cuda): gamma, beta, mean and rstd are required");
  if (N == 0 || C == 0) return;
  dispatch_storage("layernorm", dtype, [&](auto tag) {
    using T = decltype(tag);
    // gamma and beta in the list: the kVec path reads them 16 bytes at a time (load_floats)
    with_vec<T>(rows_vectorizable<T>(C, {{x, ldx}, {y, ldy}, {residual, ldr}, {gamma, 0}, {beta, 0}}), [&](auto kvec) {
      layernorm_stats_kernel<T, decltype(kvec)::value>
          <<<unsigned(ceil_div(N, kWarpsPerBlock)), kWarpsPerBlock * kWarpSize, 0, stream>>>(
              static_cast<T*>(y), ldy, mean, rstd, static_cast<const T*>(x), ldx, static_cast<const T*>(residual), ldr,
              gamma, beta, eps, N, int(C));
    });
    CUDA_CHECK_LAUNCH();
  });
}

void layernorm_backward_rows(void* dx, int64_t lddx, float* dgamma, float* dbeta, const void* x, int64_t ldx,
                             const void* residual, int64_t ldr, const float* gamma, const float* mean,
                             const float* rstd, const void* dy, int64_t lddy, int64_t N, int64_t C, DType dtype,
                             cudaStream_t stream, bool accumulate_dx) {
  check_rows("layernorm_backward", N, C);
  UNMASK_CHECK(N <= 1 || (ldx >= C && lddy >= C && lddx >= C && (!residual || ldr >= C)),
               "layernorm_backward (cuda): row strides ldx=", ldx, " ldr=", ldr, " lddy=", lddy, " lddx=", lddx,
               " smaller than C=", C);
  if (N == 0 || C == 0) return;
  // Two passes (column sums, then dx). A one-pass form lost on an H200 (2026-11-28: ViT-B 1,245
  // clips/s against 1,246, BERT-large phase 1 1,396 seq/s against 1,406) and was removed.
  const int64_t chunk_rows = chunk_rows_for(N), chunks = ceil_div(N, chunk_rows);
  ScratchBuffer partial(size_t(chunks * 2 * C) * sizeof(float), stream);  // [chunks][dgamma C | dbeta C]
  dispatch_storage("layernorm_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    const T* rp = static_cast<const T*>(residual);
    const T* dyp = static_cast<const T*>(dy);
    // The parameter partials read dy before the dx kernel may overwrite it (dx may alias dy).
    column_partials<T, true>(partial.as<float>(), dyp, lddy, xp, ldx, rp, ldr, mean, rstd, N, C, chunk_rows, chunks,
                             stream);
    with_vec<T>(rows_vectorizable<T>(C, {{x, ldx}, {dx, lddx}, {dy, lddy}, {residual, ldr}, {gamma, 0}}), [&](auto kvec) {
      constexpr int V = decltype(kvec)::value, kFull = kRowCacheFloats / V, kHalf = kFull / 2;
      static_assert(kHalf >= 1, "half the row cache is at least one chunk");
      const unsigned blocks = unsigned(ceil_div(N, kWarpsPerBlock));
      const auto launch = [&](auto kernel) {
        kernel<<<blocks, kWarpsPerBlock * kWarpSize, 0, stream>>>(static_cast<T*>(dx), lddx, xp, ldx, rp, ldr, gamma,
                                                                  mean, rstd, dyp, lddy, N, int(C), accumulate_dx);
      };
      if (C <= int64_t(kHalf) * V * kWarpSize)  // ViT-B's decoder (384); the same sums and order either way
        launch(layernorm_backward_dx_kernel<T, V, kHalf>);
      else
        launch(layernorm_backward_dx_kernel<T, V, kFull>);
    });
    CUDA_CHECK_LAUNCH();
  });
  finish_columns(dgamma, partial.as<float>(), 2 * C, chunks, C, stream);
  finish_columns(dbeta, partial.as<float>() + C, 2 * C, chunks, C, stream);
}

void activation_backward_rows(void* dx, int64_t lddx, const void* x, int64_t ldx, const void* dy, int64_t lddy,
                              int64_t N, int64_t C, ops::Activation act, DType dtype, cudaStream_t stream, void* y,
                              int64_t ldy, float* dbias) {
  check_rows("activation_backward", N, C);
  if (N == 0 || C == 0) return;
  if (dbias) {  // with the bias gradient's column sums: bias_grad_cols's chunks and final adds
    const int64_t chunk_rows = chunk_rows_for(N), chunks = ceil_div(N, chunk_rows);
    ScratchBuffer partial(size_t(chunks * C) * sizeof(float), stream);  // [chunks][C]
    dispatch_storage("activation_backward", dtype, [&](auto tag) {
      using T = decltype(tag);
      with_vec<T>(rows_vectorizable<T>(C, {{x, ldx}, {dy, lddy}, {dx, lddx}, {y, ldy}}), [&](auto kvec) {
        constexpr int V = decltype(kvec)::value;
        const dim3 grid(unsigned(ceil_div(C, kColTile * V)), unsigned(chunks));
        const auto launch = [&](auto kernel) {
          kernel<<<grid, kColTile * kRowLanes, 0, stream>>>(partial.as<float>(), static_cast<T*>(dx), lddx,
                                                            static_cast<T*>(y), ldy, static_cast<const T*>(x), ldx,
                                                            static_cast<const T*>(dy), lddy, N, C, chunk_rows, act);
        };
        if (y)
          launch(activation_backward_columns_kernel<T, V, true>);
        else
          launch(activation_backward_columns_kernel<T, V, false>);
      });
      CUDA_CHECK_LAUNCH();
    });
    finish_columns(dbias, partial.as<float>(), C, chunks, C, stream);
    return;
  }
  dispatch_storage("activation_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    with_vec<T>(rows_vectorizable<T>(C, {{x, ldx}, {dy, lddy}, {dx, lddx}, {y, ldy}}), [&](auto kvec) {
      constexpr int V = decltype(kvec)::value;
      const unsigned blocks = grid_stride_blocks(N * (C / V), 256);
      const bool flat = N <= 1 || (ldx == C && lddy == C && lddx == C && (!y || ldy == C));
      if (y)
        activation_backward_kernel<T, V, true><<<blocks, 256, 0, stream>>>(
            static_cast<T*>(dx), lddx, static_cast<T*>(y), ldy, static_cast<const T*>(x), ldx,
            static_cast<const T*>(dy), lddy, N, C, act, flat);
      else
        activation_backward_kernel<T, V, false><<<blocks, 256, 0, stream>>>(
            static_cast<T*>(dx), lddx, nullptr, 0, static_cast<const T*>(x), ldx, static_cast<const T*>(dy), lddy, N,
            C, act, flat);
    });
    CUDA_CHECK_LAUNCH();
  });
}

void bias_grad_cols(float* dbias, const void* dy, int64_t lddy, int64_t N, int64_t C, DType dtype,
                    cudaStream_t stream) {
  check_rows("bias_grad", N, C);
  if (N == 0 || C == 0) return;
  const int64_t chunk_rows = chunk_rows_for(N), chunks = ceil_div(N, chunk_rows);
  ScratchBuffer partial(size_t(chunks * C) * sizeof(float), stream);  // [chunks][C]
  dispatch_storage("bias_grad", dtype, [&](auto tag) {
    using T = decltype(tag);
    column_partials<T, false>(partial.as<float>(), static_cast<const T*>(dy), lddy, nullptr, 0, nullptr, 0, nullptr,
                              nullptr, N, C, chunk_rows, chunks, stream);
  });
  finish_columns(dbias, partial.as<float>(), C, chunks, C, stream);
}

void softmax_backward_rows(void* dx, int64_t lddx, const void* y, int64_t ldy, const void* dy, int64_t lddy, int64_t N,
                           int64_t C, DType dtype, cudaStream_t stream) {
  check_rows("softmax_backward", N, C);
  if (N == 0 || C == 0) return;
  dispatch_storage("softmax_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<unsigned(ceil_div(N, kWarpsPerBlock)), kWarpsPerBlock * kWarpSize, 0, stream>>>(
        static_cast<T*>(dx), lddx, static_cast<const T*>(y), ldy, static_cast<const T*>(dy), lddy, N, int(C));
    CUDA_CHECK_LAUNCH();
  });
}

void dropout_rows(void* y, int64_t ldy, const void* x, int64_t ldx, int64_t N, int64_t C, float p, uint64_t seed,
                  uint64_t offset, DType dtype, cudaStream_t stream) {
  check_rows("dropout", N, C);
  UNMASK_CHECK(p >= 0.0f && p < 1.0f, "dropout (cuda): p must be in [0, 1), got ", p);
  if (N == 0 || C == 0) return;
  const int64_t nblocks = ceil_div(int64_t(offset & 3) + N * C, 4);
  const float scale = 1.0f / (1.0f - p);
  dispatch_storage("dropout", dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = Packed128<T>::size;
    if (ldx == C && ldy == C && offset % 4 == 0 && rows_vectorizable<T>(C, {{x, ldx}, {y, ldy}})) {
      const int64_t chunks = N * C / V;
      dropout_chunks_kernel<T><<<grid_stride_blocks(chunks, 256), 256, 0, stream>>>(
          static_cast<T*>(y), static_cast<const T*>(x), chunks, p, scale, seed, offset >> 2);
      CUDA_CHECK_LAUNCH();
      return;
    }
    dropout_kernel<T><<<grid_stride_blocks(nblocks, 256), 256, 0, stream>>>(
        static_cast<T*>(y), ldy, static_cast<const T*>(x), ldx, N, C, p, scale, seed, offset, nblocks);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace unmask::cuda
