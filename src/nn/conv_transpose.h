// nn/conv_transpose.h: a transposed convolution whose kernel equals its stride (BEVT's necks:
// ConvTranspose2d k = s = 2, ConvTranspose3d k = s = (1, 2, 2) and (2, 1, 1)), which is a
// per-token GEMM followed by a pixel shuffle: each input token becomes kd x kh x kw output tokens.
//
//   Y[R, Cout K] = X[R, Cin] Wmat      (Wmat: the ConvTranspose weight [Cin, Cout, kd, kh, kw]
//                                       viewed as [Cin, Cout K], K = kd kh kw)
//   y[(b, d kd + a, h kh + e, w kw + f), c] = Y[(b, d, h, w), c K + (a kh + e) kw + f] + bias[c]
// Tokens in volume order [B, D, H, W] -> [B, D kd, H kh, W kw] (nn/window_geometry.h). On any
// device: the weight is transposed to (k, c) column order so that the GEMM's epilogue adds the
// bias and the shuffle is one row gather (ops::embedding); the backward gathers back and
// transposes dY to (c, k) order for the weight gradient.
#pragma once
#include <array>
#include <cstdint>

#include "nn/layers.h"

namespace unmask::train {

struct ConvTransposeSaved {
  Tensor x;         // the input [R, Cin] (the weight gradient reads it)
  Tensor unshuffle; // i32 [R K]: the output row of each row of Y (the backward's gather)
};

/// x f32 [B D H W, Cin] -> y f32 [B D kd H kh W kw, Cout] (allocated here). w: [Cin, Cout K]; b: [Cout].
void conv_transpose_forward(Context& ctx, const PV& w, const PV& b, const Tensor& x, int64_t batch,
                            std::array<int64_t, 3> size, std::array<int64_t, 3> kernel, Tensor& y,
                            ConvTransposeSaved& saved);
/// dy [B D kd H kh W kw, Cout] -> dx [R, Cin] (overwritten); w.grad and b.grad accumulate.
void conv_transpose_backward(Context& ctx, PV& w, PV& b, const ConvTransposeSaved& saved,
                             std::array<int64_t, 3> kernel, const Tensor& dy, Tensor& dx);

}  // namespace unmask::train
