// cuda/flash/flash_bwd.cu: the checked entry of the tensor-core attention backward (bwd_kernel.cuh).
// Instances: bf16, head sizes 64 (BERT-base/large, ViT-S/B/L and their decoders), 80, 88 and 128
// (the forward's set); other head sizes keep the f32 kernels (attention_train.cu). dQ by the
// deterministic recompute kernel, or by atomics in the dK/dV kernel (FlashBwdDq).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "cuda/common.cuh"
#include "cuda/flash/bwd_kernel.cuh"
#include "cuda/flash/flash_api.h"
#include "cuda/train_kernels.h"  // ScratchBuffer

namespace unmask::cuda {

namespace {

/// dq[row, h HS + c] = accum[row, h HS + c] * scale for every row of the batch: f32, or bf16
/// rounded once (grads_bf16). One thread per pair of columns (HS and both row strides are even).
__global__ void dq_from_accum_kernel(void* dq, int64_t ld, bool bf16, const float* accum, int64_t rows, int64_t C,
                                     float scale) {
  const int64_t pairs = C / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * pairs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / pairs, c = (i % pairs) * 2;
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

/// The dQ scheme for p: its own choice, else UNMASK_CUDA_ATTN_BWD, else recompute (the
/// deterministic kernels); atomic needs the batch's row count.
FlashBwdDq resolve_dq_mode(const FlashBwdParams& p) {
  FlashBwdDq mode = p.dq_mode;
  if (mode == FlashBwdDq::automatic) {
    mode = FlashBwdDq::recompute;
    if (const char* env = std::getenv("UNMASK_CUDA_ATTN_BWD")) {
      const std::string v = env;
      UNMASK_CHECK(v == "atomic" || v == "recompute", "UNMASK_CUDA_ATTN_BWD=", v,
                   " is not a dQ scheme of the tensor-core attention backward: use atomic (faster, run-to-run rounding "
                   "differences) or recompute (deterministic, the default)");
      mode = v == "atomic" ? FlashBwdDq::atomic : FlashBwdDq::recompute;
    }
  }
  return mode == FlashBwdDq::atomic && p.rows > 0 ? FlashBwdDq::atomic : FlashBwdDq::recompute;
}

template <int HD>
void run_flash_bwd(const FlashBwdParams& p, cudaStream_t stream) {
  using Kt = FlashBwdTraits<HD>;
  const dim3 grid(unsigned((p.max_seqlen + 63) / 64), unsigned(p.num_heads), unsigned(p.batch));
  if (resolve_dq_mode(p) == FlashBwdDq::atomic) {
    const int64_t C = int64_t(p.num_heads) * p.head_dim;
    ScratchBuffer accum(size_t(p.rows) * size_t(C) * sizeof(float), stream);
    CUDA_CHECK(cudaMemsetAsync(accum.ptr, 0, size_t(p.rows) * size_t(C) * sizeof(float), stream));
    FlashBwdParams q = p;
    q.dq_accum = accum.as<float>();
    auto fused = flash::flash_bwd_dkdv_kernel<Kt, true>;
    if constexpr (Kt::kSmemBytesAtomicDq > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(fused, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Kt::kSmemBytesAtomicDq)));
    fused<<<grid, Kt::kThreads, Kt::kSmemBytesAtomicDq, stream>>>(q);
    CUDA_CHECK_LAUNCH();
    const int64_t pairs = p.rows * (C / 2);
    const unsigned blocks = unsigned(std::min<int64_t>((pairs + 255) / 256, 65535));
    dq_from_accum_kernel<<<blocks, 256, 0, stream>>>(p.dq, p.dq_row_stride, p.grads_bf16, q.dq_accum, p.rows, C,
                                                     p.scale);
    CUDA_CHECK_LAUNCH();
    return;
  }
  auto dkdv = flash::flash_bwd_dkdv_kernel<Kt, false>;
  auto dq = flash::flash_bwd_dq_kernel<Kt>;
  if constexpr (Kt::kSmemBytes > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Kt::kSmemBytes)));
    CUDA_CHECK(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Kt::kSmemBytes)));
  }
  dkdv<<<grid, Kt::kThreads, Kt::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
  dq<<<grid, Kt::kThreads, Kt::kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

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
  if (p.batch == 0 || p.max_seqlen == 0) return;
  switch (p.head_dim) {
    case 64: return run_flash_bwd<64>(p, stream);
    case 80: return run_flash_bwd<80>(p, stream);
    case 88: return run_flash_bwd<88>(p, stream);
    case 128: return run_flash_bwd<128>(p, stream);
  }
}

}  // namespace unmask::cuda
