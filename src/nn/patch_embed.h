// nn/patch_embed.h: patch (2-D) and tubelet (3-D) embedding, the first layer of the video and
// image transformers (VideoMAE's 2 x 16 x 16 tubelets, Video Swin's 2 x 4 x 4 patches, an image
// stream's 1 x 4 x 4 or 1 x 16 x 16): a Conv3d with kernel = stride over clips [B, C, T, H, W]
// (an image is a clip of T = 1 frame with tubelet 1), computed as a GEMM on the tokens' pixels.
//
//   cols[R, K] = the pixels of tokens ids[r] in the Conv3d weight's column order (c, dt, dy, dx),
//                K = C tt p p (ops::tubelet_gather; the tokens of a clip are numbered t gh gw +
//                y gw + x, clip b's from b Np)
//   x[R, D]    = cols W^T + b   (W: the Conv3d weight [D, C, tt, p, p] viewed as [D, K])
//
// The backward accumulates dW += dx^T cols and db += column sums of dx; the pixels need no
// gradient. Only the gathered tokens are computed: a masked autoencoder embeds its visible
// tokens alone.
#pragma once
#include <cstdint>

#include "nn/layers.h"
#include "ops/ops.h"

namespace unmask::train {

/// What patch_embed_backward needs: the gathered pixels [R, K] (f32).
struct PatchEmbedSaved {
  Tensor cols;
};

/// ids: i32 [R] flat token ids on the clips' device (ops::tubelet_gather); all_token_ids gives
/// every token of a batch in order. x: f32 [R, D], overwritten.
void patch_embed_forward(Context& ctx, const Tensor& clips, const Tensor& ids, ops::Tubelet tubelet, const PV& w,
                         const PV& b, Tensor& x, PatchEmbedSaved& saved);

/// w.grad += dx^T cols, b.grad += sum over rows of dx (dx: f32 [R, D]).
void patch_embed_backward(Context& ctx, const PatchEmbedSaved& saved, PV& w, PV& b, const Tensor& dx);

/// 0, 1, ..., tokens - 1 as i32 on `device`: every token of the batch, in the unfold's order.
Tensor all_token_ids(int64_t tokens, Device device);

}  // namespace unmask::train
