// cpu/window_attention_cpu.cc: see window_attention_cpu.h.
#include "cpu/window_attention_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace unmask::cpu {

namespace {

// A (window, head)'s operands, gathered once: K^T and V^T [HS, N] for the score rows, K, V
// and Q [N, HS] for the output's and the gradients' rows.
struct WindowScratch {
  std::vector<float> kt, vt, kn, vn, qn, dk, dv, s, dp;
  void size_for(int64_t N, int64_t HS) {
    for (auto* v : {&kt, &vt, &kn, &vn, &qn, &dk, &dv}) v->resize(size_t(N * HS));
    s.resize(size_t(N));
    dp.resize(size_t(N));
  }
};

// s[j] = scale q_i . k_j + bias_i[j] (+ mask_i[j]) for the N keys.
inline void score_row(const float* qi, const WindowScratch& ws, const float* bias_i, const float* mask_i, int64_t N,
                      int64_t HS, float scale, float* s) {
  for (int64_t j = 0; j < N; ++j) s[j] = (bias_i ? bias_i[j] : 0.0f) + (mask_i ? mask_i[j] : 0.0f);
  for (int64_t d = 0; d < HS; ++d) {
    const float a = scale * qi[d];
    const float* kd = ws.kt.data() + d * N;
    for (int64_t j = 0; j < N; ++j) s[j] += a * kd[j];
  }
}

void gather(const float* src, int64_t ld, int64_t row0, int64_t col0, int64_t N, int64_t HS, float* rows_out,
            float* transposed_out) {
  for (int64_t j = 0; j < N; ++j) {
    const float* r = src + (row0 + j) * ld + col0;
    for (int64_t d = 0; d < HS; ++d) {
      if (rows_out) rows_out[j * HS + d] = r[d];
      if (transposed_out) transposed_out[d * N + j] = r[d];
    }
  }
}

}  // namespace

void window_attention_forward(Context& ctx, const WindowAttentionParams& p) {
  const int64_t N = p.window, HS = p.head_size, NH = p.num_heads, R = p.windows * N;
  ctx.parallel_for(p.windows * NH, [&](int64_t begin, int64_t end) {
    WindowScratch ws;
    ws.size_for(N, HS);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t w = item / NH, h = item % NH, row0 = w * N, col0 = h * HS;
      gather(p.k, p.ldk, row0, col0, N, HS, nullptr, ws.kt.data());
      gather(p.v, p.ldv, row0, col0, N, HS, ws.vn.data(), nullptr);
      const float* bias_h = p.bias ? p.bias + h * N * N : nullptr;
      const float* mask_w = p.mask ? p.mask + (w % p.masks) * N * N : nullptr;
      for (int64_t i = 0; i < N; ++i) {
        float* s = ws.s.data();
        score_row(p.q + (row0 + i) * p.ldq + col0, ws, bias_h ? bias_h + i * N : nullptr, mask_w ? mask_w + i * N : nullptr, N, HS,
                  p.scale, s);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < N; ++j) m = std::max(m, s[j]);
        double sum = 0;
        for (int64_t j = 0; j < N; ++j) {
          s[j] = std::exp(s[j] - m);
          sum += s[j];
        }
        const float inv = float(1.0 / sum);
        float* o = p.out + (row0 + i) * p.ldo + col0;
        std::fill(o, o + HS, 0.0f);
        for (int64_t j = 0; j < N; ++j) {
          const float pj = s[j] * inv;
          const float* vj = ws.vn.data() + j * HS;
          for (int64_t d = 0; d < HS; ++d) o[d] += pj * vj[d];
        }
        if (p.lse) p.lse[h * R + row0 + i] = m + float(std::log(sum));
      }
    }
  });
}

void window_attention_backward(Context& ctx, const WindowAttentionParams& p) {
  const int64_t N = p.window, HS = p.head_size, NH = p.num_heads, R = p.windows * N;
  // The windows' score gradients for the bias gradient, a group at a time (at most ~64 MB).
  const int64_t per_window = NH * N * N;
  const int64_t group = p.dbias ? std::max<int64_t>(1, (int64_t(16) << 20) / std::max<int64_t>(per_window, 1)) : p.windows;
  std::vector<float> dS_group(p.dbias ? size_t(std::min(group, p.windows) * per_window) : 0);
  for (int64_t w0 = 0; w0 < p.windows; w0 += group) {
    const int64_t w1 = std::min(p.windows, w0 + group);
    ctx.parallel_for((w1 - w0) * NH, [&](int64_t begin, int64_t end) {
      WindowScratch ws;
      ws.size_for(N, HS);
      for (int64_t item = begin; item < end; ++item) {
        const int64_t w = w0 + item / NH, h = item % NH, row0 = w * N, col0 = h * HS;
        gather(p.k, p.ldk, row0, col0, N, HS, ws.kn.data(), ws.kt.data());
        gather(p.v, p.ldv, row0, col0, N, HS, nullptr, ws.vt.data());
        gather(p.q, p.ldq, row0, col0, N, HS, ws.qn.data(), nullptr);
        std::fill(ws.dk.begin(), ws.dk.end(), 0.0f);
        std::fill(ws.dv.begin(), ws.dv.end(), 0.0f);
        const float* bias_h = p.bias ? p.bias + h * N * N : nullptr;
        const float* mask_w = p.mask ? p.mask + (w % p.masks) * N * N : nullptr;
        float* dS_wh = p.dbias ? dS_group.data() + ((w - w0) * NH + h) * N * N : nullptr;
        for (int64_t i = 0; i < N; ++i) {
          float* s = ws.s.data();
          const float* qi = ws.qn.data() + i * HS;
          score_row(qi, ws, bias_h ? bias_h + i * N : nullptr, mask_w ? mask_w + i * N : nullptr, N, HS, p.scale, s);
          const float lse = p.lse[h * R + row0 + i];
          for (int64_t j = 0; j < N; ++j) s[j] = std::exp(s[j] - lse);  // P_ij
          const float* doi = p.dout + (row0 + i) * p.lddo + col0;
          const float* oi = p.out + (row0 + i) * p.ldo + col0;
          float delta = 0;
          for (int64_t d = 0; d < HS; ++d) delta += doi[d] * oi[d];
          float* dp = ws.dp.data();
          std::fill(dp, dp + N, 0.0f);
          for (int64_t d = 0; d < HS; ++d) {
            const float a = doi[d];
            const float* vd = ws.vt.data() + d * N;
            for (int64_t j = 0; j < N; ++j) dp[j] += a * vd[j];
          }
          float* dqi = p.dq + (row0 + i) * p.lddq + col0;
          std::fill(dqi, dqi + HS, 0.0f);
          for (int64_t j = 0; j < N; ++j) {
            const float pij = s[j], ds = pij * (dp[j] - delta);
            if (dS_wh) dS_wh[i * N + j] = ds;
            const float* kj = ws.kn.data() + j * HS;
            float* dkj = ws.dk.data() + j * HS;
            float* dvj = ws.dv.data() + j * HS;
            const float sds = p.scale * ds;
            for (int64_t d = 0; d < HS; ++d) {
              dqi[d] += sds * kj[d];
              dkj[d] += sds * qi[d];
              dvj[d] += pij * doi[d];
            }
          }
        }
        for (int64_t j = 0; j < N; ++j) {
          std::copy(ws.dk.data() + j * HS, ws.dk.data() + (j + 1) * HS, p.dk + (row0 + j) * p.lddk + col0);
          std::copy(ws.dv.data() + j * HS, ws.dv.data() + (j + 1) * HS, p.dv + (row0 + j) * p.lddv + col0);
        }
      }
    });
    if (!p.dbias) continue;
    // dbias[h, i, :] += the group's dS in window order: per (head, query row), any thread count.
    ctx.parallel_for(NH * N, [&](int64_t begin, int64_t end) {
      for (int64_t hi = begin; hi < end; ++hi) {
        const int64_t h = hi / N, i = hi % N;
        float* db = p.dbias + (h * N + i) * N;
        for (int64_t w = w0; w < w1; ++w) {
          const float* src = dS_group.data() + (((w - w0) * NH + h) * N + i) * N;
          for (int64_t j = 0; j < N; ++j) db[j] += src[j];
        }
      }
    });
  }
}

}  // namespace unmask::cpu
