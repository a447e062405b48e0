// ref/window_attention_ref.h: the dumb float64 oracle for windowed attention with an additive
// bias and mask (Swin, Video Swin, BEVT), forward and backward.
//
// Rows come in windows of N tokens (window w = rows w N .. w N + N - 1); the C = NH HS columns
// split into heads. Per window w and head h:
//   S = scale Q_h K_h^T + bias[h] (+ mask[w mod M]),  P = softmax(S) over the keys,  O_h = P V_h,
//   lse[h R + r] = log sum_j exp(S_rj)   (R = all rows)
// bias: [NH, N, N] (a relative-position table gathered per block); mask: [M, N, N] (Swin's
// shifted-window regions: 0 within a region, -100 across), the window's position in its sample
// picking the mask. Everything materialised, no blocking, no threads.
#pragma once
#include <cstdint>

namespace unmask::ref {

struct WindowLayout {
  int64_t num_heads = 0;  // NH
  int64_t head_size = 0;  // HS
  int64_t window = 0;     // N, tokens per window
  int64_t windows = 0;    // W, windows in the batch (rows R = W N)
  int64_t masks = 0;      // M: mask[w mod M]; 0 = no mask
};

/// out (and lse when not null) from q, k, v: [R, NH HS] contiguous; bias [NH, N, N]; mask
/// [M, N, N] or null.
void window_attention_forward(const double* q, const double* k, const double* v, const double* bias,
                              const double* mask, double* out, double* lse, const WindowLayout& lay, double scale);

/// Gradients of sum(out * dout): dq, dk, dv overwritten ([R, NH HS]); dbias ([NH, N, N])
/// overwritten with the sum over windows of dS.
void window_attention_backward(const double* q, const double* k, const double* v, const double* bias,
                               const double* mask, const double* dout, double* dq, double* dk, double* dv,
                               double* dbias, const WindowLayout& lay, double scale);

}  // namespace unmask::ref
