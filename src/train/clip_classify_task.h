// train/clip_classify_task.h: what every video classifier's fine-tuning task shares (VideoMAE's,
// models/videomae/finetune_task.h; Video Swin's, models/bevt/finetune_task.h): the clip loader
// and its data position, mixup/cutmix with label smoothing, the options of a classifier step,
// the training accuracy and the step's figures over ranks. A model's task derives from it and
// supplies the model: its parameters, zero_grad, one step, and the saved files.
//
// Data parallel under mpirun/srun: rank r reads its slice of each global batch (the loader's
// slice sharding), drop path and dropout draw the global batch's masks for its clips
// (first_clip), and the gradients add up to the global batch mean's (loss_scale x rows /
// global rows); mixup and cutmix mix within each rank's clips (as timm's per-process Mixup does
// under DDP). Mixing and drop path are keyed by (seed, global micro-batch[, rank]) and the data
// position is the loader batches consumed, so a resumed run continues bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "data/video/clip_loader.h"
#include "train/task.h"
#include "train/trainer.h"
#include "unmask/videomae.h"

namespace unmask::train {

struct ClipClassifySettings {
  int64_t num_classes = 0;
  int64_t batch = 8;              // clips per micro-batch and rank
  uint64_t seed = 0;
  float drop_path = 0.1f, head_dropout = 0.0f;
  float mixup = 0.8f, cutmix = 1.0f, smoothing = 0.1f;
  int64_t tokens_per_clip = 0;    // for the tokens/s figure (0: none)
  double micro_flops = 0;         // FLOPs of one full micro-batch (for FLOP/s and MFU)
};

class ClipClassifyTask : public TrainTask {
 public:
  std::string sample_name() const override { return "clips"; }
  void zero_grad(Context& ctx) override;
  double micro_batch(Context& ctx, const MicroBatchOptions& options) override;
  StepSummary finish_step() override;
  void save_data_state(TrainerState& state) override;
  std::string closing_note() override;

  int64_t videos() const { return loader_->size(); }
  int64_t batches_per_epoch() const { return loader_->batches_per_epoch(); }

 protected:
  explicit ClipClassifyTask(const ClipClassifySettings& settings);
  /// Opens the loader where `start` left it (the command's name for the error of a foreign checkpoint).
  void open_data(const video::ClipLoaderOptions& loader_options,
                 const std::function<video::ClipLoader(const video::ClipLoaderOptions&)>& open_loader,
                 const LoopStart& start, const char* command);
  virtual void zero_model_grad(Context& ctx) = 0;
  virtual VideoMAEClassifyStats classify(Context& ctx, const Tensor& videos, const Tensor& targets,
                                         const VideoMAEClassifyOptions& options) = 0;

  ClipClassifySettings c_;
  int world_ = 1, rank_ = 0;

 private:
  std::optional<video::ClipLoader> loader_;
  int64_t batches_consumed_ = 0, epoch_ = 0;
  double loss_sum_ = 0, lam_sum_ = 0;
  int64_t rows_ = 0, hits_ = 0, micro_ = 0;
  video::ClipBatch batch_;
};

}  // namespace unmask::train
