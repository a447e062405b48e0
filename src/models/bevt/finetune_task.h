// models/bevt/finetune_task.h: Video Swin fine-tuning for action recognition (BEVT's downstream
// recipe: mean pooling, layer decay, mixup/cutmix, label smoothing, drop path) as a
// train::TrainTask: what `unmask finetune-swin` runs on the one training loop.
//
// The same data path and rules as VideoMAE fine-tuning (models/videomae/finetune_task.h): the
// clip loader (a clip store or a list file; data parallel: rank r reads its slice of every
// global batch), mixing keyed by (seed, global micro-batch[, rank]), drop path by (seed, step,
// clip, block, branch), the data position is the loader batches consumed: --resume continues
// bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/video/clip_loader.h"
#include "models/bevt/classify.h"
#include "train/task.h"
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

class SwinFinetuneTask final : public train::TrainTask {
 public:
  SwinFinetuneTask(const SwinFinetuneSettings& settings, const video::ClipLoaderOptions& loader_options,
                   const std::function<video::ClipLoader(const video::ClipLoaderOptions&)>& open_loader,
                   const train::LoopStart& start);

  std::string title() const override;
  std::string sample_name() const override { return "clips"; }
  std::vector<Param>& params() override { return model_->params(); }
  void zero_grad(Context& ctx) override;
  double micro_batch(Context& ctx, const train::MicroBatchOptions& options) override;
  train::StepSummary finish_step() override;
  void save_model(const std::string& dir) override;
  void save_data_state(train::TrainerState& state) override;
  std::string closing_note() override;

  SwinClassifier& model() { return *model_; }
  int64_t videos() const { return loader_->size(); }

 private:
  SwinFinetuneSettings s_;
  std::optional<SwinClassifier> model_;
  std::optional<video::ClipLoader> loader_;
  int64_t batches_consumed_ = 0, epoch_ = 0;
  double micro_flops_ = 0, loss_sum_ = 0, lam_sum_ = 0;
  int64_t rows_ = 0, hits_ = 0, micro_ = 0;
  int world_ = 1, rank_ = 0;
  video::ClipBatch batch_;
};

/// Writes a fine-tuned model: dir/model.safetensors (BEVT names + cls_head.fc_cls) and
/// dir/config.json (the Swin sizes, num_classes, id2label from class_names when given).
void save_swin_classifier(const std::string& dir, const SwinConfig& config, int64_t num_classes,
                          const std::vector<Param>& params, const std::vector<std::string>& class_names = {});

}  // namespace unmask::bevt
