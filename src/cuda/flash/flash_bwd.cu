// cuda/flash/flash_bwd.cu: the checked entry of the tensor-core attention backward (bwd_kernel.cuh).
// Instances: bf16, head sizes 64 (BERT-base/large, ViT-S/B/L and their decoders), 80, 88 and 128
// (the forward's set); other head sizes keep the f32 kernels (attention_train.cu).
#include "cuda/common.cuh"
#include "cuda/flash/bwd_kernel.cuh"
#include "cuda/flash/flash_api.h"

namespace unmask::cuda {

namespace {

template <int HD>
void run_flash_bwd(const FlashBwdParams& p, cudaStream_t stream) {
  using Kt = FlashBwdTraits<HD>;
  auto dkdv = flash::flash_bwd_dkdv_kernel<Kt>;
  auto dq = flash::flash_bwd_dq_kernel<Kt>;
  if constexpr (Kt::kSmemBytes > 48 * 1024) {
    CUDA_CHECK(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Kt::kSmemBytes)));
    CUDA_CHECK(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Kt::kSmemBytes)));
  }
  const dim3 grid(unsigned((p.max_seqlen + 63) / 64), unsigned(p.num_heads), unsigned(p.batch));
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
  if (p.batch == 0 || p.max_seqlen == 0) return;
  switch (p.head_dim) {
    case 64: return run_flash_bwd<64>(p, stream);
    case 80: return run_flash_bwd<80>(p, stream);
    case 88: return run_flash_bwd<88>(p, stream);
    case 128: return run_flash_bwd<128>(p, stream);
  }
}

}  // namespace unmask::cuda
