// VideoMAE pretraining (tube masking, normalised-pixel MSE) as a train::TrainTask: what
// `unmask pretrain-video` runs on the one training loop (train/trainer.h).
//
//   video::VideoMAEPretrainSettings s; s.config = VideoMAEConfig::vit_b(); s.batch = 8; ...
//   train::LoopStart start = train::open_run(loop_config, resume, warn);
//   video::VideoMAEPretrainTask task(s, ctx, loader_options, open_loader, start);
//   train::TrainResult r = train::run_training(task, ctx, loop_config, start, control);
//
// Data parallel (mpirun / srun; dist/shard.h): with slice sharding each rank's loader reads only
// its rows of every global batch (batch x ranks clips; the loader keys every draw by the clip's
// global position), masks are keyed by the global clip index and the gradients are summed with
// loss_scale = rows / global rows, so N ranks compute the step of one process with the global
// batch; with local sharding each rank reads its own data. Everything random is a function of
// (seed, global micro-batch, clip index): the data position of a checkpoint is the number of
// loader batches consumed, and a resumed run continues bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "train/task.h"
#include "train/trainer.h"
#include "unmask/videomae.h"
#include "data/video/clip_loader.h"
#include "data/video/masking.h"
#include "models/videomae/checkpoint.h"

namespace unmask::video {

struct VideoMAEPretrainSettings {
  VideoMAEConfig config;
  std::string preset;             // the model's name in the title ("vit-b")
  int64_t batch = 8;              // clips per rank and micro-batch
  double mask_ratio = 0.9;        // tube masking
  double decoder_mask_ratio = 0;  // VideoMAE v2 running-cell decoder masking (0 = off)
  uint64_t seed = 0;              // weights, masks, augmentation
  DType activations = DType::f32;
  VideoMAENaming naming = VideoMAENaming::original;  // the checkpoints' names
  std::string init_from;          // a checkpoint to start a fresh run from ("" = random init)
  std::string output;             // the run directory (for the title)
};

class VideoMAEPretrainTask final : public train::TrainTask {
 public:
  /// open_loader opens --data with the options given (the task sets start_batch from `start`).
  VideoMAEPretrainTask(const VideoMAEPretrainSettings& settings, Context& ctx, const ClipLoaderOptions& loader_options,
                       const std::function<ClipLoader(const ClipLoaderOptions&)>& open_loader,
                       const train::LoopStart& start, int64_t accumulation);

  std::string title() const override;
  std::string sample_name() const override { return "clips"; }
  std::vector<Param>& params() override { return model_->params(); }
  void zero_grad(Context& ctx) override;
  double micro_batch(Context& ctx, const train::MicroBatchOptions& options) override;
  train::StepSummary finish_step() override;
  void save_model(const std::string& dir) override;
  void save_data_state(train::TrainerState& state) override;
  std::string closing_note() override;

  /// The loader's size and one step's FLOPs (per micro-batch of this rank), for the start line.
  int64_t videos() const { return loader_->size(); }
  double micro_batch_flops() const { return micro_flops_; }

 private:
  VideoMAEPretrainSettings s_;
  std::optional<VideoMAEPretrainModel> model_;
  std::optional<ClipLoader> loader_;
  TokenGrid grid_;
  int world_ = 1, rank_ = 0;
  int64_t batches_consumed_ = 0;  // loader batches since epoch 0 (the data position)
  int64_t accumulation_ = 1;
  double micro_flops_ = 0;
  double loss_sum_ = 0;           // this rank's rows x loss, summed over the step's micro-batches
  int64_t rows_ = 0;
  ClipBatch batch_;
};

}  // namespace unmask::video
