// cuda/flash/traits.h: every tile constant of the flash attention forward kernel, derived in
// one place and checked with static_asserts (flash-attention kernel_traits.h style).
//
// A CTA owns kBlockM query rows of one head of one sequence; each of its kWarps warps owns 16
// rows (one m16n8k16 MMA row tile). It walks the sequence's keys kBlockN at a time, K and V
// tiles double-buffered in shared memory with cp.async. Shared-memory rows are padded by 16
// bytes (kSmemStride) so that the 8 row addresses of an ldmatrix fall in distinct bank groups
// for every supported head size (row pitch mod 128 B is 16, 48, 80 or 16 for HS 64/80/88/128).
//
// Head sizes that are not a multiple of 16 (88) are padded to kHeadDimPad with zeros in shared
// memory: the zero columns add nothing to Q K^T, and the extra output columns are not stored.
#pragma once
#include <cstddef>

namespace unmask::cuda {

// (32 rows a warp, two row tiles sharing each K and V fragment, lost: BENCHMARKS.md.)
template <int kHeadDim_, typename Element_, int kBlockM_ = 64, int kBlockN_ = 64>
struct FlashFwdTraits {
  using Element = Element_;  // __nv_bfloat16 or __half
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimPad = (kHeadDim + 15) / 16 * 16;  // MMA k-steps of 16
  static constexpr int kBlockM = kBlockM_;                       // query rows per CTA
  static constexpr int kBlockN = kBlockN_;                       // keys per step
  static constexpr int kWarps = kBlockM / 16;                    // 16 query rows per warp
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kSmemStride = kHeadDimPad + 8;            // elements per smem row (+16 B)
  static constexpr int kChunksPerRow = kHeadDimPad / 8;          // 16-byte chunks per smem row
  static constexpr int kKSteps = kHeadDimPad / 16;               // MMA k-steps of Q K^T
  static constexpr int kNTilesS = kBlockN / 8;                   // n-tiles of S = Q K^T
  static constexpr int kNTilesO = kHeadDimPad / 8;               // n-tiles of O = P V
  static constexpr size_t kSmemQ = size_t(kBlockM) * kSmemStride * sizeof(Element);
  static constexpr size_t kSmemKV = size_t(kBlockN) * kSmemStride * sizeof(Element);  // one tile
  static constexpr size_t kSmemBias = 2 * kBlockN * sizeof(float);                    // key masks
  static constexpr size_t kSmemBytes = kSmemQ + 4 * kSmemKV + kSmemBias;              // Q, 2xK, 2xV

  static_assert(sizeof(Element) == 2, "tensor-core path: bf16 or fp16 storage");
  static_assert(kHeadDim % 8 == 0, "head rows are moved in 16-byte chunks");
  static_assert(kHeadDim <= 256, "accumulators live in registers");
  static_assert(kBlockM % 16 == 0 && kWarps >= 1 && kWarps <= 8, "one warp per 16 query rows");
  static_assert(kBlockN % 16 == 0, "P V consumes keys 16 at a time");
  static_assert(kHeadDimPad % 16 == 0, "ldmatrix.x4 loads pairs of 8-column tiles");
  static_assert((kSmemStride * sizeof(Element)) % 16 == 0, "smem rows must stay 16-byte aligned");
  static_assert((kSmemStride * sizeof(Element)) % 128 != 0, "padded rows avoid ldmatrix bank conflicts");
  static_assert(kSmemQ % 16 == 0 && kSmemKV % 16 == 0, "tiles start 16-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "fits the 227 KB of shared memory of sm_90 (164 KB on sm_80)");
};

}  // namespace unmask::cuda
