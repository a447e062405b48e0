// ref/window_attention_ref.cc: see window_attention_ref.h.
#include "ref/window_attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace unmask::ref {

namespace {

// P [N, N] (and lse per row) of window w, head h.
void probabilities(const double* q, const double* k, const double* bias, const double* mask, const WindowLayout& lay,
                   double scale, int64_t w, int64_t h, std::vector<double>& P, double* lse_rows) {
  const int64_t N = lay.window, HS = lay.head_size, C = lay.num_heads * HS;
  const double* bh = bias + h * N * N;
  const double* mw = mask ? mask + (w % lay.masks) * N * N : nullptr;
  for (int64_t i = 0; i < N; ++i) {
    const double* qi = q + (w * N + i) * C + h * HS;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < N; ++j) {
      const double* kj = k + (w * N + j) * C + h * HS;
      double s = 0;
      for (int64_t d = 0; d < HS; ++d) s += qi[d] * kj[d];
      s = scale * s + bh[i * N + j] + (mw ? mw[i * N + j] : 0.0);
      P[size_t(i * N + j)] = s;
      m = std::max(m, s);
    }
    double sum = 0;
    for (int64_t j = 0; j < N; ++j) sum += std::exp(P[size_t(i * N + j)] - m);
    for (int64_t j = 0; j < N; ++j) P[size_t(i * N + j)] = std::exp(P[size_t(i * N + j)] - m) / sum;
    if (lse_rows) lse_rows[i] = m + std::log(sum);
  }
}

}  // namespace

void window_attention_forward(const double* q, const double* k, const double* v, const double* bias,
                              const double* mask, double* out, double* lse, const WindowLayout& lay, double scale) {
  const int64_t N = lay.window, HS = lay.head_size, NH = lay.num_heads, C = NH * HS, R = lay.windows * N;
  std::vector<double> P(size_t(N * N));
  for (int64_t w = 0; w < lay.windows; ++w)
    for (int64_t h = 0; h < NH; ++h) {
      probabilities(q, k, bias, mask, lay, scale, w, h, P, lse ? lse + h * R + w * N : nullptr);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t d = 0; d < HS; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < N; ++j) acc += P[size_t(i * N + j)] * v[(w * N + j) * C + h * HS + d];
          out[(w * N + i) * C + h * HS + d] = acc;
        }
    }
}

void window_attention_backward(const double* q, const double* k, const double* v, const double* bias,
                               const double* mask, const double* dout, double* dq, double* dk, double* dv,
                               double* dbias, const WindowLayout& lay, double scale) {
  const int64_t N = lay.window, HS = lay.head_size, NH = lay.num_heads, C = NH * HS, R = lay.windows * N;
  std::fill(dq, dq + R * C, 0.0);
  std::fill(dk, dk + R * C, 0.0);
  std::fill(dv, dv + R * C, 0.0);
  std::fill(dbias, dbias + NH * N * N, 0.0);
  std::vector<double> P(size_t(N * N)), dS(size_t(N * N));
  for (int64_t w = 0; w < lay.windows; ++w)
    for (int64_t h = 0; h < NH; ++h) {
      probabilities(q, k, bias, mask, lay, scale, w, h, P, nullptr);
      auto at = [&](const double* t, int64_t row, int64_t d) { return t[(w * N + row) * C + h * HS + d]; };
      for (int64_t i = 0; i < N; ++i) {
        // dP_ij = dout_i . v_j; dS_ij = P_ij (dP_ij - sum_l P_il dP_il)
        double rowsum = 0;
        for (int64_t j = 0; j < N; ++j) {
          double dp = 0;
          for (int64_t d = 0; d < HS; ++d) dp += at(dout, i, d) * at(v, j, d);
          dS[size_t(i * N + j)] = dp;
          rowsum += P[size_t(i * N + j)] * dp;
        }
        for (int64_t j = 0; j < N; ++j) dS[size_t(i * N + j)] = P[size_t(i * N + j)] * (dS[size_t(i * N + j)] - rowsum);
      }
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j) {
          const double p = P[size_t(i * N + j)], ds = dS[size_t(i * N + j)];
          dbias[h * N * N + i * N + j] += ds;
          for (int64_t d = 0; d < HS; ++d) {
            dv[(w * N + j) * C + h * HS + d] += p * at(dout, i, d);
            dq[(w * N + i) * C + h * HS + d] += scale * ds * at(k, j, d);
            dk[(w * N + j) * C + h * HS + d] += scale * ds * at(q, i, d);
          }
        }
    }
}

}  // namespace unmask::ref
