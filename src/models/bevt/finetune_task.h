// models/bevt/finetune_task.h: Video Swin fine-tuning for action recognition (BEVT's downstream
// recipe: mean pooling, layer decay, mixup/cutmix, label smoothing, drop path) as a
// train::TrainTask: what `unmask finetune-swin` runs on the one training loop.
//
// The data, mixing, data parallelism and resume are the shared clip classifier's
// (train/clip_classify_task.h), as for VideoMAE; drop path is keyed by (seed, step, clip, block,
// branch).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/video/clip_loader.h"
#include "models/bevt/classify.h"
#include "train/clip_classify_task.h"
#include "train/trainer.h"

namespace unmask::bevt {

struct SwinFinetuneSettings {
  SwinConfig config;
  std::string size, output;       // for the title
  int64_t num_classes = 0, frames = 16, crop = 224;
  int64_t batch = 8;              // clips per micro-batch and rank
  uint64_t seed = 0;
  float layer_decay = 0.75f, drop_path = 0.1f, head_dropout = 0.0f;
  float mixup = 0.8f, cutmix = 1.0f, smoothing = 0.1f;
  std::string init_from;          // BEVT / Video Swin weights for a fresh run ("" = random init)
};

class SwinFinetuneTask final : public train::ClipClassifyTask {
 public:
  /// The model goes to ctx's device (the loader's clips follow it at each step).
  SwinFinetuneTask(Context& ctx, const SwinFinetuneSettings& settings, const video::ClipLoaderOptions& loader_options,
                   const std::function<video::ClipLoader(const video::ClipLoaderOptions&)>& open_loader,
                   const train::LoopStart& start);

  std::string title() const override;
  std::vector<Param>& params() override { return model_->params(); }
  void save_model(const std::string& dir) override;

  SwinClassifier& model() { return *model_; }

 private:
  void zero_model_grad(Context& ctx) override { model_->zero_grad(ctx); }
  VideoMAEClassifyStats classify(Context& ctx, const Tensor& videos, const Tensor& targets,
                                 const VideoMAEClassifyOptions& options) override {
    return model_->step(ctx, videos, targets, options);
  }

  SwinFinetuneSettings s_;
  std::optional<SwinClassifier> model_;
};

}  // namespace unmask::bevt
