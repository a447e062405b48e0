// cuda/flash/flash_bwd_wgmma.cu: the launcher of the wgmma attention backward
// (bwd_wgmma_kernel.cuh: head size 64, bf16, sm_90a). flash_bwd.cu decides when it
// runs (UNMASK_FLASH_BWD_WGMMA=1, opt-in until measured) and has checked p.
#include <atomic>
#include <cstdlib>
#include <string>

#include "cuda/check.h"
#include "cuda/flash/bwd_wgmma_kernel.cuh"
#include "cuda/flash/flash_api.h"
#include "unmask/error.h"

namespace unmask::cuda {

namespace {

std::atomic<uint64_t> g_wgmma_bwd_launches[2];  // 64-row, 128-row CTAs

template <typename Kernel>
void launch(Kernel kernel, dim3 grid, int threads, size_t smem, const FlashBwdParams& p, cudaStream_t stream) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, threads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

/// The pair for CTAs of Bt::kRows rows; without dropout, instances compiled without its code
/// (fewer registers), as flash_bwd.cu does. One warpgroup: two CTAs per SM (8 warps; 255
/// registers a thread); two: one CTA of 8 warps.
template <typename Bt>
void run(const FlashBwdParams& p, cudaStream_t stream) {
  constexpr int kMin = Bt::kWarpGroups == 1 ? 2 : 1;
  const dim3 grid(unsigned((p.max_seqlen + Bt::kRows - 1) / Bt::kRows), unsigned(p.num_heads), unsigned(p.batch));
  if (p.dropout_p == 0.0f) {
    launch(flash::flash_bwd_dkdv_wgmma_kernel<Bt, false, kMin>, grid, Bt::kThreads, Bt::kSmemDkdv, p, stream);
    launch(flash::flash_bwd_dq_wgmma_kernel<Bt, false, kMin>, grid, Bt::kThreads, Bt::kSmemDq, p, stream);
  } else {
    launch(flash::flash_bwd_dkdv_wgmma_kernel<Bt, true, kMin>, grid, Bt::kThreads, Bt::kSmemDkdv, p, stream);
    launch(flash::flash_bwd_dq_wgmma_kernel<Bt, true, kMin>, grid, Bt::kThreads, Bt::kSmemDq, p, stream);
  }
}

}  // namespace

int flash_bwd_wgmma_rows() {
  const char* env = std::getenv("UNMASK_FLASH_BWD_WGMMA_SHAPE");
  if (!env || !*env) return 64;
  const std::string v = env;
  if (v == "m64") return 64;
  if (v == "m128") return 128;
  throw Error("UNMASK_FLASH_BWD_WGMMA_SHAPE=", v, " is not a shape of the wgmma attention backward: use m64 (64 rows a ",
              "CTA, the default) or m128 (two warpgroups sharing each streamed tile)");
}

void flash_bwd_wgmma(const FlashBwdParams& p_in, cudaStream_t stream) {
  const bool m128 = flash_bwd_wgmma_rows() == 128;
  FlashBwdParams p = p_in;
  p.wgmma_exchange = flash_wgmma_exchange();
  if (m128)
    run<flash::FlashBwdWgmmaTraits<2>>(p, stream);
  else
    run<flash::FlashBwdWgmmaTraits<1>>(p, stream);
  g_wgmma_bwd_launches[m128 ? 1 : 0].fetch_add(1, std::memory_order_relaxed);
}

uint64_t flash_bwd_wgmma_launches(int rows) {
  if (rows == 64 || rows == 128) return g_wgmma_bwd_launches[rows == 128 ? 1 : 0].load(std::memory_order_relaxed);
  return g_wgmma_bwd_launches[0].load(std::memory_order_relaxed) + g_wgmma_bwd_launches[1].load(std::memory_order_relaxed);
}

}  // namespace unmask::cuda
