// cuda/flash/fwd_wgmma_kernel.cuh: flash attention forward on Hopper's warpgroup MMA (wgmma,
// sm_90a), head size 64. The same algorithm, semantics and softmax code as fwd_kernel.cuh (the
// mma.sync kernel, which every other case keeps); what changes is who multiplies:
//
//   mma.sync (fwd_kernel.cuh): each warp multiplies 16 rows, reading every K and V fragment
//     from shared memory into registers itself (ldmatrix): 32 ldmatrix.x4 per 64 MMAs of 16x8x16,
//     so shared-memory bandwidth, not the tensor cores, bounds it (flash/traits.h).
//   wgmma (here): a warpgroup (4 warps, 64 rows) multiplies 64 x kBlockN (S = Q K^T) and 64 x 64
//     (O = P V) tiles with K and V read by the tensor cores straight from shared memory
//     (descriptors, flash/wgmma.cuh); Q and P stay in registers as the A operand.
//
// Grid: (ceil(max_seqlen / kBlockM), NH, B); CTA (m, h, b) owns query rows m kBlockM .. +kBlockM-1
// of head h of sequence b; warpgroup wg of it rows wg 64 .. +63, warp w rows 16 w .. +15 of the
// CTA (the wgmma's rows of warp w % 4 of its group).
//
// Shared memory: K and V tiles (double-buffered, cp.async) in the no-swizzle core-matrix layout:
// key r, head column c of a [kBlockN][64] tile at element ((r / 8) 8 + c / 8) 64 + (r % 8) 8 + c % 8,
// i.e. 8 keys x 8 columns per contiguous 128-byte core matrix, the 8 column chunks of a group of
// 8 keys side by side. The same bytes serve as
//   K, the K-major B of S = Q K^T (N = keys, k = head columns): LBO 128 B (next 8 columns),
//     SBO 1024 B (next 8 keys); k-step ks starts at column chunk 2 ks;
//   V, the MN-major B of O = P V (k = keys, N = head columns; trans-b): LBO 1024 B (next 8 keys),
//     SBO 128 B (next 8 columns); k-step kt starts at key group 2 kt.
// Q is loaded once into padded rows (fwd_kernel.cuh's layout) and read into A fragments with
// ldmatrix, as there.
//
// Per key block j (kBlockN keys) and warpgroup:
//   prefetch K/V j+1 (cp.async), wait for j, fence.proxy.async, barrier
//   S = Q K^T: 4 wgmmas (k = 64 head columns), wait
//   online softmax on S in registers (fwd_kernel.cuh's code: rows g and g+8 of each warp's 16)
//   O = O corr + P V: kBlockN / 16 wgmmas with P packed from S as A, wait; barrier
// The waits follow each group at once: the overlap comes from the other warpgroups and CTAs on
// the SM (a softmax runs while another group's MMAs do).
#pragma once
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/flash/fwd_kernel.cuh"  // load_tile, load_key_bias, online_softmax_tile
#include "cuda/flash/mma.cuh"
#include "cuda/flash/params.h"
#include "cuda/flash/wgmma.cuh"

namespace unmask::cuda::flash {

template <typename Element_, int kWarpGroups_, int kBlockN_>
struct FlashFwdWgmmaTraits {
  using Element = Element_;
  static constexpr int kHeadDim = 64;
  static constexpr int kWarpGroups = kWarpGroups_;
  static constexpr int kBlockM = 64 * kWarpGroups;  // query rows per CTA
  static constexpr int kBlockN = kBlockN_;          // keys per step
  static constexpr int kThreads = 128 * kWarpGroups;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks of a head row
  static constexpr int kSmemStride = kHeadDim + 8;    // elements per padded Q row (ldmatrix, no conflicts;
                                                      // fwd_kernel.cuh's load_tile fills it)
  static constexpr int kKSteps = kHeadDim / 16;       // k-steps of S = Q K^T
  static constexpr int kSRegs = kBlockN / 2;          // S accumulators per thread (64 x kBlockN / 128)
  static constexpr int kORegs = kHeadDim / 2;         // O accumulators per thread
  static constexpr uint32_t kCoreBytes = 128;                                // one 8 x 8 core matrix
  static constexpr uint32_t kKeyGroupBytes = kCoreBytes * kChunksPerRow;     // 8 keys x 64 columns
  static constexpr size_t kSmemKV = size_t(kBlockN) * kHeadDim * sizeof(Element);  // one tile
  static constexpr size_t kSmemQ = size_t(kBlockM) * kSmemStride * sizeof(Element);
  static constexpr size_t kSmemBias = 2 * kBlockN * sizeof(float);
  static constexpr size_t kSmemBytes = 4 * kSmemKV + kSmemQ + kSmemBias;  // 2 x K, 2 x V, Q, masks

  static_assert(sizeof(Element) == 2, "bf16 or fp16");
  static_assert(kBlockN == 64 || kBlockN == 128, "wgmma shapes m64n64k16 / m64n128k16");
  static_assert(kWarpGroups == 1 || kWarpGroups == 2, "one or two warpgroups per CTA");
  static_assert(kSmemKV % 128 == 0, "K/V tiles keep 128-byte core-matrix alignment");
  static_assert(kSmemBytes <= 227 * 1024, "fits sm_90's shared memory");
};

/// Copies keys [0, rows_valid) of a [Wt::kBlockN][64] global tile (row stride ld) into the
/// core-matrix layout above; zero-fills the other keys. Thread i moves 16-byte chunk i of the
/// tile in core-matrix order (key r % 8 fastest, then the column chunk, then r / 8): consecutive
/// threads write consecutive shared-memory bytes, and the chunk's smem offset is just 16 i.
template <typename Wt>
__device__ __forceinline__ void load_tile_core(typename Wt::Element* s, const typename Wt::Element* g, int64_t ld,
                                               int rows_valid, int tid) {
  constexpr int kChunks = Wt::kBlockN * Wt::kChunksPerRow;
  static_assert(kChunks % Wt::kThreads == 0, "every thread moves the same number of chunks");
#pragma unroll
  for (int i0 = 0; i0 < kChunks; i0 += Wt::kThreads) {
    const int i = i0 + tid;
    const int r = (i / (8 * Wt::kChunksPerRow)) * 8 + i % 8, c = ((i / 8) % Wt::kChunksPerRow) * 8;
    typename Wt::Element* dst = s + i * 8;
    if (r < rows_valid)
      cp_async_16(dst, g + int64_t(r) * ld + c);
    else
      *reinterpret_cast<int4*>(dst) = make_int4(0, 0, 0, 0);
  }
}

/// S (64 x kBlockN) = Q K^T for this warpgroup: k-step ks reads column chunks 2 ks, 2 ks + 1.
template <typename Wt>
__device__ __forceinline__ void wgmma_qk(float (&s)[Wt::kSRegs], const uint32_t (&q_frag)[Wt::kKSteps][4],
                                         const typename Wt::Element* sK, int exchange) {
  using T = typename Wt::Element;
#pragma unroll
  for (int ks = 0; ks < Wt::kKSteps; ++ks) {
    const uint64_t desc = wgmma::smem_desc(sK + ks * 2 * 64, Wt::kCoreBytes, Wt::kKeyGroupBytes, exchange & 1);
    if constexpr (Wt::kBlockN == 128)
      wgmma::mma_m64n128k16_rs<T, 0>(s, q_frag[ks], desc, ks > 0);
    else
      wgmma::mma_m64n64k16_rs<T, 0>(s, q_frag[ks], desc, ks > 0);
  }
}

/// O (64 x 64) += P V for this warpgroup: k-step kt reads key groups 2 kt, 2 kt + 1 of V.
template <typename Wt>
__device__ __forceinline__ void wgmma_pv(float (&o)[Wt::kORegs], const uint32_t (&p_frag)[Wt::kBlockN / 16][4],
                                         const typename Wt::Element* sV, int exchange) {
  using T = typename Wt::Element;
#pragma unroll
  for (int kt = 0; kt < Wt::kBlockN / 16; ++kt) {
    const uint64_t desc = wgmma::smem_desc(sV + kt * 2 * 8 * Wt::kHeadDim, Wt::kKeyGroupBytes, Wt::kCoreBytes, exchange & 2);
    wgmma::mma_m64n64k16_rs<T, 1>(o, p_frag[kt], desc, 1);
  }
}

template <typename Wt, int kMinBlocks>
__global__ void __launch_bounds__(Wt::kThreads, kMinBlocks) flash_fwd_wgmma_kernel(const __grid_constant__ FlashFwdParams p) {
#ifdef UNMASK_WGMMA_ENABLED
  using T = typename Wt::Element;
  constexpr int BM = Wt::kBlockM, BN = Wt::kBlockN, D = Wt::kHeadDim, LDQ = Wt::kSmemStride;
  constexpr int kNT = BN / 8;  // 8-key tiles of S per row

  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);                      // [2][BN * D], core matrices
  T* sV = sK + 2 * BN * D;                                     // [2][BN * D], core matrices
  T* sQ = sV + 2 * BN * D;                                     // [BM][LDQ]
  float* sBias = reinterpret_cast<float*>(sQ + BM * LDQ);      // [2][BN]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const FwdTile tile = fwd_tile<BM>(p, blockIdx.x, blockIdx.y, blockIdx.z);
  const int head = tile.head, b = tile.b, seqlen = tile.seqlen, q0 = tile.q0;
  const int64_t seq_start = tile.seq_start;
  if (q0 >= seqlen) return;  // the whole CTA: no barrier is left waiting

  const T* gQ = fwd_head_row<T, D>(p.q, seq_start + q0, p.q_row_stride, head);
  const T* gK = fwd_head_row<T, D>(p.k, seq_start, p.k_row_stride, head);
  const T* gV = fwd_head_row<T, D>(p.v, seq_start, p.v_row_stride, head);
  const int n_blocks = (seqlen + BN - 1) / BN;

  load_tile<Wt, BM>(sQ, gQ, p.q_row_stride, min(BM, seqlen - q0), tid);  // padded rows (fwd_kernel.cuh)
  load_tile_core<Wt>(sK, gK, p.k_row_stride, min(BN, seqlen), tid);
  load_tile_core<Wt>(sV, gV, p.v_row_stride, min(BN, seqlen), tid);
  cp_async_commit();
  load_key_bias<Wt>(sBias, p, b, 0, seqlen, tid);

  uint32_t q_frag[Wt::kKSteps][4];
  float acc_o[Wt::kORegs];
#pragma unroll
  for (int i = 0; i < Wt::kORegs; ++i) acc_o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};  // rows g, g+8; log2 domain

  const bool quad_dropout = dropout_quads_aligned(p.dropout_offset, p.max_seqlen);
  for (int j = 0; j < n_blocks; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_blocks) {  // prefetch tile j+1 into the other buffer
      const int kv1 = (j + 1) * BN;
      load_tile_core<Wt>(sK + (buf ^ 1) * BN * D, gK + int64_t(kv1) * p.k_row_stride, p.k_row_stride,
                         min(BN, seqlen - kv1), tid);
      load_tile_core<Wt>(sV + (buf ^ 1) * BN * D, gV + int64_t(kv1) * p.v_row_stride, p.v_row_stride,
                         min(BN, seqlen - kv1), tid);
      cp_async_commit();
      load_key_bias<Wt>(sBias + (buf ^ 1) * BN, p, b, kv1, seqlen, tid);
      cp_async_wait<1>();  // tile j (and Q) landed; tile j+1 may still be in flight
    } else {
      cp_async_wait<0>();
    }
    wgmma::fence_proxy_async();  // this thread's smem writes, visible to the tensor cores' reads
    __syncthreads();

    if (j == 0) {  // Q fragments: this warp's 16 rows, all k-steps (fwd_kernel.cuh's ldmatrix)
#pragma unroll
      for (int ks = 0; ks < Wt::kKSteps; ++ks) {
        const int r = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = ks * 16 + (lane / 16) * 8;
        ldmatrix_x4(q_frag[ks], sQ + r * LDQ + c);
      }
    }

    // ---- S = Q K^T (64 x BN per warpgroup) ----
    float s[Wt::kSRegs];
    wgmma::keep(q_frag);
    wgmma::fence();
    wgmma_qk<Wt>(s, q_frag, sK + buf * BN * D, p.wgmma_exchange);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(s);

    // ---- online softmax (fwd_kernel.cuh's online_softmax_tile): element 4t + e of s is tile t's
    // element e, row g + 8 (e / 2), key 8t + 2(lane % 4) + e % 2 ----
    const float* bias = sBias + buf * BN;
    float corr[2];
    online_softmax_tile(reinterpret_cast<float(&)[kNT][4]>(s), row_max, row_sum, corr, bias, p.scale_log2, lane);
    if (p.dropout_p > 0.0f) {  // training: P V uses the dropped probabilities, the row sums do not
      const int64_t row_g = int64_t(head) * p.lse_head_stride + seq_start + q0 + warp * 16 + lane / 4;
#pragma unroll
      for (int t = 0; t < kNT; ++t) {
        float f[4];
        dropout_factors_s(f, p.dropout_p, p.dropout_seed, p.dropout_offset + uint64_t(row_g * p.max_seqlen),
                          uint64_t(p.max_seqlen), j * BN + t * 8, quad_dropout, lane);
#pragma unroll
        for (int e = 0; e < 4; ++e) s[4 * t + e] *= f[e];
      }
    }
#pragma unroll
    for (int i = 0; i < Wt::kORegs / 4; ++i) {
      acc_o[4 * i + 0] *= corr[0];
      acc_o[4 * i + 1] *= corr[0];
      acc_o[4 * i + 2] *= corr[1];
      acc_o[4 * i + 3] *= corr[1];
    }

    // ---- O += P V: P (rounded to T) as the A operand, two 8-key tiles per k-step ----
    uint32_t p_frag[BN / 16][4];
#pragma unroll
    for (int kt = 0; kt < BN / 16; ++kt) {
      p_frag[kt][0] = pack2<T>(s[8 * kt + 0], s[8 * kt + 1]);
      p_frag[kt][1] = pack2<T>(s[8 * kt + 2], s[8 * kt + 3]);
      p_frag[kt][2] = pack2<T>(s[8 * kt + 4], s[8 * kt + 5]);
      p_frag[kt][3] = pack2<T>(s[8 * kt + 6], s[8 * kt + 7]);
    }
    wgmma::keep(acc_o);
    wgmma::keep(p_frag);
    wgmma::fence();
    wgmma_pv<Wt>(acc_o, p_frag, sV + buf * BN * D, p.wgmma_exchange);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::keep(acc_o);
    __syncthreads();  // buffer `buf` is refilled by the prefetch issued at step j+1
  }

  // ---- epilogue: normalise and store (and the log-sum-exp for training) ----
  float inv[2];
  const int row0 = warp * 16 + lane / 4, row1 = row0 + 8;
  const bool ok0 = q0 + row0 < seqlen, ok1 = q0 + row1 < seqlen;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = l > 0.0f ? 1.0f / l : 0.0f;
    if (p.lse && lane % 4 == 0 && (r == 0 ? ok0 : ok1))  // ln(sum exp(S scale)) = (m + log2 l) ln 2
      p.lse[head * p.lse_head_stride + seq_start + q0 + (r == 0 ? row0 : row1)] =
          l > 0.0f ? (row_max[r] + log2f(l)) * 0.6931471805599453f : -INFINITY;
  }
  T* gO = static_cast<T*>(p.o) + (seq_start + q0) * p.o_row_stride + head * D;
  float* gOf = static_cast<float*>(p.o) + (seq_start + q0) * p.o_row_stride + head * D;  // o_f32 only
#pragma unroll
  for (int i = 0; i < Wt::kORegs / 4; ++i) {
    const int c = i * 8 + (lane % 4) * 2;
    if (p.o_f32) {
      if (ok0)
        *reinterpret_cast<float2*>(gOf + int64_t(row0) * p.o_row_stride + c) =
            make_float2(acc_o[4 * i + 0] * inv[0], acc_o[4 * i + 1] * inv[0]);
      if (ok1)
        *reinterpret_cast<float2*>(gOf + int64_t(row1) * p.o_row_stride + c) =
            make_float2(acc_o[4 * i + 2] * inv[1], acc_o[4 * i + 3] * inv[1]);
      continue;
    }
    if (ok0)
      *reinterpret_cast<uint32_t*>(gO + int64_t(row0) * p.o_row_stride + c) =
          pack2<T>(acc_o[4 * i + 0] * inv[0], acc_o[4 * i + 1] * inv[0]);
    if (ok1)
      *reinterpret_cast<uint32_t*>(gO + int64_t(row1) * p.o_row_stride + c) =
          pack2<T>(acc_o[4 * i + 2] * inv[1], acc_o[4 * i + 3] * inv[1]);
  }
#else
  __trap();  // wgmma exists on sm_90a only: flash_fwd_wgmma_available() keeps other devices out
#endif
}

}  // namespace unmask::cuda::flash
