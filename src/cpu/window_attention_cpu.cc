// cpu/window_attention_cpu.cc: see window_attention_cpu.h.
#include "cpu/window_attention_cpu.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "cpu/blas.h"
#include "cpu/kernels.h"

namespace unmask::cpu {

namespace {

// S [N, N] = scale Q K^T (+ bias_h) (+ mask_w) of one (window, head).
void scores(const WindowAttentionParams& p, int64_t w, int64_t h, float* s) {
  const int64_t N = p.window, HS = p.head_size, row0 = w * N, col0 = h * HS;
  sgemm_serial(false, true, N, N, HS, p.scale, p.q + row0 * p.ldq + col0, p.ldq, p.k + row0 * p.ldk + col0, p.ldk, s, N);
  const float* bias = p.bias ? p.bias + h * N * N : nullptr;
  const float* mask = p.mask ? p.mask + (w % p.masks) * N * N : nullptr;
  if (bias)
    for (int64_t i = 0; i < N * N; ++i) s[i] += bias[i];
  if (mask)
    for (int64_t i = 0; i < N * N; ++i) s[i] += mask[i];
}

// Runs fn(w0 + item / NH, item % NH, scratch) for the items of windows [w0, w1), handed out
// dynamically to ctx's threads; scratch: `floats` floats per thread.
template <typename Fn>
void for_items(Context& ctx, int64_t w0, int64_t w1, int64_t NH, size_t floats, Fn&& fn) {
  std::atomic<int64_t> next{0};
  const int64_t items = (w1 - w0) * NH;
  ctx.parallel_for(std::min<int64_t>(ctx.num_threads(), items), [&](int64_t, int64_t) {
    const std::unique_ptr<float[]> scratch(new float[floats]);  // written before read
    for (int64_t i = next.fetch_add(1); i < items; i = next.fetch_add(1)) fn(w0 + i / NH, i % NH, scratch.get());
  });
}

}  // namespace

void window_attention_forward(Context& ctx, const WindowAttentionParams& p) {
  const int64_t N = p.window, HS = p.head_size, NH = p.num_heads, R = p.windows * N;
  const CpuKernels& k = kernels();
  for_items(ctx, 0, p.windows, NH, size_t(N * N + N), [&](int64_t w, int64_t h, float* s) {
    const int64_t row0 = w * N, col0 = h * HS;
    float* lse = p.lse ? p.lse + h * R + row0 : s + N * N;
    scores(p, w, h, s);
    k.softmax_lse_rows(s, N, s, N, N, N, lse);
    sgemm_serial(false, false, N, HS, N, 1.0f, s, N, p.v + row0 * p.ldv + col0, p.ldv, p.out + row0 * p.ldo + col0,
                 p.ldo);
  });
}

void window_attention_backward(Context& ctx, const WindowAttentionParams& p) {
  const int64_t N = p.window, HS = p.head_size, NH = p.num_heads, R = p.windows * N;
  const CpuKernels& k = kernels();
  // The windows' score gradients for the bias gradient, a group of windows at a time (<= 64 MB),
  // summed in window order afterwards so the bits do not depend on the thread count.
  const int64_t per_window = NH * N * N;
  const int64_t group = p.dbias ? std::max<int64_t>(1, (int64_t(16) << 20) / std::max<int64_t>(per_window, 1)) : p.windows;
  std::vector<float> dS_group(p.dbias ? size_t(std::min(group, p.windows) * per_window) : 0);
  for (int64_t w0 = 0; w0 < p.windows; w0 += group) {
    const int64_t w1 = std::min(p.windows, w0 + group);
    for_items(ctx, w0, w1, NH, size_t(2 * N * N + N), [&](int64_t w, int64_t h, float* scratch) {
      const int64_t row0 = w * N, col0 = h * HS;
      float* prob = scratch;         // [N, N] P, recomputed from the forward's lse
      float* ds = prob + N * N;      // [N, N] dP, then dS in place
      float* delta = ds + N * N;     // [N] dO_i . O_i
      const float* dout = p.dout + row0 * p.lddo + col0;
      const float* o = p.out + row0 * p.ldo + col0;
      scores(p, w, h, prob);
      k.exp_sub_rows(prob, N, p.lse + h * R + row0, prob, N, N, N);
      sgemm_serial(true, false, N, HS, N, 1.0f, prob, N, dout, p.lddo, p.dv + row0 * p.lddv + col0, p.lddv);
      sgemm_serial(false, true, N, N, HS, 1.0f, dout, p.lddo, p.v + row0 * p.ldv + col0, p.ldv, ds, N);
      for (int64_t i = 0; i < N; ++i) {
        float acc = 0.0f;
        for (int64_t d = 0; d < HS; ++d) acc += dout[i * p.lddo + d] * o[i * p.ldo + d];
        delta[i] = acc;
      }
      k.attn_dscores_rows(prob, nullptr, ds, N, delta, 1.0f, N, N);
      if (p.dbias) std::copy_n(ds, N * N, dS_group.data() + ((w - w0) * NH + h) * N * N);
      sgemm_serial(false, false, N, HS, N, p.scale, ds, N, p.k + row0 * p.ldk + col0, p.ldk, p.dq + row0 * p.lddq + col0,
                   p.lddq);
      sgemm_serial(true, false, N, HS, N, p.scale, ds, N, p.q + row0 * p.ldq + col0, p.ldq, p.dk + row0 * p.lddk + col0,
                   p.lddk);
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
