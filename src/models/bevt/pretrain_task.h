// models/bevt/pretrain_task.h: BEVT joint pretraining as a train::TrainTask: what `unmask
// pretrain-bevt` runs on the one training loop (train/trainer.h).
//
//   bevt::BevtPretrainSettings s; s.config = SwinConfig::preset("base"); s.clips = 8; s.images = 64;
//   train::LoopStart start = train::open_run(loop_config, resume, warn);
//   bevt::BevtPretrainTask task(ctx, s, tokenizer, start, accumulation);
//   train::TrainResult r = train::run_training(task, ctx, loop_config, start, control);
//
// The data: BevtSource (clips from a video list, images from a list or an ImageNet-style folder,
// either synthetic when not given). The joint schedule (reference/bevt.md 0.1): per optimizer step and rank, `clips` clips and
// `images` images, split evenly over the gradient-accumulation micro-batches (BEVT: 8 + 64 over
// 2, i.e. 4 clips + 32 images an iteration). Micro-batch m of step s on rank r reads the samples
// whose global index starts at ((s A + m) R + r) x per-micro-batch count, so every draw (pixels,
// crops, masks, drop path) is a function of (seed, step, micro-batch, rank): a resumed run
// continues bit for bit, and the data position is the step itself.
// Data parallel: each rank's loss is its own batch's (CE means per stream, summed) and the
// gradients are averaged over ranks (loss_scale / ranks), as BEVT's DDP does.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/video/bevt_data.h"
#include "models/bevt/dvae.h"
#include "models/bevt/pretrain.h"
#include "train/task.h"
#include "train/trainer.h"

namespace unmask::bevt {

struct BevtPretrainSettings {
  SwinConfig config;
  std::string size = "base";      // the preset's name (the title)
  int64_t vocab = 8192;
  int64_t clips = 8, images = 64;  // per optimizer step and rank
  video::BevtDataOptions data;     // frames, crop, augmentation, seed
  double drop_path_rate = 0.3;
  uint64_t seed = 0;               // weights (data.seed draws the samples)
  std::string init_from;           // BEVT weights to start a fresh run from ("" = BEVT's init)
  std::string output;              // the run directory (the title)
  std::string tokenizer_name;      // what the tokenizer is (the title)
  std::string video_list, image_source, root;  // files (data/video/bevt_data.h BevtSource); "" = synthetic
};

class BevtPretrainTask final : public train::TrainTask {
 public:
  /// The model and the tokenizer go to ctx's device (the batches follow them at each step).
  BevtPretrainTask(Context& ctx, const BevtPretrainSettings& settings, const DalleEncoder& tokenizer,
                   const train::LoopStart& start, int64_t accumulation);

  std::string title() const override;
  std::string sample_name() const override { return "clips"; }
  std::vector<Param>& params() override { return model_.params(); }
  void zero_grad(Context& ctx) override;
  double micro_batch(Context& ctx, const train::MicroBatchOptions& options) override;
  train::StepSummary finish_step() override;
  void save_model(const std::string& dir) override;
  void save_data_state(train::TrainerState& state) override;

  /// One micro-batch's FLOPs as BEVT defines them (every position, every frame), for the start line.
  double micro_batch_flops() const;
  std::string data_description() const { return source_->describe(); }
  BevtPretrainModel& model() { return model_; }

 private:
  BevtPretrainSettings s_;
  BevtPretrainModel model_;
  DalleEncoder tokenizer_;
  std::unique_ptr<video::BevtSource> source_;
  int world_ = 1, rank_ = 0;
  int64_t accumulation_ = 1, clips_ = 0, images_ = 0;  // per micro-batch
  // The step's sums over its micro-batches: losses, masked tokens and hits per stream.
  double video_loss_ = 0, image_loss_ = 0;
  int64_t video_masked_ = 0, video_correct_ = 0, image_masked_ = 0, image_correct_ = 0, micro_batches_ = 0;
  // Masked tokens whose target is their micro-batch stream's most common one (majority_), or
  // their sample's most common visible one (context_): the two baselines of the accuracy.
  int64_t majority_ = 0, context_ = 0;
  int64_t samples_ = 0;
};

}  // namespace unmask::bevt
