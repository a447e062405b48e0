// cuda/flash/flash_fwd_wgmma.cu: the launchers of the wgmma flash forward (fwd_wgmma_kernel.cuh,
// sm_90a, head size 64), and the choice of its tile shape.
//
// Shapes (UNMASK_FLASH_WGMMA_SHAPE; default m64n128):
//   m64n128: one warpgroup (64 rows) per CTA, 128 keys a step; 74 KB of shared memory.
//   m64n64:  one warpgroup, 64 keys a step (half the S registers); 41.5 KB.
//   m128n128: two warpgroups (128 rows) sharing each K/V tile (half the tile loads per query);
//     83 KB.
// None has been measured yet (written without a GPU, 2026-11-27). The default takes 128 keys a
// step (half the barriers and softmax rescales of 64) in one warpgroup: 209 registers (ptxas,
// sm_90a), two CTAs per SM; m64n64 fits 134 (three CTAs), m128n128 186 (one CTA of 8 warps).
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/flash/flash_api.h"
#include "cuda/flash/fwd_wgmma_kernel.cuh"
#include "unmask/error.h"

namespace unmask::cuda {

namespace flash {

namespace {

std::atomic<uint64_t> g_wgmma_launches[3];  // per WgmmaFwdShape

/// Launches the kernel of traits Wt (kMinBlocks CTAs per SM asked of the register allocator).
template <typename Wt, int kMinBlocks>
void launch(const FlashFwdParams& p, WgmmaFwdShape shape, cudaStream_t stream) {
  auto kernel = flash_fwd_wgmma_kernel<Wt, kMinBlocks>;
  if constexpr (Wt::kSmemBytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Wt::kSmemBytes)));
  const dim3 grid(unsigned((p.max_seqlen + Wt::kBlockM - 1) / Wt::kBlockM), unsigned(p.num_heads), unsigned(p.batch));
  kernel<<<grid, Wt::kThreads, Wt::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  g_wgmma_launches[int(shape)].fetch_add(1, std::memory_order_relaxed);
}

/// The descriptor probe (flash_wgmma_probe): one warpgroup, one m64n64k16 f16 wgmma with a
/// one-hot A (A[m][k] = 1 where k = m % 16) and B read from a [64][64] core-matrix tile through
/// the descriptors the attention kernels use at k-step `step`; out[m * 64 + n] = D[m][n]. Tile
/// element (r, c) is 64 (c % 16) + r + 1 in the 16 columns of the k-step (K-major: rows are n,
/// columns k) or 64 (r % 16) + c + 1 in its 16 rows (MN-major: rows are k), else 0; so D[m][n]
/// = 64 (m % 16) + n + 1 exactly (integers below 2048 are exact in f16).
/// swap: the descriptor with LBO and SBO exchanged (a diagnostic: if the probe fails as the
/// kernels build it and passes swapped, the PTX ISA's LBO/SBO roles were read the wrong way).
template <int TransB>
__global__ void __launch_bounds__(128) wgmma_probe_kernel(float* out, int step, bool swap) {
#ifdef UNMASK_WGMMA_ENABLED
  // Twice the tile, the upper half zeros: with LBO and SBO exchanged (the diagnosis) an MN-major
  // read reaches past the first 8 KB, which must stay inside the array.
  __shared__ __align__(128) __half tile[2 * 64 * 64];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int i = 64 * 64 + tid; i < 2 * 64 * 64; i += 128) tile[i] = __float2half(0.0f);
  for (int i = tid; i < 64 * 64; i += 128) {
    const int r = i / 64, c = i % 64;  // element (r, c) of the tile, stored as load_tile_core stores it
    const int k_coord = TransB ? r : c, n_coord = TransB ? c : r;
    const float v = k_coord / 16 == step ? float(64 * (k_coord % 16) + n_coord + 1) : 0.0f;
    tile[((r / 8) * 8 + c / 8) * 64 + (r % 8) * 8 + c % 8] = __float2half(v);
  }
  wgmma::fence_proxy_async();
  __syncthreads();
  auto pair = [](bool lo, bool hi) {
    __half2 h = __floats2half2_rn(lo ? 1.0f : 0.0f, hi ? 1.0f : 0.0f);
    return *reinterpret_cast<uint32_t*>(&h);
  };
  uint32_t a[1][4];  // rows g and g + 8 of the warp's 16: m % 16 = g, g + 8
  a[0][0] = pair(2 * t == g, 2 * t + 1 == g);
  a[0][1] = pair(2 * t == g + 8, 2 * t + 1 == g + 8);
  a[0][2] = pair(2 * t + 8 == g, 2 * t + 9 == g);
  a[0][3] = pair(2 * t + 8 == g + 8, 2 * t + 9 == g + 8);
  const uint32_t lbo = TransB ? 1024 : 128, sbo = TransB ? 128 : 1024;  // fwd_wgmma_kernel.cuh's V and K strides
  const uint64_t desc = wgmma::smem_desc(tile + (TransB ? step * 2 * 8 * 64 : step * 2 * 64), swap ? sbo : lbo,
                                         swap ? lbo : sbo);
  float d[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;
  wgmma::keep(d);
  wgmma::keep(a);
  wgmma::fence();
  wgmma::mma_m64n64k16_rs<__half, TransB>(d, a[0], desc, 0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::keep(d);
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) out[(warp * 16 + g + 8 * (e / 2)) * 64 + 8 * j + 2 * t + e % 2] = d[4 * j + e];
#else
  (void)out, (void)step, (void)swap;
  __trap();
#endif
}

template <typename T>
void run(const FlashFwdParams& p, WgmmaFwdShape shape, cudaStream_t stream) {
  switch (shape) {
    case WgmmaFwdShape::m64n128: return launch<FlashFwdWgmmaTraits<T, 1, 128>, 2>(p, shape, stream);
    case WgmmaFwdShape::m64n64: return launch<FlashFwdWgmmaTraits<T, 1, 64>, 3>(p, shape, stream);
    case WgmmaFwdShape::m128n128: return launch<FlashFwdWgmmaTraits<T, 2, 128>, 1>(p, shape, stream);
  }
}

}  // namespace

}  // namespace flash

WgmmaFwdShape flash_fwd_wgmma_shape() {
  const char* env = std::getenv("UNMASK_FLASH_WGMMA_SHAPE");
  if (!env || !*env) return WgmmaFwdShape::m64n128;
  const std::string v = env;
  if (v == "m64n128") return WgmmaFwdShape::m64n128;
  if (v == "m64n64") return WgmmaFwdShape::m64n64;
  if (v == "m128n128") return WgmmaFwdShape::m128n128;
  throw Error("UNMASK_FLASH_WGMMA_SHAPE=", v, " is not a tile shape of the wgmma attention forward: use m64n128 (the ",
              "default), m64n64 or m128n128");
}

bool flash_fwd_wgmma_device() {
#ifndef UNMASK_CUDA_HAS_SM90A
  return false;  // no sm_90a code in this build (UNMASK_CUDA_ARCHS without 90a; CMakeLists.txt)
#else
  const int major = current_device_attribute<cudaDevAttrComputeCapabilityMajor>();
  return major == 9;  // the sm_90a cubin; other majors have no wgmma
#endif
}

int flash_wgmma_exchange() {
  const char* env = std::getenv("UNMASK_FLASH_WGMMA_EXCHANGE");
  if (!env || !*env) return 0;
  const std::string v = env;
  if (v == "none") return 0;
  if (v == "k") return 1;
  if (v == "mn") return 2;
  if (v == "k,mn" || v == "mn,k") return 3;
  throw Error("UNMASK_FLASH_WGMMA_EXCHANGE=", v, " is not a set of operand forms: use k (the K-major descriptors' LBO "
              "and SBO exchanged), mn (the MN-major ones'), k,mn (both) or none (the default)");
}

void flash_fwd_wgmma(const FlashFwdParams& p_in, WgmmaFwdShape shape, cudaStream_t stream) {
  FlashFwdParams p = p_in;
  p.wgmma_exchange = flash_wgmma_exchange();
  if (p.dtype == DType::bf16)
    flash::run<__nv_bfloat16>(p, shape, stream);
  else
    flash::run<__half>(p, shape, stream);
}

std::vector<float> flash_wgmma_probe(bool trans_b, int step, bool swap_strides) {
  UNMASK_CHECK(flash_fwd_wgmma_device(), "flash_wgmma_probe: needs a compute capability 9.x GPU and sm_90a code");
  UNMASK_CHECK(step >= 0 && step < 4, "flash_wgmma_probe: step must be in [0, 4), got ", step);
  float* out = nullptr;
  CUDA_CHECK(cudaGetLastError());  // an earlier call's error is not the probe's
  CUDA_CHECK(cudaMalloc(&out, 64 * 64 * sizeof(float)));
  if (trans_b)
    flash::wgmma_probe_kernel<1><<<1, 128>>>(out, step, swap_strides);
  else
    flash::wgmma_probe_kernel<0><<<1, 128>>>(out, step, swap_strides);
  std::vector<float> host(64 * 64);
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t copy = launch == cudaSuccess
                               ? cudaMemcpy(host.data(), out, host.size() * sizeof(float), cudaMemcpyDeviceToHost)
                               : launch;
  CUDA_CHECK(cudaFree(out));
  CUDA_CHECK(copy);
  return host;
}

uint64_t flash_fwd_wgmma_launches(WgmmaFwdShape shape) {
  return flash::g_wgmma_launches[int(shape)].load(std::memory_order_relaxed);
}

uint64_t flash_fwd_wgmma_launches() {
  return flash_fwd_wgmma_launches(WgmmaFwdShape::m64n128) + flash_fwd_wgmma_launches(WgmmaFwdShape::m64n64) +
         flash_fwd_wgmma_launches(WgmmaFwdShape::m128n128);
}

}  // namespace unmask::cuda
