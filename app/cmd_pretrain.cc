// app/cmd_pretrain.cc: `unmask pretrain`, BERT pretraining (MLM + NSP) from a config file.
//
//   unmask pretrain --config configs/pretrain-tiny.toml [--phase 2] [--set key=value ...]
//                   [--resume [DIR]] [--output DIR] [--steps N] ...
//
// Exit codes: 0 when the run reached `steps`; 130 (SIGINT) or 143 (SIGTERM) when a signal
// stopped it: the step in flight finished and a checkpoint was written, so `--resume`
// continues where it stopped (a second Ctrl-C kills at once); 1 on any error.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "train/checkpoint.h"
#include "core/signals.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/trainer.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::cli {

namespace {

// Shortcuts: `--steps 10` is `--set steps=10`.
const char* kShortcuts[] = {"output", "data", "model", "vocab", "steps", "batch", "accumulation", "lr", "threads", "seed"};

std::string keys_help() {
  std::string s = "\nconfig keys (file syntax: key = value; --set key=value):\n";
  for (const auto& k : train::config_keys()) {
    std::string left = std::string("  ") + k.name + " (" + k.type + ")";
    s += left + (left.size() < 40 ? std::string(40 - left.size(), ' ') : "\n" + std::string(40, ' ')) + k.help + "\n";
  }
  return s;
}

}  // namespace

int cmd_pretrain(int argc, char** argv) {
  std::vector<OptionSpec> specs = {
      {"config", "FILE", "the run's config (TOML subset; see configs/pretrain-tiny.toml)", ""},
      {"phase", "1|2", "2 applies the config's [phase2] section (DLE's seq-512 phase)", "1"},
      {"set", "KEY=VALUE", "override a config key (repeatable)", ""},
      {"resume", "[DIR]", "continue from the latest checkpoint of the run directory (or of DIR, or the checkpoint DIR)", ""},
      {"print-config", "", "print the resolved config (file syntax) and exit", ""},
      {"quiet", "", "no progress output", ""},
      {"stop-after", "N", "stop after N steps of this invocation with a checkpoint (continue with --resume)", "0"},
  };
  for (const char* k : kShortcuts) specs.push_back({k, "VALUE", std::string("same as --set ") + k + "=VALUE", ""});
  const std::string summary =
      "BERT pretraining (MLM + NSP) with LAMB or AdamW: checkpoints under OUTPUT/checkpoints/step-N (HF model\n"
      "directories plus optimizer and trainer state), per-step metrics in OUTPUT/metrics.jsonl, a plot in\n"
      "OUTPUT/loss.svg. SIGINT/SIGTERM finish the current step, save a checkpoint and exit 130/143.";

  // --set (repeatable) and --resume (optional value) are taken out before the common parser.
  std::vector<std::string> sets;
  bool resume = false;
  std::string resume_dir;
  std::vector<char*> rest = {argv[0], argv[1]};
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--set") {
      if (i + 1 >= argc) throw Error("--set needs KEY=VALUE");
      sets.push_back(argv[++i]);
    } else if (a.rfind("--set=", 0) == 0) {
      sets.push_back(a.substr(6));
    } else if (a == "--resume") {
      resume = true;
      if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) resume_dir = argv[++i];
    } else if (a.rfind("--resume=", 0) == 0) {
      resume = true;
      resume_dir = a.substr(9);
    } else {
      rest.push_back(argv[i]);
    }
  }
  auto args = Args::parse("pretrain", summary, specs, int(rest.size()), rest.data(), 2);
  if (!args) {
    std::fputs(keys_help().c_str(), stdout);
    return 0;
  }
  const std::string phase_text = args->get("phase");
  if (phase_text != "1" && phase_text != "2") throw Error("--phase must be 1 or 2, got '", phase_text, "'");
  const int phase = phase_text == "2" ? 2 : 1;
  train::PretrainConfig cfg = train::load_config(args->require("config"), phase);
  for (const char* k : kShortcuts)
    if (args->has(k)) train::apply_override(cfg, std::string(k) + "=" + args->get(k), "--" + std::string(k));
  for (const auto& s : sets) train::apply_override(cfg, s, "--set");
  if (args->has("print-config")) {
    std::printf("# resolved from %s (phase %d)\n%s", cfg.path.c_str(), cfg.phase, cfg.to_toml().c_str());
    return 0;
  }

  train::TrainerOptions opt;
  opt.config = cfg;
  if (resume) opt.resume = resume_dir.empty() ? cfg.output : resume_dir;
  opt.progress = !args->has("quiet");
  opt.tty = opt.progress && ::isatty(2);
  opt.stop_signal = install_stop_handlers("pretrain");
  opt.max_steps_this_run = args->get_int("stop-after");
  if (opt.max_steps_this_run < 0) throw Error("--stop-after must be >= 0, got ", opt.max_steps_this_run);
  train::TrainResult r = train::pretrain(opt);
  if (!Communicator::world().is_root()) return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;  // rank 0 reports

  const std::string ckpt = r.checkpoint;
  std::printf("%s\n", train::summary_line(r, "pretrained", "sequences").c_str());
  if (!ckpt.empty()) {
    std::printf("checkpoint: %s\nmetrics:    %s/metrics.jsonl, plot: %s/loss.svg\n", ckpt.c_str(), cfg.output.c_str(),
                cfg.output.c_str());
    std::printf("try it:     unmask infer --model %s --text \"paris is the [MASK] of france .\"\n", ckpt.c_str());
  }
  if (r.stopped_by_signal && ckpt.empty()) {
    // Stopped before the first step of a new run finished: nothing to resume from.
    std::printf("no step finished, so no checkpoint was written; start again with the same command (without --resume)\n");
    return 128 + r.stopped_by_signal;
  }
  if (r.stopped_by_signal) {
    std::printf("continue:   unmask pretrain --config %s%s --resume%s%s\n", cfg.path.c_str(),
                cfg.phase == 2 ? " --phase 2" : "", args->has("output") ? (" --output " + cfg.output).c_str() : "",
                sets.empty() ? "" : "  (with the same --set options)");
    return 128 + r.stopped_by_signal;
  }
  return 0;
}

}  // namespace unmask::cli
