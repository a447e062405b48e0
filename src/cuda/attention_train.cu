// cuda/attention_train.cu: f32 attention for training: the forward that also writes the
// log-sum-exp and applies dropout to the probabilities, and the backward (ops.h semantics;
// CPU twin: cpu/attention_train_cpu.cc; float64 oracle: ref::attention_forward/backward).
//
// Tiles of kTile = 64 query rows x 64 keys, 256 threads as a 16 x 16 grid: thread (ty, tx) owns
// score (row ty + 16 i, key tx + 16 j), i, j < 4, and output (row ty + 16 i, dim tx + 16 j),
// j < D/16, where D is the head size rounded up to 32, 64, 96 or 128 (zero-padded in shared
// memory). Shared-memory tiles are [64][D + 1] (odd stride: no bank conflicts when 16 threads
// read 16 different rows at one d). Plain fp32 FMAs, no tensor cores: the f32 reference path;
// a bf16 tensor-core version is the next step.
//
// Forward, one block per (query tile, head, sequence), online softmax over the key tiles:
//   S = scale Q K^T (masked keys -inf); m, l running max and sum of exp(S - m) (undropped);
//   Pd = dropout(exp(S - m)) (ops.h counters); O = O corr + Pd V;  finally O /= l,
//   lse = m + log l  (l = 0, no real key: O = 0, lse = -inf).
// Backward (delta_i = dO_i . O_i precomputed, one warp per (row, head)); P = exp(S - lse):
//   dK/dV kernel, one block per (key tile, head, sequence), loop over the query tiles:
//     dV += Pd^T dO;  dPd = dO V^T;  dS = P (dPd keep/(1-p) - delta);  dK += scale dS^T Q
//   dQ kernel, one block per (query tile, head, sequence), loop over the key tiles:
//     dQ += scale dS K
// Every output element is written by one thread in a fixed order: no atomics, deterministic.
#include <cmath>

#include "core/philox.h"
#include "cuda/attention_train.h"
#include "cuda/check.h"
#include "cuda/common.cuh"
#include "unmask/error.h"

namespace unmask::cuda {
namespace {

constexpr int kTile = 64;        // query rows and keys per tile
constexpr int kThreads = 256;    // 16 x 16
constexpr int kPLd = kTile + 1;  // row stride of the [64][64] score tile in shared memory

struct Seq {
  int64_t start;  // first row
  int len;
};

__device__ __forceinline__ Seq sequence(const AttnTrainParams& p, int b) {
  Seq s;
  sequence_bounds(p.cu_seqlens, p.max_seqlen, b, s.start, s.len);
  return s;
}

/// Key `key` of sequence b exists and is real (not masked out).
__device__ __forceinline__ bool key_valid(const AttnTrainParams& p, int b, int len, int key) {
  if (key >= len) return false;
  return !p.key_mask || mask_is_set(p.key_mask, p.mask_elem_bytes, int64_t(b) * p.mask_batch_stride + key);
}

/// s [64][D+1] = rows 0..63 of x (row stride ld, first `hs` columns), zero for rows >= valid
/// and columns >= hs.
template <int D>
__device__ __forceinline__ void load_tile(float* s, const float* x, int64_t ld, int valid, int hs) {
  for (int idx = threadIdx.x; idx < kTile * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    s[r * (D + 1) + d] = (r < valid && d < hs) ? x[int64_t(r) * ld + d] : 0.0f;
  }
}

/// acc[i][j] = sum_d A[ty + 16 i][d] * B[tx + 16 j][d]; A, B: [64][D+1].
template <int D>
__device__ __forceinline__ void mm_abt(const float* A, const float* B, float acc[4][4]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
#pragma unroll 8
  for (int d = 0; d < D; ++d) {
    float a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = A[(ty + 16 * i) * (D + 1) + d];
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = B[(tx + 16 * j) * (D + 1) + d];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

/// acc[i][j] += sum_r P'(ty + 16 i, r) * X[r][tx + 16 j], P' = P (kTransP false) or P^T;
/// P: [64][kPLd], X: [64][D+1].
template <int D, bool kTransP>
__device__ __forceinline__ void mm_px(const float* P, const float* X, float acc[4][D / 16]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 4
  for (int r = 0; r < kTile; ++r) {
    float a[4], x[D / 16];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = kTransP ? P[r * kPLd + ty + 16 * i] : P[(ty + 16 * i) * kPLd + r];
#pragma unroll
    for (int j = 0; j < D / 16; ++j) x[j] = X[r * (D + 1) + tx + 16 * j];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < D / 16; ++j) acc[i][j] = fmaf(a[i], x[j], acc[i][j]);
  }
}

/// In place over the score tile P [64][kPLd] (rows: queries q0.., columns: keys k0..): keeps an
/// element iff philox_uniform(seed, counter) >= p, counter = offset + (h N + row) T + key, and
/// scales kept ones by 1/(1-p). Thread t does 16 consecutive keys of row t/4, one Philox block
/// per 4 consecutive counters. Rows >= valid_rows are left alone (they are zero).
__device__ __forceinline__ void dropout_tile(float* P, const AttnTrainParams& p, int head, int64_t row0,
                                             int k0, int valid_rows) {
  const int r = threadIdx.x / 4, c0 = (threadIdx.x % 4) * 16;
  if (r >= valid_rows) return;
  const float keep_scale = 1.0f / (1.0f - p.dropout_p);
  const uint64_t base = p.dropout_offset +
                        uint64_t((int64_t(head) * p.rows + row0 + r) * int64_t(p.max_seqlen)) +
                        uint64_t(k0 + c0);
  uint64_t block = ~uint64_t(0);
  Philox4x32 bits{};
#pragma unroll
  for (int e = 0; e < 16; ++e) {
    const uint64_t c = base + uint64_t(e);
    if ((c >> 2) != block) {
      block = c >> 2;
      bits = philox_block(p.dropout_seed, block);
    }
    float& x = P[r * kPLd + c0 + e];
    x = philox_uniform_from_bits(bits.w[c & 3]) >= p.dropout_p ? x * keep_scale : 0.0f;
  }
}

/// Max / sum over the 16 lanes sharing ty (lanes 16 ty' .. 16 ty' + 15 of a warp).
__device__ __forceinline__ float half_warp_max(float x) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float half_warp_sum(float x) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// Grid (query tiles, NH, B). Shared: Q, K, V [64][D+1], P [64][kPLd].
template <int D>
__global__ void __launch_bounds__(kThreads) attn_train_fwd_kernel(const __grid_constant__ AttnTrainParams p) {
  extern __shared__ float smem[];
  float* Qs = smem;
  float* Ks = Qs + kTile * (D + 1);
  float* Vs = Ks + kTile * (D + 1);
  float* Ps = Vs + kTile * (D + 1);
  const int head = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * kTile;
  const Seq s = sequence(p, b);
  if (q0 >= s.len) return;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16, hs = p.head_size;
  const int64_t col = int64_t(head) * hs;
  const bool drop = p.dropout_p > 0.0f;
  const int q_rows = min(kTile, s.len - q0);
  load_tile<D>(Qs, p.q + (s.start + q0) * p.ldq + col, p.ldq, q_rows, hs);
  float o[4][D / 16], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < D / 16; ++j) o[i][j] = 0.0f;
  }
  for (int k0 = 0; k0 < s.len; k0 += kTile) {
    __syncthreads();  // the previous tile's readers of Ks, Vs, Ps are done
    const int k_rows = min(kTile, s.len - k0);
    load_tile<D>(Ks, p.k + (s.start + k0) * p.ldk + col, p.ldk, k_rows, hs);
    load_tile<D>(Vs, p.v + (s.start + k0) * p.ldv + col, p.ldv, k_rows, hs);
    __syncthreads();
    float sc[4][4];
    mm_abt<D>(Qs, Ks, sc);
    bool valid[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) valid[j] = key_valid(p, b, s.len, k0 + tx + 16 * j);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        sc[i][j] = valid[j] ? sc[i][j] * p.scale : -INFINITY;
        tile_max = fmaxf(tile_max, sc[i][j]);
      }
      const float m_new = fmaxf(m[i], half_warp_max(tile_max));
      // m_new = -inf: no real key so far, nothing to rescale; m[i] = -inf < m_new: corr 0.
      const float corr = m_new == -INFINITY ? 1.0f : expf(m[i] - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float e = valid[j] ? expf(sc[i][j] - m_new) : 0.0f;
        sum += e;
        Ps[(ty + 16 * i) * kPLd + tx + 16 * j] = e;
      }
      l[i] = l[i] * corr + half_warp_sum(sum);  // the undropped sum: dropout acts after normalising
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < D / 16; ++j) o[i][j] *= corr;
    }
    if (drop) {
      __syncthreads();
      dropout_tile(Ps, p, head, s.start + q0, k0, q_rows);
    }
    __syncthreads();
    mm_px<D, false>(Ps, Vs, o);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = q0 + ty + 16 * i;
    if (q >= s.len) continue;
    const int64_t row = s.start + q;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    float* orow = p.out + row * p.ldo + col;
#pragma unroll
    for (int j = 0; j < D / 16; ++j)
      if (tx + 16 * j < hs) orow[tx + 16 * j] = o[i][j] * inv;
    if (tx == 0) p.lse[int64_t(head) * p.rows + row] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
  }
}

/// delta[h N + n] = sum_d dout[n, h HS + d] out[n, h HS + d]; one warp per (row, head).
/// Grid (ceil(N / 8), NH), 256 threads.
__global__ void __launch_bounds__(kThreads) attn_train_delta_kernel(const __grid_constant__ AttnTrainParams p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = int64_t(blockIdx.x) * (kThreads / kWarpSize) + threadIdx.x / kWarpSize;
  const int head = blockIdx.y;
  if (n >= p.rows) return;
  const float* dor = p.dout + n * p.lddo + int64_t(head) * p.head_size;
  const float* orow = p.out + n * p.ldo + int64_t(head) * p.head_size;
  float acc = 0.0f;
  for (int d = lane; d < p.head_size; d += kWarpSize) acc = fmaf(dor[d], orow[d], acc);
  acc = warp_sum(acc);
  if (lane == 0) p.delta[int64_t(head) * p.rows + n] = acc;
}

/// The same sum over bf16 rows (training with bf16 activations).
__global__ void __launch_bounds__(kThreads)
    attn_train_delta_bf16_kernel(const __grid_constant__ AttnTrainParams p, const __nv_bfloat16* __restrict__ dout,
                                 const __nv_bfloat16* __restrict__ out) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t n = int64_t(blockIdx.x) * (kThreads / kWarpSize) + threadIdx.x / kWarpSize;
  const int head = blockIdx.y;
  if (n >= p.rows) return;
  const __nv_bfloat16* dor = dout + n * p.lddo + int64_t(head) * p.head_size;
  const __nv_bfloat16* orow = out + n * p.ldo + int64_t(head) * p.head_size;
  float acc = 0.0f;
  for (int d = lane; d < p.head_size; d += kWarpSize) acc = fmaf(to_float(dor[d]), to_float(orow[d]), acc);
  acc = warp_sum(acc);
  if (lane == 0) p.delta[int64_t(head) * p.rows + n] = acc;
}

/// The probabilities of the thread's 4 x 4 scores of a (query tile q0, key tile k0) pair, in
/// place over sc (= Q K^T unscaled), and written to Ps: P = exp(scale s - lse_row), 0 for
/// invalid keys and for rows without a real key (lse = -inf).
__device__ __forceinline__ void probabilities(const AttnTrainParams& p, int b, int len, int k0, const float lse[4],
                                              float sc[4][4], float* Ps) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  bool valid[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) valid[j] = key_valid(p, b, len, k0 + tx + 16 * j);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float e = valid[j] && lse[i] != -INFINITY ? expf(sc[i][j] * p.scale - lse[i]) : 0.0f;
      sc[i][j] = e;
      Ps[(ty + 16 * i) * kPLd + tx + 16 * j] = e;
    }
}

/// The score gradient over the thread's 4 x 4 elements: ds = P (dP - delta_row) with
/// dP = dPd / (1-p) where the dropped-out probability (Ps) is kept (nonzero), else 0, as the
/// CPU's attn_dscores_rows. dp holds dPd = dO V^T on entry, dS on return.
__device__ __forceinline__ void score_grad(const AttnTrainParams& p, const float P[4][4], const float* Ps,
                                           const float delta[4], float dp[4][4]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const bool drop = p.dropout_p > 0.0f;
  const float keep_scale = drop ? 1.0f / (1.0f - p.dropout_p) : 1.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float g = dp[i][j];
      if (drop) g = Ps[(ty + 16 * i) * kPLd + tx + 16 * j] > 0.0f ? g * keep_scale : 0.0f;
      dp[i][j] = P[i][j] * (g - delta[i]);
    }
}

/// Grid (key tiles, NH, B). Shared: K, V, Q, dO [64][D+1], P [64][kPLd], lse, delta [64].
template <int D>
__global__ void __launch_bounds__(kThreads) attn_train_dkdv_kernel(const __grid_constant__ AttnTrainParams p) {
  extern __shared__ float smem[];
  float* Ks = smem;
  float* Vs = Ks + kTile * (D + 1);
  float* Qs = Vs + kTile * (D + 1);
  float* dOs = Qs + kTile * (D + 1);
  float* Ps = dOs + kTile * (D + 1);
  float* lse_s = Ps + kTile * kPLd;
  float* delta_s = lse_s + kTile;
  const int head = blockIdx.y, b = blockIdx.z, k0 = blockIdx.x * kTile;
  const Seq s = sequence(p, b);
  if (k0 >= s.len) return;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16, hs = p.head_size;
  const int64_t col = int64_t(head) * hs;
  const bool drop = p.dropout_p > 0.0f;
  const int k_rows = min(kTile, s.len - k0);
  load_tile<D>(Ks, p.k + (s.start + k0) * p.ldk + col, p.ldk, k_rows, hs);
  load_tile<D>(Vs, p.v + (s.start + k0) * p.ldv + col, p.ldv, k_rows, hs);
  float dk[4][D / 16], dv[4][D / 16];  // rows: keys ty + 16 i
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < D / 16; ++j) dk[i][j] = dv[i][j] = 0.0f;
  for (int q0 = 0; q0 < s.len; q0 += kTile) {
    __syncthreads();  // the previous tile's readers are done
    const int q_rows = min(kTile, s.len - q0);
    load_tile<D>(Qs, p.q + (s.start + q0) * p.ldq + col, p.ldq, q_rows, hs);
    load_tile<D>(dOs, p.dout + (s.start + q0) * p.lddo + col, p.lddo, q_rows, hs);
    if (threadIdx.x < kTile) {
      const bool in = int(threadIdx.x) < q_rows;
      const int64_t at = int64_t(head) * p.rows + s.start + q0 + threadIdx.x;
      lse_s[threadIdx.x] = in ? p.lse[at] : -INFINITY;
      delta_s[threadIdx.x] = in ? p.delta[at] : 0.0f;
    }
    __syncthreads();
    float lse[4], delta[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lse[i] = lse_s[ty + 16 * i];
      delta[i] = delta_s[ty + 16 * i];
    }
    float P[4][4], dp[4][4];
    mm_abt<D>(Qs, Ks, P);
    probabilities(p, b, s.len, k0, lse, P, Ps);
    if (drop) {
      __syncthreads();
      dropout_tile(Ps, p, head, s.start + q0, k0, q_rows);
    }
    __syncthreads();
    mm_px<D, true>(Ps, dOs, dv);  // dV[k] += sum_q Pd[q][k] dO[q]
    mm_abt<D>(dOs, Vs, dp);       // dPd[q][k]
    score_grad(p, P, Ps, delta, dp);
    __syncthreads();  // everyone is done reading Pd
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) Ps[(ty + 16 * i) * kPLd + tx + 16 * j] = dp[i][j];
    __syncthreads();
    mm_px<D, true>(Ps, Qs, dk);  // dK[k] += sum_q dS[q][k] Q[q]
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = k0 + ty + 16 * i;
    if (key >= s.len) continue;
    float* dkr = p.dk + (s.start + key) * p.lddk + col;
    float* dvr = p.dv + (s.start + key) * p.lddv + col;
#pragma unroll
    for (int j = 0; j < D / 16; ++j)
      if (tx + 16 * j < hs) {
        dkr[tx + 16 * j] = dk[i][j] * p.scale;
        dvr[tx + 16 * j] = dv[i][j];
      }
  }
}

/// Grid (query tiles, NH, B). Shared: Q, dO, K, V [64][D+1], P [64][kPLd].
template <int D>
__global__ void __launch_bounds__(kThreads) attn_train_dq_kernel(const __grid_constant__ AttnTrainParams p) {
  extern __shared__ float smem[];
  float* Qs = smem;
  float* dOs = Qs + kTile * (D + 1);
  float* Ks = dOs + kTile * (D + 1);
  float* Vs = Ks + kTile * (D + 1);
  float* Ps = Vs + kTile * (D + 1);
  const int head = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * kTile;
  const Seq s = sequence(p, b);
  if (q0 >= s.len) return;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16, hs = p.head_size;
  const int64_t col = int64_t(head) * hs;
  const bool drop = p.dropout_p > 0.0f;
  const int q_rows = min(kTile, s.len - q0);
  load_tile<D>(Qs, p.q + (s.start + q0) * p.ldq + col, p.ldq, q_rows, hs);
  load_tile<D>(dOs, p.dout + (s.start + q0) * p.lddo + col, p.lddo, q_rows, hs);
  float lse[4], delta[4], dq[4][D / 16];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = q0 + ty + 16 * i;
    const int64_t at = int64_t(head) * p.rows + s.start + q;
    lse[i] = q < s.len ? p.lse[at] : -INFINITY;
    delta[i] = q < s.len ? p.delta[at] : 0.0f;
#pragma unroll
    for (int j = 0; j < D / 16; ++j) dq[i][j] = 0.0f;
  }
  for (int k0 = 0; k0 < s.len; k0 += kTile) {
    __syncthreads();
    const int k_rows = min(kTile, s.len - k0);
    load_tile<D>(Ks, p.k + (s.start + k0) * p.ldk + col, p.ldk, k_rows, hs);
    load_tile<D>(Vs, p.v + (s.start + k0) * p.ldv + col, p.ldv, k_rows, hs);
    __syncthreads();
    float P[4][4], dp[4][4];
    mm_abt<D>(Qs, Ks, P);
    probabilities(p, b, s.len, k0, lse, P, Ps);
    if (drop) {
      __syncthreads();
      dropout_tile(Ps, p, head, s.start + q0, k0, q_rows);
      __syncthreads();
    }
    mm_abt<D>(dOs, Vs, dp);
    score_grad(p, P, Ps, delta, dp);
    __syncthreads();  // everyone is done reading Pd
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) Ps[(ty + 16 * i) * kPLd + tx + 16 * j] = dp[i][j];
    __syncthreads();
    mm_px<D, false>(Ps, Ks, dq);  // dQ[q] += sum_k dS[q][k] K[k]
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = q0 + ty + 16 * i;
    if (q >= s.len) continue;
    float* dqr = p.dq + (s.start + q) * p.lddq + col;
#pragma unroll
    for (int j = 0; j < D / 16; ++j)
      if (tx + 16 * j < hs) dqr[tx + 16 * j] = dq[i][j] * p.scale;
  }
}

/// Launches kernel with `floats` floats of dynamic shared memory (opting in above 48 KiB).
template <typename Kernel>
void launch(Kernel kernel, dim3 grid, size_t floats, const AttnTrainParams& p, cudaStream_t stream) {
  const size_t bytes = floats * sizeof(float);
  if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<grid, kThreads, bytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void check_params(const char* op, const AttnTrainParams& p) {
  UNMASK_CHECK(p.head_size >= 1 && p.head_size <= 128, op, " (cuda): head size must be in [1, 128], got ",
               p.head_size);
  UNMASK_CHECK(p.batch >= 0 && p.batch <= 65535 && p.num_heads >= 1 && p.num_heads <= 65535, op,
               " (cuda): batch ", p.batch, " and heads ", p.num_heads, " must be at most 65535");
  UNMASK_CHECK(p.dropout_p >= 0.0f && p.dropout_p < 1.0f, op, " (cuda): dropout_p must be in [0, 1), got ",
               p.dropout_p);
}

template <int D>
void forward_d(const AttnTrainParams& p, cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(p.max_seqlen, kTile)), unsigned(p.num_heads), unsigned(p.batch));
  launch(attn_train_fwd_kernel<D>, grid, size_t(3 * kTile * (D + 1) + kTile * kPLd), p, stream);
}

template <int D>
void backward_d(const AttnTrainParams& p, cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(p.max_seqlen, kTile)), unsigned(p.num_heads), unsigned(p.batch));
  const size_t tiles = size_t(4 * kTile * (D + 1) + kTile * kPLd);
  launch(attn_train_dkdv_kernel<D>, grid, tiles + 2 * kTile, p, stream);
  launch(attn_train_dq_kernel<D>, grid, tiles, p, stream);
}

}  // namespace

void attention_train_forward(const AttnTrainParams& p, cudaStream_t stream) {
  check_params("attention_forward_train", p);
  if (p.rows == 0 || p.batch == 0 || p.max_seqlen == 0) return;
  if (p.head_size <= 32) return forward_d<32>(p, stream);
  if (p.head_size <= 64) return forward_d<64>(p, stream);
  if (p.head_size <= 96) return forward_d<96>(p, stream);
  return forward_d<128>(p, stream);
}

void attention_train_delta(const AttnTrainParams& p, cudaStream_t stream) {
  UNMASK_CHECK(p.delta != nullptr, "attention_backward (cuda): the delta scratch buffer is null");
  if (p.rows == 0 || p.num_heads == 0) return;
  const dim3 delta_grid(unsigned(ceil_div(p.rows, int64_t(kThreads / kWarpSize))), unsigned(p.num_heads));
  attn_train_delta_kernel<<<delta_grid, kThreads, 0, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void attention_train_delta_bf16(const AttnTrainParams& p, const void* dout, const void* out, cudaStream_t stream) {
  UNMASK_CHECK(p.delta != nullptr, "attention_backward (cuda, bf16): the delta scratch buffer is null");
  if (p.rows == 0 || p.num_heads == 0) return;
  const dim3 delta_grid(unsigned(ceil_div(p.rows, int64_t(kThreads / kWarpSize))), unsigned(p.num_heads));
  attn_train_delta_bf16_kernel<<<delta_grid, kThreads, 0, stream>>>(p, static_cast<const __nv_bfloat16*>(dout),
                                                                    static_cast<const __nv_bfloat16*>(out));
  CUDA_CHECK_LAUNCH();
}

void attention_train_backward(const AttnTrainParams& p, cudaStream_t stream) {
  check_params("attention_backward", p);
  if (p.rows == 0 || p.batch == 0 || p.max_seqlen == 0) return;
  attention_train_delta(p, stream);
  if (p.head_size <= 32) return backward_d<32>(p, stream);
  if (p.head_size <= 64) return backward_d<64>(p, stream);
  if (p.head_size <= 96) return backward_d<96>(p, stream);
  return backward_d<128>(p, stream);
}

}  // namespace unmask::cuda
