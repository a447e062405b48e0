// cuda/flash/bwd_short_kernel.cuh: the attention backward of short sequences (at most 128 keys,
// head size 64: BERT's phase 1 and its fine-tuning at 128) in ONE kernel, one CTA of 8 warps per
// (sequence, head). The default where it applies (H200, 2026-11-28: BERT-large phase 1 +1.7%).
//
// Why: at 128 keys the default pair of 64-key CTAs per (sequence, head) adds each dQ element
// twice with f32 atomics into a zeroed accumulator that a third kernel scales and stores; on an
// H200 the attention backward of a BERT-large step took ~220 us a layer, ~10x its MMA time.
// Here one CTA holds every key, so dQ = dS K is summed inside the CTA and stored once: no
// accumulator, no memset, no atomics, no finishing kernel, and each query tile is loaded once
// instead of once per key block.
//
//   grid (1, NH, B), 256 threads; warp w owns keys 16 w .. 16 w + 15 (K and V fragments in
//   registers, as in flash_bwd_dkdv_kernel); per query tile j of 64 (at most two):
//     S^T = K Q^T, P^T, dP^T = V dO^T, dS^T: the dK/dV kernel's code and roundings, so dK and dV
//       are that kernel's values (its per-key arithmetic does not depend on the CTA's size);
//     dV += (P f)^T dO, dK += dS^T Q;
//     dS^T (bf16) -> smem [128 keys][64 queries + 8]; barrier;
//     dQ[64 x 64] = dS K: warp w takes queries 16 (w % 4) .. +15 and columns 32 (w / 4) .. +31,
//       k = the 128 keys (8 k-steps): A = dS via ldmatrix.trans of dS^T, B = K via
//       ldmatrix.trans; stored once, times scale (f32, or bf16 rounded once).
// Keys past the sequence, masked keys and rows past it are handled as in the dK/dV kernel
// (zero-filled tiles, P = 0, lse2 = +inf); dS^T rows of missing keys are 0, so they add nothing.
#pragma once
#include "cuda/flash/bwd_kernel.cuh"

namespace unmask::cuda {

/// The head-size-64 tiles of FlashBwdTraits with 8 warps (256 threads): load_tile and the MMA
/// helpers take the thread count and strides from here.
struct FlashBwdShortTraits : FlashBwdTraits<64> {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKeys = 16 * kWarps;  // 128: every key of a sequence the kernel takes
};

/// Shared memory of flash_bwd_short_kernel: K and V [128][LDS] each, two slots of (Q, dO)
/// [64][LDS] double-buffering the query tiles, dS^T [128][kSmemStrideDs], lse and delta [2][64].
/// 93,184 bytes: one CTA per SM by registers (8 warps x 255), whose shared memory fits sm_80 too.
struct FlashBwdShortSmem {
  using Kt = FlashBwdShortTraits;
  static constexpr size_t kKeyTile = size_t(Kt::kKeys) * Kt::kSmemStride * sizeof(Kt::Element);
  static constexpr size_t kQueryTile = Kt::kSmemTile;  // 64 rows
  static constexpr size_t kK = 0, kV = kKeyTile, kSlots = 2 * kKeyTile;
  static constexpr size_t kDsT = kSlots + 4 * kQueryTile;
  static constexpr size_t kDsTBytes = size_t(Kt::kKeys) * Kt::kSmemStrideDs * sizeof(Kt::Element);
  static constexpr size_t kLse = kDsT + kDsTBytes;  // [2][64] f32
  static constexpr size_t kDelta = kLse + 2 * 64 * sizeof(float);
  static constexpr size_t kBytes = kDelta + 2 * 64 * sizeof(float);
  static_assert(kKeyTile % 16 == 0 && kQueryTile % 16 == 0 && kDsTBytes % 16 == 0,
                "every piece starts 16-byte aligned (cp.async, ldmatrix)");
  static_assert(kBytes <= 160 * 1024, "fits sm_80's dynamic shared memory");
};

/// The longest sequence flash_bwd_short_kernel takes.
constexpr int kFlashBwdShortMaxSeqlen = FlashBwdShortTraits::kKeys;

namespace flash {

/// dK, dV and dQ of one (sequence, head) of at most 128 keys, head size 64 (see the header).
/// kDropout false: compiled without the dropout code (p.dropout_p must be 0).
template <bool kDropout>
__global__ void __launch_bounds__(FlashBwdShortTraits::kThreads, 1)
    flash_bwd_short_kernel(const __grid_constant__ FlashBwdParams p) {
  using Kt = FlashBwdShortTraits;
  using Smem = FlashBwdShortSmem;
  using T = typename Kt::Element;
  constexpr int D = Kt::kHeadDim, LDS = Kt::kSmemStride, LDT = Kt::kSmemStrideDs;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const sK = reinterpret_cast<T*>(smem_raw + Smem::kK);
  T* const sV = reinterpret_cast<T*>(smem_raw + Smem::kV);
  T* const slots = reinterpret_cast<T*>(smem_raw + Smem::kSlots);
  // tile `which` (0: Q, 1: dO) of slot `s`: plain arithmetic, no local array indexed at run time
  auto slot = [slots](int s, int which) { return slots + (2 * s + which) * 64 * LDS; };
  T* const sdsT = reinterpret_cast<T*>(smem_raw + Smem::kDsT);
  float* const sLse = reinterpret_cast<float*>(smem_raw + Smem::kLse);
  float* const sDelta = reinterpret_cast<float*>(smem_raw + Smem::kDelta);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int head = blockIdx.y, b = blockIdx.z;
  int64_t start;
  int seqlen;
  sequence_bounds(p.cu_seqlens, p.max_seqlen, b, start, seqlen);
  if (seqlen <= 0) return;  // the launcher checked max_seqlen <= 128

  const T* gQ = static_cast<const T*>(p.q) + start * p.q_row_stride + head * D;
  const T* gdO = static_cast<const T*>(p.dout) + start * p.dout_row_stride + head * D;
  const float* lse = p.lse + head * p.lse_head_stride + start;
  const float* delta = p.delta + head * p.lse_head_stride + start;
  // Query tile j (rows q0 = 64 j ..) into slot j % 2 and its lse / delta into [j % 2]: one
  // cp.async commit group; the zero rows (lse -inf: P = 0) are plain stores.
  auto load_query_tile = [&](int j) {
    const int q0 = j * 64, valid = min(64, seqlen - q0);
    load_tile<Kt, 64>(slot(j % 2, 0), gQ + int64_t(q0) * p.q_row_stride, p.q_row_stride, valid, tid);
    load_tile<Kt, 64>(slot(j % 2, 1), gdO + int64_t(q0) * p.dout_row_stride, p.dout_row_stride, valid, tid);
    stage_lse_delta<Kt::kThreads>(sLse + (j % 2) * 64, sDelta + (j % 2) * 64, lse + q0, delta + q0, valid, tid);
    cp_async_commit();
  };

  load_tile<Kt, Kt::kKeys>(sK, static_cast<const T*>(p.k) + start * p.k_row_stride + head * D, p.k_row_stride,
                           min(Kt::kKeys, seqlen), tid);
  load_tile<Kt, Kt::kKeys>(sV, static_cast<const T*>(p.v) + start * p.v_row_stride + head * D, p.v_row_stride,
                           min(Kt::kKeys, seqlen), tid);
  cp_async_commit();
  load_query_tile(0);
  // This thread's accumulator rows are keys warp*16 + lane/4 (+ 8).
  const bool key_ok[2] = {bwd_key_real(p, b, warp * 16 + lane / 4, seqlen),
                          bwd_key_real(p, b, warp * 16 + lane / 4 + 8, seqlen)};
  uint32_t k_frag[Kt::kKSteps][4], v_frag[Kt::kKSteps][4];
  cp_async_wait<1>();  // K and V have landed (query tile 0 may still be in flight)
  __syncthreads();
  load_a_frags<Kt>(k_frag, sK, warp, lane);  // rows warp*16 .. of the 128-row tiles
  load_a_frags<Kt>(v_frag, sV, warp, lane);  // (sK stays: it is dQ's B operand)

  float acc_dk[Kt::kNTilesO][4], acc_dv[Kt::kNTilesO][4];
#pragma unroll
  for (int i = 0; i < Kt::kNTilesO; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[i][e] = acc_dv[i][e] = 0.0f;

  const bool quad_dropout = dropout_quads_aligned(p.dropout_offset, p.max_seqlen);
  const int n_tiles = (seqlen + 63) / 64;
  // dQ's share of this warp: queries qw*16 .. +15 of each tile, columns c0 .. c0 + 31.
  const int qw = warp % 4, c0 = (warp / 4) * 32;
  for (int j = 0; j < n_tiles; ++j) {
    const int q0 = j * 64;
    // Tile j + 1 goes into slot (j + 1) % 2, which tile j - 1 used: every warp finished reading
    // that slot before the barrier after iteration j - 1's dS^T stores.
    stream_next_tile(j, n_tiles, load_query_tile);
    const T* sQ = slot(j % 2, 0);
    const T* sdO = slot(j % 2, 1);
    const float* lse_j = sLse + (j % 2) * 64;
    const float* delta_j = sDelta + (j % 2) * 64;

    // (P f)^T and dS^T in bf16, two query ranges at a time: flash_bwd_dkdv_kernel's elementwise
    // step (dkdv_tile_elementwise) with k0 = 0.
    constexpr int kParts = 2, kTiles = 8 / kParts;
    uint32_t p_frag[4][4], ds_frag[4][4];
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      float acc_p[kTiles][4], acc_dp[kTiles][4];  // P^T and dP^T: 16 keys x 8 kTiles queries
#pragma unroll
      for (int t = 0; t < kTiles; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_p[t][e] = acc_dp[t][e] = 0.0f;
      mma_rows_nt<Kt>(acc_p, k_frag, sQ + part * 8 * kTiles * LDS, lane);    // S^T = K Q^T
      mma_rows_nt<Kt>(acc_dp, v_frag, sdO + part * 8 * kTiles * LDS, lane);  // dP^T = V dO^T
#pragma unroll
      for (int th = 0; th < kTiles; ++th) {
        const int t = kTiles * part + th;  // n8 tile of the 64 queries
        dkdv_tile_elementwise<kDropout>(acc_p[th], acc_dp[th], p, head, start, q0, 0, warp, lane, t, key_ok, lse_j,
                                        delta_j, quad_dropout);
        pack_acc_tile<T>(p_frag, acc_p[th], t);
        pack_acc_tile<T>(ds_frag, acc_dp[th], t);
      }
    }
    mma_frags_nn<Kt>(acc_dv, p_frag, sdO, lane);  // dV += P^T dO
    mma_frags_nn<Kt>(acc_dk, ds_frag, sQ, lane);  // dK += dS^T Q
    // dS^T to smem (bf16, the operand the dK MMA used): rows = this warp's keys, columns = queries
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int row = warp * 16 + lane / 4, c = t * 8 + (lane % 4) * 2;
      *reinterpret_cast<uint32_t*>(sdsT + row * LDT + c) = ds_frag[t / 2][(t % 2) * 2];
      *reinterpret_cast<uint32_t*>(sdsT + (row + 8) * LDT + c) = ds_frag[t / 2][(t % 2) * 2 + 1];
    }
    __syncthreads();  // dS^T complete for all 128 keys; every warp is done with tile j's Q and dO

    // dQ = dS K for this warp's 16 queries x 32 columns, over the 128 keys (keys past the
    // sequence have dS^T rows of 0 and zero-filled K rows).
    float acc_dq[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) acc_dq[i][0] = acc_dq[i][1] = acc_dq[i][2] = acc_dq[i][3] = 0.0f;
#pragma unroll
    for (int kt = 0; kt < Kt::kKeys / 16; ++kt) {
      // A: dS [16 queries x 16 keys] via ldmatrix.trans of dS^T (as mma_ds_k): matrix i = lane / 8
      // holds keys kt*16 + (i / 2) * 8 .. and queries qw*16 + (i % 2) * 8 ..
      uint32_t af[4];
      ldmatrix_x4_trans(af, sdsT + (kt * 16 + (lane % 8) + (lane / 16) * 8) * LDT + qw * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int dp = 0; dp < 2; ++dp) {  // B: K [16 keys x 16 columns] via ldmatrix.trans (as mma_kstep_nn)
        uint32_t bf[4];
        const int row = kt * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = c0 + dp * 16 + (lane / 16) * 8;
        ldmatrix_x4_trans(bf, sK + row * LDS + c);
        mma_16816<T>(acc_dq[2 * dp], af, bf[0], bf[1]);
        mma_16816<T>(acc_dq[2 * dp + 1], af, bf[2], bf[3]);
      }
    }
    // rows q0 + qw*16 + lane/4 (+ 8) < seqlen, columns c0 + 8 i + 2 (lane % 4) (+ 1): scaled, stored once
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = c0 + i * 8 + (lane % 4) * 2;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = q0 + qw * 16 + lane / 4 + 8 * r;
        if (row >= seqlen) continue;
        const int64_t at = (start + row) * p.dq_row_stride + head * D + c;
        const float x0 = acc_dq[i][2 * r] * p.scale, x1 = acc_dq[i][2 * r + 1] * p.scale;
        if (p.grads_bf16) {
          *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.dq) + at) = __floats2bfloat162_rn(x0, x1);
        } else {
          float* dst = static_cast<float*>(p.dq) + at;
          dst[0] = x0;
          dst[1] = x1;
        }
      }
    }
    // The next iteration's barrier (stream_next_tile) orders these reads of dS^T before its
    // rewrite; its prefetch goes into the slot this iteration did not use.
  }
  store_rows<Kt>(p.dk, p.grads_bf16, start * p.dk_row_stride + head * D, p.dk_row_stride, acc_dk, warp * 16 + lane / 4,
                 seqlen, p.scale, lane);
  store_rows<Kt>(p.dv, p.grads_bf16, start * p.dv_row_stride + head * D, p.dv_row_stride, acc_dv, warp * 16 + lane / 4,
                 seqlen, 1.0f, lane);
}

}  // namespace flash
}  // namespace unmask::cuda
