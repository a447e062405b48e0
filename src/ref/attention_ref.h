// ref/attention_ref.h: the dumb float64 oracle for multi-head attention, forward and backward.
//
// Naive on purpose: for every sequence and head it materialises the T x T scores and
// probabilities, no blocking, no SIMD, no threads. Tests compare cpu::attention_forward
// (src/cpu/attention_cpu.cc) against attention_forward here, and check attention_backward
// against central finite differences of attention_forward.
//
// Semantics (HF BERT): per sequence and head h,
//   S = scale * Q_h K_h^T, keys with mask 0 excluded (probability exactly 0),
//   P = softmax(S) over the keys, O_h = P V_h.
// A query whose sequence has no real key gets O = 0 (and zero gradients).
//
// Training (ops::attention_forward_train): optional dropout on P, element (head h, query row r,
// key position j) dropped iff philox_uniform(seed, offset + (h N + r) T + j) < p, T the longest
// sequence (padded: seq_len), kept ones scaled by 1 / (1 - p); and the log-sum-exp per head and
// query row, lse[h N + r] = log sum_j exp(S_rj) over the real keys (-inf without any).
//
//   ref::AttentionLayout lay{.num_heads = NH, .head_size = HS, .batch = B, .seq_len = T};
//   ref::attention_forward(q, k, v, out, lay, 1.0 / std::sqrt(HS));
#pragma once
#include <cstdint>

namespace unmask::ref {

/// How the N rows split into sequences and the C = NH*HS columns into heads.
struct AttentionLayout {
  int64_t num_heads = 0;                // NH
  int64_t head_size = 0;                // HS
  int64_t batch = 0;                    // B
  const int32_t* cu_seqlens = nullptr;  // packed: [B+1] (sequence b = rows cu[b]..cu[b+1]-1)
  int64_t seq_len = 0;                  // padded: T, N = B*T (when cu_seqlens is null)
  const uint8_t* key_mask = nullptr;    // padded, optional: [B, T], nonzero = real key
};

/// Dropout on the attention probabilities (p = 0: none); see the header comment.
struct AttentionDropout {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

/// out = attention(q, k, v). q, k, v, out: [N, NH*HS] contiguous; lse: [NH, N] or null.
template <typename T>
void attention_forward(const T* q, const T* k, const T* v, T* out, const AttentionLayout& lay,
                       double scale, const AttentionDropout& dropout = {}, T* lse = nullptr);

/// Gradients of sum(out * dout) with respect to q, k and v (overwritten), with the forward's
/// dropout. q, k, v, dout, dq, dk, dv: [N, NH*HS] contiguous.
template <typename T>
void attention_backward(const T* q, const T* k, const T* v, const T* dout, T* dq, T* dk, T* dv,
                        const AttentionLayout& lay, double scale,
                        const AttentionDropout& dropout = {});

}  // namespace unmask::ref
