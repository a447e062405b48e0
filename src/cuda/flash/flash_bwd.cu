// cuda/flash/flash_bwd.cu: the checked entry of the tensor-core attention backward (bwd_kernel.cuh).
// Instances: bf16, head sizes 64 (BERT-base/large, ViT-S/B/L and their decoders), 80, 88 and 128
// (the forward's set); other head sizes keep the f32 kernels (attention_train.cu). dQ by atomics
// in the dK/dV kernel (FlashBwdDq; the default), or by the deterministic recompute kernel.
// Sequences of at most 128 keys at head size 64 run in one kernel per (sequence, head), dQ summed
// in the CTA (bwd_short_kernel.cuh; FlashBwdParams::short_kernel false runs the pair instead).
#include <algorithm>
#include <atomic>
#include <optional>
#include <cstdlib>
#include <string>

#include "cuda/common.cuh"
#include "cuda/flash/bwd_kernel.cuh"
#include "cuda/flash/bwd_short_kernel.cuh"
#include "cuda/flash/flash_api.h"
#include "cuda/train_kernels.h"  // ScratchBuffer

namespace unmask::cuda {

namespace {

/// dq[row, h HS + c] = accum[row, h HS + c] * scale for every row of the batch: f32, or bf16
/// rounded once (grads_bf16). A block per row (grid-stride), a thread per pair of columns (HS
/// and both row strides are even): no 64-bit division per pair, which the flat index took.
__global__ void dq_from_accum_kernel(void* dq, int64_t ld, bool bf16, const float* accum, int64_t rows, int64_t C,
                                     float scale) {
  const int64_t pairs = C / 2;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    for (int64_t pair = threadIdx.x; pair < pairs; pair += blockDim.x) {
      const int64_t c = pair * 2;
      const float2 a = *reinterpret_cast<const float2*>(accum + row * C + c);
      if (bf16) {
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(dq) + row * ld + c) =
            __floats2bfloat162_rn(a.x * scale, a.y * scale);
      } else {
        float* d = static_cast<float*>(dq) + row * ld + c;
        d[0] = a.x * scale;
        d[1] = a.y * scale;
      }
    }
  }
}

/// The atomic dQ is the default at every length (H200, 2026-11-28: with three dK/dV CTAs a SM,
/// ViT-B's 1,568-key decoder +2.4%). Up to two 64-key blocks it is bitwise reproducible: each dQ
/// element gets at most two atomic adds into a zeroed f32 accumulator, and 0 + a + b = 0 + b + a
/// exactly. Past 128 keys three or more adds depend on their order: run-to-run differences in the
/// last bit; FlashBwdParams::dq_mode = recompute (ContextOptions::kernels.deterministic) gives the
/// deterministic second kernel.

/// The dQ scheme for p: its own choice, else atomic; atomic needs the batch's row count.
FlashBwdDq resolve_dq_mode(const FlashBwdParams& p) {
  const FlashBwdDq mode = p.dq_mode == FlashBwdDq::automatic ? FlashBwdDq::atomic : p.dq_mode;
  return mode == FlashBwdDq::atomic && p.rows > 0 ? FlashBwdDq::atomic : FlashBwdDq::recompute;
}

/// Whether three CTAs of `smem_bytes` dynamic shared memory fit an SM of the current device
/// (sm_90: 228 KB per SM; sm_80: 164 KB, too little for the three-CTA dK/dV kernel, which would
/// then run two CTAs held to 168 registers: slower than the default). Cached per device.
bool three_ctas_fit(size_t smem_bytes) {
  const int bytes = current_device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>();
  return 3 * (smem_bytes + 1024) <= size_t(bytes);  // 1 KB a CTA reserved by the driver
}

/// The CTA count asked for: p.ctas_per_sm, else 3 (H200, 2026-11-28, with atomic dQ: ViT-B +2.4%,
/// BERT-large +1.1%).
int requested_dkdv_ctas(const FlashBwdParams& p) {
  UNMASK_CHECK(p.ctas_per_sm == 0 || p.ctas_per_sm == 2 || p.ctas_per_sm == 3,
               "attention backward (cuda, bf16): ctas_per_sm = ", p.ctas_per_sm, " must be 0, 2 or 3");
  return p.ctas_per_sm == 0 ? 3 : p.ctas_per_sm;
}

/// CTAs per SM of the dK/dV kernel for p: 3 (K and V re-read from shared memory, 168
/// registers) where asked for and there is an instance (head size 64 without dropout) whose
/// three CTAs fit the device's shared memory (sm_90); else 2.
int resolve_dkdv_ctas(const FlashBwdParams& p, bool atomic) {
  if (requested_dkdv_ctas(p) != 3 || p.head_dim != 64 || p.dropout_p != 0.0f) return 2;
  return flash_bwd_three_ctas_available(atomic) ? 3 : 2;  // flash_api.h; defined below
}

std::atomic<uint64_t> g_launches_without_dropout{0}, g_launches_kv_in_smem{0}, g_launches_short{0};

/// The one-kernel backward of sequences of at most 128 keys: a CTA of 256 threads per
/// (sequence, head), dQ stored directly (no accumulator).
template <bool kDropout>
void run_flash_bwd_short(const FlashBwdParams& p, cudaStream_t stream) {
  auto kernel = flash::flash_bwd_short_kernel<kDropout>;
  constexpr size_t smem = FlashBwdShortSmem::kBytes;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  g_launches_short.fetch_add(1, std::memory_order_relaxed);
  kernel<<<dim3(1, unsigned(p.num_heads), unsigned(p.batch)), FlashBwdShortTraits::kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

/// Launches kernel on grid with `smem` bytes of dynamic shared memory (opting in above 48 KB;
/// `max_carveout` asks for the largest shared-memory carveout, which three CTAs of the kv-in-smem
/// dK/dV kernel need).
template <typename Kernel>
void launch_bwd_kernel(Kernel kernel, dim3 grid, size_t smem, bool max_carveout, const FlashBwdParams& p,
                       cudaStream_t stream) {
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  if (max_carveout)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)));
  kernel<<<grid, 128, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

/// The dK/dV kernel of the shape (atomic dQ or not, K and V in shared memory or registers).
template <typename Kt, bool kDropout, bool kKvInSmem>
void run_dkdv(const FlashBwdParams& p, bool atomic, dim3 grid, cudaStream_t stream) {
  static_assert(Kt::kThreads == 128, "launch_bwd_kernel launches 128 threads");
  if (atomic) {
    launch_bwd_kernel(flash::flash_bwd_dkdv_kernel<Kt, true, kDropout, kKvInSmem>, grid,
                      FlashBwdDkdvSmem<Kt, true, kKvInSmem>::kBytes, kKvInSmem, p, stream);
  } else {
    launch_bwd_kernel(flash::flash_bwd_dkdv_kernel<Kt, false, kDropout, kKvInSmem>, grid,
                      FlashBwdDkdvSmem<Kt, false, kKvInSmem>::kBytes, kKvInSmem, p, stream);
  }
}

/// One backward: the dK/dV kernel (with dQ by atomics into a zeroed f32 accumulator, then
/// scaled and stored), or the dK/dV and dQ kernels. kDropout false: p.dropout_p is 0.
template <int HD, bool kDropout>
void run_flash_bwd(const FlashBwdParams& p, cudaStream_t stream) {
  using Kt = FlashBwdTraits<HD>;
  if constexpr (HD == 64) {
    if (p.max_seqlen <= kFlashBwdShortMaxSeqlen && p.short_kernel) {
      if (!kDropout) g_launches_without_dropout.fetch_add(1, std::memory_order_relaxed);
      return run_flash_bwd_short<kDropout>(p, stream);
    }
    // (A Hopper wgmma pair lost on an H200, 2026-11-28, and was removed: flash_fwd.cu.)
  }
  const dim3 grid(unsigned((p.max_seqlen + 63) / 64), unsigned(p.num_heads), unsigned(p.batch));
  const bool atomic = resolve_dq_mode(p) == FlashBwdDq::atomic;
  const bool kv_in_smem = resolve_dkdv_ctas(p, atomic) == 3;
  if (!kDropout) g_launches_without_dropout.fetch_add(1, std::memory_order_relaxed);
  const int64_t C = int64_t(p.num_heads) * p.head_dim;
  FlashBwdParams q = p;
  std::optional<ScratchBuffer> accum;
  if (atomic) {
    accum.emplace(size_t(p.rows) * size_t(C) * sizeof(float), stream);
    CUDA_CHECK(cudaMemsetAsync(accum->ptr, 0, size_t(p.rows) * size_t(C) * sizeof(float), stream));
    q.dq_accum = accum->as<float>();
  }
  if constexpr (HD == 64 && !kDropout) {
    if (kv_in_smem) {
      g_launches_kv_in_smem.fetch_add(1, std::memory_order_relaxed);
      run_dkdv<Kt, false, true>(q, atomic, grid, stream);
    } else {
      run_dkdv<Kt, false, false>(q, atomic, grid, stream);
    }
  } else {
    run_dkdv<Kt, kDropout, false>(q, atomic, grid, stream);
  }
  if (atomic) {
    const unsigned blocks = unsigned(std::min<int64_t>(p.rows, int64_t(1) << 20));
    const int threads = int(std::clamp<int64_t>((C / 2 + 31) / 32 * 32, 32, 256));
    dq_from_accum_kernel<<<blocks, threads, 0, stream>>>(p.dq, p.dq_row_stride, p.grads_bf16, q.dq_accum, p.rows, C,
                                                         p.scale);
    CUDA_CHECK_LAUNCH();
    return;
  }
  launch_bwd_kernel(flash::flash_bwd_dq_kernel<Kt, kDropout>, grid, Kt::kSmemBytes, false, p, stream);
}

/// The head size's instances: without the dropout code for head size 64 (BERT's and the ViTs'
/// head size; the ViTs train without attention dropout), with it for every case elsewhere.
template <int HD>
void run_flash_bwd(const FlashBwdParams& p, cudaStream_t stream) {
  if constexpr (HD == 64) {
    if (p.dropout_p == 0.0f) return run_flash_bwd<HD, false>(p, stream);
  }
  run_flash_bwd<HD, true>(p, stream);
}

}  // namespace

bool flash_bwd_three_ctas_available(bool atomic_dq) {
  using Kt = FlashBwdTraits<64>;
  return three_ctas_fit(atomic_dq ? FlashBwdDkdvSmem<Kt, true, true>::kBytes : FlashBwdDkdvSmem<Kt, false, true>::kBytes);
}

FlashBwdLaunchStats flash_bwd_launch_stats() {
  return {g_launches_without_dropout.load(std::memory_order_relaxed), g_launches_kv_in_smem.load(std::memory_order_relaxed),
          g_launches_short.load(std::memory_order_relaxed)};
}

bool flash_bwd_head_dim_supported(int head_dim) {
  return head_dim == 64 || head_dim == 80 || head_dim == 88 || head_dim == 128;
}

void flash_attention_backward(const FlashBwdParams& p, cudaStream_t stream) {
  UNMASK_CHECK(flash_bwd_head_dim_supported(p.head_dim), "attention backward (cuda, bf16): head size ", p.head_dim,
               " has no tensor-core instance (64, 80, 88, 128)");
  UNMASK_CHECK(p.q && p.k && p.v && p.dout && p.lse && p.delta && p.dq && p.dk && p.dv,
               "attention backward (cuda, bf16): every pointer is required");
  UNMASK_CHECK(p.num_heads >= 1 && p.num_heads <= 65535 && p.batch >= 0 && p.batch <= 65535 && p.max_seqlen >= 0,
               "attention backward (cuda, bf16): bad sizes NH=", p.num_heads, " B=", p.batch, " T=", p.max_seqlen);
  for (const void* ptr : {p.q, p.k, p.v, p.dout})
    UNMASK_CHECK(is_aligned(ptr, 16), "attention backward (cuda, bf16): q/k/v/dout must be 16-byte aligned");
  UNMASK_CHECK(p.q_row_stride % 8 == 0 && p.k_row_stride % 8 == 0 && p.v_row_stride % 8 == 0 &&
                   p.dout_row_stride % 8 == 0,
               "attention backward (cuda, bf16): bf16 row strides must be multiples of 8 elements");
  if (p.grads_bf16)  // the bf16 gradients are stored in pairs (__nv_bfloat162); f32 ones one by one
    UNMASK_CHECK(p.dq_row_stride % 2 == 0 && p.dk_row_stride % 2 == 0 && p.dv_row_stride % 2 == 0 &&
                     is_aligned(p.dq, 4) && is_aligned(p.dk, 4) && is_aligned(p.dv, 4),
                 "attention backward (cuda, bf16 gradients): dq/dk/dv need even row strides and 4-byte alignment, got "
                 "strides ", p.dq_row_stride, ", ", p.dk_row_stride, ", ", p.dv_row_stride, " and pointers ", p.dq, ", ",
                 p.dk, ", ", p.dv);
  UNMASK_CHECK(p.rows >= 0 && p.rows <= int64_t(p.batch) * p.max_seqlen,
               "attention backward (cuda, bf16): rows = ", p.rows, " must be the batch's row count (at most B T = ",
               int64_t(p.batch) * p.max_seqlen, "), or 0");
  requested_dkdv_ctas(p);  // a bad ctas_per_sm fails on any batch
  if (p.batch == 0 || p.max_seqlen == 0) return;
  switch (p.head_dim) {
    case 64: return run_flash_bwd<64>(p, stream);
    case 80: return run_flash_bwd<80>(p, stream);
    case 88: return run_flash_bwd<88>(p, stream);
    case 128: return run_flash_bwd<128>(p, stream);
  }
}

}  // namespace unmask::cuda
