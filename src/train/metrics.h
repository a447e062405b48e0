// train/metrics.h: what the trainer records per optimizer step, and how it shows it.
//
//   run/metrics.jsonl   one JSON object per step (the fields of StepMetrics), appended and flushed
//   run/loss.svg        two panels: loss (and MLM / NSP loss) vs step, sequences/s vs step;
//                       rewritten atomically at every checkpoint and at the end
//   stderr              a progress bar with ETA on a terminal, else a plain line every log_every
//
//   train::MetricsLog log("run", /*resume_step=*/0);      // 0: a fresh file
//   log.append(m);                                         // m: StepMetrics of one step
//   log.write_plot("BERT tiny, LAMB 6e-3");
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "unmask/context.h"
#include "unmask/dtype.h"

namespace unmask::train {

struct StepMetrics {
  int64_t step = 0;          // optimizer steps completed (1-based)
  double loss = 0;           // mean over the step's micro-batches of (MLM loss + NSP loss)
  double mlm_loss = 0, nsp_loss = 0;  // means over the step's masked positions / sequences
  double mlm_acc = 0, nsp_acc = 0;
  double lr = 0, grad_norm = 0;
  double seq_per_s = 0, tokens_per_s = 0;  // real (unpadded) tokens
  double flops_per_s = 0;    // bert_train_flops / step time
  double mfu = 0;            // flops_per_s / peak (0 when the peak is unknown)
  double step_s = 0;         // wall time of the step (forward, backward, optimizer)
  double elapsed = 0;        // training seconds since step 0, over resumed segments
  int64_t sequences = 0, tokens = 0;  // of this step
  double loss_scale = 0;     // dynamic loss scaling: the scale this step's gradients were taken at (0 = off)
  int64_t skipped = 0;       // dynamic loss scaling: overflowed iterations skipped since the last step
};

/// One JSONL line (no trailing newline); non-finite values are written as null.
std::string metrics_json_line(const StepMetrics& m);
/// Parses a line written by metrics_json_line (null -> NaN); throws on other text.
StepMetrics parse_metrics_line(const std::string& line);

/// The two-panel SVG (self-contained, no scripts); `title` is XML-escaped.
std::string render_loss_svg(const std::vector<StepMetrics>& history, const std::string& title);

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
  void write_plot(const std::string& title) const;
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
  Progress(int64_t first_step, int64_t total_steps, int64_t log_every, bool tty);
  void update(const StepMetrics& m);
  /// Ends the bar's line (a TTY bar is left on screen).
  void finish();
  /// Prints a message on its own line (clearing the bar first).
  void message(const std::string& text);

 private:
  int64_t first_step_, total_steps_, log_every_;
  bool tty_;
  bool drawn_ = false;
  double start_s_, last_draw_s_ = -1;
};

/// Formats seconds as "1h02m", "5m12s", "42s".
std::string format_duration(double seconds);
/// Measures the fp32 FMA peak of `threads` cores in GFLOP/s (~0.3 s; 0 when the CPU lacks
/// AVX2+FMA): twelve independent FMA chains per thread, best of five trials.
double measure_peak_gflops(int threads);
/// Measures the GEMM rate ctx reaches on n x n operands of `dtype` (f32, bf16 or f16; f32 takes
/// the context's TF32 setting on CUDA) in GFLOP/s: C = A A^T on uniform values in [-1, 1), three
/// warm-up products, then the mean over `reps` (matmul_peak.cc). The MFU denominator on GPUs
/// (n = 8192: about 20 ms of GPU time and 256 MB of device memory in bf16, freed on return).
double measure_matmul_peak_gflops(Context& ctx, DType dtype, int64_t n = 8192, int reps = 10);

}  // namespace unmask::train
