// cuda/flash/switch.h: the one runtime-to-template switch of the flash forward kernel.
//
// Supported: head sizes 64, 80, 88, 128 x bf16, fp16 (instances in flash/gen/, written by
// flash/gen/generate.py; keep the two lists equal). Anything else goes to the naive kernel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/flash/params.h"

namespace unmask::cuda::flash {

template <int HD, typename T>
void run_flash_fwd(const FlashFwdParams& p, cudaStream_t stream);  // flash/launch.cuh

constexpr int kFlashHeadDims[] = {64, 80, 88, 128};

inline bool flash_head_dim_supported(int hd) {
  for (int d : kFlashHeadDims)
    if (d == hd) return true;
  return false;
}

/// Calls the instance for (p.head_dim, p.dtype); returns false when there is none.
template <typename T>
bool flash_fwd_switch_head_dim(const FlashFwdParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: run_flash_fwd<64, T>(p, stream); return true;
    case 80: run_flash_fwd<80, T>(p, stream); return true;
    case 88: run_flash_fwd<88, T>(p, stream); return true;
    case 128: run_flash_fwd<128, T>(p, stream); return true;
    default: return false;
  }
}

inline bool flash_fwd_switch(const FlashFwdParams& p, cudaStream_t stream) {
  switch (p.dtype) {
    case DType::bf16: return flash_fwd_switch_head_dim<__nv_bfloat16>(p, stream);
    case DType::f16: return flash_fwd_switch_head_dim<__half>(p, stream);
    default: return false;
  }
}

}  // namespace unmask::cuda::flash
