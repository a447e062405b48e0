// cpu/attention_train_cpu.h: multi-head attention for training on the CPU (fp32): the forward
// that also writes the log-sum-exp (and applies dropout to the probabilities), and the backward.
//
// The kernels behind ops::attention_forward_train / ops::attention_backward for Device::cpu.
// Unlike the inference kernel (cpu/attention_cpu.h) this one materialises, per work item
// (sequence, head), the L x L scores of that sequence in per-thread scratch (BERT pretraining
// has L <= 512, so at most 3 MiB per thread), and runs the products as single-threaded sgemm
// calls on them; the row work (softmax, exp, dropout, score gradient) uses the per-ISA row
// kernels of cpu/kernels.h. The backward recomputes the probabilities from the saved lse.
//
// Trusts its inputs: src/ops/attention.cc validates them. Float64 oracle:
// ref::attention_forward / attention_backward (src/ref/attention_ref.h).
//
//   cpu::AttentionTrainParams p{.attn = {...}, .lse = lse, .rows = N, .dropout_stride = T};
//   cpu::attention_train_forward(ctx, p);
#pragma once
#include <cstdint>

#include "cpu/attention_cpu.h"
#include "unmask/context.h"

namespace unmask::cpu {

struct AttentionTrainParams {
  AttentionParams attn;  // q, k, v, out with their row strides, heads, scale, the sequences
  float* lse = nullptr;  // [NH, N]: forward output, backward input
  int64_t rows = 0;      // N
  // Dropout of the probabilities: element (h, query row r, key position j) dropped iff
  // philox_uniform(dropout_seed, dropout_offset + (h * N + r) * dropout_stride + j) < p.
  float dropout_p = 0.0f;
  uint64_t dropout_seed = 0, dropout_offset = 0;
  int64_t dropout_stride = 0;  // T: the longest sequence (padded: the padded length)
  // Backward only.
  const float* dout = nullptr;  // [N, NH*HS], row stride lddo
  float* dq = nullptr;          // [N, NH*HS] each, row strides lddq, lddk, lddv; may be
  float* dk = nullptr;          //   column slices of one buffer; must not overlap the inputs
  float* dv = nullptr;
  int64_t lddo = 0, lddq = 0, lddk = 0, lddv = 0;
};

/// out = dropout(softmax(scale q k^T)) v per sequence and head, lse = its log-sum-exp
/// (-inf and out = 0 for a query whose sequence has no real key).
void attention_train_forward(Context& ctx, const AttentionTrainParams& p);

/// dq, dk, dv (overwritten) from dout, with p.attn.out and p.lse from the forward.
void attention_train_backward(Context& ctx, const AttentionTrainParams& p);

}  // namespace unmask::cpu
