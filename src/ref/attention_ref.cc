// ref/attention_ref.cc: naive attention forward and backward, with the training dropout and
// log-sum-exp (the oracle; see the header).
#include "ref/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "ref/train_ref.h"

namespace unmask::ref {
namespace {

/// Rows of sequence b: [row0, row0 + len), with an optional key mask [len].
struct Seq {
  int64_t row0, len;
  const uint8_t* mask;
};

Seq sequence(const AttentionLayout& lay, int64_t b) {
  if (lay.cu_seqlens) return {lay.cu_seqlens[b], lay.cu_seqlens[b + 1] - lay.cu_seqlens[b], nullptr};
  return {b * lay.seq_len, lay.seq_len, lay.key_mask ? lay.key_mask + b * lay.seq_len : nullptr};
}

/// Rows N and the dropout stride T (the longest sequence; padded: seq_len).
std::pair<int64_t, int64_t> rows_and_stride(const AttentionLayout& lay) {
  if (!lay.cu_seqlens) return {lay.batch * lay.seq_len, lay.seq_len};
  int64_t T = 0;
  for (int64_t b = 0; b < lay.batch; ++b) T = std::max<int64_t>(T, lay.cu_seqlens[b + 1] - lay.cu_seqlens[b]);
  return {lay.cu_seqlens[lay.batch], T};
}

/// keep[i][j] = 1 / (1 - p) or 0: the dropout multipliers of one sequence and head. [len][len].
void dropout_multipliers(const AttentionDropout& d, const AttentionLayout& lay, const Seq& s,
                         int64_t h, std::vector<double>& keep) {
  const auto [N, T] = rows_and_stride(lay);
  keep.assign(size_t(s.len * s.len), 1.0);
  if (d.p == 0.0f) return;
  for (int64_t i = 0; i < s.len; ++i)
    for (int64_t j = 0; j < s.len; ++j) {
      const uint64_t counter = d.offset + uint64_t((h * N + s.row0 + i) * T + j);
      keep[size_t(i * s.len + j)] = dropout_keep(d.p, d.seed, counter) ? 1.0 / (1.0 - double(d.p)) : 0.0;
    }
}

/// p[i][j] = softmax_j(scale * q_i . k_j) over the real keys of one sequence and head
/// (0 for masked keys; a row of zeros when no key is real). p: [len][len].
template <typename T>
void probabilities(const T* q, const T* k, const Seq& s, int64_t C, int64_t col, int64_t HS,
                   double scale, std::vector<double>& p, std::vector<double>* lse = nullptr) {
  const int64_t L = s.len;
  p.assign(size_t(L * L), 0.0);
  if (lse) lse->assign(size_t(L), -INFINITY);
  for (int64_t i = 0; i < L; ++i) {
    const T* qi = q + (s.row0 + i) * C + col;
    double mx = -INFINITY;
    for (int64_t j = 0; j < L; ++j) {
      if (s.mask && !s.mask[j]) continue;
      const T* kj = k + (s.row0 + j) * C + col;
      double dot = 0.0;
      for (int64_t d = 0; d < HS; ++d) dot += double(qi[d]) * double(kj[d]);
      p[i * L + j] = scale * dot;
      mx = std::max(mx, scale * dot);
    }
    if (mx == -INFINITY) continue;  // no real key: the row stays 0
    double sum = 0.0;
    for (int64_t j = 0; j < L; ++j) {
      if (s.mask && !s.mask[j]) continue;
      p[i * L + j] = std::exp(p[i * L + j] - mx);
      sum += p[i * L + j];
    }
    for (int64_t j = 0; j < L; ++j) p[i * L + j] /= sum;
    if (lse) (*lse)[size_t(i)] = mx + std::log(sum);
  }
}

}  // namespace

template <typename T>
void attention_forward(const T* q, const T* k, const T* v, T* out, const AttentionLayout& lay,
                       double scale, const AttentionDropout& dropout, T* lse) {
  const int64_t NH = lay.num_heads, HS = lay.head_size, C = NH * HS;
  const int64_t N = rows_and_stride(lay).first;
  std::vector<double> p, keep, row_lse;
  for (int64_t b = 0; b < lay.batch; ++b) {
    const Seq s = sequence(lay, b);
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t col = h * HS;
      probabilities(q, k, s, C, col, HS, scale, p, &row_lse);
      dropout_multipliers(dropout, lay, s, h, keep);
      for (int64_t i = 0; i < s.len; ++i) {
        if (lse) lse[h * N + s.row0 + i] = T(row_lse[size_t(i)]);
        for (int64_t d = 0; d < HS; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < s.len; ++j)
            acc += p[i * s.len + j] * keep[i * s.len + j] * double(v[(s.row0 + j) * C + col + d]);
          out[(s.row0 + i) * C + col + d] = T(acc);
        }
      }
    }
  }
}

template <typename T>
void attention_backward(const T* q, const T* k, const T* v, const T* dout, T* dq, T* dk, T* dv,
                        const AttentionLayout& lay, double scale, const AttentionDropout& dropout) {
  const int64_t NH = lay.num_heads, HS = lay.head_size, C = NH * HS;
  std::vector<double> p, ds, keep;
  for (int64_t b = 0; b < lay.batch; ++b) {
    const Seq s = sequence(lay, b);
    const int64_t L = s.len;
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t col = h * HS;
      auto at = [&](const T* x, int64_t i, int64_t d) { return double(x[(s.row0 + i) * C + col + d]); };
      probabilities(q, k, s, C, col, HS, scale, p);
      dropout_multipliers(dropout, lay, s, h, keep);
      // dv_j = sum_i p_ij keep_ij dout_i
      for (int64_t j = 0; j < L; ++j)
        for (int64_t d = 0; d < HS; ++d) {
          double acc = 0.0;
          for (int64_t i = 0; i < L; ++i) acc += p[i * L + j] * keep[i * L + j] * at(dout, i, d);
          dv[(s.row0 + j) * C + col + d] = T(acc);
        }
      // dp_ij = keep_ij dout_i . v_j (the gradient of p before dropout);
      // ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik)
      ds.assign(size_t(L * L), 0.0);
      for (int64_t i = 0; i < L; ++i) {
        double rowdot = 0.0;
        for (int64_t j = 0; j < L; ++j) {
          double dp = 0.0;
          for (int64_t d = 0; d < HS; ++d) dp += at(dout, i, d) * at(v, j, d);
          dp *= keep[i * L + j];
          ds[i * L + j] = dp;
          rowdot += p[i * L + j] * dp;
        }
        for (int64_t j = 0; j < L; ++j) ds[i * L + j] = p[i * L + j] * (ds[i * L + j] - rowdot);
      }
      // dq_i = scale sum_j ds_ij k_j;  dk_j = scale sum_i ds_ij q_i
      for (int64_t i = 0; i < L; ++i)
        for (int64_t d = 0; d < HS; ++d) {
          double aq = 0.0, ak = 0.0;
          for (int64_t j = 0; j < L; ++j) {
            aq += ds[i * L + j] * at(k, j, d);
            ak += ds[j * L + i] * at(q, j, d);
          }
          dq[(s.row0 + i) * C + col + d] = T(scale * aq);
          dk[(s.row0 + i) * C + col + d] = T(scale * ak);
        }
    }
  }
}

template void attention_forward<double>(const double*, const double*, const double*, double*,
                                        const AttentionLayout&, double, const AttentionDropout&,
                                        double*);
template void attention_backward<double>(const double*, const double*, const double*,
                                         const double*, double*, double*, double*,
                                         const AttentionLayout&, double, const AttentionDropout&);

}  // namespace unmask::ref
