// nn/patch_merging.h: Swin's patch merging between stages (Video Swin merges spatially only):
// each 2 x 2 block of tokens becomes one token of twice the width.
//
//   merged[R/4, 4C] = cat(x[h0, w0], x[h1, w0], x[h0, w1], x[h1, w1])   (Video Swin's x0..x3 order)
//   ln[R/4, 4C]     = LN(merged)                  saved with mean/rstd
//   out[R/4, 2C]    = ln Wred^T                    (no bias)
// Tokens are a volume [B, D, H, W] numbered b D H W + (d H + h) W + w (nn/window_geometry.h);
// H and W must be even (BEVT's 56 / 28 / 14 are). The gathers are ops::embedding into column
// slices; the backward scatters with ops::embedding_backward.
#pragma once
#include <array>
#include <cstdint>

#include "nn/layers.h"

namespace unmask::train {

struct PatchMergingParams {
  PV norm_g, norm_b;  // [4C]
  PV reduction_w;     // [2C, 4C]
};

struct PatchMergingSaved {
  Tensor merged, ln, mean, rstd;
};

/// x: f32 [B D H W, C] -> out f32 [B D (H/2) (W/2), 2C] (allocated here). eps: the LayerNorm's.
void patch_merging_forward(Context& ctx, const PatchMergingParams& p, const Tensor& x, int64_t batch,
                           std::array<int64_t, 3> size, float eps, Tensor& out, PatchMergingSaved& saved);
/// dout [R/4, 2C] -> dx [R, C] (overwritten); the parameter gradients accumulate.
void patch_merging_backward(Context& ctx, PatchMergingParams& p, const PatchMergingSaved& saved, int64_t batch,
                            std::array<int64_t, 3> size, const Tensor& dout, Tensor& dx);

}  // namespace unmask::train
