// train/checkpoint.h: training checkpoints, written whole or not at all.
//
//   run/checkpoints/step-000200/
//     model/                 the model as its users have it (BERT: an HF directory, config.json,
//                            model.safetensors, vocab.txt, tokenizer files), nothing else: the
//                            directory to upload or to pass to `unmask infer --model`
//     optimizer.safetensors  "P.exp_avg", "P.exp_avg_sq" for every param P; metadata: optimizer, step
//     trainer_state.json     step, data position(s), seed, settings, metrics
//
//   train::TrainerState st; st.step = 200; ...
//   std::string dir = train::write_checkpoint("run", model, optimizer, st, {.vocab_path = v, .keep_last = 3});
//   std::string last = train::latest_checkpoint("run");     // "" when there is none
//   train::TrainerState back = train::read_trainer_state(last);
//
// Atomicity: everything is written into run/checkpoints/.tmp-step-000200-<pid>/, fsynced, and
// the directory is renamed into place (then the parent is fsynced). trainer_state.json is
// written last, and only directories that hold it count as checkpoints. Older checkpoints are
// pruned (keep_last) only after the new one is in place, so a failure at any point (a full
// disk, a crash, a kill) leaves the previous checkpoints as they were.
//
// Fault injection (tests): UNMASK_CHECKPOINT_FAULT=model|optimizer|state|publish (or
// set_checkpoint_fault()) makes the writer throw at that stage, as a full disk would.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "data/text/pretrain_data.h"
#include "unmask/train.h"

namespace unmask::train {

/// The last step's figures and the run's totals (what a run's summary reports), kept in
/// trainer_state.json.
struct CheckpointMetrics {
  double loss = std::numeric_limits<double>::quiet_NaN();
  double accuracy = std::numeric_limits<double>::quiet_NaN(), lr = 0, grad_norm = 0;
  double first_loss = std::numeric_limits<double>::quiet_NaN();  // of the whole run (step 1)
  double elapsed_s = 0;           // training time so far, over all resumed segments
  int64_t samples = 0, tokens = 0;
  std::vector<std::pair<std::string, double>> extras;  // the task's own (StepMetrics::extras)
};

struct TrainerState {
  int64_t step = 0;                // optimizer steps completed (the directory's number)
  int64_t optimizer_step = 0;      // Optimizer::step_count() (differs from step in phase 2)
  int phase = 1;
  uint64_t seed = 0;
  data::LoaderPosition loader;     // position of the next micro-batch (data_sharding = batch)
  // data_sharding = files / local: every rank's own loader position, in rank order (empty for batch).
  std::string data_sharding = "batch";
  std::vector<data::LoaderPosition> rank_loaders;
  // Other tasks' data positions by name (video: "clip_batches", the loader batches consumed).
  std::map<std::string, int64_t> data;
  double loss_scale = 0;           // dynamic loss scaling: the scale (0 = off) and its run of finite steps
  int64_t loss_scale_good_steps = 0;
  std::string config_hash;         // PretrainConfig::numeric_hash()
  std::map<std::string, std::string> config;  // PretrainConfig::to_map()
  CheckpointMetrics metrics;
};

struct CheckpointWriteOptions {
  std::string vocab_path;          // copied into the directory (HF layout); empty = none
  TokenizerSettings tokenizer;     // tokenizer_config.json beside the vocab (its casing)
  int64_t keep_last = 3;           // 0 = keep all
};

/// "step-000200".
std::string checkpoint_name(int64_t step);
/// run_dir + "/checkpoints".
std::string checkpoints_root(const std::string& run_dir);

/// Writes run_dir/checkpoints/step-NNNNNN (NNNNNN = state.step) atomically, replacing one of the
/// same step, then deletes the oldest complete checkpoints beyond keep_last. Returns its path.
/// save_model writes the model's files (its users' layout) into the directory it is given (the
/// checkpoint's model/).
/// Errors say which stage failed and that the previous checkpoint is intact.
std::string write_checkpoint(const std::string& run_dir, const std::function<void(const std::string&)>& save_model,
                             const Optimizer& optimizer, const TrainerState& state, int64_t keep_last);
/// BERT's: an HF model directory (config.json, model.safetensors, vocab.txt, tokenizer files).
std::string write_checkpoint(const std::string& run_dir, const BertTrainModel& model, const Optimizer& optimizer,
                             const TrainerState& state, const CheckpointWriteOptions& options);

/// Complete checkpoints (directories with trainer_state.json) of a run, oldest first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);
/// The newest complete checkpoint of a run, or "" when there is none.
std::string latest_checkpoint(const std::string& run_dir);
/// A checkpoint directory from a --resume argument: a checkpoint itself, or a run directory
/// (its latest checkpoint). Throws when there is none.
std::string resolve_checkpoint(const std::string& path);
/// The model directory of a checkpoint (checkpoint_dir/model; a checkpoint of an earlier build
/// held the model files beside the state: then checkpoint_dir itself).
std::string checkpoint_model_dir(const std::string& checkpoint_dir);
/// Whether `dir` is a training checkpoint (it holds trainer_state.json).
bool is_training_checkpoint(const std::string& dir);
/// Removes leftover .tmp-* directories of interrupted writes (at the start of a run).
void remove_stale_checkpoint_temporaries(const std::string& run_dir);

TrainerState read_trainer_state(const std::string& checkpoint_dir);
/// optimizer.safetensors as an OptimizerState (views into the memory-mapped file).
OptimizerState read_optimizer_state(const std::string& checkpoint_dir, std::string* optimizer_kind = nullptr);

/// Tests: make write_checkpoint fail at `stage` ("" = off; overrides UNMASK_CHECKPOINT_FAULT).
void set_checkpoint_fault(const std::string& stage);

}  // namespace unmask::train
