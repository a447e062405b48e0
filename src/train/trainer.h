// train/trainer.h: the one training loop every model runs on, and BERT pretraining on it.
//
//   // any model: a TrainTask (train/task.h) and the loop's settings
//   train::LoopConfig lc; lc.output = "run"; lc.steps = 1000; lc.optimizer = {...}; ...
//   train::LoopStart start = train::open_run(lc, resume_arg, warn);   // refuses to overwrite a run
//   MyTask task(..., start);                                          // weights / data position from it
//   train::TrainResult r = train::run_training(task, ctx, lc, start, control);
//
//   // BERT pretraining (`unmask pretrain`): builds its task from a TOML config and runs the loop
//   train::TrainerOptions o; o.config = train::load_config("configs/pretrain-tiny.toml");
//   train::TrainResult r = train::pretrain(o);
//
// One optimizer step: `accumulation` micro-batches through TrainTask::micro_batch with
// loss_scale = 1/accumulation (times the dynamic loss scale), the gradients all-reduced over
// ranks (bucketed, overlapping the last micro-batch's backward), then Optimizer::step with
// lr = optimizer.lr * lr_multiplier(schedule, step). Everything random derives from (seed, step,
// micro-batch) and the data position, so a run resumed from a checkpoint computes bit-identically
// the losses the uninterrupted run would have (tests/test_trainer.cc and
// tests/cli/test_video_resume.sh check it with ==).
//
// Stops: after `steps` (a final checkpoint); when *stop_signal becomes non-zero (the step in
// flight finishes, a checkpoint is written, TrainResult::stopped_by_signal says which signal);
// after max_steps_this_run steps of this invocation (--stop-after; a checkpoint); on a non-finite
// loss or gradient norm (an Error naming the step and the first non-finite parameter, else
// gradient; nothing is written, the last good checkpoint stays the latest).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/metrics.h"
#include "train/task.h"
#include "unmask/train.h"

namespace unmask::train {

/// What the loop does whatever the model; a checkpoint records `config` and `config_hash`.
struct LoopConfig {
  std::string output;                // run directory: checkpoints/, metrics.jsonl, loss.svg ("" = write nothing)
  int64_t steps = 0;                 // total optimizer steps
  int64_t accumulation = 1;          // micro-batches per optimizer step
  double lr = 0;                     // the peak learning rate (the schedule multiplies it)
  OptimizerConfig optimizer;         // kind, betas, eps, weight decay, clipping (its lr is ignored)
  ScheduleConfig schedule;           // total_steps = steps
  bool loss_scaling = false;         // dynamic loss scaling (train/loss_scaler.h)
  double init_loss_scale = 1048576.0;
  int64_t loss_scale_window = 2000;
  bool overlap_allreduce = true;     // data parallel: all-reduce buckets as the backward finishes them
  int64_t checkpoint_every = 0;      // optimizer steps (0 = only at the end)
  int64_t keep_checkpoints = 3;      // keep the last N (0 = keep all)
  int64_t log_every = 10;
  double peak_gflops = 0;            // MFU denominator (0 = unknown: no MFU)
  uint64_t seed = 0;
  int phase = 1;
  std::map<std::string, std::string> config;  // the run's settings, as the checkpoint records them
  std::string config_hash;                    // of the settings that change the numbers
};

/// Where a run starts: a fresh run, or the checkpoint it resumes.
struct LoopStart {
  std::string resume_dir;            // "" = a fresh run
  TrainerState resumed;              // resume_dir's trainer_state.json
  /// A fresh run that takes the optimizer moments (step reset to 0) of this checkpoint when its
  /// optimizer matches (DLE's phase 2); "" = none.
  std::string init_optimizer_dir;
};

/// How one invocation is driven.
struct RunControl {
  /// Set asynchronously (a signal handler) to the signal number: finish the step, checkpoint, return.
  const std::atomic<int>* stop_signal = nullptr;
  /// Stop after this many steps of this invocation, with a checkpoint (0 = run to steps).
  int64_t max_steps_this_run = 0;
  bool progress = true;  // progress on stderr
  bool tty = false;      // draw a bar (stderr is a terminal) instead of plain lines
  /// Tests: called before each step with the number of steps completed (e.g. to inject a NaN).
  std::function<void(std::vector<Param>&, int64_t)> before_step;
  /// Tests: called once the step's gradients are final (reduced over ranks), before loss-scale
  /// checks and the update, with the number of steps completed (e.g. to plant an overflow).
  std::function<void(std::vector<Param>&, int64_t)> after_backward;
  /// Called after each step with its metrics (a caller's own log lines).
  std::function<void(const StepMetrics&)> after_step;
};

struct TrainerOptions {
  PretrainConfig config;
  /// Continue from a checkpoint: a run directory (its latest checkpoint) or a checkpoint directory.
  std::string resume;
  const std::atomic<int>* stop_signal = nullptr;
  int64_t max_steps_this_run = 0;
  bool progress = true;
  bool tty = false;
  std::function<void(std::vector<Param>&, int64_t)> before_step;
  std::function<void(std::vector<Param>&, int64_t)> after_backward;
};

struct TrainResult {
  int64_t start_step = 0;     // steps completed before this invocation (resume point)
  int64_t end_step = 0;       // steps completed at the end
  int64_t total_steps = 0;    // config.steps
  double first_loss = 0;      // the run's first step (carried over resumes)
  double last_loss = 0;
  double invocation_first_loss = 0;  // this invocation's first step (NaN when it did none)
  double invocation_s = 0;           // this invocation's wall time in the loop
  double samples_per_s = 0;   // this invocation: samples / time in steps
  double elapsed_s = 0;       // training time of the whole run (over resumes)
  double peak_gflops = 0;
  std::string checkpoint;     // the last checkpoint written (empty if none)
  std::string resumed_from;   // the checkpoint resumed from (empty if none)
  int stopped_by_signal = 0;  // the signal number when a signal stopped the run
  int64_t skipped_steps = 0;  // dynamic loss scaling: iterations whose gradients overflowed (no update)
  std::vector<StepMetrics> steps;  // this invocation's steps
  std::vector<std::string> warnings;
};

/// Resolves where a run starts: with `resume` (a run directory or a checkpoint), its checkpoint
/// and state, refusing one that has done all `steps` and warning when the settings differ; without,
/// a fresh run, refused when `output` already holds checkpoints. Removes stale temporaries.
LoopStart open_run(const LoopConfig& config, const std::string& resume,
                   const std::function<void(const std::string&)>& warn);

/// Runs (or continues) a run of `task` on ctx; throws an Error on a non-finite loss.
TrainResult run_training(TrainTask& task, Context& ctx, const LoopConfig& config, const LoopStart& start,
                         const RunControl& control);

/// The run's summary line: this invocation's steps, time, losses and throughput (a resumed run's
/// totals after it); verb: "pretrained", "fine-tuned". E.g. "pretrained 8 steps (step 0 -> 8 of 8) in 3s: loss 10.41 -> 9.87, 5.2 clips/s".
std::string summary_line(const TrainResult& r, const std::string& verb, const std::string& samples_name);

/// BERT pretraining (MLM + NSP) from a PretrainConfig: builds the task, runs the loop.
TrainResult pretrain(const TrainerOptions& options);

/// The first non-finite value among the parameters (values first, then gradients), as
/// "parameter NAME element I = nan" / "gradient of NAME element I = inf"; empty when all are finite.
std::string first_non_finite(std::vector<Param>& params);

}  // namespace unmask::train
