// VideoMAE fine-tuning for classification (mean pooling, layer decay, mixup/cutmix, label
// smoothing, drop path) as a train::TrainTask: what `unmask finetune-video` runs on the one
// training loop (train/trainer.h). The data, mixing, data parallelism and resume are the shared
// clip classifier's (train/clip_classify_task.h); this holds the model.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "train/clip_classify_task.h"
#include "train/trainer.h"
#include "unmask/videomae.h"
#include "data/video/clip_loader.h"
#include "models/videomae/checkpoint.h"

namespace unmask::video {

struct VideoMAEFinetuneSettings {
  VideoMAEConfig config;
  std::string preset, output;     // for the title
  int64_t num_classes = 0;
  std::vector<std::string> class_names;  // id2label of the saved model (may be empty)
  int64_t batch = 8;              // clips per micro-batch and rank
  uint64_t seed = 0;
  float layer_decay = 0.75f, drop_path = 0.1f, head_dropout = 0.0f;
  float mixup = 0.8f, cutmix = 1.0f, smoothing = 0.1f;
  VideoMAENaming naming = VideoMAENaming::original;
  std::string init_from;          // pretrained weights for a fresh run ("" = random init)
};

class VideoMAEFinetuneTask final : public train::ClipClassifyTask {
 public:
  VideoMAEFinetuneTask(const VideoMAEFinetuneSettings& settings, Context& ctx, const ClipLoaderOptions& loader_options,
                       const std::function<ClipLoader(const ClipLoaderOptions&)>& open_loader,
                       const train::LoopStart& start);

  std::string title() const override;
  std::vector<Param>& params() override { return model_->params(); }
  void save_model(const std::string& dir) override;

  VideoMAEClassifier& model() { return *model_; }

 private:
  void zero_model_grad(Context& ctx) override { model_->zero_grad(ctx); }
  VideoMAEClassifyStats classify(Context& ctx, const Tensor& videos, const Tensor& targets,
                                 const VideoMAEClassifyOptions& options) override {
    return model_->step(ctx, videos, targets, options);
  }

  VideoMAEFinetuneSettings s_;
  std::optional<VideoMAEClassifier> model_;
};

}  // namespace unmask::video
