// models/bevt/backbone.h: BEVT's Video Swin backbone (SwinTransformerBEVT) for both streams:
// video clips through a 3-D patch embedding, images through a 2-D one, the shared learned mask
// token mixed in where the BEiT mask says, then four shared stages (models/bevt/swin_stage.h).
// The stage-3 and stage-4 outputs before merging (x3, x4) are what the necks read; the final
// LayerNorm (`norm`) belongs to the necks' output and is held here under BEVT's name.
//
//   video: clips [B, 3, T, H, W] -> patch_embed (Conv3d k = s = 2 x 4 x 4) -> LN -> mask mix
//          -> [B T/2 H/4 W/4, C] -> stages (C, 2C, 4C, 8C)
//   image: images [B, 3, 1, H, W] -> patch_embed_2d (Conv2d k = s = 4) -> LN -> mask mix -> ...
// Mask mix (BEiT): x = x (1 - m) + mask_token m per token, m from a u8 token mask.
// Drop path (stochastic depth): block k of all N gets rate k / (N - 1) x drop_path_rate; each
// sample keeps each branch (attention, MLP) with 1 - rate, scaled by 1 / (1 - rate), drawn from
// (seed, stream, sample, block, branch), so a sample's draw does not depend on its batch.
// Everything on the CPU, f32.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "models/bevt/swin_stage.h"
#include "nn/patch_embed.h"
#include "unmask/train.h"

namespace unmask::bevt {

struct SwinConfig {
  int64_t embed_dim = 128;
  std::array<int64_t, 4> depths{2, 2, 18, 2};
  std::array<int64_t, 4> heads{4, 8, 16, 32};
  std::array<int64_t, 3> patch{2, 4, 4};   // video tubelet; images take patch[1] x patch[2]
  std::array<int64_t, 3> window{8, 7, 7};  // video; images take window[1] x window[2]
  int64_t mlp_ratio = 4;
  float eps = 1e-5f;
  int64_t dim(int stage) const { return embed_dim << stage; }
  int64_t table_rows() const { return (2 * window[0] - 1) * (2 * window[1] - 1) * (2 * window[2] - 1); }
  /// BEVT's sizes: "base" (the default: 128, 2/2/18/2, 4/8/16/32), "small" (96, 2/2/18/2,
  /// 3/6/12/24), "tiny" (96, 2/2/6/2, 3/6/12/24); window 8 x 7 x 7, patch 2 x 4 x 4.
  static SwinConfig preset(const std::string& name);
};

struct SwinBackbone {
  SwinConfig config;
  train::PV patch3_w, patch3_b, patch3_norm_g, patch3_norm_b;  // Conv3d [C, 3 tt p p] (a matrix), LN
  train::PV patch2_w, patch2_b, patch2_norm_g, patch2_norm_b;  // Conv2d [C, 3 p p], LN
  train::PV mask_token;                                         // [C]
  std::array<SwinStageParams, 4> stages;
  train::PV norm_g, norm_b;                                     // [8C]

  /// BEVT's init (truncated normal 0.02 for linear weights and the tables, LayerNorms 1 / 0,
  /// PyTorch's default for the patch convolutions), from `seed`.
  static SwinBackbone random(const SwinConfig& config, uint64_t seed);
  /// Every tensor under BEVT's mmaction names ("backbone.patch_embed.proj.weight",
  /// "backbone.layers.0.blocks.0.attn.relative_position_bias_table", ...).
  std::vector<Param> params();
  /// Every parameter's storage (value and gradient), for moving them to a device.
  std::vector<train::PV*> storages();
};

struct BackboneSaved {
  bool image = false;
  int64_t batch = 0;
  train::PatchEmbedSaved embed;
  Tensor embedded, mean, rstd;      // [R, C]: patch embedding (+ its LayerNorm statistics)
  Tensor ln;                        // [R + 1, C]: the LayerNorm's rows, then the mask token's
  Tensor mix_ids;                   // i32 [R]: r, or R where the mask token replaces row r (undefined: no mask)
  std::array<SwinStageShape, 4> shapes;
  std::array<SwinStageSaved, 4> stages;
  const Tensor& x3() const { return stages[2].out; }  // [B D H/16 W/16, 4C]
  const Tensor& x4() const { return stages[3].out; }  // [B D H/32 W/32, 8C]
};

struct DropPathDraw {
  double rate = 0;         // drop_path_rate (0 = off)
  uint64_t seed = 0, stream = 0, first_sample = 0;  // the batch's first sample's global index
};

/// The per-sample scales of every block (all stages, in order) a draw gives: f32 [blocks, 2,
/// batch] (attention, MLP; 0 or 1 / keep; all 1 without drop path). What backbone_forward applies.
Tensor drop_path_scales(const SwinConfig& config, const DropPathDraw& drop, int64_t batch);

/// input: f32 [B, 3, T, H, W] (image: T = 1) on the parameters' device; token_mask: u8 [B tokens]
/// (1 = replace by the mask token) or null. The mask token enters as a row gather from the
/// LayerNorm's rows and the token (ops::embedding), its gradient as the scatter back.
void backbone_forward(Context& ctx, const SwinBackbone& bb, const Tensor& input, bool image,
                      const std::vector<uint8_t>* token_mask, BackboneSaved& saved, const DropPathDraw& drop = {});
/// The gradients of x3 and x4 (either may be undefined) -> parameter gradients (accumulated).
void backbone_backward(Context& ctx, SwinBackbone& bb, BackboneSaved& saved, const Tensor& g_x3, const Tensor& g_x4);

}  // namespace unmask::bevt
