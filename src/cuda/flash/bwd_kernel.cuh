// cuda/flash/bwd_kernel.cuh: flash attention backward on tensor cores (mma.sync m16n8k16, bf16
// operands, fp32 accumulators), the training twin of fwd_kernel.cuh. No atomics: two kernels,
// each output element written once (the f32 attention_train.cu does the same on CUDA cores).
//
// Inputs: bf16 copies of q, k, v, dout; lse (natural, from the forward) and
// delta = rowsum(dout * out) (f32, [NH, N]). With s = S * scale * log2(e) and
// lse2 = lse * log2(e), P = exp2(s - lse2) is the forward's softmax, recomputed per tile:
//
//   dK/dV kernel, grid (key blocks of kBlockN, NH, B); warp w owns 16 keys; loop over query
//   tiles of kBlockM (Q, dO, lse2, delta staged in shared memory):
//     S^T = K Q^T           A = K (registers), B = Q rows (ldmatrix)
//     P^T = exp2(S^T scale log2e - lse2[q]), 0 for a masked or missing key
//     dV += P^T dO          A = P^T (accumulators re-packed to bf16), B = dO (ldmatrix.trans)
//     dP^T = V dO^T         A = V (registers), B = dO rows (ldmatrix)
//     dS^T = P^T (dP^T - delta[q])
//     dK += dS^T Q          A = dS^T (re-packed), B = Q (ldmatrix.trans);  dK *= scale at the end
//   dQ kernel, grid (query blocks of kBlockM, NH, B); warp w owns 16 queries; loop over key tiles:
//     S = Q K^T, P = exp2(S scale log2e + mask - lse2[row]), dP = dO V^T,
//     dS = P (dP - delta[row]), dQ += dS K (B = K via ldmatrix.trans);  dQ *= scale at the end
//
// Atomic-dQ variant (kAtomicDq, FlashBwdDq::atomic; flash-attention 2's scheme): the dK/dV
// kernel also writes dS^T (bf16) to shared memory and adds dQ_partial = dS K (16 queries x HS per
// warp, A = dS via ldmatrix.trans of dS^T, B = the CTA's own K tile) into an f32 accumulator with
// float2 atomics; flash_bwd.cu then scales and stores it. 5 MMAs of 64 x 64 x HS per tile pair
// instead of 7 (the dQ kernel recomputes S and dP), but the sum order of dQ varies from run to
// run (the recompute kernels are bitwise deterministic).
//
// Register pressure, and the instances flash_bwd.cu launches: P^T and dS^T go to bf16 A fragments
// n8 tile by n8 tile as they are made (pack_acc_tile), and the dK/dV kernel makes them for 32
// queries at a time (the dQ kernel for 32 keys), so that at most 16 x 32 of each is live in fp32.
// kDropout = false compiles the dropout code out (head size 64 without dropout: the ViTs; the dQ
// kernel then fits the 168 registers of three CTAs per SM). kKvInSmem (head size 64 without
// dropout; the default where three CTAs fit, H200 2026-11-28) re-reads the K and V fragments
// from shared memory every k-step instead of holding them, for three CTAs per SM (12 warps, where
// the 255-register kernel gets 8 and Nsight Compute found it latency-bound).
//
// A query row with no real key has lse = -inf; its lse2 is taken as +inf so that P = 0 and it
// adds nothing (the forward gave it a zero output). Rows past the sequence end are zero-filled
// in shared memory and get lse2 = +inf; keys past it or masked get P = 0.
// Dropout (the forward's Philox mask, recomputed, factor f = keep / (1 - p)):
// dV += (P f)^T dO and dS = P (dPd f - delta), dPd = dO V^T (the f32 kernels' formulas). With
// four-aligned counters (dropout_quads_aligned: BERT's sites and lengths) each lane evaluates one
// Philox block per n8 tile and shares its words by shuffles (common.cuh dropout_factors_st_tile,
// _s_tile): a quarter of the evaluations of one block per element (dK/dV), half of one per pair
// (dQ, and the forward).
// Fragment layouts and ldmatrix patterns: mma.cuh and fwd_kernel.cuh (the same three patterns:
// an A operand from row-major smem, a B operand whose n index is the smem row, and a B operand
// whose k index is the smem row, through .trans).
#pragma once
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/flash/fwd_kernel.cuh"
#include "cuda/flash/mma.cuh"

namespace unmask::cuda {

/// dQ of the tensor-core backward: `recompute` (a second kernel recomputes S and dP per query
/// block: deterministic), `atomic` (the dK/dV kernel adds dS K into an f32 accumulator: fewer
/// MMAs, run-to-run rounding differences), or `automatic` (the default of flash_bwd.cu: atomic
/// when `rows` is known).
enum class FlashBwdDq : uint8_t { automatic, recompute, atomic };

struct FlashBwdParams {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;  // bf16 rows, head h at column h * HS
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0, dout_row_stride = 0;
  const float* lse = nullptr;    // [NH, lse_head_stride], natural log
  const float* delta = nullptr;  // [NH, lse_head_stride]
  int64_t lse_head_stride = 0;
  // Gradient rows (overwritten): f32, or bf16 when grads_bf16 (training with bf16 activations:
  // one rounding of the fp32 accumulators, no f32 scratch). Row strides in elements, even.
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  int64_t dq_row_stride = 0, dk_row_stride = 0, dv_row_stride = 0;
  bool grads_bf16 = false;
  int num_heads = 0, head_dim = 0, batch = 0, max_seqlen = 0;
  const int32_t* cu_seqlens = nullptr;  // packed mode, device [B+1]
  const void* key_mask = nullptr;       // padded mode, device [B, T], optional
  int mask_elem_bytes = 1;
  int64_t mask_batch_stride = 0;
  float scale = 0.0f, scale_log2 = 0.0f;
  // The forward's dropout (params.h counters: offset + (h lse_head_stride + row) max_seqlen + key).
  float dropout_p = 0.0f;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  // How dQ is computed (FlashBwdDq). `rows`: the batch's total rows (B T padded, cu[B] packed),
  // which sizes the atomic variant's accumulator; 0 (unknown) means the recompute kernel.
  FlashBwdDq dq_mode = FlashBwdDq::automatic;
  int64_t rows = 0;
  // CTAs per SM of the dK/dV kernel: 2 (K and V fragments in registers, 255 of them), 3 (K and V
  // re-read from shared memory every iteration, 168 registers; head size 64 without dropout on
  // a device where three CTAs' shared memory fits an SM, sm_90; elsewhere runs as 2), or 0: 3
  // (2 where 3 does not apply). Same results.
  int ctas_per_sm = 0;
  // Sequences of at most 128 keys at head size 64 in one kernel (bwd_short_kernel.cuh; the
  // default); false runs the dK/dV kernel pair (tests).
  bool short_kernel = true;
  // Set by flash_attention_backward for the atomic variant: f32 [rows, NH HS], zeroed.
  float* dq_accum = nullptr;
};

template <int kHeadDim_, int kBlockM_ = 64, int kBlockN_ = 64>
struct FlashBwdTraits {
  using Element = __nv_bfloat16;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimPad = (kHeadDim + 15) / 16 * 16;
  static constexpr int kBlockM = kBlockM_;  // queries per tile
  static constexpr int kBlockN = kBlockN_;  // keys per tile
  static constexpr int kWarps = 4;          // dK/dV: kBlockN = 16 kWarps keys; dQ: kBlockM = 16 kWarps queries
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kSmemStride = kHeadDimPad + 8;
  static constexpr int kChunksPerRow = kHeadDimPad / 8;
  static constexpr int kKSteps = kHeadDimPad / 16;
  static constexpr int kNTilesO = kHeadDimPad / 8;
  static constexpr size_t kSmemTile = size_t(64) * kSmemStride * sizeof(Element);
  // Two slots of two tiles (the CTA's own K, V or Q, dO, then the double-buffered streamed
  // tiles) and two row vectors, double-buffered: lse2 and delta [2][64] (dK/dV), the key bias
  // [2][64] (dQ).
  static constexpr size_t kSmemBytes = 4 * kSmemTile + 2 * 2 * 64 * sizeof(float);
  // The atomic-dQ dK/dV kernel adds two tiles: its own K kept for dQ = dS K, and dS^T [64 keys]
  // [64 queries + 8] (kSmemStrideDs: the same 16-byte pad, conflict-free ldmatrix.trans).
  static constexpr int kSmemStrideDs = 64 + 8;
  static constexpr size_t kSmemBytesAtomicDq = kSmemBytes + kSmemTile + size_t(64) * kSmemStrideDs * sizeof(Element);
  static_assert(kBlockM == 64 && kBlockN == 64 && kWarps * 16 == 64, "one 16-row MMA tile per warp, 64-row tiles");
  static_assert(kHeadDim % 8 == 0 && kHeadDim <= 128, "head rows move in 16-byte chunks; accumulators in registers");
  static_assert((kSmemStride * sizeof(Element)) % 16 == 0 && (kSmemStride * sizeof(Element)) % 128 != 0,
                "16-byte aligned, bank-conflict-free smem rows");
  // HS 64: 37.9 KB; 80: 46.1 KB; 88 (padded to 96): 54.3 KB; 128: 70.6 KB. Above 48 KB the
  // launcher opts in (cudaFuncAttributeMaxDynamicSharedMemorySize; sm_80 allows 163 KB).
  static_assert(kSmemBytesAtomicDq <= 160 * 1024, "fits sm_80's dynamic shared memory");
};

/// Byte offsets of the dK/dV kernel's shared-memory pieces, for its shapes:
///   default:    [slot 0: Q, dO][slot 1: Q, dO] lse[2][64] delta[2][64]; K and V arrive in slot 0
///               and go to registers before the loop, which then reuses slot 0;
///   kAtomicDq:  K in a fifth tile (kept for dQ = dS K; V still arrives in slot 0), then dS^T
///               [64 keys][kSmemStrideDs] before lse and delta;
///   kKvInSmem:  K and V in tiles 4 and 5 for the whole kernel, re-read as MMA fragments every
///               iteration instead of held in 32 registers (HS 64): the kernel fits 168
///               registers, so three CTAs share an SM (12 warps instead of 8).
/// The static_asserts check that no two pieces overlap and that every piece is 16-byte aligned.
template <typename Kt, bool kAtomicDq, bool kKvInSmem>
struct FlashBwdDkdvSmem {
  static constexpr size_t kTile = Kt::kSmemTile;
  static constexpr size_t kSlot0 = 0, kSlot1 = 2 * kTile, kSlotsEnd = 4 * kTile;
  static constexpr size_t kK = (kAtomicDq || kKvInSmem) ? kSlotsEnd : kSlot0;
  static constexpr size_t kV = kKvInSmem ? kSlotsEnd + kTile : kSlot0 + kTile;
  static constexpr size_t kTilesEnd = kSlotsEnd + (kKvInSmem ? 2 : kAtomicDq ? 1 : 0) * kTile;
  static constexpr size_t kDsT = kTilesEnd;
  static constexpr size_t kDsTBytes = kAtomicDq ? size_t(64) * Kt::kSmemStrideDs * sizeof(typename Kt::Element) : 0;
  static constexpr size_t kLse = kDsT + kDsTBytes;  // [2][64] f32
  static constexpr size_t kDelta = kLse + 2 * 64 * sizeof(float);
  static constexpr size_t kBytes = kDelta + 2 * 64 * sizeof(float);

  static_assert(kTile % 16 == 0 && kDsTBytes % 16 == 0, "every piece starts 16-byte aligned (cp.async, ldmatrix)");
  // K and V either share slot 0 (read before the loop reuses it) or sit past both slots.
  static_assert((kK == kSlot0 && kV == kSlot0 + kTile) || kK >= kSlotsEnd, "K overlaps a query slot");
  static_assert(kV + kTile <= kSlot1 || kV >= kSlotsEnd, "V overlaps slot 1, which holds query tile 0 from the start");
  static_assert(kK == kSlot0 || (kK + kTile <= kTilesEnd && (kV == kSlot0 + kTile || kK + kTile <= kV)),
                "K overlaps V or runs past the tiles");
  static_assert(kV + kTile <= kTilesEnd || kV == kSlot0 + kTile, "V runs past the tiles");
  static_assert(kDsT >= kTilesEnd && kLse >= kDsT + kDsTBytes && kDelta >= kLse + 2 * 64 * sizeof(float),
                "dS^T, lse and delta follow the tiles in order");
  static_assert(kBytes <= 227 * 1024 && (!kKvInSmem || 3 * (kBytes + 1024) <= 228 * 1024),
                "fits the dynamic shared memory of sm_90 (three CTAs per SM with kKvInSmem)");
};
static_assert(FlashBwdDkdvSmem<FlashBwdTraits<64>, false, false>::kBytes == FlashBwdTraits<64>::kSmemBytes &&
                  FlashBwdDkdvSmem<FlashBwdTraits<128>, true, false>::kBytes == FlashBwdTraits<128>::kSmemBytesAtomicDq,
              "the default and atomic layouts are the traits' sizes");

namespace flash {

/// 4-byte asynchronous global -> shared copy (.ca: the only cache mode below 16 bytes; mma.cuh
/// has the 16-byte one). Both addresses 4-byte aligned.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}

/// The lse and delta of a query tile's 64 rows into l[64] and d[64] (shared memory): cp.async
/// for the `valid` rows (part of the caller's commit group), lse -inf (P = 0) and delta 0 past
/// them. lse, delta: the tile's first row. Shared by the dK/dV kernels (the pair's and the short one).
template <int kThreads>
__device__ __forceinline__ void stage_lse_delta(float* l, float* d, const float* lse, const float* delta, int valid,
                                                int tid) {
  for (int i = tid; i < 64; i += kThreads) {
    if (i < valid) {
      cp_async_4(l + i, lse + i);
      cp_async_4(d + i, delta + i);
    } else {
      l[i] = -INFINITY;
      d[i] = 0.0f;
    }
  }
}

/// Whether key `key` of sequence b takes part (inside the sequence and not masked).
__device__ __forceinline__ bool bwd_key_real(const FlashBwdParams& p, int b, int key, int seqlen) {
  if (key >= seqlen) return false;
  return !p.key_mask || mask_is_set(p.key_mask, p.mask_elem_bytes, int64_t(b) * p.mask_batch_stride + key);
}

/// lse in the log2 domain, +inf for a row with no real key or past the sequence (P = 0).
__device__ __forceinline__ float bwd_lse2(float lse) {
  return lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
}

/// acc[16 x 8 NT] += A (16 x HS, registers) * B^T where B is an [8 NT][LDS] smem tile whose rows
/// are the n index (keys or queries) and whose columns are the k index (head dim).
template <typename Kt, int NT>
__device__ __forceinline__ void mma_rows_nt(float (&acc)[NT][4], const uint32_t (&a)[Kt::kKSteps][4],
                                            const typename Kt::Element* sB, int lane) {
#pragma unroll
  for (int ks = 0; ks < Kt::kKSteps; ++ks) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bf[4];
      const int row = np * 16 + (lane % 8) + (lane / 16) * 8, c = ks * 16 + ((lane / 8) % 2) * 8;
      ldmatrix_x4(bf, sB + row * Kt::kSmemStride + c);
      mma_16816<typename Kt::Element>(acc[2 * np], a[ks], bf[0], bf[1]);
      mma_16816<typename Kt::Element>(acc[2 * np + 1], a[ks], bf[2], bf[3]);
    }
  }
}

/// mma_rows_nt with A read from smem: rows warp*16 .. +15 of the [64][LDS] tile sA, one k-step's
/// fragment at a time (4 registers instead of the 4 kKSteps of a whole A held in registers).
template <typename Kt, int NT>
__device__ __forceinline__ void mma_rows_nt_smem_a(float (&acc)[NT][4], const typename Kt::Element* sA, int warp,
                                                   const typename Kt::Element* sB, int lane) {
#pragma unroll
  for (int ks = 0; ks < Kt::kKSteps; ++ks) {
    uint32_t a[4];
    ldmatrix_x4(a, sA + (warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * Kt::kSmemStride + ks * 16 + (lane / 16) * 8);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bf[4];
      const int row = np * 16 + (lane % 8) + (lane / 16) * 8, c = ks * 16 + ((lane / 8) % 2) * 8;
      ldmatrix_x4(bf, sB + row * Kt::kSmemStride + c);
      mma_16816<typename Kt::Element>(acc[2 * np], a, bf[0], bf[1]);
      mma_16816<typename Kt::Element>(acc[2 * np + 1], a, bf[2], bf[3]);
    }
  }
}

/// out[16 x HS] += A (one 16 x 16 k-step, fragments) * B[kt*16 .. +15][0 .. HS) where B is a
/// [64][LDS] smem tile whose rows are the k index and columns the head dim (ldmatrix.trans).
template <typename Kt>
__device__ __forceinline__ void mma_kstep_nn(float (&out)[Kt::kNTilesO][4], const uint32_t (&a)[4],
                                             const typename Kt::Element* sB, int kt, int lane) {
#pragma unroll
  for (int dp = 0; dp < Kt::kNTilesO / 2; ++dp) {
    uint32_t bf[4];
    const int row = kt * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = dp * 16 + (lane / 16) * 8;
    ldmatrix_x4_trans(bf, sB + row * Kt::kSmemStride + c);
    mma_16816<typename Kt::Element>(out[2 * dp], a, bf[0], bf[1]);
    mma_16816<typename Kt::Element>(out[2 * dp + 1], a, bf[2], bf[3]);
  }
}

/// n8 tile t of a 16 x 64 fp32 accumulator (P^T, dS^T or dS), rounded to T, into the A
/// fragments of the 16 x 64 operand it becomes (k-step t / 2; C-fragment columns 2(lane % 4)..+1
/// of tile t are A columns 8 (t % 2) + 2(lane % 4)..+1: a0/a1 for even t, a2/a3 for odd t, rows
/// g in a0/a2 and g + 8 in a1/a3). Done tile by tile as the fp32 values are made, so that the
/// fp32 tile dies at once: 16 registers for the operand instead of 32 (ptxas, sm_90a: the
/// three-CTA dK/dV kernel's spill 156 -> 66 B, HS 80's dK/dV spills gone).
template <typename T>
__device__ __forceinline__ void pack_acc_tile(uint32_t (&frags)[4][4], const float (&acc)[4], int t) {
  frags[t / 2][(t % 2) * 2] = pack2<T>(acc[0], acc[1]);
  frags[t / 2][(t % 2) * 2 + 1] = pack2<T>(acc[2], acc[3]);
}

/// out[16 x HS] += A (16 x 64, the fragments of pack_acc_tile) * B where B is a [64][LDS] smem
/// tile whose rows are the k index (the 64 of A's columns) and columns the head dim.
template <typename Kt>
__device__ __forceinline__ void mma_frags_nn(float (&out)[Kt::kNTilesO][4], const uint32_t (&a)[4][4],
                                             const typename Kt::Element* sB, int lane) {
#pragma unroll
  for (int kt = 0; kt < 4; ++kt) mma_kstep_nn<Kt>(out, a[kt], sB, kt, lane);
}

/// A-operand fragments of rows warp*16 .. +15 of a [64][LDS] smem tile, every k-step.
template <typename Kt>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[Kt::kKSteps][4], const typename Kt::Element* s, int warp,
                                             int lane) {
#pragma unroll
  for (int ks = 0; ks < Kt::kKSteps; ++ks) {
    const int r = warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = ks * 16 + (lane / 16) * 8;
    ldmatrix_x4(a[ks], s + r * Kt::kSmemStride + c);
  }
}

/// Calls f(row, c, x0, x1) for each pair of adjacent columns c, c + 1 (< HS) a lane holds of a
/// 16 x HS accumulator, in rows `row0` and `row0 + 8` when they are < valid (the C fragment:
/// c = 8 i + 2 (lane % 4), even).
template <typename Kt, typename F>
__device__ __forceinline__ void for_each_acc_pair(const float (&acc)[Kt::kNTilesO][4], int row0, int valid, int lane,
                                                  F&& f) {
#pragma unroll
  for (int i = 0; i < Kt::kNTilesO; ++i) {
    if (i * 8 >= Kt::kHeadDim) break;
    const int c = i * 8 + (lane % 4) * 2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      if (row < valid) f(row, c, acc[i][2 * r], acc[i][2 * r + 1]);
    }
  }
}

/// Stores rows `row0` and `row0 + 8` (when < valid) of a 16 x HS accumulator times `mul`, at
/// element `offset` of g (row stride ld): f32 pairs, or bf16 pairs rounded once when `bf16`
/// (c is even and ld even, so a pair is 4-byte aligned).
template <typename Kt>
__device__ __forceinline__ void store_rows(void* g, bool bf16, int64_t offset, int64_t ld,
                                           const float (&acc)[Kt::kNTilesO][4], int row0, int valid, float mul,
                                           int lane) {
  for_each_acc_pair<Kt>(acc, row0, valid, lane, [&](int row, int c, float a0, float a1) {
    const int64_t at = offset + int64_t(row) * ld + c;
    const float x0 = a0 * mul, x1 = a1 * mul;
    if (bf16) {
      *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(g) + at) = __floats2bfloat162_rn(x0, x1);
    } else {
      float* dst = static_cast<float*>(g) + at;
      dst[0] = x0;
      dst[1] = x1;
    }
  });
}

/// Iteration j of n over double-buffered tiles: starts tile j + 1 (load_next(j + 1): one
/// cp.async commit group, into the slot iteration j - 1 read, which the barrier ending every
/// iteration has freed), then waits until tile j has landed and every thread's stores are visible.
template <typename F>
__device__ __forceinline__ void stream_next_tile(int j, int n, F&& load_next) {
  if (j + 1 < n) {
    load_next(j + 1);
    cp_async_wait<1>();  // tile j has landed; tile j + 1 may be in flight
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

/// dQ_partial [16 queries x HS] = dS (A: this warp's 16 queries x the CTA's 64 keys, read with
/// ldmatrix.trans from dS^T [key][query] in smem) * K (B: the CTA's [64 keys][LDS] tile, k = key
/// = smem row, through .trans as in mma_frags_nn).
template <typename Kt>
__device__ __forceinline__ void mma_ds_k(float (&out)[Kt::kNTilesO][4], const typename Kt::Element* sdsT,
                                         const typename Kt::Element* sK, int warp, int lane) {
#pragma unroll
  for (int kt = 0; kt < 4; ++kt) {
    // Matrix i = lane / 8 of the A fragment: keys kt*16 + (i / 2) * 8 .., queries warp*16 + (i % 2) * 8 ..
    // (a0: queries 0-7 x keys 0-7, a1: queries 8-15, a2: keys 8-15, a3: both), transposed on load.
    uint32_t af[4];
    ldmatrix_x4_trans(af, sdsT + (kt * 16 + (lane % 8) + (lane / 16) * 8) * Kt::kSmemStrideDs + warp * 16 +
                              ((lane / 8) % 2) * 8);
    mma_kstep_nn<Kt>(out, af, sK, kt, lane);
  }
}

/// accum[row, c] += acc (rows row0 and row0 + 8 when < valid, columns < HS) for one warp's
/// 16 x HS dQ partial; accum rows of `ld` floats. float2 reductions on sm_90, pairs of scalar
/// ones before (c and ld are even: 8-byte aligned pairs).
template <typename Kt>
__device__ __forceinline__ void atomic_add_rows(float* accum, int64_t ld, const float (&acc)[Kt::kNTilesO][4],
                                                int row0, int valid, int lane) {
  for_each_acc_pair<Kt>(acc, row0, valid, lane, [&](int row, int c, float a0, float a1) {
    float* dst = accum + int64_t(row) * ld + c;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a0, a1));
#else
    atomicAdd(dst, a0);
    atomicAdd(dst + 1, a1);
#endif
  });
}

/// The dK/dV kernels' elementwise step on n8 tile t (queries q0 + 8 t ..) of S^T and dP^T: 16
/// keys x 8 queries in the C-fragment layout (element e: key k0 + 16 warp + lane / 4 + 8 (e / 2),
/// query t 8 + 2 (lane % 4) + e % 2), in place: pt becomes (P f)^T, dpt dS^T = P^T (dP^T f -
/// delta). The dropout factors f: a Philox block per lane with four-aligned counters, else one
/// per element. One copy for the two kernels that share this layout per warp: the mma.sync
/// dK/dV kernel (head sizes up to 80) and the short-sequence one (k0 = 0).
template <bool kDropout>
__device__ __forceinline__ void dkdv_tile_elementwise(float (&pt)[4], float (&dpt)[4], const FlashBwdParams& p,
                                                      int head, int64_t start, int q0, int k0, int warp, int lane,
                                                      int t, const bool (&key_ok)[2], const float* lse_j,
                                                      const float* delta_j, bool quad_dropout) {
  float f[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  if (kDropout && p.dropout_p > 0.0f) {
    const int64_t q_row = head * p.lse_head_stride + start + q0 + t * 8 + (lane % 4) * 2;
    if (quad_dropout) {
      dropout_factors_st_tile(f, p.dropout_p, p.dropout_seed, p.dropout_offset + uint64_t(q_row * p.max_seqlen),
                              uint64_t(p.max_seqlen), k0 + warp * 16 + 4 * (lane >> 4), lane);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f[e] = dropout_factor(p.dropout_p, p.dropout_seed,
                              p.dropout_offset + uint64_t((q_row + (e & 1)) * p.max_seqlen) +
                                  uint64_t(k0 + warp * 16 + lane / 4 + 8 * (e >> 1)));
    }
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) {  // query column q of elements c and c + 2 (keys row, row + 8)
    const int q = t * 8 + (lane % 4) * 2 + c;
    const float lse2 = bwd_lse2(lse_j[q]), row_delta = delta_j[q];
#pragma unroll
    for (int e = c; e < 4; e += 2) {
      const float pv = key_ok[e >> 1] ? exp2f(pt[e] * p.scale_log2 - lse2) : 0.0f;
      pt[e] = pv * f[e];                          // (P f)^T, for dV
      dpt[e] = pv * (dpt[e] * f[e] - row_delta);  // dS^T
    }
  }
}

/// The dQ kernels' elementwise step on n8 tile t (keys k0 + 8 t ..) of S and dP: 16 queries x 8
/// keys (element e: row g + 8 (e / 2) of the warp's queries, whose lse2 and delta are lse2[e / 2],
/// delta[e / 2]; key t 8 + 2 (lane % 4) + e % 2 of the tile, key bias bias_j), in place: dpt
/// becomes dS = P (dP f - delta), P = exp2(S scale log2e + bias - lse2). row_g: the dropout
/// counters' row of element 0 (h lse_head_stride + the sequence's row of query g).
template <bool kDropout>
__device__ __forceinline__ void dq_tile_elementwise(const float (&st)[4], float (&dpt)[4], const FlashBwdParams& p,
                                                    int64_t row_g, int k0, int lane, int t, const float* bias_j,
                                                    const float (&lse2)[2], const float (&delta)[2],
                                                    bool quad_dropout) {
  float f[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  if (kDropout && p.dropout_p > 0.0f)
    dropout_factors_s(f, p.dropout_p, p.dropout_seed, p.dropout_offset + uint64_t(row_g * p.max_seqlen),
                      uint64_t(p.max_seqlen), k0 + t * 8, quad_dropout, lane);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int key = t * 8 + (lane % 4) * 2 + (e & 1);
    const float pv = exp2f(st[e] * p.scale_log2 + bias_j[key] - lse2[e >> 1]);
    dpt[e] = pv * (dpt[e] * f[e] - delta[e >> 1]);  // dS
  }
}

/// CTAs per SM the dK/dV kernel is compiled for (__launch_bounds__): 3 with K and V in shared
/// memory (168 registers), else 1 (no limit below the 255 a thread may have; 2 fit by registers).
template <bool kKvInSmem>
__host__ __device__ constexpr int flash_bwd_dkdv_min_ctas() {
  return kKvInSmem ? 3 : 1;
}

/// dK and dV of one 64-key block (and, kAtomicDq, its dQ contributions; see the header).
/// kDropout false: compiled without the dropout code (p.dropout_p must be 0; fewer registers).
/// kKvInSmem: K and V fragments re-read from shared memory every iteration (FlashBwdDkdvSmem).
template <typename Kt, bool kAtomicDq, bool kDropout, bool kKvInSmem>
__global__ void __launch_bounds__(Kt::kThreads, flash_bwd_dkdv_min_ctas<kKvInSmem>())
    flash_bwd_dkdv_kernel(const __grid_constant__ FlashBwdParams p) {
  using T = typename Kt::Element;
  using Smem = FlashBwdDkdvSmem<Kt, kAtomicDq, kKvInSmem>;
  constexpr int D = Kt::kHeadDim, LDS = Kt::kSmemStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Two slots of two [64][LDS] tiles double-buffer the query tiles (Q, dO): tile j sits in slot
  // (j + 1) % 2, and tile j + 1 is loaded while tile j is multiplied. By default slot 0 first
  // holds this CTA's K and V, which go to registers before the loop (kAtomicDq: K in a tile of
  // its own, kept for dQ = dS K; kKvInSmem: K and V both in tiles of their own). Smem: the offsets.
  T* const smem = reinterpret_cast<T*>(smem_raw);
  // tile `which` (0 or 1) of slot `s`: plain arithmetic, no local array indexed at run time
  auto slot = [smem](int s, int which) { return smem + (2 * s + which) * 64 * LDS; };
  T* const sK = reinterpret_cast<T*>(smem_raw + Smem::kK);
  T* const sV = reinterpret_cast<T*>(smem_raw + Smem::kV);
  T* const sdsT = reinterpret_cast<T*>(smem_raw + Smem::kDsT);  // kAtomicDq only: [64][kSmemStrideDs]
  // Raw lse and delta of the query tiles, [2][64] each, double-buffered like the tiles (cp.async,
  // so that no thread waits for a global load inside the loop); lse2 is taken at use.
  float* sLse = reinterpret_cast<float*>(smem_raw + Smem::kLse);
  float* sDelta = reinterpret_cast<float*>(smem_raw + Smem::kDelta);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int head = blockIdx.y, b = blockIdx.z;
  int64_t start;
  int seqlen;
  sequence_bounds(p.cu_seqlens, p.max_seqlen, b, start, seqlen);
  const int k0 = blockIdx.x * 64;
  if (k0 >= seqlen) return;

  const T* gQ = static_cast<const T*>(p.q) + start * p.q_row_stride + head * D;
  const T* gdO = static_cast<const T*>(p.dout) + start * p.dout_row_stride + head * D;
  const float* lse = p.lse + head * p.lse_head_stride + start;
  const float* delta = p.delta + head * p.lse_head_stride + start;
  // Query tile j (rows q0 = 64 j ..) into slot (j + 1) % 2 and its lse / delta into [j % 2]:
  // one cp.async commit group; the zero rows (lse -inf: P = 0) are plain stores.
  auto load_query_tile = [&](int j) {
    const int q0 = j * 64, valid = min(64, seqlen - q0);
    load_tile<Kt, 64>(slot((j + 1) % 2, 0), gQ + int64_t(q0) * p.q_row_stride, p.q_row_stride, valid, tid);
    load_tile<Kt, 64>(slot((j + 1) % 2, 1), gdO + int64_t(q0) * p.dout_row_stride, p.dout_row_stride, valid, tid);
    stage_lse_delta<Kt::kThreads>(sLse + (j % 2) * 64, sDelta + (j % 2) * 64, lse + q0, delta + q0, valid, tid);
    cp_async_commit();
  };

  load_tile<Kt, 64>(sK, static_cast<const T*>(p.k) + (start + k0) * p.k_row_stride + head * D, p.k_row_stride,
                    min(64, seqlen - k0), tid);
  load_tile<Kt, 64>(sV, static_cast<const T*>(p.v) + (start + k0) * p.v_row_stride + head * D, p.v_row_stride,
                    min(64, seqlen - k0), tid);
  cp_async_commit();
  load_query_tile(0);  // into slot 1
  // This thread's accumulator rows are keys k0 + warp*16 + lane/4 (+ 8).
  const bool key_ok[2] = {bwd_key_real(p, b, k0 + warp * 16 + lane / 4, seqlen),
                          bwd_key_real(p, b, k0 + warp * 16 + lane / 4 + 8, seqlen)};
  // K and V as A fragments: loaded once here (kept in registers), or per iteration (kKvInSmem;
  // the first iteration's wait covers K and V, committed before query tile 0).
  uint32_t k_frag[Kt::kKSteps][4], v_frag[Kt::kKSteps][4];
  if constexpr (!kKvInSmem) {
    cp_async_wait<1>();  // K and V have landed (the query tile may still be in flight)
    __syncthreads();
    load_a_frags<Kt>(k_frag, sK, warp, lane);
    load_a_frags<Kt>(v_frag, sV, warp, lane);
    __syncthreads();  // every warp has its K and V fragments: slot 0 is free for query tile 1
  }

  float acc_dk[Kt::kNTilesO][4], acc_dv[Kt::kNTilesO][4];
#pragma unroll
  for (int i = 0; i < Kt::kNTilesO; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[i][e] = acc_dv[i][e] = 0.0f;

  // Shared Philox blocks (head sizes up to 80, the branch in the loop: for 88 and 128, already
  // over the register file, the transpose raised the spills, sm_90a: 76 -> 200 B, 680 -> 928 B).
  const bool quad_dropout = dropout_quads_aligned(p.dropout_offset, p.max_seqlen);
  const int n_tiles = (seqlen + 63) / 64;
  for (int j = 0; j < n_tiles; ++j) {
    const int q0 = j * 64;
    stream_next_tile(j, n_tiles, load_query_tile);
    const T* sQ = slot((j + 1) % 2, 0);
    const T* sdO = slot((j + 1) % 2, 1);
    const float* lse_j = sLse + (j % 2) * 64;
    const float* delta_j = sDelta + (j % 2) * 64;

    // (P f)^T and dS^T in bf16: the A operands of dV and dK, made kParts query ranges at a time
    // (n8 tiles t = kTiles part .. +kTiles-1 of the 64 queries). Two parts: only 16 x 32 of P^T
    // and dP^T are live in fp32 at once (32 registers fewer than the whole tile; the same values
    // and roundings). ptxas, sm_90a: two parts take HS 80's spills to 0 and HS 128's from 680 to
    // 472 B; under the three-CTA kernel's 168 registers one part spills less (24 B against 316 B
    // of spill loads, atomic dQ).
    constexpr int kParts = kKvInSmem ? 1 : 2, kTiles = 8 / kParts;
    uint32_t p_frag[4][4], ds_frag[4][4];
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      float acc_p[kTiles][4], acc_dp[kTiles][4];  // P^T and dP^T: 16 keys x 8 kTiles queries
#pragma unroll
      for (int t = 0; t < kTiles; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_p[t][e] = acc_dp[t][e] = 0.0f;
      if constexpr (kKvInSmem) {
        mma_rows_nt_smem_a<Kt>(acc_p, sK, warp, sQ + part * 8 * kTiles * LDS, lane);    // S^T = K Q^T
        mma_rows_nt_smem_a<Kt>(acc_dp, sV, warp, sdO + part * 8 * kTiles * LDS, lane);  // dP^T = V dO^T
      } else {
        mma_rows_nt<Kt>(acc_p, k_frag, sQ + part * 8 * kTiles * LDS, lane);
        mma_rows_nt<Kt>(acc_dp, v_frag, sdO + part * 8 * kTiles * LDS, lane);
      }
#pragma unroll
      for (int th = 0; th < kTiles; ++th) {
        const int t = kTiles * part + th;  // n8 tile of the 64 queries
        // The two head-size branches are the same math (dkdv_tile_elementwise, with one Philox
        // evaluation per element past 80); ptxas allocates registers better for each this way
        // (sm_90a, spill bytes: HS 64 none in either kernel, HS 88 / 128 as before the shared blocks).
        if constexpr (Kt::kHeadDim <= 80) {
          dkdv_tile_elementwise<kDropout>(acc_p[th], acc_dp[th], p, head, start, q0, k0, warp, lane, t, key_ok, lse_j,
                                          delta_j, quad_dropout);
          pack_acc_tile<T>(p_frag, acc_p[th], t);
          pack_acc_tile<T>(ds_frag, acc_dp[th], t);
        } else {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int q = t * 8 + (lane % 4) * 2 + c;
            const float lse2 = bwd_lse2(lse_j[q]), row_delta = delta_j[q];
#pragma unroll
            for (int e = c; e < 4; e += 2) {
              const float pv = key_ok[e >> 1] ? exp2f(acc_p[th][e] * p.scale_log2 - lse2) : 0.0f;
              float f = 1.0f;
              if (kDropout && p.dropout_p > 0.0f) {
                const int key = k0 + warp * 16 + lane / 4 + 8 * (e >> 1);
                f = dropout_factor(p.dropout_p, p.dropout_seed,
                                   p.dropout_offset + uint64_t((head * p.lse_head_stride + start + q0 + q) * p.max_seqlen) +
                                       uint64_t(key));
              }
              acc_p[th][e] = pv * f;
              acc_dp[th][e] = pv * (acc_dp[th][e] * f - row_delta);
            }
          }
          pack_acc_tile<T>(p_frag, acc_p[th], t);
          pack_acc_tile<T>(ds_frag, acc_dp[th], t);
        }
      }
    }
    mma_frags_nn<Kt>(acc_dv, p_frag, sdO, lane);  // dV += P^T dO
    mma_frags_nn<Kt>(acc_dk, ds_frag, sQ, lane);  // dK += dS^T Q
    if constexpr (kAtomicDq) {
      // dS^T to smem (bf16, the operand the dK MMA used): rows = this warp's keys, columns = queries
      // (tile t's pairs: pack_acc_tile's registers, row g then g + 8)
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int row = warp * 16 + lane / 4, c = t * 8 + (lane % 4) * 2;
        *reinterpret_cast<uint32_t*>(sdsT + row * Kt::kSmemStrideDs + c) = ds_frag[t / 2][(t % 2) * 2];
        *reinterpret_cast<uint32_t*>(sdsT + (row + 8) * Kt::kSmemStrideDs + c) = ds_frag[t / 2][(t % 2) * 2 + 1];
      }
      __syncthreads();  // dS^T complete; every warp is also done with tile j's Q and dO
      float acc_dq[Kt::kNTilesO][4];
#pragma unroll
      for (int i = 0; i < Kt::kNTilesO; ++i) acc_dq[i][0] = acc_dq[i][1] = acc_dq[i][2] = acc_dq[i][3] = 0.0f;
      mma_ds_k<Kt>(acc_dq, sdsT, sK, warp, lane);  // this warp's 16 queries of the tile
      atomic_add_rows<Kt>(p.dq_accum + (start + q0) * int64_t(p.num_heads) * D + head * D, int64_t(p.num_heads) * D,
                          acc_dq, warp * 16 + lane / 4, seqlen - q0, lane);
      // The next iteration's barrier (stream_next_tile) orders these reads of dS^T before its rewrite.
    } else {
      __syncthreads();  // every warp is done with tile j's slot before tile j + 2 is loaded into it
    }
  }
  const int valid_keys = seqlen - k0;
  store_rows<Kt>(p.dk, p.grads_bf16, (start + k0) * p.dk_row_stride + head * D, p.dk_row_stride, acc_dk,
                 warp * 16 + lane / 4, valid_keys, p.scale, lane);
  store_rows<Kt>(p.dv, p.grads_bf16, (start + k0) * p.dv_row_stride + head * D, p.dv_row_stride, acc_dv,
                 warp * 16 + lane / 4, valid_keys, 1.0f, lane);
}

/// CTAs per SM the dQ kernel is compiled for: without the dropout code at head size 64 it fits
/// the 168 registers of 3 (ptxas, sm_90a: 168 registers and no spill, against 234 with it).
template <typename Kt, bool kDropout>
__host__ __device__ constexpr int flash_bwd_dq_min_ctas() {
  return !kDropout && Kt::kHeadDim <= 64 ? 3 : 1;
}

/// dQ of one 64-query block (the recompute scheme). kDropout false: as in the dK/dV kernel.
template <typename Kt, bool kDropout>
__global__ void __launch_bounds__(Kt::kThreads, flash_bwd_dq_min_ctas<Kt, kDropout>())
    flash_bwd_dq_kernel(const __grid_constant__ FlashBwdParams p) {
  using T = typename Kt::Element;
  constexpr int D = Kt::kHeadDim, LDS = Kt::kSmemStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // As in the dK/dV kernel: slot 0 first holds this CTA's Q and dO (to registers before the
  // loop), then the slots double-buffer the key tiles (K, V): tile j in slot (j + 1) % 2.
  T* const smem = reinterpret_cast<T*>(smem_raw);
  // tile `which` (0 or 1) of slot `s`: plain arithmetic, no local array indexed at run time
  auto slot = [smem](int s, int which) { return smem + (2 * s + which) * 64 * LDS; };
  float* sBias = reinterpret_cast<float*>(smem + 4 * 64 * LDS);  // [2][64]: 0 or -inf

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int head = blockIdx.y, b = blockIdx.z;
  int64_t start;
  int seqlen;
  sequence_bounds(p.cu_seqlens, p.max_seqlen, b, start, seqlen);
  const int q0 = blockIdx.x * 64;
  if (q0 >= seqlen) return;

  const T* gK = static_cast<const T*>(p.k) + start * p.k_row_stride + head * D;
  const T* gV = static_cast<const T*>(p.v) + start * p.v_row_stride + head * D;
  // Key tile j (keys k0 = 64 j ..) into slot (j + 1) % 2 and its key bias into [j % 2].
  auto load_key_tile = [&](int j) {
    const int k0 = j * 64, valid = min(64, seqlen - k0);
    load_tile<Kt, 64>(slot((j + 1) % 2, 0), gK + int64_t(k0) * p.k_row_stride, p.k_row_stride, valid, tid);
    load_tile<Kt, 64>(slot((j + 1) % 2, 1), gV + int64_t(k0) * p.v_row_stride, p.v_row_stride, valid, tid);
    cp_async_commit();
    for (int i = tid; i < 64; i += Kt::kThreads)
      sBias[(j % 2) * 64 + i] = bwd_key_real(p, b, k0 + i, seqlen) ? 0.0f : -INFINITY;
  };

  load_tile<Kt, 64>(slot(0, 0), static_cast<const T*>(p.q) + (start + q0) * p.q_row_stride + head * D,
                    p.q_row_stride, min(64, seqlen - q0), tid);
  load_tile<Kt, 64>(slot(0, 1), static_cast<const T*>(p.dout) + (start + q0) * p.dout_row_stride + head * D,
                    p.dout_row_stride, min(64, seqlen - q0), tid);
  cp_async_commit();
  load_key_tile(0);  // into slot 1
  float lse2[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = q0 + warp * 16 + lane / 4 + 8 * r;
    const bool ok = row < seqlen;
    lse2[r] = ok ? bwd_lse2(p.lse[head * p.lse_head_stride + start + row]) : INFINITY;
    delta[r] = ok ? p.delta[head * p.lse_head_stride + start + row] : 0.0f;
  }
  cp_async_wait<1>();  // Q and dO have landed (the key tile may still be in flight)
  __syncthreads();
  uint32_t q_frag[Kt::kKSteps][4], do_frag[Kt::kKSteps][4];
  load_a_frags<Kt>(q_frag, slot(0, 0), warp, lane);
  load_a_frags<Kt>(do_frag, slot(0, 1), warp, lane);
  __syncthreads();  // every warp has its Q and dO fragments: slot 0 is free for key tile 1

  float acc_dq[Kt::kNTilesO][4];
#pragma unroll
  for (int i = 0; i < Kt::kNTilesO; ++i) acc_dq[i][0] = acc_dq[i][1] = acc_dq[i][2] = acc_dq[i][3] = 0.0f;
  const bool quad_dropout = dropout_quads_aligned(p.dropout_offset, p.max_seqlen);
  const int n_tiles = (seqlen + 63) / 64;
  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = j * 64;
    stream_next_tile(j, n_tiles, load_key_tile);
    const T* sK = slot((j + 1) % 2, 0);
    const T* sV = slot((j + 1) % 2, 1);
    const float* bias_j = sBias + (j % 2) * 64;

    // dS in bf16, the A operand of dQ, made kParts key ranges at a time as in the dK/dV kernel
    // (ptxas, sm_90a, two parts: HS 64 with dropout 234 -> 192 registers, HS 128's spill 40 ->
    // 16 B; one part where the kernel is held to the 168 registers of three CTAs, which two
    // parts made spill 16 B).
    constexpr int kParts = flash_bwd_dq_min_ctas<Kt, kDropout>() == 3 ? 1 : 2, kTiles = 8 / kParts;
    uint32_t ds_frag[4][4];
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      float acc_p[kTiles][4], acc_dp[kTiles][4];  // S and dP: 16 queries x 8 kTiles keys
#pragma unroll
      for (int t = 0; t < kTiles; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_p[t][e] = acc_dp[t][e] = 0.0f;
      mma_rows_nt<Kt>(acc_p, q_frag, sK + part * 8 * kTiles * LDS, lane);    // S = Q K^T
      mma_rows_nt<Kt>(acc_dp, do_frag, sV + part * 8 * kTiles * LDS, lane);  // dP = dO V^T
#pragma unroll
      for (int th = 0; th < kTiles; ++th) {
        const int t = kTiles * part + th;  // n8 tile of the 64 keys
        // Elements 2h and 2h + 1 are keys `key` and `key + 1` of row + 8h: adjacent dropout
        // counters, one Philox evaluation for both (dropout_factor_pair), or one for all four with
        // four-aligned counters (dropout_factors_s_tile).
        dq_tile_elementwise<kDropout>(acc_p[th], acc_dp[th], p,
                                      head * p.lse_head_stride + start + q0 + warp * 16 + lane / 4, k0, lane, t, bias_j,
                                      lse2, delta, quad_dropout);
        pack_acc_tile<T>(ds_frag, acc_dp[th], t);
      }
    }
    mma_frags_nn<Kt>(acc_dq, ds_frag, sK, lane);  // dQ += dS K
    __syncthreads();  // every warp is done with tile j's slot before tile j + 2 is loaded into it
  }
  store_rows<Kt>(p.dq, p.grads_bf16, (start + q0) * p.dq_row_stride + head * D, p.dq_row_stride, acc_dq,
                 warp * 16 + lane / 4, seqlen - q0, p.scale, lane);
}

}  // namespace flash
}  // namespace unmask::cuda
