// models/bevt/classify.h: the Video Swin backbone fine-tuned for action recognition, as BEVT's
// and Video Swin's fine-tuning run it (mmaction Recognizer3D + I3DHead):
//
//   clips [B, 3, T, H, W] -> backbone (video stream, no mask token) -> stage-4 tokens x4
//   -> LayerNorm (backbone.norm) -> mean over each clip's tokens [B, 8C] -> dropout
//   -> fc_cls [K, 8C] -> logits [B, K];  loss: soft-target cross-entropy (mixup / smoothing)
//
// Names: the backbone's BEVT names without the image stream's (backbone.patch_embed.*,
// backbone.layers.i..., backbone.norm.*) and cls_head.fc_cls.{weight, bias}: a BEVT pretraining
// checkpoint loads its backbone (its necks, head, mask token and 2-D patch embedding are unused).
// Layer decay (BEiT's rule over Swin's blocks): patch_embed id 0, block k of all L id k + 1, a
// stage's patch merging the id of its last block, norm and head L + 1; lr_scale = decay^(L+1-id).
// f32 on the CPU or a CUDA context (to(ctx)); the mean pooling is a GEMM with a [B, B N] averaging
// matrix, the soft-target loss of the B x K logits is computed on the host.
#pragma once
#include <cstdint>
#include <vector>

#include "models/bevt/backbone.h"
#include "unmask/videomae.h"

namespace unmask::bevt {

class SwinClassifier {
 public:
  /// BEVT's backbone init from `seed`; fc_cls ~ N(0, 0.01) (I3DHead's init_std), bias 0.
  static SwinClassifier random(const SwinConfig& config, int64_t num_classes, uint64_t seed);

  const SwinConfig& config() const { return backbone_.config; }
  int64_t num_classes() const { return num_classes_; }
  std::vector<Param>& params();
  void zero_grad(Context& ctx);
  void set_layer_decay(float decay);
  /// Every parameter moved to ctx's device (a no-op when there); params() is rebuilt over the
  /// copies (layer decay kept), so call it before an Optimizer takes them.
  void to(Context& ctx);
  Device device() const { return fc_w_.value.device(); }

  /// Forward (+ the backward of the soft-target CE when targets are given and options.backward):
  /// videos f32 [B, 3, T, H, W] normalised; targets f32 [B, K] rows summing to 1, or undefined.
  /// Drop path is keyed by (options.seed, options.step, first_clip + b, block, branch); the
  /// stats' drop_scales are [blocks, 2, B].
  VideoMAEClassifyStats step(Context& ctx, const Tensor& videos, const Tensor& targets,
                             const VideoMAEClassifyOptions& options);
  /// Inference logits f32 [B, K] on the model's device (videos may be host tensors).
  Tensor logits(Context& ctx, const Tensor& videos);

 private:
  SwinBackbone backbone_;
  train::PV fc_w_, fc_b_;
  int64_t num_classes_ = 0;
  std::vector<Param> params_;
  float layer_decay_ = 0.0f;      // what set_layer_decay set (0: never called), re-applied by to()
};

}  // namespace unmask::bevt
