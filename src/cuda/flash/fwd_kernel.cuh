// cuda/flash/fwd_kernel.cuh: flash attention forward on tensor cores (mma.sync m16n8k16).
//
// Grid: (ceil(max_seqlen / kBlockM), NH, B). CTA (m, h, b) computes output rows
// m*kBlockM .. +kBlockM-1 of head h of sequence b; warp w owns rows 16 w .. +15 of those.
//
//   load Q tile -> smem (cp.async), K/V tile 0 -> smem buffer 0
//   for each key block j (kBlockN keys):
//     prefetch K/V tile j+1 into the other buffer (cp.async), write its key mask to smem
//     wait for tile j; Q fragments -> registers (first step only)
//     S = Q K^T                 [16 x kBlockN] per warp, fp32 in registers
//     s = S * scale * log2(e) + mask (0 or -inf)
//     m_new = max(m, rowmax(s)); P = exp2(s - m_new); l = l * exp2(m - m_new) + rowsum(P)
//     O = O * exp2(m - m_new) + P V   (P rounded to bf16/fp16 as the MMA's A operand)
//   O /= l; store rows < seqlen, columns < HS
//
// Nothing of size T x T exists anywhere: S and P live in registers, kBlockN columns at a time.
// The S accumulator layout equals the A-operand layout of the P V MMA pairwise (two n8 tiles
// of S form one k16 slice of P), so P never leaves registers.
//
// Rows past the sequence end (and keys past it) are zero-filled in smem, so no garbage (NaN)
// can reach the MMAs; masked keys get probability exactly 0. A row with no real key keeps
// m = -inf; we then subtract 0 instead of m (exp2(-inf) = 0) and divide by l only when l > 0.
#pragma once
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/flash/mma.cuh"
#include "cuda/flash/params.h"
#include "cuda/flash/traits.h"

namespace unmask::cuda::flash {

/// Copies rows [0, rows_valid) x columns [0, HS) of a global tile (row stride ld) into a
/// [ROWS][kSmemStride] smem tile with cp.async; zero-fills the other rows and the pad columns.
template <typename Kt, int ROWS>
__device__ __forceinline__ void load_tile(typename Kt::Element* s, const typename Kt::Element* g, int64_t ld,
                                          int rows_valid, int tid) {
  constexpr int kChunks = ROWS * Kt::kChunksPerRow;
#pragma unroll
  for (int i0 = 0; i0 < kChunks; i0 += Kt::kThreads) {
    const int i = i0 + tid;
    if (kChunks % Kt::kThreads != 0 && i >= kChunks) break;
    const int r = i / Kt::kChunksPerRow, c = (i % Kt::kChunksPerRow) * 8;
    typename Kt::Element* dst = s + r * Kt::kSmemStride + c;
    if (r < rows_valid && c < Kt::kHeadDim)
      cp_async_16(dst, g + int64_t(r) * ld + c);
    else
      *reinterpret_cast<int4*>(dst) = make_int4(0, 0, 0, 0);
  }
}

/// 0 for a real key, -inf for a masked one or one past the sequence end; bias: [kBlockN].
template <typename Kt>
__device__ __forceinline__ void load_key_bias(float* bias, const FlashFwdParams& p, int b, int kv0, int seqlen,
                                              int tid) {
  for (int i = tid; i < Kt::kBlockN; i += Kt::kThreads) {
    const int key = kv0 + i;
    const bool real =
        key < seqlen && (!p.key_mask || mask_is_set(p.key_mask, p.mask_elem_bytes, int64_t(b) * p.mask_batch_stride + key));
    bias[i] = real ? 0.0f : -INFINITY;
  }
}

/// The online-softmax step of one 16-row tile over a block of keys (log2 domain): s holds the
/// tile's scores in the mma C layout per n8 tile (element e of tile t: row g + 8 (e / 2), key
/// 8 t + 2 (lane % 4) + e % 2), scaled here by scale_log2 plus the key bias (0 or -inf) and
/// turned into P = exp2(s - m_new) in place; the rows' running max and (this thread's partial)
/// sums are updated, and corr = exp2(m_old - m_new), the factor of O, is returned per row half.
/// A row with no real key so far keeps m = -inf and subtracts 0 (P = 0).
template <int NT>
__device__ __forceinline__ void online_softmax_tile(float (&s)[NT][4], float (&row_max)[2], float (&row_sum)[2],
                                                    float (&corr)[2], const float* bias, float scale_log2, int lane) {
  float blk_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = s[t][e] * scale_log2 + bias[t * 8 + (lane % 4) * 2 + (e & 1)];
      s[t][e] = x;
      blk_max[e >> 1] = fmaxf(blk_max[e >> 1], x);
    }
  }
  float sub[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {  // the 4 threads of a quad share a row
    blk_max[r] = fmaxf(blk_max[r], __shfl_xor_sync(0xffffffffu, blk_max[r], 1));
    blk_max[r] = fmaxf(blk_max[r], __shfl_xor_sync(0xffffffffu, blk_max[r], 2));
    const float m_new = fmaxf(row_max[r], blk_max[r]);
    sub[r] = m_new == -INFINITY ? 0.0f : m_new;  // all keys masked so far: keep P = 0
    corr[r] = exp2f(row_max[r] - sub[r]);
    row_max[r] = m_new;
    row_sum[r] *= corr[r];
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pe = exp2f(s[t][e] - sub[e >> 1]);
      s[t][e] = pe;
      row_sum[e >> 1] += pe;
    }
  }
}

/// One tile of the forward: query block m_block (rows q0 = m_block kBlockM ..) of head `head`
/// of sequence b, whose rows start at seq_start. q0 >= seqlen: nothing to compute.
struct FwdTile {
  int m_block = 0, head = 0, b = 0;
  int64_t seq_start = 0;
  int seqlen = 0;
  int q0 = 0;
};

template <int BM>
__device__ __forceinline__ FwdTile fwd_tile(const FlashFwdParams& p, int m_block, int head, int b) {
  FwdTile tile;
  tile.m_block = m_block;
  tile.head = head;
  tile.b = b;
  sequence_bounds(p.cu_seqlens, p.max_seqlen, b, tile.seq_start, tile.seqlen);
  tile.q0 = m_block * BM;
  return tile;
}

/// Row `row` of the head columns of `head` in one of p's [N, row_stride] operands.
template <typename T, int D>
__device__ __forceinline__ const T* fwd_head_row(const void* base, int64_t row, int64_t row_stride, int head) {
  return static_cast<const T*>(base) + row * row_stride + head * D;
}

/// One warp's running state over its 16 query rows while the key blocks go by: Q fragments, O
/// accumulators, the rows' running max and this thread's partial sums (log2 domain; quad-reduced
/// in fwd_store_rows). Registers once inlined.
template <typename Kt>
struct FwdWarpState {
  uint32_t q_frag[Kt::kKSteps][4];
  float acc_o[Kt::kNTilesO][4];
  float row_max[2], row_sum[2];
};

template <typename Kt>
__device__ __forceinline__ void fwd_reset(FwdWarpState<Kt>& st) {
#pragma unroll
  for (int i = 0; i < Kt::kNTilesO; ++i) st.acc_o[i][0] = st.acc_o[i][1] = st.acc_o[i][2] = st.acc_o[i][3] = 0.0f;
  st.row_max[0] = st.row_max[1] = -INFINITY;
  st.row_sum[0] = st.row_sum[1] = 0.0f;
}

/// Q fragments of this warp's rows, all k-steps, from the padded [kBlockM][kSmemStride] tile.
template <typename Kt>
__device__ __forceinline__ void fwd_load_q(FwdWarpState<Kt>& st, const typename Kt::Element* sQ, int warp, int lane) {
  constexpr int LDS = Kt::kSmemStride;
#pragma unroll
  for (int ks = 0; ks < Kt::kKSteps; ++ks) {
    const int r = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = ks * 16 + (lane / 16) * 8;
    ldmatrix_x4(st.q_frag[ks], sQ + r * LDS + c);
  }
}

/// Key block j (keys j kBlockN .. +kBlockN-1 of the sequence) for this warp's rows: S = Q K^T,
/// the online softmax with the block's key bias, the training dropout, O = O corr + P V. sKb,
/// sVb: the block's padded K and V tiles; the CTA's rows start at q0 of the sequence that starts
/// at row seq_start (the dropout counters).
template <typename Kt>
__device__ __forceinline__ void fwd_key_block(FwdWarpState<Kt>& st, const typename Kt::Element* sKb,
                                              const typename Kt::Element* sVb, const float* bias,
                                              const FlashFwdParams& p, int j, int head, int64_t seq_start, int q0,
                                              bool quad_dropout, int warp, int lane) {
  using T = typename Kt::Element;
  constexpr int BN = Kt::kBlockN, LDS = Kt::kSmemStride;
  // ---- S = Q K^T for this warp's 16 rows and BN keys ----
  float acc_s[Kt::kNTilesS][4];
#pragma unroll
  for (int i = 0; i < Kt::kNTilesS; ++i) acc_s[i][0] = acc_s[i][1] = acc_s[i][2] = acc_s[i][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < Kt::kKSteps; ++ks) {
#pragma unroll
    for (int np = 0; np < Kt::kNTilesS / 2; ++np) {  // two n8 key tiles per ldmatrix.x4
      uint32_t kf[4];
      const int key = np * 16 + (lane % 8) + (lane / 16) * 8, c = ks * 16 + ((lane / 8) % 2) * 8;
      ldmatrix_x4(kf, sKb + key * LDS + c);
      mma_16816<T>(acc_s[2 * np], st.q_frag[ks], kf[0], kf[1]);
      mma_16816<T>(acc_s[2 * np + 1], st.q_frag[ks], kf[2], kf[3]);
    }
  }

  // ---- online softmax (log2 domain) ----
  float corr[2];
  online_softmax_tile(acc_s, st.row_max, st.row_sum, corr, bias, p.scale_log2, lane);
  if (p.dropout_p > 0.0f) {  // training: P V uses the dropped probabilities, the row sums do not
    const int64_t row_g = (int64_t(head) * p.lse_head_stride + seq_start + q0 + warp * 16 + lane / 4);
#pragma unroll
    for (int t = 0; t < Kt::kNTilesS; ++t) {
      float f[4];
      dropout_factors_s(f, p.dropout_p, p.dropout_seed, p.dropout_offset + uint64_t(row_g * p.max_seqlen),
                        uint64_t(p.max_seqlen), j * BN + t * 8, quad_dropout, lane);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[t][e] *= f[e];
    }
  }
#pragma unroll
  for (int i = 0; i < Kt::kNTilesO; ++i) {
    st.acc_o[i][0] *= corr[0];
    st.acc_o[i][1] *= corr[0];
    st.acc_o[i][2] *= corr[1];
    st.acc_o[i][3] *= corr[1];
  }

  // ---- O += P V: P from registers (A operand), V via ldmatrix.trans (B operand) ----
#pragma unroll
  for (int kt = 0; kt < BN / 16; ++kt) {
    uint32_t pf[4];
    pf[0] = pack2<T>(acc_s[2 * kt][0], acc_s[2 * kt][1]);
    pf[1] = pack2<T>(acc_s[2 * kt][2], acc_s[2 * kt][3]);
    pf[2] = pack2<T>(acc_s[2 * kt + 1][0], acc_s[2 * kt + 1][1]);
    pf[3] = pack2<T>(acc_s[2 * kt + 1][2], acc_s[2 * kt + 1][3]);
#pragma unroll
    for (int dp = 0; dp < Kt::kNTilesO / 2; ++dp) {
      uint32_t vf[4];
      const int key = kt * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = dp * 16 + (lane / 16) * 8;
      ldmatrix_x4_trans(vf, sVb + key * LDS + c);
      mma_16816<T>(st.acc_o[2 * dp], pf, vf[0], vf[1]);
      mma_16816<T>(st.acc_o[2 * dp + 1], pf, vf[2], vf[3]);
    }
  }
}

/// The epilogue of this warp's rows: normalise and store rows < seqlen of the CTA's q0 ..
/// (the log-sum-exp too for training; o_f32: the f32 rows). gO: fwd_out_rows.
template <typename Kt>
__device__ __forceinline__ void fwd_store_rows(const FwdWarpState<Kt>& st, const FlashFwdParams& p,
                                               typename Kt::Element* gO, int head, int64_t seq_start, int q0,
                                               int seqlen, int warp, int lane) {
  using T = typename Kt::Element;
  constexpr int D = Kt::kHeadDim;
  float inv[2];
  const int row0 = warp * 16 + lane / 4, row1 = row0 + 8;
  const bool ok0 = q0 + row0 < seqlen, ok1 = q0 + row1 < seqlen;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = st.row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = l > 0.0f ? 1.0f / l : 0.0f;
    if (p.lse && lane % 4 == 0 && (r == 0 ? ok0 : ok1))  // ln(sum exp(S scale)) = (m + log2 l) ln 2
      p.lse[head * p.lse_head_stride + seq_start + q0 + (r == 0 ? row0 : row1)] =
          l > 0.0f ? (st.row_max[r] + log2f(l)) * 0.6931471805599453f : -INFINITY;
  }
  float* gOf = static_cast<float*>(p.o) + (seq_start + q0) * p.o_row_stride + head * D;  // o_f32 only
#pragma unroll
  for (int i = 0; i < Kt::kNTilesO; ++i) {
    if (i * 8 >= D) break;  // pad columns (HS not a multiple of 16)
    const int c = i * 8 + (lane % 4) * 2;
    if (p.o_f32) {
      if (ok0)
        *reinterpret_cast<float2*>(gOf + int64_t(row0) * p.o_row_stride + c) =
            make_float2(st.acc_o[i][0] * inv[0], st.acc_o[i][1] * inv[0]);
      if (ok1)
        *reinterpret_cast<float2*>(gOf + int64_t(row1) * p.o_row_stride + c) =
            make_float2(st.acc_o[i][2] * inv[1], st.acc_o[i][3] * inv[1]);
      continue;
    }
    if (ok0)
      *reinterpret_cast<uint32_t*>(gO + int64_t(row0) * p.o_row_stride + c) =
          pack2<T>(st.acc_o[i][0] * inv[0], st.acc_o[i][1] * inv[0]);
    if (ok1)
      *reinterpret_cast<uint32_t*>(gO + int64_t(row1) * p.o_row_stride + c) =
          pack2<T>(st.acc_o[i][2] * inv[1], st.acc_o[i][3] * inv[1]);
  }
}

/// The CTA's first output row of head `head` (not o_f32). Computed before the key loop, where
/// it has always been: ptxas allocates the kernels' registers differently with it after the
/// loop (the 128-row head-size-64 instance then takes 154 registers instead of 128, one CTA a
/// SM instead of two).
template <typename Kt>
__device__ __forceinline__ typename Kt::Element* fwd_out_rows(const FlashFwdParams& p, int head, int64_t seq_start,
                                                              int q0) {
  return static_cast<typename Kt::Element*>(p.o) + (seq_start + q0) * p.o_row_stride + head * Kt::kHeadDim;
}

template <typename Kt>
__global__ void __launch_bounds__(Kt::kThreads) flash_fwd_kernel(const __grid_constant__ FlashFwdParams p) {
  using T = typename Kt::Element;
  constexpr int BM = Kt::kBlockM, BN = Kt::kBlockN, D = Kt::kHeadDim, LDS = Kt::kSmemStride;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);               // [BM][LDS]
  T* sK = sQ + BM * LDS;                                // [2][BN][LDS]
  T* sV = sK + 2 * BN * LDS;                            // [2][BN][LDS]
  float* sBias = reinterpret_cast<float*>(sV + 2 * BN * LDS);  // [2][BN]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const FwdTile tile = fwd_tile<BM>(p, blockIdx.x, blockIdx.y, blockIdx.z);
  const int head = tile.head, b = tile.b, seqlen = tile.seqlen, q0 = tile.q0;
  const int64_t seq_start = tile.seq_start;
  if (q0 >= seqlen) return;

  const T* gQ = fwd_head_row<T, D>(p.q, seq_start + q0, p.q_row_stride, head);
  const T* gK = fwd_head_row<T, D>(p.k, seq_start, p.k_row_stride, head);
  const T* gV = fwd_head_row<T, D>(p.v, seq_start, p.v_row_stride, head);
  T* gO = fwd_out_rows<Kt>(p, head, seq_start, q0);
  const int n_blocks = (seqlen + BN - 1) / BN;

  // ---- prologue: Q and the first K/V tile ----
  load_tile<Kt, BM>(sQ, gQ, p.q_row_stride, min(BM, seqlen - q0), tid);
  load_tile<Kt, BN>(sK, gK, p.k_row_stride, min(BN, seqlen), tid);
  load_tile<Kt, BN>(sV, gV, p.v_row_stride, min(BN, seqlen), tid);
  cp_async_commit();
  load_key_bias<Kt>(sBias, p, b, 0, seqlen, tid);

  FwdWarpState<Kt> st;  // this warp's rows: warp 16 .. +15 of the CTA
  fwd_reset(st);

  const bool quad_dropout = dropout_quads_aligned(p.dropout_offset, p.max_seqlen);
  for (int j = 0; j < n_blocks; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_blocks) {  // prefetch tile j+1 into the other buffer
      const int kv1 = (j + 1) * BN;
      load_tile<Kt, BN>(sK + (buf ^ 1) * BN * LDS, gK + int64_t(kv1) * p.k_row_stride, p.k_row_stride,
                        min(BN, seqlen - kv1), tid);
      load_tile<Kt, BN>(sV + (buf ^ 1) * BN * LDS, gV + int64_t(kv1) * p.v_row_stride, p.v_row_stride,
                        min(BN, seqlen - kv1), tid);
      cp_async_commit();
      load_key_bias<Kt>(sBias + (buf ^ 1) * BN, p, b, kv1, seqlen, tid);
      cp_async_wait<1>();  // tile j (and Q) landed; tile j+1 may still be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    if (j == 0) fwd_load_q(st, sQ, warp, lane);
    fwd_key_block(st, sK + buf * BN * LDS, sV + buf * BN * LDS, sBias + buf * BN, p, j, head, seq_start, q0,
                  quad_dropout, warp, lane);
    __syncthreads();  // buffer `buf` is refilled by the prefetch of step j+2... issued at step j+1
  }

  fwd_store_rows(st, p, gO, head, seq_start, q0, seqlen, warp, lane);
}

}  // namespace unmask::cuda::flash
