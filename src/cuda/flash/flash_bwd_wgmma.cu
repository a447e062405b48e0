// cuda/flash/flash_bwd_wgmma.cu: the launcher of the wgmma attention backward
// (bwd_wgmma_kernel.cuh: head size 64, bf16, sm_90a). flash_bwd.cu decides when it
// runs (UNMASK_FLASH_BWD_WGMMA=1, opt-in until measured) and has checked p.
#include <atomic>

#include "cuda/check.h"
#include "cuda/flash/bwd_wgmma_kernel.cuh"
#include "cuda/flash/flash_api.h"

namespace unmask::cuda {

namespace {

std::atomic<uint64_t> g_wgmma_bwd_launches{0};

template <typename Kernel>
void launch(Kernel kernel, dim3 grid, size_t smem, const FlashBwdParams& p, cudaStream_t stream) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, flash::FlashBwdWgmmaTraits::kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void flash_bwd_wgmma(const FlashBwdParams& p, cudaStream_t stream) {
  using Bt = flash::FlashBwdWgmmaTraits;
  const dim3 grid(unsigned((p.max_seqlen + 63) / 64), unsigned(p.num_heads), unsigned(p.batch));
  // Two CTAs per SM (8 warps): the register budget of each kernel is 255 per thread. Without
  // dropout, instances compiled without its code (fewer registers), as flash_bwd.cu does.
  if (p.dropout_p == 0.0f) {
    launch(flash::flash_bwd_dkdv_wgmma_kernel<false, 2>, grid, Bt::kSmemDkdv, p, stream);
    launch(flash::flash_bwd_dq_wgmma_kernel<false, 2>, grid, Bt::kSmemDq, p, stream);
  } else {
    launch(flash::flash_bwd_dkdv_wgmma_kernel<true, 2>, grid, Bt::kSmemDkdv, p, stream);
    launch(flash::flash_bwd_dq_wgmma_kernel<true, 2>, grid, Bt::kSmemDq, p, stream);
  }
  g_wgmma_bwd_launches.fetch_add(1, std::memory_order_relaxed);
}

uint64_t flash_bwd_wgmma_launches() { return g_wgmma_bwd_launches.load(std::memory_order_relaxed); }

}  // namespace unmask::cuda
