// cuda/attention_train.h: the launchers of the f32 training attention kernels
// (attention_train.cu), behind cuda::attention_forward_train / attention_backward
// (ops_cuda_attn_train.cc, semantics in ops/ops.h).
//
// Raw device pointers, row strides in elements (innermost stride 1), the sequences already on
// the device (cu_seqlens, or the padded length with an optional key mask), an explicit stream.
// Preconditions are checked here; the shapes were validated by the op front-end.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace unmask::cuda {

/// The tensor-core attention kernels' choices (attention_train_tc.cu, flash/). The defaults are
/// the kernels that won on an H200 (2026-11-28, BENCHMARKS.md); tests set the others to check them.
struct AttentionTuning {
  /// dQ by the recompute kernel (bitwise reproducible) instead of atomic adds into an f32
  /// accumulator (faster; past 128 keys the last bit may differ between runs).
  bool deterministic = false;
  /// Sequences of at most 128 keys (head size 64) in one backward kernel with dQ summed in the CTA
  /// (BERT-large +1.7%); false runs the dK/dV kernel pair.
  bool backward_short = true;
  /// CTAs a SM of the dK/dV kernel: 0 = 3 where three fit (sm_90, head size 64, no dropout; K and
  /// V re-read from shared memory), else 2; 2 or 3 asks for that count (3 runs as 2 where it
  /// does not apply). The same results either way.
  int backward_ctas_per_sm = 0;
  /// The forward's query rows a CTA: 0 = chosen from the grid and the SM count; 64 or 128.
  int forward_block_m = 0;
};

struct AttnTrainParams {
  const float *q = nullptr, *k = nullptr, *v = nullptr;  // [N, NH*HS] each, row strides ldq, ldk, ldv
  float* out = nullptr;                                   // forward: written; backward: read
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0;
  float* lse = nullptr;  // f32 [NH, N] contiguous: forward output, backward input
  int64_t rows = 0;      // N
  int num_heads = 0, head_size = 0;
  float scale = 0.0f;
  int batch = 0;                        // B
  int max_seqlen = 0;                   // T: longest sequence (padded: padded_seq_len)
  const int32_t* cu_seqlens = nullptr;  // device i32 [B+1] (packed) or null (padded)
  const void* key_mask = nullptr;       // padded only, device [B, T] (row stride mask_batch_stride)
  int mask_elem_bytes = 1;              // 1 (u8/bool), 4 (i32) or 8 (i64)
  int64_t mask_batch_stride = 0;
  // Dropout of the probabilities, counters of ops.h: offset + (h * N + r) * T + j.
  float dropout_p = 0.0f;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  // Backward only.
  const float* dout = nullptr;
  int64_t lddo = 0;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;
  int64_t lddq = 0, lddk = 0, lddv = 0;
  float* delta = nullptr;  // scratch f32 [NH, N]: rowsum(dout * out) per head
  AttentionTuning tuning;  // the tensor-core kernels' choices (CudaState::attention)
};

/// out and lse (ops::attention_forward_train). head_size in [1, 128].
void attention_train_forward(const AttnTrainParams& p, cudaStream_t stream);
/// dq, dk, dv (overwritten) from dout, out and lse; p.delta must hold NH * N floats.
void attention_train_backward(const AttnTrainParams& p, cudaStream_t stream);
/// p.delta [NH, N] = rowsum(dout * out) per head: the first step of both backward paths.
void attention_train_delta(const AttnTrainParams& p, cudaStream_t stream);

// The tensor-core twins (attention_train_tc.cu): bf16 operands, fp32 accumulators, the same
// contract (f32 in and out, lse natural, the same dropout mask, deterministic). They apply to
// head size 64, 80, 88 or 128; CudaState::attention_bf16 (precision bf16) selects them in
// ops_cuda_attn_train.cc.
bool attention_train_tc_applies(const AttnTrainParams& p);
void attention_train_tc_forward(const AttnTrainParams& p, cudaStream_t stream);
void attention_train_tc_backward(const AttnTrainParams& p, cudaStream_t stream);

/// bf16 activations (training with bf16 activations): the rows of q, k, v, out, dout, dq, dk,
/// dv are bf16 at these pointers, with the strides and every other field of AttnTrainParams
/// (whose float row pointers stay null; lse and delta stay f32).
struct AttnTrainBf16Rows {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void* out = nullptr;
  const void* dout = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
};
/// Head size 64, 80, 88 or 128 (the tensor-core kernels); bf16 throughout.
bool attention_train_bf16_applies(const AttnTrainParams& p);
/// out (bf16, rounded once) and lse: the flash forward on the bf16 rows as they are.
void attention_train_bf16_forward(const AttnTrainParams& p, const AttnTrainBf16Rows& rows, cudaStream_t stream);
/// dq, dk, dv (bf16): delta from the bf16 dout and out, then the flash backward storing its
/// fp32 accumulators rounded once into the bf16 rows.
void attention_train_bf16_backward(const AttnTrainParams& p, const AttnTrainBf16Rows& rows, cudaStream_t stream);
/// p.delta [NH, N] = rowsum(dout * out) per head over bf16 rows (fp32 sums).
void attention_train_delta_bf16(const AttnTrainParams& p, const void* dout, const void* out, cudaStream_t stream);

}  // namespace unmask::cuda
