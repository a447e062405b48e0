// train/task.h: what the one training loop (train/trainer.h) needs from a model and its data.
//
// A task owns a model, its loader and its loss. The loop owns everything a run has whatever the
// model: the optimizer and schedule, gradient accumulation, clipping, dynamic loss scaling, the
// overlapped gradient all-reduce, metrics.jsonl, the plot, the progress line, checkpoints, signals
// and --resume. Per optimizer step the loop calls
//
//   task.zero_grad(ctx);
//   for micro in 0 .. accumulation-1: flops += task.micro_batch(ctx, {step, micro, loss_scale, ...});
//   (gradients all-reduced over ranks)
//   StepSummary s = task.finish_step();      // loss, accuracy, samples: over all ranks
//   optimizer step
//
// and at a checkpoint task.save_model(dir) and task.save_data_state(state). A task restores its
// data position when it is built (it knows the checkpoint it resumes from), so everything random
// is a function of (seed, step, micro-batch, data position) and a resumed run computes what the
// uninterrupted one would have, bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "train/checkpoint.h"
#include "unmask/context.h"
#include "unmask/train.h"

namespace unmask::train {

struct MicroBatchOptions {
  int64_t step = 0;          // optimizer steps completed before this one
  int64_t micro = 0;         // micro-batch of the step, 0 .. accumulation-1
  int64_t accumulation = 1;
  /// The gradients to accumulate are of loss_scale x this micro-batch's loss (1 / accumulation,
  /// times the dynamic loss scale). A data-parallel task scales further by its share of the rows.
  float loss_scale = 1.0f;
  /// Data parallel, last micro-batch: call with each index range [first, end) of params() whose
  /// gradients are final, so their all-reduce overlaps the rest of the backward. Empty otherwise.
  std::function<void(int64_t first, int64_t end)> grads_ready;
};

/// A step's figures, the same on every rank (a data-parallel task reduces them).
struct StepSummary {
  double loss = 0;           // mean over the micro-batches of each one's loss
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // NaN: the task has none
  int64_t samples = 0, tokens = 0;  // the step's (all ranks)
  std::vector<std::pair<std::string, double>> extras;  // StepMetrics::extras
};

class TrainTask {
 public:
  virtual ~TrainTask() = default;
  /// The plot's title and the unit of throughput ("sequences", "clips").
  virtual std::string title() const = 0;
  virtual std::string sample_name() const = 0;
  virtual std::vector<Param>& params() = 0;
  virtual void zero_grad(Context& ctx) = 0;
  /// Reads the next micro-batch, runs forward and backward (adding into the gradients); returns
  /// this rank's FLOPs for it (for FLOP/s and MFU; 0 when unknown).
  virtual double micro_batch(Context& ctx, const MicroBatchOptions& options) = 0;
  /// After the last micro-batch and the gradient all-reduce: the step's figures (collective).
  virtual StepSummary finish_step() = 0;
  /// Writes the model's files, in its users' layout, into `dir` (rank 0 only).
  virtual void save_model(const std::string& dir) = 0;
  /// Records the data position in `state` (collective: ranks may exchange their positions).
  virtual void save_data_state(TrainerState& state) = 0;
  /// Called after a run stops (a final report line for the loader, say); may be empty.
  virtual std::string closing_note() { return ""; }
};

}  // namespace unmask::train
