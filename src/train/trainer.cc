// train/trainer.cc: the one training loop (see trainer.h and task.h).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include "dist/grad_sync.h"
#include "io/file.h"
#include "ops/ops.h"
#include "train/checkpoint.h"
#include "train/loss_scaler.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::train {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Describes the keys that differ between a checkpoint's config and this run's.
std::string config_diff(const std::map<std::string, std::string>& saved, const std::map<std::string, std::string>& now) {
  std::string out;
  for (const auto& [k, v] : now) {
    auto it = saved.find(k);
    if (it != saved.end() && it->second != v) out += (out.empty() ? "" : ", ") + k + " " + it->second + " -> " + v;
  }
  return out;
}

// Non-finite elements: scans a contiguous f32 tensor; -1 when all are finite.
int64_t first_bad(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::f32) return -1;
  Tensor c = t.device() != Device::cpu ? t.to(Device::cpu) : t.is_contiguous() ? t : t.contiguous();
  const float* p = c.data<float>();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}

std::string value_text(const Tensor& t, int64_t i) {
  Tensor c = t.device() != Device::cpu ? t.to(Device::cpu) : t.is_contiguous() ? t : t.contiguous();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", double(c.data<float>()[i]));
  return buf;
}

}  // namespace

std::string first_non_finite(std::vector<Param>& params) {
  for (const Param& p : params)
    if (int64_t i = first_bad(p.value); i >= 0)
      return "parameter " + p.name + " element " + std::to_string(i) + " of " + p.value.shape().str() + " = " +
             value_text(p.value, i);
  for (const Param& p : params)
    if (int64_t i = first_bad(p.grad); i >= 0)
      return "gradient of " + p.name + " element " + std::to_string(i) + " of " + p.grad.shape().str() + " = " +
             value_text(p.grad, i);
  return "";
}

LoopStart open_run(const LoopConfig& config, const std::string& resume,
                   const std::function<void(const std::string&)>& warn) {
  LoopStart start;
  if (!resume.empty()) {
    start.resume_dir = resolve_checkpoint(resume);
    start.resumed = read_trainer_state(start.resume_dir);
    const TrainerState& r = start.resumed;
    if (r.step >= config.steps)
      throw Error("the run in ", start.resume_dir, " has already done ", r.step, " of steps = ", config.steps, " steps",
                  Hint("raise the number of steps to train further"));
    if (r.phase != config.phase)
      warn("resuming a phase-" + std::to_string(r.phase) + " checkpoint as phase " + std::to_string(config.phase));
    if (r.config_hash != config.config_hash) {
      std::string diff = config_diff(r.config, config.config);
      warn("the settings differ from the checkpoint's (" + (diff.empty() ? std::string("?") : diff) +
           "): the resumed run is not the same computation as an uninterrupted one");
    }
  } else if (std::string last = config.output.empty() ? "" : latest_checkpoint(config.output); !last.empty()) {
    throw Error("the output directory ", config.output, " already holds checkpoints (latest ", last, ")",
                Hint("pass --resume to continue that run, or choose another output directory"));
  }
  if (Communicator::world().is_root() && !config.output.empty()) remove_stale_checkpoint_temporaries(config.output);
  return start;
}

TrainResult run_training(TrainTask& task, Context& ctx, const LoopConfig& cfg, const LoopStart& start,
                         const RunControl& control) {
  TrainResult result;
  result.total_steps = cfg.steps;
  Communicator& comm = Communicator::world();
  const int world = comm.size();
  const bool root = comm.is_root();
  auto warn = [&](const std::string& w) {
    result.warnings.push_back(w);
    if (control.progress && root) std::fprintf(stderr, "warning: %s\n", w.c_str());
  };
  auto note = [&](const std::string& w) {
    if (control.progress && root) std::fprintf(stderr, "%s\n", w.c_str());
  };
  std::vector<Param>& params = task.params();
  Optimizer opt(cfg.optimizer, params);
  std::unique_ptr<dist::GradientSync> grad_sync;
  if (world > 1) {
    // Same weights everywhere (same seed or the same checkpoint): compare per-tensor sums of squares.
    std::vector<const Tensor*> values;
    for (const Param& p : params) values.push_back(&p.value);
    const std::vector<double> mine = ops::sum_squares_many(ctx, values);
    const std::vector<double> all = comm.allgather(mine, "the initial-weights check");
    for (int r = 1; r < world; ++r)
      for (size_t i = 0; i < mine.size(); ++i)
        if (all[size_t(r) * mine.size() + i] != all[i])
          throw Error("rank ", r, " starts from different weights than rank 0 (", params[i].name, ")",
                      Hint("every rank must load the same checkpoint or use the same seed"));
    grad_sync = std::make_unique<dist::GradientSync>(comm, params, dist::GradientSyncOptions{.average = false});
  }
  std::optional<DynamicLossScaler> scaler;
  if (cfg.loss_scaling)
    scaler.emplace(LossScalerConfig{.init_scale = cfg.init_loss_scale, .window = cfg.loss_scale_window});
  int64_t step = 0;
  CheckpointMetrics carried;
  const char* kind_name = cfg.optimizer.kind == OptimizerKind::adamw ? "adamw" : "lamb";
  if (!start.resume_dir.empty()) {
    std::string kind;
    OptimizerState os = read_optimizer_state(start.resume_dir, &kind);
    if (kind != kind_name)
      throw Error("the checkpoint ", start.resume_dir, " was trained with ", kind, " but the optimizer is ", kind_name,
                  Hint("resume with the same optimizer"));
    opt.load_state(os);
    step = start.resumed.step;
    carried = start.resumed.metrics;
    if (scaler && start.resumed.loss_scale > 0)
      scaler->restore(start.resumed.loss_scale, start.resumed.loss_scale_good_steps);
    result.resumed_from = start.resume_dir;
    note("resuming from " + start.resume_dir + " (step " + std::to_string(step) + ")");
  } else if (!start.init_optimizer_dir.empty() && io::file_exists(start.init_optimizer_dir + "/optimizer.safetensors")) {
    std::string kind;
    OptimizerState os = read_optimizer_state(start.init_optimizer_dir, &kind);
    if (kind == kind_name) {
      os.step = 0;
      opt.load_state(os);
    } else {
      warn("the starting checkpoint's optimizer is " + kind + ", not " + kind_name + ": its moments are not used");
    }
  }
  result.start_step = result.end_step = step;

  const std::string& run_dir = cfg.output;  // "": an in-memory run (tests): no files at all
  const bool files = !run_dir.empty();
  const double peak = cfg.peak_gflops;
  result.peak_gflops = peak;
  std::optional<MetricsLog> log;  // rank 0 writes the run's files
  if (root && files) log.emplace(run_dir, step);
  const std::string title = task.title(), samples_name = task.sample_name();
  const std::string unit = samples_name == "sequences" ? "seq/s" : samples_name + "/s";
  Progress progress(step, cfg.steps, cfg.log_every, control.tty, unit);

  auto make_state = [&](const StepMetrics* last) {
    TrainerState st;
    st.step = step;
    st.optimizer_step = opt.step_count();
    st.phase = cfg.phase;
    st.seed = cfg.seed;
    if (scaler) st.loss_scale = scaler->scale(), st.loss_scale_good_steps = scaler->good_steps();
    st.config_hash = cfg.config_hash;
    st.config = cfg.config;
    st.metrics = carried;
    if (last) {
      st.metrics.loss = last->loss, st.metrics.accuracy = last->accuracy, st.metrics.lr = last->lr;
      st.metrics.grad_norm = last->grad_norm, st.metrics.elapsed_s = last->elapsed, st.metrics.extras = last->extras;
    }
    task.save_data_state(st);  // collective
    return st;
  };
  int64_t saved_step = -1;
  auto save = [&](const StepMetrics* last) {
    if (saved_step == step || !files) return;
    TrainerState st = make_state(last);
    if (control.progress && root) progress.message("saving checkpoint " + checkpoint_name(step) + " ...");
    if (root) {
      result.checkpoint = write_checkpoint(
          run_dir, [&](const std::string& dir) { task.save_model(dir); }, opt, st, cfg.keep_checkpoints);
      log->write_plot(title, samples_name);
    }
    saved_step = step;
  };

  const double seg_start = now_s();
  double time_in_steps = 0;
  int64_t samples_this_run = 0;
  const StepMetrics* last = nullptr;
  int stop_seen = 0;               // the signal that stopped the run (agreed over ranks)
  int64_t skipped_since_step = 0;  // loss-scale overflows since the last update
  auto stop_requested = [&] {
    int local = control.stop_signal ? control.stop_signal->load() : 0;
    if (world > 1) {  // every rank must stop at the same step: the first signal anywhere stops all
      double any[2] = {double(local != 0), double(local)};
      comm.allreduce_sum(any, 2, "the stop-signal check");
      local = any[0] > 0 ? (local ? local : int(any[1] / any[0])) : 0;
    }
    if (local) stop_seen = local;
    return local != 0;
  };
  while (step < cfg.steps) {
    if (stop_requested()) break;
    if (control.max_steps_this_run > 0 && step - result.start_step >= control.max_steps_this_run) break;
    if (control.before_step) control.before_step(params, step);

    const double t0 = now_s();
    task.zero_grad(ctx);
    double flops = 0;
    for (int64_t micro = 0; micro < cfg.accumulation; ++micro) {
      MicroBatchOptions mo;
      mo.step = step, mo.micro = micro, mo.accumulation = cfg.accumulation;
      mo.loss_scale = float(1.0 / double(cfg.accumulation)) * (scaler ? scaler->scale() : 1.0f);
      // On the last micro-batch each bucket's all-reduce starts as soon as the backward has
      // finished its gradients (with accumulation nothing is reduced before that).
      if (world > 1 && cfg.overlap_allreduce && micro + 1 == cfg.accumulation)
        mo.grads_ready = [&](int64_t first, int64_t end) {
          for (int64_t i = end; i-- > first;) grad_sync->mark_ready(i);
        };
      flops += task.micro_batch(ctx, mo);
    }
    if (world > 1) grad_sync->finish();  // reduces whatever was not marked ready (everything without overlap)
    const StepSummary sum = task.finish_step();
    const double loss = sum.loss;
    auto non_finite = [&](const std::string& what) {
      progress.finish();
      const std::string last_good = files ? latest_checkpoint(run_dir) : "";
      std::string culprit = first_non_finite(params);
      throw Error("step ", step + 1, ": ", what, "; first non-finite tensor: ",
                  culprit.empty() ? std::string("none found among the parameters and gradients") : culprit,
                  Hint(last_good.empty() ? std::string("no checkpoint was written; lower lr or check the data")
                                         : "nothing was saved; the last good checkpoint is " + last_good +
                                               " (resume from it with a lower lr, or check the data)"));
    };
    if (!std::isfinite(loss)) non_finite("the loss is " + std::to_string(loss));
    if (control.after_backward) control.after_backward(params, step);
    const float step_loss_scale = scaler ? scaler->scale() : 0.0f;
    if (scaler && !scaler->unscale(ctx, params)) {
      // The gradients of (scale x loss) overflowed: no update, the scale halves, the batch is spent.
      // The same decision on every rank (the gradients were reduced first).
      ++result.skipped_steps, ++skipped_since_step;
      if (step_loss_scale <= 1.0f) non_finite("the gradients are not finite even at loss scale 1");
      if (control.progress && root)
        progress.message("step " + std::to_string(step + 1) + ": gradients overflowed at loss scale " +
                         std::to_string(step_loss_scale) + "; skipped, scale now " + std::to_string(scaler->scale()));
      continue;
    }
    const double lr = cfg.lr * lr_multiplier(cfg.schedule, opt.step_count());
    OptimizerStepStats os;
    try {
      os = opt.step(ctx, float(lr));
    } catch (const Error& e) {
      // The optimizer refuses a non-finite gradient norm (and leaves the parameters as they were).
      if (!first_non_finite(params).empty()) non_finite(std::string("the optimizer refused the step (") + e.what() + ")");
      throw;
    }
    if (!std::isfinite(os.grad_norm)) non_finite("the gradient norm is " + std::to_string(os.grad_norm));
    const double step_s = now_s() - t0;
    ++step;

    StepMetrics m;
    m.step = step;
    m.loss = loss;
    m.accuracy = sum.accuracy;
    m.extras = sum.extras;
    m.lr = lr;
    m.grad_norm = os.grad_norm;
    m.step_s = step_s;
    m.samples = sum.samples, m.tokens = sum.tokens;
    m.loss_scale = step_loss_scale;
    m.skipped = std::exchange(skipped_since_step, 0);
    m.samples_per_s = double(sum.samples) / step_s;
    m.tokens_per_s = double(sum.tokens) / step_s;
    m.flops_per_s = flops / step_s;  // this rank's (MFU per device)
    m.mfu = peak > 0 ? m.flops_per_s / (peak * 1e9) : 0;
    m.elapsed = carried.elapsed_s + (now_s() - seg_start);
    if (std::isnan(carried.first_loss)) carried.first_loss = loss;
    carried.samples += sum.samples, carried.tokens += sum.tokens;
    time_in_steps += step_s;
    samples_this_run += sum.samples;
    if (log) log->append(m);
    result.steps.push_back(m);
    last = &result.steps.back();
    if (control.progress && root) progress.update(m);
    if (control.after_step) control.after_step(m);

    if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0 && step < cfg.steps) save(last);
  }
  if (stop_seen) result.stopped_by_signal = stop_seen;
  // The final checkpoint (also after a signal or max_steps_this_run), unless nothing changed.
  if (step > result.start_step) save(last);
  progress.finish();

  result.end_step = step;
  result.first_loss = carried.first_loss;
  result.last_loss = last ? last->loss : carried.loss;
  result.invocation_first_loss = result.steps.empty() ? std::nan("") : result.steps.front().loss;
  result.invocation_s = now_s() - seg_start;
  result.samples_per_s = time_in_steps > 0 ? double(samples_this_run) / time_in_steps : 0;
  result.elapsed_s = last ? last->elapsed : carried.elapsed_s;
  if (result.checkpoint.empty() && files) result.checkpoint = latest_checkpoint(run_dir);
  return result;
}

std::string summary_line(const TrainResult& r, const std::string& verb, const std::string& samples_name) {
  const int64_t done = r.end_step - r.start_step;
  if (done == 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "stopped before a step of this run finished (at step %lld of %lld)",
                  (long long)r.end_step, (long long)r.total_steps);
    return buf;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s %lld steps (step %lld -> %lld of %lld) in %s: loss %.4f -> %.4f, %.2f %s/s",
                r.stopped_by_signal ? "stopped after" : verb.c_str(), (long long)done,
                (long long)r.start_step, (long long)r.end_step, (long long)r.total_steps,
                format_duration(r.invocation_s).c_str(), r.invocation_first_loss, r.last_loss, r.samples_per_s,
                samples_name.c_str());
  std::string line = buf;
  if (!r.resumed_from.empty()) {
    std::snprintf(buf, sizeof buf, " (resumed from %s; the whole run: %s, loss %.4f at step 1)", r.resumed_from.c_str(),
                  format_duration(r.elapsed_s).c_str(), r.first_loss);
    line += buf;
  }
  return line;
}

}  // namespace unmask::train
