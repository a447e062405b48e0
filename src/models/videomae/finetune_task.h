// VideoMAE fine-tuning for classification (mean pooling, layer decay, mixup/cutmix, label
// smoothing, drop path) as a train::TrainTask: what `unmask finetune-video` runs on the one
// training loop (train/trainer.h). Data parallel under mpirun/srun: rank r reads its slice of
// each global batch (the loader's slice sharding), drop path and dropout draw the global batch's
// masks for its clips, and the gradients add up to the global batch mean's; mixup and cutmix mix
// within each rank's clips (as timm's per-process Mixup does under DDP). Mixing and drop path
// are keyed by (seed, global micro-batch[, rank]), the data position is the loader batches
// consumed, so a resumed run continues bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "train/task.h"
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

class VideoMAEFinetuneTask final : public train::TrainTask {
 public:
  VideoMAEFinetuneTask(const VideoMAEFinetuneSettings& settings, Context& ctx, const ClipLoaderOptions& loader_options,
                       const std::function<ClipLoader(const ClipLoaderOptions&)>& open_loader,
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

  VideoMAEClassifier& model() { return *model_; }
  int64_t videos() const { return loader_->size(); }
  int64_t batches_per_epoch() const { return loader_->batches_per_epoch(); }

 private:
  VideoMAEFinetuneSettings s_;
  std::optional<VideoMAEClassifier> model_;
  std::optional<ClipLoader> loader_;
  int64_t batches_consumed_ = 0;
  double micro_flops_ = 0;
  double loss_sum_ = 0, lam_sum_ = 0;
  int64_t rows_ = 0, hits_ = 0, micro_ = 0, epoch_ = 0;
  int world_ = 1, rank_ = 0;
  ClipBatch batch_;
};

}  // namespace unmask::video
