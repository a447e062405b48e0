// train/trainer.h: the pretraining loop behind `unmask pretrain`.
//
//   train::TrainerOptions o;
//   o.config = train::load_config("configs/pretrain-tiny.toml");
//   o.resume = "";                        // or a run directory / checkpoint to continue from
//   train::TrainResult r = train::pretrain(o);
//
// One optimizer step: `accumulation` micro-batches from the loader, each through
// BertTrainModel::pretrain_step with loss_scale = 1/accumulation (gradients add up to those of
// the mean loss), then Optimizer::step with lr = config.lr * lr_multiplier(schedule, step).
// Dropout masks derive from (seed, step, micro-batch), the data from the loader position, so a
// run resumed from a checkpoint computes bit-identically the losses the uninterrupted run would
// have (tests/test_trainer.cc checks it with ==).
//
// Stops: after config.steps (a final checkpoint); when *stop_signal becomes non-zero (the step
// in flight finishes, a checkpoint is written, TrainResult::stopped_by_signal says which signal);
// on a non-finite loss or gradient norm (an Error naming the step and the first non-finite
// parameter, else gradient; nothing is written, the last good checkpoint stays the latest).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/metrics.h"
#include "unmask/train.h"

namespace unmask::train {

struct TrainerOptions {
  PretrainConfig config;
  /// Continue from a checkpoint: a run directory (its latest checkpoint) or a checkpoint directory.
  std::string resume;
  /// Set asynchronously (a signal handler) to the signal number: finish the step, checkpoint, return.
  const std::atomic<int>* stop_signal = nullptr;
  /// Stop after this many steps of this invocation, with a checkpoint (0 = run to config.steps).
  int64_t max_steps_this_run = 0;
  bool progress = true;  // progress on stderr
  bool tty = false;      // draw a bar (stderr is a terminal) instead of plain lines
  /// Tests: called before each step with the number of steps completed (e.g. to inject a NaN).
  std::function<void(BertTrainModel&, int64_t)> before_step;
  /// Tests: called once the step's gradients are final (reduced over ranks), before loss-scale
  /// checks and the update, with the number of steps completed (e.g. to plant an overflow).
  std::function<void(BertTrainModel&, int64_t)> after_backward;
};

struct TrainResult {
  int64_t start_step = 0;     // steps completed before this invocation (resume point)
  int64_t end_step = 0;       // steps completed at the end
  int64_t total_steps = 0;    // config.steps
  double first_loss = 0;      // the run's first step (carried over resumes)
  double last_loss = 0;
  double seq_per_s = 0;       // this invocation: sequences / time in steps
  double elapsed_s = 0;       // training time of the whole run (over resumes)
  double peak_gflops = 0;
  std::string checkpoint;     // the last checkpoint written (empty if none)
  std::string resumed_from;   // the checkpoint resumed from (empty if none)
  int stopped_by_signal = 0;  // the signal number when a signal stopped the run
  int64_t skipped_steps = 0;  // dynamic loss scaling: iterations whose gradients overflowed (no update)
  std::vector<StepMetrics> steps;  // this invocation's steps
  std::vector<std::string> warnings;
};

/// Runs (or continues) a pretraining run; throws an Error on bad input or a non-finite loss.
TrainResult pretrain(const TrainerOptions& options);

/// The first non-finite value among the parameters (values first, then gradients), as
/// "parameter NAME element I = nan" / "gradient of NAME element I = inf"; empty when all are finite.
std::string first_non_finite(BertTrainModel& model);

}  // namespace unmask::train
