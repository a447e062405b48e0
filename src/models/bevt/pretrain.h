// models/bevt/pretrain.h: BEVT's joint pretraining step (reference/bevt.md 2.7-2.9): one shared
// Video Swin backbone, the video and the image stream, the DALL-E tokenizer's ids as targets,
// loss = CE mean over the masked video tokens + CE mean over the masked image tokens.
//
//   BevtPretrainModel model = BevtPretrainModel::random(SwinConfig::preset("base"), 8192, seed);
//   DalleEncoder tokenizer = ...;                        // frozen, a separate file
//   BevtBatch batch = video::synthetic_bevt_batch(...);  // data/video/bevt_data.h
//   model.zero_grad(ctx);
//   BevtStepStats st = bevt_pretrain_step(ctx, model, &tokenizer, batch, options);
//
// Per stream, forward then backward at once (the loss is a sum, so the streams' gradients simply
// add, and only one stream's activations are held at a time):
//   tokens:   the tokenizer runs only on the frames that hold a masked cell (a video frame t is
//             covered by its input-mask slice t / 2), a few frames at a time;
//   backbone: patch embedding, the mask token where the input mask (upsampled 4 x 4 to the
//             patch grid) says, four stages, with drop path drawn per sample and block;
//   neck:     evaluated at the masked cells only (neck.h): the masked rows of the H/16 grid, which
//             for the video are the input mask's cells, each giving frames 2 tau and 2 tau + 1.
// Shapes: the video clips [Bv, 3, T, H, W] (T even, tubelet 2), images [Bi, 3, H', W'], each
// stream's tokenizer copies at half the resolution (112 for 224) and its masks on the H/16 grid.
#pragma once
#include <cstdint>
#include <vector>

#include "data/video/bevt_data.h"
#include "models/bevt/backbone.h"
#include "models/bevt/dvae.h"
#include "models/bevt/neck.h"

namespace unmask::bevt {

class BevtPretrainModel {
 public:
  SwinBackbone backbone;
  NeckHeadParams neck;

  /// BEVT's init (backbone.h, neck.h) from `seed`; vocab: the tokenizer's codes (DALL-E 8192).
  static BevtPretrainModel random(const SwinConfig& config, int64_t vocab, uint64_t seed);
  /// Every trainable tensor under BEVT's checkpoint names, backbone first (built once).
  std::vector<Param>& params();
  void zero_grad(Context& ctx);
  /// Every parameter moved to ctx's device (a no-op when there); params() is rebuilt over the
  /// copies, so call it before an Optimizer takes them.
  void to(Context& ctx);
  Device device() const { return backbone.mask_token.value.device(); }

 private:
  std::vector<Param> params_;
};

using video::BevtBatch;  // data/video/bevt_data.h

struct BevtStepOptions {
  float loss_scale = 1.0f;        // the gradients are of loss_scale x (video loss + image loss)
  double drop_path_rate = 0;      // stochastic depth, linear from 0 over all blocks
  uint64_t seed = 0;              // drop path draws: keyed by (seed, stream, sample, block, branch)
  uint64_t first_clip = 0, first_image = 0;  // the global index of this batch's first sample
  /// Evaluate the neck and head at every position instead of the masked ones (the same loss and
  /// gradients; for measuring what the selection saves).
  bool all_positions = false;
  /// Targets given instead of running the tokenizer ([Bv T, cells] / [Bi, cells]; ids of frames
  /// without a masked cell are not read). Either may be null.
  const std::vector<int32_t>* video_ids = nullptr;
  const std::vector<int32_t>* image_ids = nullptr;
};

struct BevtStreamStats {
  double loss = 0;  // CE mean over the masked tokens (0 without any)
  int64_t masked = 0, correct = 0;
  /// Masked tokens whose target is the batch's most common target: the accuracy of always
  /// guessing it, the baseline a learning model must beat (1 / vocab only for uniform ids).
  int64_t majority = 0;
  /// Masked tokens whose target is their sample's most common VISIBLE target (unmasked cells of
  /// the tokenized frames): what copying the context scores. Beating the majority baseline
  /// takes context; this says how much is there.
  int64_t context = 0;
  double accuracy() const { return masked ? double(correct) / double(masked) : 0.0; }
};

struct BevtStepStats {
  BevtStreamStats video, image;
  /// The targets used: [Bv T, cells] and [Bi, cells]; -1 for frames the tokenizer skipped.
  std::vector<int32_t> video_ids, image_ids;
  int64_t tokenized_frames = 0;   // frames the tokenizer ran on
  double loss() const { return video.loss + image.loss; }
};

/// Forward and backward of one batch (gradients accumulate into model.params()). tokenizer may
/// be null only when options give both streams' ids.
BevtStepStats bevt_pretrain_step(Context& ctx, BevtPretrainModel& model, const DalleEncoder* tokenizer,
                                 const BevtBatch& batch, const BevtStepOptions& options);

}  // namespace unmask::bevt
