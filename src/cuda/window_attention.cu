// cuda/window_attention.cu: windowed attention with an additive bias and mask on CUDA (fp32), the
// kernels behind ops::window_attention / window_attention_backward on a CUDA context (semantics in
// ops.h, the float64 oracle in ref/window_attention_ref.h).
//
// The plain kernels first (STYLE.md: the dumb kernel beside which faster ones are judged). One
// warp per row and head: lane l holds head dims l, l + 32, ... (HS <= 128); the window's keys are
// visited one at a time with a warp-wide dot product and an fp32 online softmax, so no N x N
// score buffer exists (Video Swin's 392-token windows, Swin's 49).
//   forward: out and lse[h, r] = max + log(sum) per (row, head);
//   delta:   delta[h, r] = sum_d dout[r, h d] out[r, h d];
//   dQ + dbias: one warp per (head, window row i) walking the windows in order. dS[i, j] of each
//     window adds to dbias[h, i, j] in registers (lane l owns j = l, l + 32, ...: N <= 32 x
//     kMaxKeyChunks), so the bias gradient, a sum over windows, is summed in window order with
//     no atomics and the same bits on every run (the CPU kernel's guarantee too);
//   dK + dV: one warp per (key row, head), walking the window's queries.
// Each P entry is recomputed from lse: exp(scale q.k + bias + mask - lse).
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/cuda_state.h"
#include "cuda/ops_cuda.h"
#include "unmask/error.h"

namespace unmask::cuda {

namespace {

constexpr int kWarps = 4;           // warps per block
constexpr int kMaxDimsPerLane = 4;  // HS <= 128
constexpr int kMaxKeyChunks = 16;   // N <= 512 (dbias registers of the dQ kernel)

using Params = ops::WindowAttentionParams;

// The additive term of score (w, h, i, j): bias[h, i, j] (+ mask[w mod M, i, j]).
__device__ __forceinline__ float score_bias(const Params& p, int64_t w, int64_t h, int64_t i, int64_t j) {
  const int64_t N = p.window;
  float b = p.bias ? p.bias[(h * N + i) * N + j] : 0.0f;
  if (p.mask) b += p.mask[((w % p.masks) * N + i) * N + j];
  return b;
}

// Loads row r's head-h slice of x (row stride ld) into lane-held registers (lane l: dims l + 32 t).
__device__ __forceinline__ void load_row(const float* x, int64_t ld, int64_t r, int64_t h, int64_t HS, int lane,
                                         float (&out)[kMaxDimsPerLane], float mul = 1.0f) {
#pragma unroll
  for (int t = 0; t < kMaxDimsPerLane; ++t) {
    const int64_t d = lane + t * kWarpSize;
    out[t] = d < HS ? x[r * ld + h * HS + d] * mul : 0.0f;
  }
}

__device__ __forceinline__ float dot_row(const float (&a)[kMaxDimsPerLane], const float* x, int64_t ld, int64_t r,
                                         int64_t h, int64_t HS, int lane) {
  float s = 0.0f;
#pragma unroll
  for (int t = 0; t < kMaxDimsPerLane; ++t) {
    const int64_t d = lane + t * kWarpSize;
    if (d < HS) s += a[t] * x[r * ld + h * HS + d];
  }
  return warp_sum(s);
}

/// Grid ceil(R NH / kWarps); warp g: row g / NH, head g % NH.
__global__ void __launch_bounds__(kWarps * kWarpSize) window_forward_kernel(const __grid_constant__ Params p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t g = int64_t(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
  const int64_t N = p.window, R = N * p.windows, HS = p.head_size;
  if (g >= R * p.num_heads) return;
  const int64_t r = g / p.num_heads, h = g % p.num_heads, w = r / N, i = r % N;
  float q[kMaxDimsPerLane], o[kMaxDimsPerLane] = {};
  load_row(p.q, p.ldq, r, h, HS, lane, q, p.scale);
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j < N; ++j) {
    const int64_t key = w * N + j;
    const float s = dot_row(q, p.k, p.ldk, key, h, HS, lane) + score_bias(p, w, h, i, j);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), e = expf(s - m_new);
    l = l * corr + e;
#pragma unroll
    for (int t = 0; t < kMaxDimsPerLane; ++t) {
      const int64_t d = lane + t * kWarpSize;
      if (d < HS) o[t] = o[t] * corr + e * p.v[key * p.ldv + h * HS + d];
    }
    m = m_new;
  }
  const float inv = 1.0f / l;  // l >= 1: the row's maximum contributes exp(0)
#pragma unroll
  for (int t = 0; t < kMaxDimsPerLane; ++t) {
    const int64_t d = lane + t * kWarpSize;
    if (d < HS) p.out[r * p.ldo + h * HS + d] = o[t] * inv;
  }
  if (p.lse && lane == 0) p.lse[h * R + r] = m + logf(l);
}

/// delta[h, r] = dout_h(r) . out_h(r). Grid ceil(R NH / kWarps).
__global__ void __launch_bounds__(kWarps * kWarpSize) window_delta_kernel(const __grid_constant__ Params p,
                                                                          float* delta) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t g = int64_t(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
  const int64_t R = p.window * p.windows;
  if (g >= R * p.num_heads) return;
  const int64_t r = g / p.num_heads, h = g % p.num_heads;
  float o[kMaxDimsPerLane];
  load_row(p.out, p.ldo, r, h, p.head_size, lane, o);
  const float d = dot_row(o, p.dout, p.lddo, r, h, p.head_size, lane);
  if (lane == 0) delta[h * R + r] = d;
}

/// dQ and dbias. Grid ceil(NH N / kWarps); warp g: head g / N, window row i = g % N.
__global__ void __launch_bounds__(kWarps * kWarpSize) window_dq_kernel(const __grid_constant__ Params p,
                                                                       const float* delta) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t g = int64_t(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
  const int64_t N = p.window, R = N * p.windows, HS = p.head_size;
  if (g >= p.num_heads * N) return;
  const int64_t h = g / N, i = g % N;
  float db[kMaxKeyChunks] = {};  // dbias[h, i, c 32 + lane], summed over windows in order
  for (int64_t w = 0; w < p.windows; ++w) {
    const int64_t r = w * N + i;
    float q[kMaxDimsPerLane], go[kMaxDimsPerLane], dq[kMaxDimsPerLane] = {};
    load_row(p.q, p.ldq, r, h, HS, lane, q, p.scale);
    load_row(p.dout, p.lddo, r, h, HS, lane, go);
    const float lse = p.lse[h * R + r], dl = delta[h * R + r];
#pragma unroll
    for (int c = 0; c < kMaxKeyChunks; ++c) {
      if (c * kWarpSize >= N) break;
      for (int jj = 0; jj < kWarpSize && c * kWarpSize + jj < N; ++jj) {
        const int64_t j = c * kWarpSize + jj, key = w * N + j;
        const float s = dot_row(q, p.k, p.ldk, key, h, HS, lane) + score_bias(p, w, h, i, j);
        const float pr = expf(s - lse);
        const float ds = pr * (dot_row(go, p.v, p.ldv, key, h, HS, lane) - dl);
        if (lane == jj) db[c] += ds;
#pragma unroll
        for (int t = 0; t < kMaxDimsPerLane; ++t) {
          const int64_t d = lane + t * kWarpSize;
          if (d < HS) dq[t] += ds * p.k[key * p.ldk + h * HS + d];
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kMaxDimsPerLane; ++t) {
      const int64_t d = lane + t * kWarpSize;
      if (d < HS) p.dq[r * p.lddq + h * HS + d] = dq[t] * p.scale;
    }
  }
  if (p.dbias) {
#pragma unroll
    for (int c = 0; c < kMaxKeyChunks; ++c) {
      const int64_t j = c * kWarpSize + lane;
      if (j < N) p.dbias[(h * N + i) * N + j] += db[c];
    }
  }
}

/// dK and dV. Grid ceil(R NH / kWarps); warp g: key row g / NH, head g % NH.
__global__ void __launch_bounds__(kWarps * kWarpSize) window_dkv_kernel(const __grid_constant__ Params p,
                                                                        const float* delta) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t g = int64_t(blockIdx.x) * kWarps + threadIdx.x / kWarpSize;
  const int64_t N = p.window, R = N * p.windows, HS = p.head_size;
  if (g >= R * p.num_heads) return;
  const int64_t key = g / p.num_heads, h = g % p.num_heads, w = key / N, j = key % N;
  float k[kMaxDimsPerLane], v[kMaxDimsPerLane], dk[kMaxDimsPerLane] = {}, dv[kMaxDimsPerLane] = {};
  load_row(p.k, p.ldk, key, h, HS, lane, k);
  load_row(p.v, p.ldv, key, h, HS, lane, v);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t r = w * N + i;
    const float s = p.scale * dot_row(k, p.q, p.ldq, r, h, HS, lane) + score_bias(p, w, h, i, j);
    const float pr = expf(s - p.lse[h * R + r]);
    const float ds = pr * (dot_row(v, p.dout, p.lddo, r, h, HS, lane) - delta[h * R + r]);
#pragma unroll
    for (int t = 0; t < kMaxDimsPerLane; ++t) {
      const int64_t d = lane + t * kWarpSize;
      if (d < HS) {
        dv[t] += pr * p.dout[r * p.lddo + h * HS + d];
        dk[t] += ds * p.q[r * p.ldq + h * HS + d];
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kMaxDimsPerLane; ++t) {
    const int64_t d = lane + t * kWarpSize;
    if (d < HS) {
      p.dk[key * p.lddk + h * HS + d] = dk[t] * p.scale;
      p.dv[key * p.lddv + h * HS + d] = dv[t];
    }
  }
}

unsigned blocks_for(int64_t warps) { return unsigned((warps + kWarps - 1) / kWarps); }

void check_sizes(const char* op, const Params& p) {
  UNMASK_CHECK(p.head_size <= kMaxDimsPerLane * kWarpSize, op, " (cuda): head size ", p.head_size, " above ",
               kMaxDimsPerLane * kWarpSize);
  UNMASK_CHECK(p.window <= kMaxKeyChunks * kWarpSize, op, " (cuda): windows of ", p.window, " tokens; at most ",
               kMaxKeyChunks * kWarpSize);
  UNMASK_CHECK(p.window * p.windows * p.num_heads < (int64_t(1) << 31) * kWarps, op, " (cuda): too many rows");
}

}  // namespace

void window_attention_forward(Context& ctx, const ops::WindowAttentionParams& p) {
  check_sizes("window_attention", p);
  const int64_t warps = p.window * p.windows * p.num_heads;
  if (warps == 0) return;
  window_forward_kernel<<<blocks_for(warps), kWarps * kWarpSize, 0, cuda_state(ctx).stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void window_attention_backward(Context& ctx, const ops::WindowAttentionParams& p) {
  check_sizes("window_attention_backward", p);
  const int64_t R = p.window * p.windows, warps = R * p.num_heads;
  if (warps == 0) return;
  CudaState& st = cuda_state(ctx);
  Tensor delta = Tensor::empty({p.num_heads, R}, DType::f32, Device::cuda);  // NH R floats
  window_delta_kernel<<<blocks_for(warps), kWarps * kWarpSize, 0, st.stream>>>(p, delta.data<float>());
  CUDA_CHECK_LAUNCH();
  window_dq_kernel<<<blocks_for(p.num_heads * p.window), kWarps * kWarpSize, 0, st.stream>>>(p, delta.data<float>());
  CUDA_CHECK_LAUNCH();
  window_dkv_kernel<<<blocks_for(warps), kWarps * kWarpSize, 0, st.stream>>>(p, delta.data<float>());
  CUDA_CHECK_LAUNCH();
}

}  // namespace unmask::cuda
