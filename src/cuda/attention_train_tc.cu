// cuda/attention_train_tc.cu: the training attention on tensor cores (bf16 operands, fp32
// accumulators), behind the same AttnTrainParams as the f32 kernels of attention_train.cu and
// chosen by ops_cuda_attn_train.cc when CudaState::attention_bf16 is set and it applies.
//
// Forward: q, k, v (f32 rows) are rounded to bf16 copies and the flash forward kernel
// (flash/fwd_kernel.cuh) writes the f32 output and the log-sum-exp. Backward: q, k, v and dout
// are rounded again (nothing extra is kept between the passes), delta = rowsum(dout * out) is
// taken in f32 by the f32 path's kernel (attention_train_delta), and the flash backward
// (flash/bwd_kernel.cuh) writes f32 dq, dk, dv.
// Traffic per pass is a few reads of the [N, C] rows; nothing of size T x T exists.
//
// bf16 activations (attention_train_bf16_*): q, k, v, out, dout arrive as bf16 rows and go to
// the same kernels without a copy; out, dq, dk, dv are stored as bf16 (one rounding of the fp32
// accumulators each).
#include <cuda_runtime.h>

#include "cuda/attention_train.h"
#include "cuda/common.cuh"
#include "cuda/flash/bwd_kernel.cuh"
#include "cuda/flash/flash_api.h"
#include "cuda/kernels.h"
#include "cuda/train_kernels.h"

namespace unmask::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

/// A bf16 copy [N, C] (contiguous) of f32 rows with stride ld.
void to_bf16(void* dst, const float* src, int64_t ld, int64_t N, int64_t C, cudaStream_t stream) {
  cast_f32_2d(dst, DType::bf16, src, ld, 0, N, C, 1, stream);
}

// The fields both training forwards share (sequences, sizes, scale, dropout; bf16 operands):
// the callers add the row pointers, strides and the output form.
FlashFwdParams flash_fwd_params(const AttnTrainParams& p) {
  FlashFwdParams f;
  f.num_heads = p.num_heads, f.head_dim = p.head_size, f.batch = p.batch, f.max_seqlen = p.max_seqlen;
  f.cu_seqlens = p.cu_seqlens, f.key_mask = p.key_mask, f.mask_elem_bytes = p.mask_elem_bytes;
  f.mask_batch_stride = p.mask_batch_stride;
  f.scale = p.scale, f.scale_log2 = p.scale * kLog2e;
  f.dtype = DType::bf16;
  f.dropout_p = p.dropout_p, f.dropout_seed = p.dropout_seed, f.dropout_offset = p.dropout_offset;
  return f;
}

// The tensor-core forward with the context's CTA height (AttentionTuning::forward_block_m).
void run_flash_forward(const FlashFwdParams& f, const AttnTrainParams& p, cudaStream_t stream) {
  attention_forward(f, stream, AttentionKernel::flash, p.tuning.forward_block_m);
}

// The same for both training backwards.
FlashBwdParams flash_bwd_params(const AttnTrainParams& p) {
  FlashBwdParams b;
  b.num_heads = p.num_heads, b.head_dim = p.head_size, b.batch = p.batch, b.max_seqlen = p.max_seqlen;
  b.cu_seqlens = p.cu_seqlens, b.key_mask = p.key_mask, b.mask_elem_bytes = p.mask_elem_bytes;
  b.mask_batch_stride = p.mask_batch_stride;
  b.scale = p.scale, b.scale_log2 = p.scale * kLog2e;
  b.dropout_p = p.dropout_p, b.dropout_seed = p.dropout_seed, b.dropout_offset = p.dropout_offset;
  b.dq_mode = p.tuning.deterministic ? FlashBwdDq::recompute : FlashBwdDq::automatic;
  b.ctas_per_sm = p.tuning.backward_ctas_per_sm;
  b.short_kernel = p.tuning.backward_short;
  return b;
}

}  // namespace

bool attention_train_tc_applies(const AttnTrainParams& p) {
  // The flash forward stores f32 output pairs (float2): out 8-byte aligned with an even row stride.
  return flash_bwd_head_dim_supported(p.head_size) && p.rows < (int64_t(1) << 31) &&
         is_aligned(p.out, 8) && p.ldo % 2 == 0;
}

void attention_train_tc_forward(const AttnTrainParams& p, cudaStream_t stream) {
  UNMASK_CHECK(attention_train_tc_applies(p), "attention (cuda, bf16 tensor cores): needs head size 64, 80, 88 or 128 and an f32 "
               "output it can store in pairs");
  const int64_t N = p.rows, C = int64_t(p.num_heads) * p.head_size;
  if (N == 0) return;
  ScratchBuffer qkv(size_t(3 * N * C) * 2, stream);
  char* base = qkv.as<char>();
  void *qb = base, *kb = base + N * C * 2, *vb = base + 2 * N * C * 2;
  to_bf16(qb, p.q, p.ldq, N, C, stream);
  to_bf16(kb, p.k, p.ldk, N, C, stream);
  to_bf16(vb, p.v, p.ldv, N, C, stream);
  FlashFwdParams f = flash_fwd_params(p);
  f.q = qb, f.k = kb, f.v = vb, f.o = p.out;
  f.q_row_stride = f.k_row_stride = f.v_row_stride = C;
  f.o_row_stride = p.ldo;
  f.o_f32 = true, f.lse = p.lse, f.lse_head_stride = N;
  run_flash_forward(f, p, stream);
}

void attention_train_tc_backward(const AttnTrainParams& p, cudaStream_t stream) {
  UNMASK_CHECK(attention_train_tc_applies(p), "attention backward (cuda, bf16 tensor cores): needs head size 64, 80, 88 or 128 and "
               "an f32 output it can store in pairs");
  const int64_t N = p.rows, C = int64_t(p.num_heads) * p.head_size;
  if (N == 0) return;
  attention_train_delta(p, stream);  // the f32 path's kernel: the same delta bits
  ScratchBuffer rows(size_t(4 * N * C) * 2, stream);
  char* base = rows.as<char>();
  void *qb = base, *kb = base + N * C * 2, *vb = base + 2 * N * C * 2, *db = base + 3 * N * C * 2;
  to_bf16(qb, p.q, p.ldq, N, C, stream);
  to_bf16(kb, p.k, p.ldk, N, C, stream);
  to_bf16(vb, p.v, p.ldv, N, C, stream);
  to_bf16(db, p.dout, p.lddo, N, C, stream);
  FlashBwdParams b = flash_bwd_params(p);
  b.q = qb, b.k = kb, b.v = vb, b.dout = db;
  b.q_row_stride = b.k_row_stride = b.v_row_stride = b.dout_row_stride = C;
  b.lse = p.lse, b.delta = p.delta, b.lse_head_stride = N;
  b.dq = p.dq, b.dk = p.dk, b.dv = p.dv;
  b.dq_row_stride = p.lddq, b.dk_row_stride = p.lddk, b.dv_row_stride = p.lddv;
  b.rows = N;  // sizes the accumulator of the atomic dQ
  flash_attention_backward(b, stream);
}

bool attention_train_bf16_applies(const AttnTrainParams& p) {
  return flash_bwd_head_dim_supported(p.head_size) && p.rows < (int64_t(1) << 31);
}

void attention_train_bf16_forward(const AttnTrainParams& p, const AttnTrainBf16Rows& rows, cudaStream_t stream) {
  if (!attention_train_bf16_applies(p))  // Unsupported: the op front-end's contract for a shape it cannot run
    throw Unsupported("attention (cuda, bf16 activations): needs head size 64, 80, 88 or 128 and under 2^31 rows, got "
                      "head size ", p.head_size, " and ", p.rows, " rows", Hint("train with f32 activations for this model"));
  if (p.rows == 0) return;
  FlashFwdParams f = flash_fwd_params(p);
  f.q = rows.q, f.k = rows.k, f.v = rows.v, f.o = rows.out;
  f.q_row_stride = p.ldq, f.k_row_stride = p.ldk, f.v_row_stride = p.ldv, f.o_row_stride = p.ldo;
  f.o_f32 = false, f.lse = p.lse, f.lse_head_stride = p.rows;
  run_flash_forward(f, p, stream);
}

void attention_train_bf16_backward(const AttnTrainParams& p, const AttnTrainBf16Rows& rows, cudaStream_t stream) {
  if (!attention_train_bf16_applies(p))
    throw Unsupported("attention backward (cuda, bf16 activations): needs head size 64, 80, 88 or 128 and under 2^31 "
                      "rows, got head size ", p.head_size, " and ", p.rows, " rows",
                      Hint("train with f32 activations for this model"));
  const int64_t N = p.rows;
  if (N == 0) return;
  attention_train_delta_bf16(p, rows.dout, rows.out, stream);
  FlashBwdParams b = flash_bwd_params(p);
  b.q = rows.q, b.k = rows.k, b.v = rows.v, b.dout = rows.dout;
  b.q_row_stride = p.ldq, b.k_row_stride = p.ldk, b.v_row_stride = p.ldv, b.dout_row_stride = p.lddo;
  b.lse = p.lse, b.delta = p.delta, b.lse_head_stride = N;
  b.dq = rows.dq, b.dk = rows.dk, b.dv = rows.dv;  // bf16, stored straight from the accumulators
  b.dq_row_stride = p.lddq, b.dk_row_stride = p.lddk, b.dv_row_stride = p.lddv;
  b.grads_bf16 = true;
  b.rows = N;
  flash_attention_backward(b, stream);
}

}  // namespace unmask::cuda
