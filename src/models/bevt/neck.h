// models/bevt/neck.h: BEVT's necks and its shared head (reference/bevt.md 2.8-2.9): all linear.
//
//   image: up  = ConvTranspose2d(8C, 8C, k = s = 2)(x4)          backbone.fpn.0
//          h   = Linear(12C -> 8C)(cat(x3, up))                  backbone.lm_down
//   video: up  = ConvTranspose3d(8C, 8C, k = s = (1, 2, 2))(x4)  backbone.fpn_s.0
//          h   = Linear(12C -> 8C)(cat(x3, up))                  backbone.lm_down_st.0
//          h   = ConvTranspose3d(8C, 8C, k = s = (2, 1, 1))(h)   backbone.fpn_t.0 (twice the frames)
//   both:  logits = Linear(8C -> vocab)(LN(h))                   backbone.norm, cls_head.lm_head
// Rows are tokens in volume order: image [B, 1, H3, W3], video [B, 2 D, H3, W3] out (H3 = 2 H4).
// The loss is the cross-entropy over the masked tokens (targets >= 0; -1 elsewhere), their mean.
//
// Every layer after the concatenation is per token, so the neck can run on a subset of the
// concatenated rows (`rows`: the masked positions of the H3 grid) with the same numbers for them:
// lm_down, fpn_t, the norm and the head (11.5 of the 12.5 W^2 multiply-adds per output token)
// then cost only the masked fraction. With rows, the logits are ordered by the selected rows:
// image [rows], video [rows, 2] (frames 2 tau and 2 tau + 1 of the selected (b, tau, h, w)).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "nn/conv_transpose.h"
#include "unmask/train.h"

namespace unmask::bevt {

struct NeckHeadParams {
  train::PV fpn_w, fpn_b;              // [8C, 8C 4], [8C]
  train::PV lm_down_w, lm_down_b;      // [8C, 12C], [8C]
  train::PV fpn_s_w, fpn_s_b;          // [8C, 8C 4], [8C]
  train::PV lm_down_st_w, lm_down_st_b;
  train::PV fpn_t_w, fpn_t_b;          // [8C, 8C 2], [8C]
  train::PV lm_head_w, lm_head_b;      // [vocab, 8C], [vocab]
  int64_t width = 0, vocab = 0;        // 8C, the tokenizer's codes (DALL-E: 8192)

  /// BEVT's init: truncated normal 0.02 for the linear layers (zero bias), PyTorch's default
  /// for the transposed convolutions.
  static NeckHeadParams random(int64_t embed_dim, int64_t vocab, uint64_t seed);
  /// Under BEVT's names ("backbone.fpn.0.weight" as [in, out, kh, kw], "cls_head.lm_head.weight", ...).
  std::vector<Param> params();
};

struct NeckSaved {
  bool image = false;
  train::ConvTransposeSaved up, up_t;
  Tensor cat, h, ht, ln, mean, rstd;   // ht: after fpn_t (video)
  bool selected = false;               // a row subset was evaluated
  Tensor row_ids;                      // the selected rows of cat, i32 on the activations' device
  Tensor cat_rows;                     // cat at `rows` (what lm_down read)
  Tensor logits;                       // [rows, vocab]
};

/// x3 [B D H3 W3, 4C], x4 [B D H4 W4, 8C] (size4 = {D, H4, W4}) -> saved.logits. rows: the rows
/// of the H3 grid to evaluate (ascending or not; null: all, logits in volume order).
void neck_head_forward(Context& ctx, const NeckHeadParams& p, const train::PV& norm_g, const train::PV& norm_b,
                       float eps, const Tensor& x3, const Tensor& x4, bool image, int64_t batch,
                       std::array<int64_t, 3> size4, NeckSaved& saved, const std::vector<int32_t>* rows = nullptr);

/// Mean cross-entropy over the rows whose target is >= 0 (i32 [rows]); writes dlogits (the
/// gradient of loss_scale x that mean) into saved.logits' place. Returns {loss, masked rows, hits}.
struct MaskedLoss {
  double loss = 0;
  int64_t count = 0, correct = 0;
};
MaskedLoss masked_token_loss(Context& ctx, NeckSaved& saved, const std::vector<int32_t>& targets, float loss_scale,
                             Tensor& dlogits);

/// dlogits -> the gradients of x3 and x4 (allocated); parameter gradients (norm's too) accumulate.
void neck_head_backward(Context& ctx, NeckHeadParams& p, train::PV& norm_g, train::PV& norm_b, const NeckSaved& saved,
                        const Tensor& dlogits, Tensor& g_x3, Tensor& g_x4);

}  // namespace unmask::bevt
