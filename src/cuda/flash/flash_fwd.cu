// cuda/flash/flash_fwd.cu: attention_forward, the checked entry of the attention kernels.
#include <cmath>
#include <string>

#include "cuda/common.cuh"
#include "cuda/flash/flash_api.h"
#include "cuda/flash/switch.h"

namespace unmask::cuda {

namespace {

bool rows_16b_aligned(const void* ptr, int64_t row_stride, int head_dim) {
  return is_aligned(ptr, 16) && row_stride % 8 == 0 && head_dim % 8 == 0;
}

void check_params(const FlashFwdParams& p) {
  UNMASK_CHECK(p.q && p.k && p.v && p.o, "attention (cuda): q, k, v and o pointers are required");
  UNMASK_CHECK(p.num_heads >= 1 && p.num_heads <= 65535, "attention (cuda): num_heads must be in [1, 65535], got ",
               p.num_heads);
  UNMASK_CHECK(p.batch >= 0 && p.batch <= 65535, "attention (cuda): batch must be in [0, 65535], got ", p.batch);
  UNMASK_CHECK(p.max_seqlen >= 0, "attention (cuda): max_seqlen must be >= 0, got ", p.max_seqlen);
  UNMASK_CHECK(p.head_dim >= 1, "attention (cuda): head_dim must be >= 1, got ", p.head_dim);
  const int64_t C = int64_t(p.num_heads) * p.head_dim;
  UNMASK_CHECK(p.q_row_stride >= C && p.k_row_stride >= C && p.v_row_stride >= C && p.o_row_stride >= C,
               "attention (cuda): row strides q=", p.q_row_stride, " k=", p.k_row_stride, " v=", p.v_row_stride,
               " o=", p.o_row_stride, " must be >= NH*HS = ", C);
  UNMASK_CHECK(!(p.cu_seqlens && p.key_mask), "attention (cuda): key_mask is for the padded mode only");
  UNMASK_CHECK(!p.key_mask || p.mask_elem_bytes == 1 || p.mask_elem_bytes == 4 || p.mask_elem_bytes == 8,
               "attention (cuda): mask_elem_bytes must be 1, 4 or 8, got ", p.mask_elem_bytes);
  UNMASK_CHECK(std::isfinite(p.scale) && std::fabs(p.scale_log2 - p.scale * 1.4426950408889634f) <=
                                             1e-6f * std::fabs(p.scale_log2) + 1e-30f,
               "attention (cuda): scale_log2 (", p.scale_log2, ") must be scale * log2(e) (scale ", p.scale, ")");
}

}  // namespace

AttentionKernel attention_kernel_for(const FlashFwdParams& p) {
  const bool ok = (p.dtype == DType::bf16 || p.dtype == DType::f16) && flash::flash_head_dim_supported(p.head_dim) &&
                  rows_16b_aligned(p.q, p.q_row_stride, p.head_dim) &&
                  rows_16b_aligned(p.k, p.k_row_stride, p.head_dim) &&
                  rows_16b_aligned(p.v, p.v_row_stride, p.head_dim) &&
                  (p.o_f32 ? is_aligned(p.o, 8) && p.o_row_stride % 2 == 0
                           : rows_16b_aligned(p.o, p.o_row_stride, p.head_dim));
  return ok ? AttentionKernel::flash : AttentionKernel::naive;
}

void attention_forward(const FlashFwdParams& p, cudaStream_t stream) {
  attention_forward(p, stream, attention_kernel_for(p));
}

void attention_forward(const FlashFwdParams& p, cudaStream_t stream, AttentionKernel force, int block_m) {
  check_params(p);
  if (p.batch == 0 || p.max_seqlen == 0) return;
  const bool flash_kernel = force == AttentionKernel::flash;
  UNMASK_CHECK(!(p.o_f32 || p.lse) || flash_kernel,
               "attention (cuda): an f32 output and the log-sum-exp are written by the flash kernels only");
  UNMASK_CHECK(!p.lse || p.lse_head_stride >= 1, "attention (cuda): lse_head_stride must be >= 1 with an lse");
  UNMASK_CHECK(p.dropout_p == 0.0f || (p.dropout_p > 0.0f && p.dropout_p < 1.0f && p.lse && flash_kernel),
               "attention (cuda): dropout (p = ", p.dropout_p, ") is a training feature of the flash kernel: p in "
               "[0, 1) with an lse");
  if (force == AttentionKernel::naive) return attention_naive_forward(p, stream);
  UNMASK_CHECK(attention_kernel_for(p) == AttentionKernel::flash, "attention (cuda): the flash kernel needs bf16/f16, ",
               "head size 64, 80, 88 or 128 and 16-byte aligned rows; got ", dtype_name(p.dtype), " HS=", p.head_dim,
               " strides q/k/v/o=", p.q_row_stride, "/", p.k_row_stride, "/", p.v_row_stride, "/", p.o_row_stride);
  // The mma.sync kernel only. Two alternatives lost on an H200 (2026-11-28) and were removed: a
  // Hopper wgmma forward + backward (ViT-B pretraining 1,139 clips/s against the default's 1,246,
  // BERT-large phase 1 1,360 seq/s against 1,406, BERT-base inference 256x128 13.47 ms against
  // 12.89; m64n64 tiles and the backward with dropout failed their accuracy tests) and persistent
  // CTAs (1,234 clips/s, 1,409 seq/s: a tie, 13.07 ms).
  UNMASK_CHECK(block_m == 0 || block_m == 64 || block_m == 128, "attention (cuda): block_m must be 0, 64 or 128, got ",
               block_m);
  if (block_m == 0) block_m = flash::flash_fwd_block_m(p, current_device_attribute<cudaDevAttrMultiProcessorCount>());
  const bool ran = flash::flash_fwd_switch(p, block_m, stream);
  UNMASK_CHECK(ran, "attention (cuda): no flash instance for HS=", p.head_dim, " ", dtype_name(p.dtype));
}

}  // namespace unmask::cuda
