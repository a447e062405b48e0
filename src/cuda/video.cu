// cuda/video.cu: the video-token ops of VideoMAE pretraining on the GPU (ops.h semantics; CPU
// twin and float64 arithmetic in ops/video_ops.cc): the tubelet gather, the normalised-pixel
// target and the squared-error loss with its gradient.
//
//   tubelet_gather  one thread per output element (r, k), grid-stride: k = ((c tt + dt) p + dy) p
//                   + dx, consecutive threads read consecutive pixels of one tubelet row (p
//                   floats) and write consecutive columns. Pure data movement: 4 R K bytes each way.
//   tubelet_target  one block per token row: its C tt p p pixels read once into shared memory,
//                   per channel two passes over them (mean, then the sum of squared deviations),
//                   both in double like the CPU, then the row written in column order
//                   (columns (dt, dy, dx, c)).
//   mse_rows        one block per row: double sum of squared differences and the gradient
//                   float(grad_scale * d); then one block adds the row sums over a fixed stride
//                   and a fixed tree (the same bits every run) and the total comes back in one copy.
//   videomae_index  one block per clip: each thread counts the visible and decoded tokens of its
//                   run of positions, thread 0 turns the counts into offsets, then each thread
//                   writes its run's list entries (ops.h's layout; the CPU loop's values).
// No atomics anywhere; every output element has one writer.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/cuda_state.h"
#include "cuda/ops_cuda.h"
#include "cuda/train_kernels.h"
#include "unmask/error.h"

namespace unmask::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kTotalThreads = 1024;
constexpr int kMaxChannels = 4;

using ops::TubeletGeometry;  // the token -> pixel map, shared with the CPU ops

/// Sum over the block in double (blockDim.x a multiple of 32); every thread gets the result.
__device__ double block_sum_double(double x) {
  __shared__ double partial[32];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, nwarps = blockDim.x / kWarpSize;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  x = lane < nwarps ? partial[lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// Block r: cols[r, k] = the pixel (c, dt, dy, dx) of token ids[r], k = ((c tt + dt) p + dy) p + dx,
/// or 0 for an id outside the batch. The token's corner offset once per block (g.pixel: int64
/// divisions), each value in 32-bit index math from it. (The grid-stride kernel before did ~10
/// 64-bit divisions per value: 0.5 ms of a ViT-B batch-128 step on an H200, compute-bound.)
__global__ void __launch_bounds__(kRowThreads)
    tubelet_gather_kernel(float* cols, const float* videos, const int32_t* ids, TubeletGeometry g) {
  const int64_t r = blockIdx.x;
  float* row = cols + r * g.K;
  const int64_t id = ids[r];
  const int K = int(g.K), p = int(g.p), pp = p * p, tt = int(g.tt);
  if (id < 0 || id >= g.B * g.Np) {
    for (int k = threadIdx.x; k < K; k += blockDim.x) row[k] = 0.0f;
    return;
  }
  const float* corner = videos + g.pixel(id, 0, 0, 0, 0);
  const int64_t plane = g.H * g.W, channel = g.T * plane;  // dt steps a frame, c a channel's T frames
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const int dx = k % p, dy = (k / p) % p, dt = (k / pp) % tt, c = k / (pp * tt);
    row[k] = corner[c * channel + dt * plane + int64_t(dy) * g.W + dx];
  }
}

struct ChannelNorm {
  float mean[kMaxChannels], stdev[kMaxChannels];
};

/// tubelet_target's dynamic shared memory: the K pixel values (floats), padded to 8 bytes, then
/// the token's tt p pixel-row offsets (int64). Returns where the table starts, in floats.
__host__ __device__ constexpr int64_t tubelet_target_offset_table_floats(int64_t K) { return (K + 1) / 2 * 2; }

/// Block r: target[r, i C + c] for token ids[r], i = (dt p + dy) p + dx. The token's C x P pixels
/// are read once into shared memory (float, vals[c P + i]), the statistics come from there, and
/// the row is written in column order. The arithmetic is the old kernels', value by value: the
/// same per-thread order of the double sums, so the same bits.
///
/// No integer division per value: the tt p pixel rows' offsets from the token's corner are a
/// table (row_offset[dt p + dy], one division each per block), and each thread walks its indices
/// with steps split once into a quotient and a remainder ((q, dx) over pixels i = q p + dx, (i, c)
/// over columns k = i C + c). The kernel before divided by the runtime p and C 5 times per value
/// (~25 instructions each): 3.4 ms of a ViT-B batch-128 step on an H200 for 1.1 GB read and 1.1
/// GB written. (Before that, ~10 int64 divisions per value in each of three passes: 7.6 ms.)
/// Tried on an H200 (2026-11-27) and reverted: the three channels' block sums in one reduction
/// each and a reciprocal instead of the float64 division per value made it slower (Nsight
/// Compute, 45,056 rows: 664 -> 772 us, SM throughput 75 -> 68%), so neither binds it.
__global__ void __launch_bounds__(kRowThreads)
    tubelet_target_kernel(float* target, const float* videos, const int32_t* ids, TubeletGeometry g,
                          ChannelNorm norm) {
  extern __shared__ __align__(16) float vals[];  // [C, P] floats, then row_offset: [tt p] int64 (tubelet_target_offset_table_floats)
  __shared__ double mu[kMaxChannels], sd[kMaxChannels];
  const int64_t r = blockIdx.x;
  float* row = target + r * g.K;
  const int64_t id = ids[r];
  const int C = int(g.C), K = int(g.K), P = int(g.tt * g.p * g.p), p = int(g.p), rows = int(g.tt) * p;
  if (id < 0 || id >= g.B * g.Np) {
    for (int k = threadIdx.x; k < K; k += blockDim.x) row[k] = 0.0f;
    return;
  }
  int64_t* row_offset = reinterpret_cast<int64_t*>(vals + tubelet_target_offset_table_floats(K));
  for (int q = threadIdx.x; q < rows; q += blockDim.x)  // dt steps one frame (H W floats), dy one image row (W)
    row_offset[q] = int64_t(q / p) * g.H * g.W + int64_t(q % p) * g.W;
  __syncthreads();
  const int step = int(blockDim.x), step_rows = step / p, step_dx = step % p;
  for (int c = 0; c < C; ++c) {
    const float* corner = videos + g.pixel(id, c, 0, 0, 0);
    int q = int(threadIdx.x) / p, dx = int(threadIdx.x) % p;  // i = q p + dx
    for (int i = threadIdx.x; i < P; i += step) {
      vals[c * P + i] = corner[row_offset[q] + dx];
      q += step_rows, dx += step_dx;
      if (dx >= p) dx -= p, ++q;
    }
  }
  __syncthreads();
  for (int c = 0; c < C; ++c) {
    const double m = double(norm.mean[c]), s = double(norm.stdev[c]);
    const float* v = vals + c * P;
    double sum = 0;
    for (int i = threadIdx.x; i < P; i += blockDim.x) sum += double(v[i]) * s + m;
    const double mean = block_sum_double(sum) / double(P);
    double ss = 0;
    for (int i = threadIdx.x; i < P; i += blockDim.x) {
      const double d = (double(v[i]) * s + m) - mean;
      ss += d * d;
    }
    const double stdev = sqrt(block_sum_double(ss) / double(P - 1));  // unbiased, as torch .var()
    if (threadIdx.x == 0) mu[c] = mean, sd[c] = stdev;
  }
  __syncthreads();
  const int step_i = step / C, step_c = step % C;
  int c = int(threadIdx.x) % C, i = int(threadIdx.x) / C;  // k = i C + c
  for (int k = threadIdx.x; k < K; k += step) {
    const double value = double(vals[c * P + i]) * double(norm.stdev[c]) + double(norm.mean[c]);
    row[k] = float((value - mu[c]) / (sd[c] + 1e-6));
    i += step_i, c += step_c;
    if (c >= C) c -= C, ++i;
  }
}

/// Tokens a block of tubelet_target_warp_kernel: one warp each.
constexpr int kTargetWarps = 8;

/// tubelet_target_kernel's target row with one warp per token (kTargetWarps tokens a block) and
/// the token's values in registers: lane l holds pixels i = l + 32 j (j < kPix, P = 32 kPix) of
/// each of the kC channels; the statistics are warp reductions (a butterfly: every lane gets the
/// same bits), with no shared memory and no block barrier. The per-value arithmetic is the
/// block kernel's (the double value, the centred sum of squares, the unbiased stdev, the double
/// division); the sums run in another order, so the last bits of a mean may differ from it.
/// For p a power of two of at most 16 (lp = log2 p): pixel i = (dt p + dy) p + dx has dx = l mod p
/// and q = dt p + dy = i >> lp, all shifts. The block kernel on a ViT-B step: 45,056 tokens in 772
/// us (H200, Nsight Compute), 6 block reductions and 3 barriers a token of 1,536 values, at 15%
/// of DRAM bandwidth; with this kernel ViT-B pretraining ran 1.7% faster (H200, 2026-11-28).
template <int kC, int kPix>
__global__ void __launch_bounds__(kTargetWarps * kWarpSize, 2)  // (3 x 16: 130 -> 127 registers, no spill; sm_90a)
    tubelet_target_warp_kernel(float* target, const float* videos, const int32_t* ids, int64_t R, TubeletGeometry g,
                               int lp, ChannelNorm norm) {
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t r = int64_t(blockIdx.x) * kTargetWarps + int64_t(threadIdx.x) / kWarpSize;
  if (r >= R) return;
  float* row = target + r * g.K;
  const int64_t id = ids[r];
  constexpr int P = kPix * kWarpSize;
  if (id < 0 || id >= g.B * g.Np) {
    for (int k = lane; k < kC * P; k += kWarpSize) row[k] = 0.0f;
    return;
  }
  const int p = 1 << lp, dx = lane & (p - 1);
  const int64_t plane = g.H * g.W;
  float v[kC][kPix];
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    const float* corner = videos + g.pixel(id, c, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < kPix; ++j) {
      const int q = (lane + j * kWarpSize) >> lp;  // dt p + dy
      v[c][j] = corner[int64_t(q >> lp) * plane + int64_t(q & (p - 1)) * g.W + dx];
    }
  }
  double mu[kC], sd[kC];
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    const double m = double(norm.mean[c]), s = double(norm.stdev[c]);
    double sum = 0;
#pragma unroll
    for (int j = 0; j < kPix; ++j) sum += double(v[c][j]) * s + m;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const double mean = sum / double(P);
    double ss = 0;
#pragma unroll
    for (int j = 0; j < kPix; ++j) {
      const double d = (double(v[c][j]) * s + m) - mean;
      ss += d * d;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    mu[c] = mean;
    sd[c] = sqrt(ss / double(P - 1));  // unbiased, as torch .var()
  }
  // column k = i C + c of pixel i = lane + 32 j: the warp writes 32 kC contiguous floats a j
#pragma unroll
  for (int j = 0; j < kPix; ++j)
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const double value = double(v[c][j]) * double(norm.stdev[c]) + double(norm.mean[c]);
      row[(lane + j * kWarpSize) * kC + c] = float((value - mu[c]) / (sd[c] + 1e-6));
    }
}

/// Block r: row_sq[r] = sum_k (pred - target)^2 and dpred = float(grad_scale * d), or 0 / a zero
/// row where row_weight[r] == 0. dpred may alias pred (each element is read, then written, by
/// one thread).
__global__ void __launch_bounds__(kRowThreads)
    mse_rows_kernel(double* row_sq, float* dpred, const float* pred, const float* target, const uint8_t* row_weight,
                    double grad_scale, int64_t K) {
  const int64_t r = blockIdx.x;
  float* d = dpred + r * K;
  if (row_weight && !row_weight[r]) {
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) d[k] = 0.0f;
    if (threadIdx.x == 0) row_sq[r] = 0.0;
    return;
  }
  const float* a = pred + r * K;
  const float* b = target + r * K;
  double sq = 0;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const double diff = double(a[k]) - double(b[k]);
    sq += diff * diff;
    d[k] = float(grad_scale * diff);
  }
  sq = block_sum_double(sq);
  if (threadIdx.x == 0) row_sq[r] = sq;
}

/// One block: thread t adds rows t, t + kTotalThreads, ... in order, then a fixed tree.
__global__ void __launch_bounds__(kTotalThreads) sum_rows_kernel(double* total, const double* row_sq, int64_t R) {
  __shared__ double s[kTotalThreads];
  double acc = 0;
  for (int64_t r = threadIdx.x; r < R; r += kTotalThreads) acc += row_sq[r];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kTotalThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) s[threadIdx.x] += s[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *total = s[0];
}

/// log2 p and the pixels a lane of tubelet_target_warp_kernel holds, where it takes the geometry
/// (1 or 3 channels, p a power of two of at most 16, P = 32 kPix with kPix 1, 2, 4, 8 or 16);
/// pixels 0 where it does not.
std::pair<int, int64_t> tubelet_target_warp_shape(const TubeletGeometry& g) {
  int lp = 0;
  while (lp < 5 && (int64_t(1) << lp) < g.p) ++lp;
  const int64_t P = g.tt * g.p * g.p, pix = P / kWarpSize;
  const bool ok = (int64_t(1) << lp) == g.p && (g.C == 1 || g.C == 3) && P % kWarpSize == 0 &&
                  (pix == 1 || pix == 2 || pix == 4 || pix == 8 || pix == 16);
  return {lp, ok ? pix : 0};
}

/// tubelet_target_warp_kernel for geometries it takes (tubelet_target_warp_shape); false (nothing
/// launched) for the others.
bool launch_tubelet_target_warp(float* target, const float* videos, const TubeletGeometry& g, const int32_t* ids,
                                int64_t R, const ChannelNorm& norm, cudaStream_t stream) {
  const auto [lp, pix] = tubelet_target_warp_shape(g);
  const unsigned blocks = unsigned(ceil_div(R, int64_t(kTargetWarps)));
  const auto launch = [&](auto kernel) {
    kernel<<<blocks, kTargetWarps * kWarpSize, 0, stream>>>(target, videos, ids, R, g, lp, norm);
    CUDA_CHECK_LAUNCH();
    return true;
  };
  const auto with_channels = [&](auto kpix) {
    constexpr int kPix = decltype(kpix)::value;
    return g.C == 3 ? launch(tubelet_target_warp_kernel<3, kPix>) : launch(tubelet_target_warp_kernel<1, kPix>);
  };
  switch (pix) {
    case 1: return with_channels(std::integral_constant<int, 1>{});
    case 2: return with_channels(std::integral_constant<int, 2>{});
    case 4: return with_channels(std::integral_constant<int, 4>{});
    case 8: return with_channels(std::integral_constant<int, 8>{});
    case 16: return with_channels(std::integral_constant<int, 16>{});  // ViT-B: 2 x 16 x 16
    default: return false;
  }
}

}  // namespace

bool tubelet_target_warp_applies(const ops::TubeletGeometry& g) { return tubelet_target_warp_shape(g).second > 0; }

void tubelet_gather(Context& ctx, const float* videos, const TubeletGeometry& g, const int32_t* ids, int64_t R,
                    float* cols) {
  CudaState& st = cuda_state(ctx);
  if (R == 0) return;
  UNMASK_CHECK(R < (int64_t(1) << 31) && g.K < (int64_t(1) << 31), "tubelet_gather (cuda): ", R, " tokens of ", g.K,
               " values: at most 2^31 - 1 of each");
  tubelet_gather_kernel<<<unsigned(R), kRowThreads, 0, st.stream>>>(cols, videos, ids, g);
  CUDA_CHECK_LAUNCH();
}

void tubelet_target(Context& ctx, const float* videos, const TubeletGeometry& g, const int32_t* ids, int64_t R,
                    const std::vector<float>& mean, const std::vector<float>& stdev, float* target) {
  CudaState& st = cuda_state(ctx);
  UNMASK_CHECK(g.C >= 1 && g.C <= kMaxChannels && int64_t(mean.size()) == g.C && int64_t(stdev.size()) == g.C,
               "tubelet_target (cuda): 1 to ", kMaxChannels, " channels with one mean and stdev each, got C = ", g.C,
               " with ", mean.size(), " and ", stdev.size());
  UNMASK_CHECK(R < (int64_t(1) << 31), "tubelet_target (cuda): ", R, " rows exceed the grid");
  if (R == 0) return;
  ChannelNorm norm{};
  for (int64_t c = 0; c < g.C; ++c) {
    norm.mean[c] = mean[size_t(c)];
    norm.stdev[c] = stdev[size_t(c)];
  }
  if (launch_tubelet_target_warp(target, videos, g, ids, R, norm, st.stream)) return;
  // The block kernel: one token's pixels in shared memory (a 2 x 16 x 16 RGB tubelet: 6 KB) beside
  // its static arrays; past the default 48 KB a block opts in, up to the device's limit (227 KB
  // on sm_90, 163 KB on sm_80: 3 x 4 x 32 x 32 values fit both).
  const size_t dynamic =
      size_t(tubelet_target_offset_table_floats(g.K)) * sizeof(float) + size_t(g.tt * g.p) * sizeof(int64_t);
  cudaFuncAttributes attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&attr, tubelet_target_kernel));
  const size_t limit = size_t(st.props.sharedMemPerBlockOptin);
  UNMASK_CHECK(attr.sharedSizeBytes + dynamic <= limit, "tubelet_target (cuda): a token of ", g.K,
               " values (C tt p p) needs ", attr.sharedSizeBytes + dynamic, " bytes of shared memory, over this device's ",
               limit, Hint("use a smaller tubelet or patch, or the CPU op"));
  if (attr.sharedSizeBytes + dynamic > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(tubelet_target_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic)));
  tubelet_target_kernel<<<unsigned(R), kRowThreads, dynamic, st.stream>>>(target, videos, ids, g, norm);
  CUDA_CHECK_LAUNCH();
}

namespace {

constexpr int kIndexThreads = 256;

/// Clip b = blockIdx.x of videomae_index: thread t covers positions [t run, (t + 1) run).
/// The counts were checked on the host; the guards only keep a bad row's writes in bounds.
__global__ void __launch_bounds__(kIndexThreads)
    videomae_index_kernel(int32_t* __restrict__ lists, uint8_t* __restrict__ loss_weight, const uint8_t* __restrict__ mask,
                          const uint8_t* __restrict__ decoder_mask, int64_t Np, int64_t Nv, int64_t Nd, int64_t B) {
  __shared__ int64_t vis_before[kIndexThreads], dec_before[kIndexThreads];
  const int64_t b = blockIdx.x, Nt = Nv + Nd, nv = B * Nv, nd = B * Nd, nt = B * Nt;
  const int64_t run = (Np + kIndexThreads - 1) / kIndexThreads;
  const int64_t j0 = min(Np, threadIdx.x * run), j1 = min(Np, j0 + run);
  const uint8_t* mk = mask + b * Np;
  const uint8_t* dk = decoder_mask ? decoder_mask + b * Np : nullptr;
  int64_t vis = 0, dec = 0;
  for (int64_t j = j0; j < j1; ++j) {
    vis += mk[j] == 0;
    dec += dk ? dk[j] == 0 : mk[j] != 0;
  }
  vis_before[threadIdx.x] = vis, dec_before[threadIdx.x] = dec;
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive prefix sums, in thread order (256 adds)
    int64_t v = 0, d = 0;
    for (int t = 0; t < kIndexThreads; ++t) {
      const int64_t cv = vis_before[t], cd = dec_before[t];
      vis_before[t] = v, dec_before[t] = d;
      v += cv, d += cd;
    }
  }
  __syncthreads();
  int32_t* vis_id = lists;
  int32_t* vis_pos = vis_id + nv;
  int32_t* dec_src = vis_pos + nv;
  int32_t* dec_tok = dec_src + nt;
  int32_t* dec_rows = dec_tok + nt;
  int32_t* dec_id = dec_rows + nd;
  int32_t* grad_src = dec_id + nd;
  int32_t* vis_rows = grad_src + nt;
  int64_t i = vis_before[threadIdx.x], k = dec_before[threadIdx.x];
  for (int64_t j = j0; j < j1; ++j) {
    const bool masked = mk[j] != 0;
    if (!masked) {
      if (i < Nv) {
        const int64_t r = b * Nv + i, t = b * Nt + i;
        vis_id[r] = int32_t(b * Np + j), vis_pos[r] = int32_t(j), vis_rows[r] = int32_t(t);
        dec_src[t] = int32_t(r), dec_tok[t] = int32_t(j), grad_src[t] = int32_t(nd);
      }
      ++i;
    }
    if (dk ? dk[j] == 0 : masked) {
      if (k < Nd) {
        const int64_t r = b * Nd + k, t = b * Nt + Nv + k;
        dec_rows[r] = int32_t(t), dec_id[r] = int32_t(b * Np + j);
        dec_src[t] = int32_t(nv), dec_tok[t] = int32_t(j), grad_src[t] = int32_t(r);
        if (loss_weight) loss_weight[r] = masked ? 1 : 0;
      }
      ++k;
    }
  }
}

}  // namespace

void videomae_index(Context& ctx, const uint8_t* mask, const uint8_t* decoder_mask, int64_t B, int64_t Np, int64_t Nv,
                    int64_t Nd, int32_t* lists, uint8_t* loss_weight) {
  UNMASK_CHECK(B < (int64_t(1) << 31) && B * (Np + Nd) < (int64_t(1) << 31), "videomae_index (cuda): ", B,
               " clips of ", Np, " tokens exceed the i32 lists");
  if (B == 0) return;
  videomae_index_kernel<<<unsigned(B), kIndexThreads, 0, cuda_state(ctx).stream>>>(lists, loss_weight, mask,
                                                                                   decoder_mask, Np, Nv, Nd, B);
  CUDA_CHECK_LAUNCH();
}

double mse_rows(Context& ctx, const float* pred, const float* target, const uint8_t* row_weight, double grad_scale,
                float* dpred, int64_t R, int64_t K) {
  CudaState& st = cuda_state(ctx);
  UNMASK_CHECK(R < (int64_t(1) << 31), "mse_rows (cuda): ", R, " rows exceed the grid");
  if (R == 0 || K == 0) return 0.0;
  ScratchBuffer sums(size_t(R + 1) * sizeof(double), st.stream);  // row sums | total
  double* row_sq = sums.as<double>();
  mse_rows_kernel<<<unsigned(R), kRowThreads, 0, st.stream>>>(row_sq, dpred, pred, target, row_weight, grad_scale, K);
  CUDA_CHECK_LAUNCH();
  sum_rows_kernel<<<1, kTotalThreads, 0, st.stream>>>(row_sq + R, row_sq, R);
  CUDA_CHECK_LAUNCH();
  double total = 0;
  CUDA_CHECK(cudaMemcpyAsync(&total, row_sq + R, sizeof total, cudaMemcpyDeviceToHost, st.stream));
  CUDA_CHECK(cudaStreamSynchronize(st.stream));
  return total;
}

}  // namespace unmask::cuda
