// cuda/flash/params.h: the plain parameter struct of the attention forward kernels.
//
// POD only (flash-attention `Flash_fwd_params` style): device pointers, strides in elements,
// sizes. Filled by ops_cuda.cc (from validated tensors) or directly by callers of the kernel
// layer (bench/gpu), passed by value to the kernels. Kernels trust it; attention_forward()
// checks it (flash/flash_fwd.cu).
//
// Layout (BERT's fused QKV projection output is the usual source):
//   q, k, v, o: N rows; row n of head h is the HS = head_dim elements starting at
//               ptr + n * row_stride + h * head_dim. Row strides may exceed NH*HS (q, k and v
//               are then column slices of one [N, 3C] buffer).
// Sequences:
//   packed (cu_seqlens != null): device i32 [B+1]; sequence b is rows cu[b] .. cu[b+1]-1;
//     max_seqlen >= every sequence length (sizes the grid; blocks past a sequence's end exit).
//   padded (cu_seqlens == null): sequence b is rows b*T .. b*T+T-1 with T = max_seqlen;
//     key_mask (optional) [B, T] with strides (mask_batch_stride, 1) in elements of
//     mask_elem_bytes (1: u8/bool, 4: i32, 8: i64); nonzero = real key. Every query row gets
//     an output, padded ones included (they attend over the real keys), as in HF.
// A query whose sequence has no real key gets a zero output (ref::attention_forward).
#pragma once
#include <cstdint>

#include "unmask/dtype.h"

namespace unmask::cuda {

struct FlashFwdParams {
  const void* q = nullptr;  // [N, q_row_stride]
  const void* k = nullptr;  // [N, k_row_stride]
  const void* v = nullptr;  // [N, v_row_stride]
  void* o = nullptr;        // [N, o_row_stride]
  int64_t q_row_stride = 0, k_row_stride = 0, v_row_stride = 0, o_row_stride = 0;

  int num_heads = 0;  // NH
  int head_dim = 0;   // HS
  int batch = 0;      // B
  int max_seqlen = 0; // T (padded) or an upper bound of the sequence lengths (packed)

  const int32_t* cu_seqlens = nullptr;  // packed mode, device [B+1]
  const void* key_mask = nullptr;       // padded mode, device [B, T], optional
  int mask_elem_bytes = 1;
  int64_t mask_batch_stride = 0;

  float scale = 0.0f;       // softmax scale, usually 1/sqrt(HS)
  float scale_log2 = 0.0f;  // scale * log2(e): the kernels use exp2
  DType dtype = DType::bf16;  // of q, k, v, o: bf16 or f16 (flash), f32 too (naive kernel)

  // Training forward (flash kernel only; the f32 training attention's contract, ops.h):
  // o_f32: o holds f32 rows (the fp32 accumulators stored unrounded) instead of `dtype`;
  // lse: f32 [NH, lse_head_stride], natural log-sum-exp of the scaled scores of each query row
  // (row n of head h at lse[h * lse_head_stride + n]; -inf for a row with no real key).
  bool o_f32 = false;
  float* lse = nullptr;
  int64_t lse_head_stride = 0;
  // Training dropout of the probabilities (flash kernel only), the counters of ops.h: element
  // (row n of head h, key j of its sequence) is kept iff philox_uniform(seed, offset +
  // (h lse_head_stride + n) max_seqlen + j) >= p, kept ones scaled by 1 / (1 - p); the row sums
  // (and lse) stay undropped. p = 0: none.
  float dropout_p = 0.0f;
  uint64_t dropout_seed = 0, dropout_offset = 0;
};

}  // namespace unmask::cuda
