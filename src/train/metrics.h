// train/metrics.h: what the trainer records per optimizer step, and how it shows it.
//
//   run/metrics.jsonl   one JSON object per step (the fields of StepMetrics), appended and flushed
//   run/loss.svg        four panels against the step: loss (and the task's part losses), learning
//                       rate, accuracy, samples/s;
//                       rewritten atomically at every checkpoint and at the end
//   stderr              a progress bar with ETA on a terminal, else a plain line every log_every
//
//   train::MetricsLog log("run", /*resume_step=*/0);      // 0: a fresh file
//   log.append(m);                                         // m: StepMetrics of one step
//   log.write_plot("BERT tiny, LAMB 6e-3");
#pragma once
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "unmask/context.h"
#include "unmask/dtype.h"

namespace unmask::train {

struct StepMetrics {
  int64_t step = 0;          // optimizer steps completed (1-based)
  double loss = 0;           // the task's training loss (mean over the step's micro-batches)
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // the task's headline accuracy (NaN: none)
  double lr = 0, grad_norm = 0;
  double samples_per_s = 0, tokens_per_s = 0;  // samples: sequences (BERT) or clips (video); real tokens
  double flops_per_s = 0;    // the task's FLOP count / step time (this rank's: MFU per device)
  double mfu = 0;            // flops_per_s / peak (0 when the peak is unknown)
  double step_s = 0;         // wall time of the step (forward, backward, optimizer)
  double elapsed = 0;        // training seconds since step 0, over resumed segments
  int64_t samples = 0, tokens = 0;  // of this step (all ranks)
  double loss_scale = 0;     // dynamic loss scaling: the scale this step's gradients were taken at (0 = off)
  int64_t skipped = 0;       // dynamic loss scaling: overflowed iterations skipped since the last step
  /// The task's own figures, in its order (BERT: mlm_loss, nsp_loss, mlm_acc, nsp_acc). Names
  /// ending in _loss join the loss panel of the plot, names ending in _acc the accuracy panel.
  std::vector<std::pair<std::string, double>> extras;
  /// An extra by name; NaN when absent.
  double extra(const std::string& name) const;
};

/// metrics.jsonl: the same keys for every model, in this order: step, loss, accuracy, lr,
/// grad_norm, samples_per_s, tokens_per_s, flops_per_s, mfu, step_s, elapsed, samples, tokens
/// (then loss_scale and skipped when dynamic loss scaling is on), then the task's extras.
/// One JSONL line (no trailing newline); non-finite values are written as null.
std::string metrics_json_line(const StepMetrics& m);
/// Parses a line written by metrics_json_line (null -> NaN); throws on other text.
StepMetrics parse_metrics_line(const std::string& line);

/// The four-panel SVG (loss, learning rate, accuracy, throughput vs step; self-contained, no
/// scripts); `title` is XML-escaped, `samples` names the throughput's unit ("sequences", "clips").
std::string render_loss_svg(const std::vector<StepMetrics>& history, const std::string& title,
                            const std::string& samples = "samples");

class MetricsLog {
 public:
  /// Opens run_dir/metrics.jsonl. resume_step > 0: keeps the rows of steps <= resume_step (the
  /// steps after the checkpoint are recomputed and logged again) and drops the rest; 0: a new file.
  MetricsLog(const std::string& run_dir, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void append(const StepMetrics& m);
  const std::vector<StepMetrics>& history() const { return history_; }
  /// Writes run_dir/loss.svg atomically.
  void write_plot(const std::string& title, const std::string& samples = "samples") const;
  const std::string& path() const { return path_; }

 private:
  std::string run_dir_, path_;
  std::FILE* file_ = nullptr;
  std::vector<StepMetrics> history_;
};

/// The progress display on stderr.
class Progress {
 public:
  /// tty: a bar redrawn in place (at most ~10 times a second); else a line every log_every steps.
  /// unit: the throughput's short unit ("seq/s", "clips/s").
  Progress(int64_t first_step, int64_t total_steps, int64_t log_every, bool tty, std::string unit = "samples/s");
  void update(const StepMetrics& m);
  /// Ends the bar's line (a TTY bar is left on screen).
  void finish();
  /// Prints a message on its own line (clearing the bar first).
  void message(const std::string& text);

 private:
  int64_t first_step_, total_steps_, log_every_;
  bool tty_;
  std::string unit_;
  bool drawn_ = false;
  double start_s_, last_draw_s_ = -1;
};

/// Formats seconds as "1h02m", "5m12s", "42s".
std::string format_duration(double seconds);
/// Measures the fp32 FMA peak of `threads` cores in GFLOP/s (~0.3 s; 0 when the CPU lacks
/// AVX2+FMA): twelve independent FMA chains per thread, best of five trials.
double measure_peak_gflops(int threads);
/// The same for AVX-512 BF16 dot products (vdpbf16ps: 64 FLOP an instruction, 24 chains hide
/// its latency); 0 when the CPU lacks AVX-512 BF16. On an AMX machine this is not AMX's peak.
double measure_bf16_peak_gflops(int threads);
/// Measures the GEMM rate ctx reaches on n x n operands of `dtype` (f32, bf16 or f16; f32 takes
/// the context's TF32 setting on CUDA) in GFLOP/s: C = A A^T on uniform values in [-1, 1), three
/// warm-up products, then the mean over `reps` (matmul_peak.cc). The MFU denominator on GPUs
/// (n = 8192: about 20 ms of GPU time and 256 MB of device memory in bf16, freed on return).
double measure_matmul_peak_gflops(Context& ctx, DType dtype, int64_t n = 8192, int reps = 10);

}  // namespace unmask::train
