// models/bevt/dvae.h: the DALL-E dVAE encoder, BEVT's frozen target tokenizer (reference/bevt.md
// 3): 112 x 112 frames mapped by 0.8 x + 0.1 -> logits over 8,192 codes on a 14 x 14 grid ->
// the argmax per cell is the token a masked position must predict.
//
//   input:   Conv 7x7 (3 -> n)                                       blocks.input
//   group g (1..4, each `blocks_per_group` blocks, max-pool 2x2 after groups 1-3):
//     block: id_path (1x1 conv when the width changes, else identity)
//            + post_gain res_path(relu, 3x3 -> n_out/4, relu, 3x3, relu, 3x3, relu, 1x1 -> n_out)
//            widths n, 2n, 4n, 8n (n = 256), post_gain = 1 / (4 blocks_per_group)^2
//   output:  relu, Conv 1x1 (8n -> vocab)                              blocks.output.conv
// Convolutions are ops::conv2d (padding (k - 1) / 2); the names are DALL-E's state-dict names
// ("blocks.group_1.block_1.res_path.conv_1.w", "... .b"). Inference only: the weights are plain
// tensors (frozen), not trainable parameters.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask::bevt {

struct DalleEncoderConfig {
  int64_t groups = 4, hidden = 256, blocks_per_group = 2, channels = 3, vocab = 8192;
};

struct DalleConv {
  Tensor w, b;  // [out, in, k, k], [out]
};

struct DalleEncoderBlock {
  bool has_id_conv = false;
  DalleConv id;      // 1x1, when the width changes
  DalleConv res[4];  // 3x3, 3x3, 3x3, 1x1
};

struct DalleEncoder {
  DalleEncoderConfig config;
  DalleConv input, output;
  std::vector<std::vector<DalleEncoderBlock>> groups;

  /// DALL-E's init (weights ~ N(0, 1 / (in k k)), biases 0), from `seed`.
  static DalleEncoder random(const DalleEncoderConfig& config, uint64_t seed);
  /// Every tensor under DALL-E's state-dict name.
  std::vector<std::pair<std::string, Tensor*>> named();
  /// x: f32 [B, channels, H, W] on the weights' device, already mapped (0.8 x + 0.1), H and W multiples of 8 ->
  /// logits f32 [B, vocab, H/8, W/8].
  Tensor logits(Context& ctx, const Tensor& x) const;
  /// The argmax code per cell: i32 ids [B, (H/8) (W/8)] (the first maximum) on x's device.
  Tensor tokens(Context& ctx, const Tensor& x) const;
  /// The weights (and so the encoder) moved to `device`.
  DalleEncoder to(Device device) const;
};

}  // namespace unmask::bevt
