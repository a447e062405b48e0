// cpu/attention_train_cpu.cc: attention forward (with lse and dropout) and backward for
// training, one (sequence, head) work item at a time (see the header).
//
// Forward, per item (L rows of the sequence, head h; Q, K, V the head's [L, HS] column blocks):
//   S = scale Q K^T                  [L, L] sgemm; masked keys' columns set to -inf
//   P = softmax(S), lse = logsumexp  row kernel softmax_lse_rows
//   P = dropout(P)                   row kernel dropout_rows, counters per ops.h
//   O = P V                          sgemm straight into out's column block
// Backward (dO the head's block of dout; delta_i = dO_i . O_i = sum_j P_ij dP_ij):
//   P  = exp(scale Q K^T - lse)      recomputed, row kernel exp_sub_rows
//   Pd = dropout(P)                  same counters as the forward
//   dV = Pd^T dO                     sgemm
//   dPd = dO V^T;  dS = P (dP - delta), dP = dPd / (1-p) where kept   row kernel attn_dscores_rows
//   dQ = scale dS K;  dK = scale dS^T Q   sgemm
// Work items are handed out dynamically, longest sequence first. Scratch per thread:
// 3 L^2 + L floats for the longest L.
#include "cpu/attention_train_cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <vector>

#include "cpu/blas.h"
#include "cpu/kernels.h"
#include "unmask/error.h"


namespace unmask::cpu {
namespace {

/// One (sequence, head): rows row0 .. row0 + len - 1, keys masked by mask[j] == 0 (mask null:
/// all real).
struct Item {
  int64_t row0, len;
  const uint8_t* mask;
  int64_t head;
};

/// The work items, longest first, and the longest length.
std::vector<Item> make_items(const AttentionParams& a, int64_t* max_len) {
  std::vector<Item> items;
  *max_len = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    int64_t row0, len;
    const uint8_t* mask = nullptr;
    if (a.cu_seqlens) {
      row0 = a.cu_seqlens[b];
      len = a.cu_seqlens[b + 1] - row0;
    } else {
      row0 = b * a.seq_len;
      len = a.seq_len;
      if (a.key_mask) mask = a.key_mask + b * a.seq_len;
    }
    if (len == 0) continue;
    *max_len = std::max(*max_len, len);
    for (int64_t h = 0; h < a.num_heads; ++h) items.push_back({row0, len, mask, h});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& x, const Item& y) { return x.len > y.len; });
  return items;
}

int64_t real_keys(const Item& it) {
  if (!it.mask) return it.len;
  int64_t n = 0;
  for (int64_t j = 0; j < it.len; ++j) n += it.mask[j] != 0;
  return n;
}

/// S [L, L] = scale Q K^T with the masked keys' columns at -inf.
void scores(const AttentionParams& a, const Item& it, float* s) {
  const int64_t L = it.len, col = it.head * a.head_size;
  sgemm_serial(false, true, L, L, a.head_size, a.scale, a.q + it.row0 * a.ldq + col, a.ldq,
        a.k + it.row0 * a.ldk + col, a.ldk, s, L);
  if (it.mask)
    for (int64_t j = 0; j < L; ++j)
      if (!it.mask[j])
        for (int64_t i = 0; i < L; ++i) s[i * L + j] = -INFINITY;
}

/// dst = dropout(src) row by row with the counters of ops.h (row i of the item is query row
/// row0 + i). src, dst: [L, L]; dst may alias src.
void dropout_probs(const CpuKernels& k, const AttentionTrainParams& p, const Item& it,
                   const float* src, float* dst) {
  const int64_t L = it.len;
  const float keep_scale = 1.0f / (1.0f - p.dropout_p);
  for (int64_t i = 0; i < L; ++i) {
    const uint64_t counter0 = p.dropout_offset +
        uint64_t((it.head * p.rows + it.row0 + i) * p.dropout_stride);
    k.dropout_rows(src + i * L, L, dst + i * L, L, 1, L, p.dropout_p, keep_scale, p.dropout_seed,
                   counter0);
  }
}

/// Zeroes the head's column block of rows row0 .. row0 + len - 1 of x (ld).
void zero_block(float* x, int64_t ld, const Item& it, int64_t HS) {
  for (int64_t i = 0; i < it.len; ++i)
    std::fill_n(x + (it.row0 + i) * ld + it.head * HS, HS, 0.0f);
}

/// Runs fn(item, scratch) over the items on ctx's threads, dynamically balanced; scratch holds
/// `floats` floats per thread.
template <typename Fn>
void for_items(Context& ctx, const std::vector<Item>& items, size_t floats, Fn&& fn) {
  std::atomic<size_t> next{0};
  const int64_t workers = std::min<int64_t>(ctx.num_threads(), int64_t(items.size()));
  ctx.parallel_for(workers, [&](int64_t, int64_t) {
    const std::unique_ptr<float[]> scratch(new float[floats]);  // uninitialised: written before read
    for (size_t i = next.fetch_add(1); i < items.size(); i = next.fetch_add(1)) fn(items[i], scratch.get());
  });
}

}  // namespace

void attention_train_forward(Context& ctx, const AttentionTrainParams& p) {
  const AttentionParams& a = p.attn;
  int64_t max_len = 0;
  const std::vector<Item> items = make_items(a, &max_len);
  const CpuKernels& k = kernels();
  const int64_t HS = a.head_size;
  for_items(ctx, items, size_t(max_len * max_len), [&](const Item& it, float* s) {
    const int64_t L = it.len, col = it.head * HS;
    float* lse = p.lse + it.head * p.rows + it.row0;  // [L]
    if (real_keys(it) == 0) {  // no key to attend to: zeros, lse = -inf
      std::fill_n(lse, L, -INFINITY);
      zero_block(a.out, a.ldo, it, HS);
      return;
    }
    scores(a, it, s);
    k.softmax_lse_rows(s, L, s, L, L, L, lse);
    if (p.dropout_p > 0.0f) dropout_probs(k, p, it, s, s);
    sgemm_serial(false, false, L, HS, L, 1.0f, s, L, a.v + it.row0 * a.ldv + col, a.ldv,
          a.out + it.row0 * a.ldo + col, a.ldo);
  });
}

void attention_train_backward(Context& ctx, const AttentionTrainParams& p) {
  const AttentionParams& a = p.attn;
  int64_t max_len = 0;
  const std::vector<Item> items = make_items(a, &max_len);
  const CpuKernels& k = kernels();
  const int64_t HS = a.head_size;
  const bool drop = p.dropout_p > 0.0f;
  const size_t floats = size_t(3 * max_len * max_len + max_len);
  for_items(ctx, items, floats, [&](const Item& it, float* scratch) {
    const int64_t L = it.len, col = it.head * HS;
    if (real_keys(it) == 0) {
      zero_block(p.dq, p.lddq, it, HS);
      zero_block(p.dk, p.lddk, it, HS);
      zero_block(p.dv, p.lddv, it, HS);
      return;
    }
    float* prob = scratch;               // [L, L] P
    float* prob_drop = prob + L * L;     // [L, L] dropout(P) (drop only)
    float* ds = prob_drop + L * L;       // [L, L] dPd, then dS in place
    float* delta = ds + L * L;           // [L]
    const float* q = a.q + it.row0 * a.ldq + col;
    const float* kk = a.k + it.row0 * a.ldk + col;
    const float* v = a.v + it.row0 * a.ldv + col;
    const float* o = a.out + it.row0 * a.ldo + col;
    const float* dout = p.dout + it.row0 * p.lddo + col;
    scores(a, it, prob);
    k.exp_sub_rows(prob, L, p.lse + it.head * p.rows + it.row0, prob, L, L, L);
    if (drop) dropout_probs(k, p, it, prob, prob_drop);
    const float* pd = drop ? prob_drop : prob;
    sgemm_serial(true, false, L, HS, L, 1.0f, pd, L, dout, p.lddo, p.dv + it.row0 * p.lddv + col, p.lddv);
    sgemm_serial(false, true, L, L, HS, 1.0f, dout, p.lddo, v, a.ldv, ds, L);
    for (int64_t i = 0; i < L; ++i) {
      float acc = 0.0f;
      for (int64_t d = 0; d < HS; ++d) acc += dout[i * p.lddo + d] * o[i * a.ldo + d];
      delta[i] = acc;
    }
    k.attn_dscores_rows(prob, drop ? prob_drop : nullptr, ds, L, delta,
                        drop ? 1.0f / (1.0f - p.dropout_p) : 1.0f, L, L);
    sgemm_serial(false, false, L, HS, L, a.scale, ds, L, kk, a.ldk, p.dq + it.row0 * p.lddq + col, p.lddq);
    sgemm_serial(true, false, L, HS, L, a.scale, ds, L, q, a.ldq, p.dk + it.row0 * p.lddk + col, p.lddk);
  });
}

}  // namespace unmask::cpu
