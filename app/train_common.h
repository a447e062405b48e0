// app/train_common.h: what the training commands share (pretrain-video, finetune-video,
// pretrain-bevt, finetune-swin): option lists, the optimizer and schedule from the options, the
// optional-value --resume, the output directory's checks, the loop's settings and controls.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli.h"
#include "train/trainer.h"
#include "unmask/train.h"

namespace unmask::cli {

/// a followed by b.
std::vector<OptionSpec> with(std::vector<OptionSpec> a, const std::vector<OptionSpec>& b);
/// --lr, --min-lr-ratio, --warmup, --weight-decay, --beta2, --clip-grad with these defaults.
std::vector<OptionSpec> optimizer_specs(const char* lr, const char* beta2, const char* warmup);

struct OptimizerSetup {
  OptimizerConfig config;
  ScheduleConfig schedule;
};
/// AdamW (beta1 0.9, eps 1e-8) and the cosine schedule over total_steps from optimizer_specs' options.
OptimizerSetup optimizer_setup(const Args& a, int64_t total_steps);
/// --resume takes an optional value (a run or checkpoint directory): taken out before the parser.
std::vector<char*> take_resume(int argc, char** argv, bool* resume, std::string* dir);
/// A new run refuses an --output holding a run unless --force, which clears it; --resume continues it.
void prepare_video_output(const Args& a, const std::string& out, const char* command, bool resume);
/// The loop's settings from the shared options; a checkpoint records every option but where the
/// run reads and writes and how it reports.
train::LoopConfig loop_config(const Args& a, const std::string& out, int64_t steps, int64_t accumulation,
                              const OptimizerSetup& os, uint64_t seed);
/// --stop-after, progress on stderr, SIGINT / SIGTERM handlers for `command`.
train::RunControl run_control(const Args& a, const char* command);

}  // namespace unmask::cli
