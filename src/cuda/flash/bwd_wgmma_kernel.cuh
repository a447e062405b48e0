// cuda/flash/bwd_wgmma_kernel.cuh: the attention backward of bwd_kernel.cuh (the recompute-dQ
// pair: a dK/dV kernel and a dQ kernel, each output element written once, bitwise reproducible)
// on Hopper's warpgroup MMA (wgmma, sm_90a), head size 64, bf16, with or without attention dropout
// (an instance each, as there). Same formulas, dropout counters and roundings as
// bwd_kernel.cuh; the MMAs read their B operands straight from shared memory (descriptors,
// flash/wgmma.cuh) instead of through ldmatrix, and a warpgroup multiplies 64-row tiles.
//
// One or two warpgroups (128 threads each) per CTA, 64 rows each; warp w owns rows 16 w .. +15 of
// the CTA's (keys in dK/dV, queries in dQ): the same row ownership as the mma.sync kernels, so the
// elementwise code and the A fragments (ldmatrix of padded rows, or accumulators packed pairwise)
// carry over. Two warpgroups share each streamed tile (FlashBwdWgmmaTraits).
//
//   dK/dV, grid (key blocks of 64 or 128, NH, B); K and V as A fragments (registers), loop over query
//   tiles of 64 (Q, dO double-buffered in shared memory in the core-matrix layout of
//   fwd_wgmma_kernel.cuh; lse, delta beside them):
//     S^T  = K Q^T     B = Q,  K-major (n = queries, k = head columns)
//     dP^T = V dO^T    B = dO, K-major
//     P^T = exp2(S^T scale log2e - lse2[q]) (0 for a masked key), dS^T = P^T (dP^T f - delta[q])
//     dV  += (P f)^T dO  A = (P f)^T packed, B = dO, MN-major (k = queries, n = head columns)
//     dK  += dS^T Q    A = dS^T packed, B = Q, MN-major;  dK *= scale at the end
//   dQ, grid (query blocks of 64 or 128, NH, B); Q and dO as A fragments, loop over key tiles of 64
//   (K, V double-buffered, core-matrix layout; the key bias beside them):
//     S = Q K^T, dP = dO V^T (B = K, V, K-major), dS = P (dP f - delta[row]),
//     dQ += dS K (B = K, MN-major);  dQ *= scale at the end
// The index math (descriptors, tiles, fragments) is emulated on the CPU by
// tests/cuda/check_wgmma_bwd.py against float64 autograd-free formulas.
#pragma once
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/flash/bwd_kernel.cuh"
#include "cuda/flash/fwd_wgmma_kernel.cuh"
#include "cuda/flash/wgmma.cuh"

namespace unmask::cuda::flash {

/// The tiles of the wgmma backward. A CTA owns kRows = 64 kWarpGroups rows (keys in dK/dV,
/// queries in dQ), held as padded tiles (fwd_kernel.cuh's load_tile; ldmatrix into A fragments),
/// and streams the other side in 64-row tiles in the core-matrix layout (load_tile_core; the
/// descriptors' strides below). Two warpgroups share every streamed tile: half the tile traffic
/// from L2 per row of the CTA's side (for ViT-B's decoder, 1,568 keys of 64 columns, a 64-row
/// CTA streams ~400 KB of Q and dO).
template <int kWarpGroups_>
struct FlashBwdWgmmaTraits {
  using Element = __nv_bfloat16;
  static constexpr int kWarpGroups = kWarpGroups_;
  static constexpr int kRows = 64 * kWarpGroups;       // the CTA's own rows
  static constexpr int kThreads = 128 * kWarpGroups;
  static constexpr int kHeadDim = 64;
  static constexpr int kBlockN = 64;                   // rows of a streamed tile (load_tile_core)
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static constexpr int kKSteps = kHeadDim / 16;
  static constexpr int kSmemStride = kHeadDim + 8;     // padded rows (load_tile, load_a_frags)
  static constexpr int kTileElems = 64 * kHeadDim;     // one streamed core-matrix tile
  static constexpr uint32_t kCoreBytes = 128, kRowGroupBytes = kCoreBytes * kChunksPerRow;
  static constexpr size_t kPaddedTileBytes = size_t(kRows) * kSmemStride * sizeof(Element);
  // dK/dV: Q and dO [2][64 x 64] core tiles, own K and V padded, lse and delta [2][64]; dQ: K and
  // V [2][64 x 64], own Q and dO padded, key bias [2][64].
  static constexpr size_t kSmemDkdv = 4 * kTileElems * sizeof(Element) + 2 * kPaddedTileBytes + 4 * 64 * sizeof(float);
  static constexpr size_t kSmemDq = 4 * kTileElems * sizeof(Element) + 2 * kPaddedTileBytes + 2 * 64 * sizeof(float);
  static_assert(kWarpGroups == 1 || kWarpGroups == 2, "64 or 128 rows per CTA");
  static_assert(kPaddedTileBytes % 16 == 0, "padded tiles keep 16-byte alignment (cp.async, ldmatrix)");
  static_assert(kWarpGroups == 2 || (kSmemDkdv <= 113 * 1024 && kSmemDq <= 113 * 1024),
                "two 64-row CTAs per SM fit sm_90's shared memory (a 128-row CTA runs alone)");
};

/// Waits for tile j (starting tile j + 1 first, as stream_next_tile), then makes every thread's
/// shared-memory writes visible to the tensor cores' async-proxy reads before the barrier.
template <typename F>
__device__ __forceinline__ void stream_next_tile_wgmma(int j, int n, F&& load_next) {
  if (j + 1 < n) {
    load_next(j + 1);
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  wgmma::fence_proxy_async();
  __syncthreads();
}

/// Rows row0 and row0 + 8 (< valid) of a warpgroup accumulator (64 x 64, D layout) times mul,
/// at element `offset` of g (row stride ld): f32 or bf16 pairs (store_rows of bwd_kernel.cuh).
__device__ __forceinline__ void store_rows_wgmma(void* g, bool bf16, int64_t offset, int64_t ld, const float (&acc)[32],
                                                 int row0, int valid, float mul, int lane) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int c = i * 8 + (lane % 4) * 2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      if (row >= valid) continue;
      const int64_t at = offset + int64_t(row) * ld + c;
      const float x0 = acc[4 * i + 2 * r] * mul, x1 = acc[4 * i + 2 * r + 1] * mul;
      if (bf16) {
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(g) + at) = __floats2bfloat162_rn(x0, x1);
      } else {
        float* dst = static_cast<float*>(g) + at;
        dst[0] = x0;
        dst[1] = x1;
      }
    }
  }
}

/// acc (64 x 64) = A (registers, 4 k-steps over the head columns) B^T, B a core-matrix tile
/// whose rows are the n index (K-major B).
__device__ __forceinline__ void wgmma_rows_nt(float (&acc)[32], const uint32_t (&a)[4][4], const __nv_bfloat16* sB,
                                              int exchange) {
  using Bt = FlashBwdWgmmaTraits<1>;  // (the strides of a streamed tile, the same for every shape)
#pragma unroll
  for (int ks = 0; ks < Bt::kKSteps; ++ks)
    wgmma::mma_m64n64k16_rs<__nv_bfloat16, 0>(
        acc, a[ks], wgmma::smem_desc(sB + ks * 2 * 64, Bt::kCoreBytes, Bt::kRowGroupBytes, exchange & 1), ks > 0);
}

/// acc (64 x 64) += A (registers, 4 k-steps over the tile's 64 rows) B, B a core-matrix tile
/// whose rows are the k index (MN-major B).
__device__ __forceinline__ void wgmma_frags_nn(float (&acc)[32], const uint32_t (&a)[4][4], const __nv_bfloat16* sB,
                                               int exchange) {
  using Bt = FlashBwdWgmmaTraits<1>;
#pragma unroll
  for (int kt = 0; kt < 4; ++kt)
    wgmma::mma_m64n64k16_rs<__nv_bfloat16, 1>(
        acc, a[kt], wgmma::smem_desc(sB + kt * 2 * 8 * Bt::kHeadDim, Bt::kRowGroupBytes, Bt::kCoreBytes, exchange & 2), 1);
}

/// The A fragments of k-step kt of a 64 x 64 accumulator packed pairwise to bf16: n8 tiles 2 kt
/// (a0: row g, a1: row g + 8) and 2 kt + 1 (a2, a3); bwd_kernel.cuh's pack_acc_tile, whole.
__device__ __forceinline__ void pack_acc_frags(uint32_t (&frags)[4][4], const float (&acc)[32]) {
#pragma unroll
  for (int kt = 0; kt < 4; ++kt) {
    frags[kt][0] = pack2<__nv_bfloat16>(acc[8 * kt + 0], acc[8 * kt + 1]);
    frags[kt][1] = pack2<__nv_bfloat16>(acc[8 * kt + 2], acc[8 * kt + 3]);
    frags[kt][2] = pack2<__nv_bfloat16>(acc[8 * kt + 4], acc[8 * kt + 5]);
    frags[kt][3] = pack2<__nv_bfloat16>(acc[8 * kt + 6], acc[8 * kt + 7]);
  }
}

/// kDropout false: compiled without the dropout code (p.dropout_p must be 0), as bwd_kernel.cuh.
template <typename Bt, bool kDropout, int kMinBlocks>
__global__ void __launch_bounds__(Bt::kThreads, kMinBlocks)
    flash_bwd_dkdv_wgmma_kernel(const __grid_constant__ FlashBwdParams p) {
#ifdef UNMASK_WGMMA_ENABLED
  using T = __nv_bfloat16;
  constexpr int D = Bt::kHeadDim, kTile = Bt::kTileElems, kRows = Bt::kRows;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const sQ = reinterpret_cast<T*>(smem_raw);  // [2][kTile], core matrices
  T* const sdO = sQ + 2 * kTile;                  // [2][kTile]
  T* const sK = sdO + 2 * kTile;                  // [kRows][LDS], padded
  T* const sV = sK + kRows * Bt::kSmemStride;     // [kRows][LDS]
  float* const sLse = reinterpret_cast<float*>(sV + kRows * Bt::kSmemStride);  // [2][64], raw lse
  float* const sDelta = sLse + 2 * 64;                                       // [2][64]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int head = blockIdx.y, b = blockIdx.z;
  int64_t start;
  int seqlen;
  sequence_bounds(p.cu_seqlens, p.max_seqlen, b, start, seqlen);
  const int k0 = blockIdx.x * kRows;
  if (k0 >= seqlen) return;

  const T* gQ = static_cast<const T*>(p.q) + start * p.q_row_stride + head * D;
  const T* gdO = static_cast<const T*>(p.dout) + start * p.dout_row_stride + head * D;
  const float* lse = p.lse + head * p.lse_head_stride + start;
  const float* delta = p.delta + head * p.lse_head_stride + start;
  // Query tile j (rows 64 j ..) and its lse / delta into buffer j % 2: one commit group.
  auto load_query_tile = [&](int j) {
    const int q0 = j * 64, valid = min(64, seqlen - q0);
    load_tile_core<Bt>(sQ + (j % 2) * kTile, gQ + int64_t(q0) * p.q_row_stride, p.q_row_stride, valid, tid);
    load_tile_core<Bt>(sdO + (j % 2) * kTile, gdO + int64_t(q0) * p.dout_row_stride, p.dout_row_stride, valid, tid);
    stage_lse_delta<Bt::kThreads>(sLse + (j % 2) * 64, sDelta + (j % 2) * 64, lse + q0, delta + q0, valid, tid);
    cp_async_commit();
  };

  load_tile<Bt, kRows>(sK, static_cast<const T*>(p.k) + (start + k0) * p.k_row_stride + head * D, p.k_row_stride,
                       min(kRows, seqlen - k0), tid);
  load_tile<Bt, kRows>(sV, static_cast<const T*>(p.v) + (start + k0) * p.v_row_stride + head * D, p.v_row_stride,
                       min(kRows, seqlen - k0), tid);
  cp_async_commit();
  load_query_tile(0);
  const bool key_ok[2] = {bwd_key_real(p, b, k0 + warp * 16 + lane / 4, seqlen),
                          bwd_key_real(p, b, k0 + warp * 16 + lane / 4 + 8, seqlen)};
  cp_async_wait<1>();  // K and V have landed
  __syncthreads();
  uint32_t k_frag[4][4], v_frag[4][4];  // this warp's 16 keys (rows 16 warp .. of the CTA's)
  load_a_frags<Bt>(k_frag, sK, warp, lane);
  load_a_frags<Bt>(v_frag, sV, warp, lane);

  float acc_dk[32], acc_dv[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc_dk[i] = acc_dv[i] = 0.0f;
  const bool quad_dropout = dropout_quads_aligned(p.dropout_offset, p.max_seqlen);
  const int n_tiles = (seqlen + 63) / 64;
  for (int j = 0; j < n_tiles; ++j) {
    const int q0 = j * 64;
    stream_next_tile_wgmma(j, n_tiles, load_query_tile);
    const T* sQb = sQ + (j % 2) * kTile;
    const T* sdOb = sdO + (j % 2) * kTile;
    const float* lse_j = sLse + (j % 2) * 64;
    const float* delta_j = sDelta + (j % 2) * 64;

    float s[32], dp[32];  // S^T and dP^T: 64 keys x 64 queries; element 4t + e: key row g + 8 (e / 2), query 8t + 2 (lane % 4) + e % 2
    wgmma::keep(k_frag);
    wgmma::keep(v_frag);
    wgmma::fence();
    wgmma_rows_nt(s, k_frag, sQb, p.wgmma_exchange);    // S^T = K Q^T
    wgmma_rows_nt(dp, v_frag, sdOb, p.wgmma_exchange);  // dP^T = V dO^T
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(s);
    wgmma::keep(dp);
#pragma unroll
    for (int t = 0; t < 8; ++t)  // bwd_kernel.cuh's elementwise step: the same layout per warp
      dkdv_tile_elementwise<kDropout>(reinterpret_cast<float(&)[4]>(s[4 * t]), reinterpret_cast<float(&)[4]>(dp[4 * t]),
                                      p, head, start, q0, k0, warp, lane, t, key_ok, lse_j, delta_j, quad_dropout);
    uint32_t p_frag[4][4], ds_frag[4][4];
    pack_acc_frags(p_frag, s);
    pack_acc_frags(ds_frag, dp);
    wgmma::keep(p_frag);
    wgmma::keep(ds_frag);
    wgmma::keep(acc_dv);
    wgmma::keep(acc_dk);
    wgmma::fence();
    wgmma_frags_nn(acc_dv, p_frag, sdOb, p.wgmma_exchange);  // dV += P^T dO
    wgmma_frags_nn(acc_dk, ds_frag, sQb, p.wgmma_exchange);  // dK += dS^T Q
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(acc_dv);
    wgmma::keep(acc_dk);
    __syncthreads();  // every thread is done with buffer j % 2 before tile j + 2 is loaded into it
  }
  const int valid_keys = seqlen - k0;
  store_rows_wgmma(p.dk, p.grads_bf16, (start + k0) * p.dk_row_stride + head * D, p.dk_row_stride, acc_dk,
                   warp * 16 + lane / 4, valid_keys, p.scale, lane);
  store_rows_wgmma(p.dv, p.grads_bf16, (start + k0) * p.dv_row_stride + head * D, p.dv_row_stride, acc_dv,
                   warp * 16 + lane / 4, valid_keys, 1.0f, lane);
#else
  __trap();  // sm_90a only: flash_bwd_wgmma_applies() keeps other devices out
#endif
}

template <typename Bt, bool kDropout, int kMinBlocks>
__global__ void __launch_bounds__(Bt::kThreads, kMinBlocks)
    flash_bwd_dq_wgmma_kernel(const __grid_constant__ FlashBwdParams p) {
#ifdef UNMASK_WGMMA_ENABLED
  using T = __nv_bfloat16;
  constexpr int D = Bt::kHeadDim, kTile = Bt::kTileElems, kRows = Bt::kRows;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const sK = reinterpret_cast<T*>(smem_raw);  // [2][kTile], core matrices
  T* const sV = sK + 2 * kTile;                   // [2][kTile]
  T* const sQ = sV + 2 * kTile;                   // [kRows][LDS], padded
  T* const sdO = sQ + kRows * Bt::kSmemStride;    // [kRows][LDS]
  float* const sBias = reinterpret_cast<float*>(sdO + kRows * Bt::kSmemStride);  // [2][64]: 0 or -inf

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int head = blockIdx.y, b = blockIdx.z;
  int64_t start;
  int seqlen;
  sequence_bounds(p.cu_seqlens, p.max_seqlen, b, start, seqlen);
  const int q0 = blockIdx.x * kRows;
  if (q0 >= seqlen) return;

  const T* gK = static_cast<const T*>(p.k) + start * p.k_row_stride + head * D;
  const T* gV = static_cast<const T*>(p.v) + start * p.v_row_stride + head * D;
  auto load_key_tile = [&](int j) {  // key tile j (keys 64 j ..) and its bias into buffer j % 2
    const int k0 = j * 64, valid = min(64, seqlen - k0);
    load_tile_core<Bt>(sK + (j % 2) * kTile, gK + int64_t(k0) * p.k_row_stride, p.k_row_stride, valid, tid);
    load_tile_core<Bt>(sV + (j % 2) * kTile, gV + int64_t(k0) * p.v_row_stride, p.v_row_stride, valid, tid);
    cp_async_commit();
    for (int i = tid; i < 64; i += Bt::kThreads)
      sBias[(j % 2) * 64 + i] = bwd_key_real(p, b, k0 + i, seqlen) ? 0.0f : -INFINITY;
  };

  load_tile<Bt, kRows>(sQ, static_cast<const T*>(p.q) + (start + q0) * p.q_row_stride + head * D, p.q_row_stride,
                       min(kRows, seqlen - q0), tid);
  load_tile<Bt, kRows>(sdO, static_cast<const T*>(p.dout) + (start + q0) * p.dout_row_stride + head * D,
                       p.dout_row_stride, min(kRows, seqlen - q0), tid);
  cp_async_commit();
  load_key_tile(0);
  float lse2[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = q0 + warp * 16 + lane / 4 + 8 * r;
    const bool ok = row < seqlen;
    lse2[r] = ok ? bwd_lse2(p.lse[head * p.lse_head_stride + start + row]) : INFINITY;
    delta[r] = ok ? p.delta[head * p.lse_head_stride + start + row] : 0.0f;
  }
  cp_async_wait<1>();  // Q and dO have landed
  __syncthreads();
  uint32_t q_frag[4][4], do_frag[4][4];  // this warp's 16 queries (rows 16 warp .. of the CTA's)
  load_a_frags<Bt>(q_frag, sQ, warp, lane);
  load_a_frags<Bt>(do_frag, sdO, warp, lane);

  float acc_dq[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc_dq[i] = 0.0f;
  const bool quad_dropout = dropout_quads_aligned(p.dropout_offset, p.max_seqlen);
  const int n_tiles = (seqlen + 63) / 64;
  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = j * 64;
    stream_next_tile_wgmma(j, n_tiles, load_key_tile);
    const T* sKb = sK + (j % 2) * kTile;
    const T* sVb = sV + (j % 2) * kTile;
    const float* bias_j = sBias + (j % 2) * 64;

    float s[32], dp[32];  // S and dP: 64 queries x 64 keys; element 4t + e: row g + 8 (e / 2), key 8t + 2 (lane % 4) + e % 2
    wgmma::keep(q_frag);
    wgmma::keep(do_frag);
    wgmma::fence();
    wgmma_rows_nt(s, q_frag, sKb, p.wgmma_exchange);    // S = Q K^T
    wgmma_rows_nt(dp, do_frag, sVb, p.wgmma_exchange);  // dP = dO V^T
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(s);
    wgmma::keep(dp);
    const int64_t row_g = head * p.lse_head_stride + start + q0 + warp * 16 + lane / 4;
#pragma unroll
    for (int t = 0; t < 8; ++t)  // bwd_kernel.cuh's elementwise step: the same layout per warp
      dq_tile_elementwise<kDropout>(reinterpret_cast<const float(&)[4]>(s[4 * t]),
                                    reinterpret_cast<float(&)[4]>(dp[4 * t]), p, row_g, k0, lane, t, bias_j, lse2, delta,
                                    quad_dropout);
    uint32_t ds_frag[4][4];
    pack_acc_frags(ds_frag, dp);
    wgmma::keep(ds_frag);
    wgmma::keep(acc_dq);
    wgmma::fence();
    wgmma_frags_nn(acc_dq, ds_frag, sKb, p.wgmma_exchange);  // dQ += dS K
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(acc_dq);
    __syncthreads();  // every thread is done with buffer j % 2 before tile j + 2 is loaded into it
  }
  store_rows_wgmma(p.dq, p.grads_bf16, (start + q0) * p.dq_row_stride + head * D, p.dq_row_stride, acc_dq,
                   warp * 16 + lane / 4, seqlen - q0, p.scale, lane);
#else
  __trap();  // sm_90a only
#endif
}

}  // namespace unmask::cuda::flash
