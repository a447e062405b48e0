// cuda/flash/switch.h: the one runtime-to-template switch of the flash forward kernel.
//
// Supported: head sizes 64, 80, 88, 128 x bf16, fp16 x 64 or 128 query rows per CTA, 16 rows per
// warp (instances in flash/gen/, written by flash/gen/generate.py; keep the lists equal).
// Anything else goes to the naive kernel.
//
// Block rows: 128 (8 warps) loads each K/V tile once for twice as many queries as 64 (4 warps),
// halving the shared-memory fill traffic per query, but makes half as many CTAs. We take 128
// when that still gives at least two CTAs per SM (num_sms from the device), else 64 so that
// small batches of short sequences still fill the GPU. The training forward (p.lse set: its
// epilogue makes the 128-row HS-64 instance spill) always takes 64: on an H200, ViT-B batch 128
// trained at 894.6 clips/s with 64-row CTAs against 873.9 with 128 (2026-11-26, BENCHMARKS.md).
// Inference keeps the grid rule (not yet measured against 64).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/flash/params.h"

namespace unmask::cuda::flash {

template <int HD, typename T, int BM>
void run_flash_fwd(const FlashFwdParams& p, cudaStream_t stream);  // flash/launch.cuh

constexpr int kFlashHeadDims[] = {64, 80, 88, 128};

inline bool flash_head_dim_supported(int hd) {
  for (int d : kFlashHeadDims)
    if (d == hd) return true;
  return false;
}

/// Query rows per CTA for p on a device with num_sms multiprocessors (see above).
inline int flash_fwd_block_m(const FlashFwdParams& p, int num_sms) {
  if (p.lse) return 64;  // training (see above)
  const long long ctas128 = (long long)((p.max_seqlen + 127) / 128) * p.num_heads * p.batch;
  return ctas128 >= 2LL * num_sms ? 128 : 64;
}

template <typename T, int BM>
bool flash_fwd_switch_head_dim(const FlashFwdParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: run_flash_fwd<64, T, BM>(p, stream); return true;
    case 80: run_flash_fwd<80, T, BM>(p, stream); return true;
    case 88: run_flash_fwd<88, T, BM>(p, stream); return true;
    case 128: run_flash_fwd<128, T, BM>(p, stream); return true;
    default: return false;
  }
}

/// Calls the instance for (p.head_dim, p.dtype, block_m: 64 or 128); returns false when there is
/// none.
inline bool flash_fwd_switch(const FlashFwdParams& p, int block_m, cudaStream_t stream) {
  const bool m128 = block_m == 128;
  switch (p.dtype) {
    case DType::bf16:
      return m128 ? flash_fwd_switch_head_dim<__nv_bfloat16, 128>(p, stream)
                  : flash_fwd_switch_head_dim<__nv_bfloat16, 64>(p, stream);
    case DType::f16:
      return m128 ? flash_fwd_switch_head_dim<__half, 128>(p, stream)
                  : flash_fwd_switch_head_dim<__half, 64>(p, stream);
    default: return false;
  }
}

}  // namespace unmask::cuda::flash
