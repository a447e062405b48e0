// app/train_common.cc: see train_common.h.
#include "train_common.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/signals.h"
#include "train/config.h"
#include "unmask/error.h"
#include "video_common.h"

namespace unmask::cli {


std::vector<OptionSpec> with(std::vector<OptionSpec> a, const std::vector<OptionSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<OptionSpec> optimizer_specs(const char* lr, const char* beta2, const char* warmup) {
  return {
      {"lr", "LR", "peak learning rate (absolute, like V-SWIFT; VideoMAE's rule is base_lr * batch / 256)", lr},
      {"min-lr-ratio", "R", "cosine schedule floor as a fraction of --lr (VideoMAE min_lr / lr)", "0.01"},
      {"warmup", "F", "linear warmup as a fraction of the steps", warmup},
      {"weight-decay", "WD", "AdamW weight decay (biases, norms and 1-D params excluded)", "0.05"},
      {"beta2", "B", "AdamW beta2 (beta1 0.9, eps 1e-8)", beta2},
      {"clip-grad", "NORM", "clip the global gradient norm (0 = off)", "0"},
  };
}



OptimizerSetup optimizer_setup(const Args& a, int64_t total_steps) {
  OptimizerSetup s;
  s.config.kind = OptimizerKind::adamw;
  s.config.lr = float(a.get_double("lr"));
  s.config.beta1 = 0.9f;
  s.config.beta2 = float(a.get_double("beta2"));
  s.config.eps = 1e-8f;
  s.config.weight_decay = float(a.get_double("weight-decay"));
  s.config.max_grad_norm = float(a.get_double("clip-grad"));
  s.schedule.kind = ScheduleConfig::Kind::cosine;
  s.schedule.warmup = a.get_double("warmup");
  s.schedule.total_steps = total_steps;
  s.schedule.min_ratio = a.get_double("min-lr-ratio");
  if (!(s.config.lr > 0.0f)) throw Error("--lr must be > 0, got ", a.get("lr"));
  lr_multiplier(s.schedule, 0);  // validates warmup / min ratio with a clear message
  return s;
}

// --resume takes an optional value (a run or checkpoint directory): taken out before the parser.
std::vector<char*> take_resume(int argc, char** argv, bool* resume, std::string* dir) {
  std::vector<char*> rest = {argv[0], argv[1]};
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--resume") == 0) {
      *resume = true;
      if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) *dir = argv[++i];
    } else if (std::strncmp(argv[i], "--resume=", 9) == 0) {
      *resume = true;
      *dir = argv[i] + 9;
    } else {
      rest.push_back(argv[i]);
    }
  }
  return rest;
}

// A new run refuses an --output holding a run unless --force, which clears it; --resume continues it.
void prepare_video_output(const Args& a, const std::string& out, const char* command, bool resume) {
  if (resume && a.has("force")) throw Error(command, ": --resume continues the run in --output; --force would replace it");
  if (resume) return;
  check_video_output(a, out, command);
  if (a.has("force"))  // the user asked to replace the earlier run
    for (const char* old : {"checkpoints", "model", "metrics.jsonl", "loss.svg", "eval.json"})
      std::filesystem::remove_all(out + "/" + old);
}

// The loop's settings from the shared options; a checkpoint records every option but where the
// run reads and writes and how it reports.
train::LoopConfig loop_config(const Args& a, const std::string& out, int64_t steps, int64_t accumulation,
                              const OptimizerSetup& os, uint64_t seed) {
  train::LoopConfig lc;
  lc.output = out;
  lc.steps = steps;
  lc.accumulation = accumulation;
  lc.lr = double(os.config.lr);
  lc.optimizer = os.config;
  lc.schedule = os.schedule;
  lc.checkpoint_every = a.get_int("checkpoint-every");
  lc.keep_checkpoints = a.get_int("keep-checkpoints");
  if (lc.checkpoint_every < 0 || lc.keep_checkpoints < 0) throw Error("--checkpoint-every and --keep-checkpoints must be >= 0");
  lc.log_every = std::max<int64_t>(1, a.get_int("log-every"));
  lc.seed = seed;
  lc.config = a.values();
  for (const char* k : {"data", "output", "val", "threads", "log-every", "quiet", "stop-after", "checkpoint-every",
                        "keep-checkpoints", "force", "device", "root", "init-from", "no-overlap", "strict", "workers",
                        "test-segments", "test-crops", "config", "set", "print-config"})
    lc.config.erase(k);
  lc.config_hash = train::settings_hash(lc.config);
  return lc;
}

train::RunControl run_control(const Args& a, const char* command) {
  train::RunControl control;
  control.max_steps_this_run = a.get_int("stop-after");
  if (control.max_steps_this_run < 0) throw Error("--stop-after must be >= 0, got ", control.max_steps_this_run);
  control.progress = !a.has("quiet");
  control.tty = control.progress && ::isatty(2);
  control.stop_signal = install_stop_handlers(command);
  return control;
}


}  // namespace unmask::cli
