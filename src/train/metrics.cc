// train/metrics.cc: metrics.jsonl, the loss plot (SVG written by hand), progress, FMA peak.
#include "train/metrics.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/thread_pool.h"
#include "io/file.h"
#include "unmask/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace unmask::train {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// "Nice" tick positions (1, 2, 5 x 10^k apart) covering [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  double raw = (hi - lo) / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return t;
}

std::string tick_label(double v) {
  char buf[32];
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3)) std::snprintf(buf, sizeof buf, "%.1e", v);
  else std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

struct Series {
  std::string name, color;
  std::function<double(const StepMetrics&)> value;
  double width;
};

// One panel: frame, grid, ticks with labels, axis titles, polylines, and a legend in the strip
// above the frame (never over the curves). The y range fits the finite values; with
// `robust_from` > 0 the steps before it (warm-up outliers such as the first step's speed) only
// count when nothing else is there, and points outside the range are drawn on its edge.
void draw_panel(std::ostringstream& o, const std::vector<StepMetrics>& h, const std::vector<Series>& series, double x0,
                double y0, double w, double ht, const std::string& y_title, bool y_from_zero, double step_lo,
                double step_hi, int64_t robust_from = 0) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int pass = 0; pass < 2 && !std::isfinite(lo); ++pass)
    for (const auto& s : series)
      for (const auto& m : h)
        if (double v = s.value(m); std::isfinite(v) && (pass == 1 || m.step >= robust_from))
          lo = std::min(lo, v), hi = std::max(hi, v);
  const bool empty = !std::isfinite(lo);
  if (empty) lo = 0, hi = 1;
  if (y_from_zero) lo = std::min(lo, 0.0);
  double pad = (hi - lo) * 0.05;
  if (pad == 0) pad = std::max(std::abs(hi) * 0.05, 1e-3);
  lo -= y_from_zero && lo == 0 ? 0 : pad;
  hi += pad;
  auto yticks = nice_ticks(lo, hi, 4);
  lo = std::min(lo, yticks.front()), hi = std::max(hi, yticks.back());
  auto xticks = nice_ticks(step_lo, step_hi, 8);
  auto X = [&](double s) { return x0 + (s - step_lo) / (step_hi - step_lo) * w; };
  auto Y = [&](double v) { return y0 + ht - (std::clamp(v, lo, hi) - lo) / (hi - lo) * ht; };

  o << "<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << ht
    << "' fill='white' stroke='#444' stroke-width='1'/>\n";
  for (double t : yticks) {
    double y = Y(t);
    if (y < y0 - 0.5 || y > y0 + ht + 0.5) continue;
    o << "<line x1='" << x0 << "' y1='" << fmt("%.2f", y) << "' x2='" << x0 + w << "' y2='" << fmt("%.2f", y)
      << "' stroke='#e4e4e4'/>\n";
    o << "<text x='" << x0 - 6 << "' y='" << fmt("%.2f", y + 4) << "' text-anchor='end'>" << tick_label(t) << "</text>\n";
  }
  for (double t : xticks) {
    double x = X(t);
    if (x < x0 - 0.5 || x > x0 + w + 0.5) continue;
    o << "<line x1='" << fmt("%.2f", x) << "' y1='" << y0 + ht << "' x2='" << fmt("%.2f", x) << "' y2='" << y0 + ht + 5
      << "' stroke='#444'/>\n";
    o << "<text x='" << fmt("%.2f", x) << "' y='" << y0 + ht + 18 << "' text-anchor='middle'>" << tick_label(t)
      << "</text>\n";
  }
  o << "<text transform='translate(" << x0 - 58 << "," << y0 + ht / 2 << ") rotate(-90)' text-anchor='middle'>"
    << xml_escape(y_title) << "</text>\n";
  if (empty) {
    o << "<text x='" << x0 + w / 2 << "' y='" << y0 + ht / 2 << "' text-anchor='middle' fill='#888'>not measured by this task</text>\n";
    return;
  }
  // At most ~2000 points per line: every k-th step (the last one always).
  const size_t stride = std::max<size_t>(1, h.size() / 2000);
  double legend_x = x0 + w;  // right-aligned entries in the strip above the frame
  for (size_t si = series.size(); si-- > 0;) {
    const auto& s = series[si];
    std::ostringstream pts;
    size_t n = 0;
    for (size_t i = 0; i < h.size(); ++i) {
      if (i % stride != 0 && i + 1 != h.size()) continue;
      double v = s.value(h[i]);
      if (!std::isfinite(v)) continue;
      pts << fmt("%.2f", X(double(h[i].step))) << "," << fmt("%.2f", Y(v)) << " ";
      ++n;
    }
    if (n == 1) {
      std::string p = pts.str();
      auto comma = p.find(',');
      o << "<circle cx='" << p.substr(0, comma) << "' cy='" << p.substr(comma + 1, p.find(' ') - comma - 1)
        << "' r='3' fill='" << s.color << "'/>\n";
    } else if (n > 1) {
      o << "<polyline fill='none' stroke='" << s.color << "' stroke-width='" << s.width << "' points='" << pts.str()
        << "'/>\n";
    }
    if (n > 0 && series.size() > 1) {
      const double tw = 7.0 * double(s.name.size()) + 30;
      legend_x -= tw;
      o << "<line x1='" << legend_x << "' y1='" << y0 - 8 << "' x2='" << legend_x + 18 << "' y2='" << y0 - 8
        << "' stroke='" << s.color << "' stroke-width='2'/>\n";
      o << "<text x='" << legend_x + 22 << "' y='" << y0 - 4 << "'>" << xml_escape(s.name) << "</text>\n";
    }
  }
}

const char* kColors[] = {"#d9822b", "#2b9d4a", "#b03f6e", "#3fa7b0", "#7a7a7a"};

// The series of a panel: `main` first, then the extras whose names end in `suffix` (an extra
// equal to `main` at every step, as BERT's mlm_acc is its accuracy, is not drawn twice).
std::vector<Series> panel_series(const std::vector<StepMetrics>& h, Series main, const std::string& suffix) {
  std::vector<Series> out{main};
  if (h.empty()) return out;
  size_t k = 0;
  for (const auto& [name, value] : h.back().extras) {
    (void)value;
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    bool same = true;
    for (const StepMetrics& m : h) same = same && m.extra(name) == main.value(m);
    if (same) continue;
    out.push_back({name, kColors[k++ % 5], [n = name](const StepMetrics& m) { return m.extra(n); }, 1.0});
  }
  return out;
}

}  // namespace

double StepMetrics::extra(const std::string& name) const {
  for (const auto& [n, v] : extras)
    if (n == name) return v;
  return kNaN;
}

std::string metrics_json_line(const StepMetrics& m) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr); };
  nlohmann::ordered_json j = {{"step", m.step},
                              {"loss", num(m.loss)},
                              {"accuracy", num(m.accuracy)},
                              {"lr", num(m.lr)},
                              {"grad_norm", num(m.grad_norm)},
                              {"samples_per_s", num(m.samples_per_s)},
                              {"tokens_per_s", num(m.tokens_per_s)},
                              {"flops_per_s", num(m.flops_per_s)},
                              {"mfu", num(m.mfu)},
                              {"step_s", num(m.step_s)},
                              {"elapsed", num(m.elapsed)},
                              {"samples", m.samples},
                              {"tokens", m.tokens}};
  if (m.loss_scale > 0) j["loss_scale"] = m.loss_scale, j["skipped"] = m.skipped;
  for (const auto& [name, v] : m.extras) j[name] = num(v);
  return j.dump();
}

StepMetrics parse_metrics_line(const std::string& line) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(line);  // throws on bad text
  if (!j.is_object() || !j.contains("step")) throw Error("metrics line without \"step\": ", line.substr(0, 80));
  auto num = [&](const char* k) {
    auto it = j.find(k);
    return it == j.end() || !it->is_number() ? kNaN : it->get<double>();
  };
  StepMetrics m;
  m.step = j.at("step").get<int64_t>();
  m.loss = num("loss"), m.accuracy = num("accuracy"), m.lr = num("lr"), m.grad_norm = num("grad_norm");
  m.samples_per_s = num("samples_per_s"), m.tokens_per_s = num("tokens_per_s"), m.flops_per_s = num("flops_per_s");
  m.mfu = num("mfu"), m.step_s = num("step_s"), m.elapsed = num("elapsed");
  m.samples = j.value("samples", int64_t(0)), m.tokens = j.value("tokens", int64_t(0));
  m.loss_scale = j.value("loss_scale", 0.0), m.skipped = j.value("skipped", int64_t(0));
  static const char* kCommon[] = {"step",  "loss",   "accuracy", "lr",     "grad_norm",  "samples_per_s", "tokens_per_s",
                                  "flops_per_s", "mfu", "step_s", "elapsed", "samples", "tokens", "loss_scale", "skipped"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find_if(std::begin(kCommon), std::end(kCommon), [&](const char* c) { return it.key() == c; }) != std::end(kCommon))
      continue;
    if (it->is_number() || it->is_null()) m.extras.emplace_back(it.key(), it->is_number() ? it->get<double>() : kNaN);
  }
  return m;
}

std::string render_loss_svg(const std::vector<StepMetrics>& h, const std::string& title, const std::string& samples) {
  const double W = 960, left = 90, right = 30, top = 64, panel_h = 150, gap = 74;
  const double H = top + 4 * panel_h + 3 * gap + 82;
  std::ostringstream o;
  o << "<?xml version='1.0' encoding='UTF-8'?>\n"
    << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " " << H
    << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='#fafafa'/>\n"
    // a long title (run directory and recipe) in a smaller font, so it fits the width
    << "<text x='" << W / 2 << "' y='26' text-anchor='middle' font-size='" << (title.size() > 90 ? 11 : 16) << "'>"
    << xml_escape(title) << "</text>\n";
  if (h.empty()) {
    o << "<text x='" << W / 2 << "' y='" << H / 2 << "' text-anchor='middle'>no steps yet</text>\n</svg>\n";
    return o.str();
  }
  double s_lo = double(h.front().step), s_hi = double(h.back().step);
  if (s_hi <= s_lo) s_lo -= 0.5, s_hi += 0.5;
  const double w = W - left - right;
  double y = top;
  auto next_panel = [&] {
    const double at = y;
    y += panel_h + gap;
    return at;
  };
  draw_panel(o, h, panel_series(h, {"loss", "#1f5fbf", [](const StepMetrics& m) { return m.loss; }, 1.6}, "_loss"), left,
             next_panel(), w, panel_h, "loss", false, s_lo, s_hi);
  draw_panel(o, h, {{"learning rate", "#1f5fbf", [](const StepMetrics& m) { return m.lr; }, 1.4}}, left, next_panel(), w,
             panel_h, "learning rate", true, s_lo, s_hi);
  draw_panel(o, h, panel_series(h, {"accuracy", "#1f5fbf", [](const StepMetrics& m) { return m.accuracy; }, 1.6}, "_acc"),
             left, next_panel(), w, panel_h, "accuracy", false, s_lo, s_hi);
  // The first steps of each segment (warm-up, allocation) are slow outliers: the axis fits the rest.
  draw_panel(o, h, {{samples + "/s", "#7a3fb0", [](const StepMetrics& m) { return m.samples_per_s; }, 1.4}}, left,
             next_panel(), w, panel_h, samples + " / s", false, s_lo, s_hi, h.front().step + 2);
  const StepMetrics& last = h.back();
  o << "<text x='" << left + w / 2 << "' y='" << H - 40 << "' text-anchor='middle'>optimizer step</text>\n";
  o << "<text x='" << left << "' y='" << H - 10 << "'>step " << last.step << ": loss " << fmt("%.4f", last.loss) << ", "
    << fmt("%.2f", last.samples_per_s) << " " << xml_escape(samples) << "/s, elapsed " << format_duration(last.elapsed)
    << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

MetricsLog::MetricsLog(const std::string& run_dir, int64_t resume_step) : run_dir_(run_dir), path_(run_dir + "/metrics.jsonl") {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  std::string kept;
  if (resume_step > 0 && io::file_exists(path_)) {
    std::istringstream in(io::read_file(path_));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      StepMetrics m;
      try {
        m = parse_metrics_line(line);
      } catch (const std::exception&) {
        continue;  // a torn last line from a killed run
      }
      if (m.step > resume_step) continue;
      history_.push_back(m);
      kept += line + "\n";
    }
  }
  // Rewritten (atomically) with the kept rows, then appended to.
  io::write_file_atomic(path_, kept);
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_) throw Error("cannot open ", path_, " for appending: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::append(const StepMetrics& m) {
  history_.push_back(m);
  std::string line = metrics_json_line(m) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw Error("cannot append to ", path_, ": ", std::strerror(errno), Hint("is the disk full?"));
}

void MetricsLog::write_plot(const std::string& title, const std::string& samples) const {
  io::write_file_atomic(run_dir_ + "/loss.svg", render_loss_svg(history_, title, samples));
}

// ---- progress --------------------------------------------------------------------------------

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  long long t = (long long)std::llround(s);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%llds", t);
  return buf;
}

Progress::Progress(int64_t first_step, int64_t total_steps, int64_t log_every, bool tty, std::string unit)
    : first_step_(first_step), total_steps_(total_steps), log_every_(std::max<int64_t>(1, log_every)), tty_(tty),
      unit_(std::move(unit)), start_s_(now_s()) {}

void Progress::update(const StepMetrics& m) {
  const double now = now_s();
  const int64_t done = m.step - first_step_;
  const double eta = done > 0 ? (now - start_s_) / double(done) * double(total_steps_ - m.step) : kNaN;
  const bool last = m.step >= total_steps_;
  // loss, the task's part losses (mlm_loss -> "mlm"), accuracy, lr, throughput, GFLOP/s, MFU
  std::string info = fmt("loss %.4f", m.loss);
  for (const auto& [name, v] : m.extras)
    if (name.size() > 5 && name.compare(name.size() - 5, 5, "_loss") == 0)
      info += "  " + name.substr(0, name.size() - 5) + fmt(" %.3f", v);
  if (std::isfinite(m.accuracy)) info += fmt("  acc %.3f", m.accuracy);
  info += fmt("  lr %.3g", m.lr) + fmt("  %.2f ", m.samples_per_s) + unit_ + fmt("  %.1f GFLOP/s", m.flops_per_s / 1e9);
  if (m.mfu > 0) info += fmt("  MFU %.1f%%", 100 * m.mfu);
  if (tty_) {
    if (!last && last_draw_s_ >= 0 && now - last_draw_s_ < 0.1) return;
    last_draw_s_ = now;
    const int width = 24;
    int filled = int(double(width) * double(m.step) / double(std::max<int64_t>(1, total_steps_)));
    std::string bar = std::string(size_t(filled), '#') + std::string(size_t(width - filled), '.');
    std::fprintf(stderr, "\r\033[K[%s] %lld/%lld  %s  ETA %s", bar.c_str(), (long long)m.step, (long long)total_steps_,
                 info.c_str(), format_duration(eta).c_str());
    drawn_ = true;
  } else if (m.step % log_every_ == 0 || last || done == 1) {
    std::fprintf(stderr, "step %lld/%lld  %s  elapsed %s  ETA %s\n", (long long)m.step, (long long)total_steps_, info.c_str(),
                 format_duration(m.elapsed).c_str(), format_duration(eta).c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (tty_ && drawn_) std::fputc('\n', stderr);
  drawn_ = false;
  std::fflush(stderr);
}

void Progress::message(const std::string& text) {
  if (tty_ && drawn_) std::fputs("\r\033[K", stderr);
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  last_draw_s_ = -1;  // redraw the bar at the next update
  drawn_ = false;
}

// ---- fp32 peak -------------------------------------------------------------------------------

#if defined(__x86_64__)
namespace {
// Twelve independent FMA chains hide the FMA latency; 8-wide (AVX2) or 16-wide (AVX-512).
template <int kWidth>
__attribute__((target("avx512f,avx2,fma"))) double fma_chains(int64_t iters) {
  if constexpr (kWidth == 16) {
    __m512 acc[12];
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
    float out[16];
    _mm512_storeu_ps(out, s);
    return out[0];
  } else {
    __m256 acc[12];
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i) * 1e-3f);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t n = 0; n < iters; ++n)
      for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
  }
}
}  // namespace
#endif

namespace {
// Per-thread rate of run(iters) (flops_per_iter FLOP an iteration) in thread CPU time, summed
// over `threads` threads: the best of five trials after a warm-up.
template <typename Run>
double per_core_peak(int threads, int64_t iters, double flops_per_iter, Run run) {
  threads = std::max(1, threads);
  std::vector<double> sink(size_t(threads), 0.0);
  // Each thread times its own loop in THREAD CPU time, so a core shared with other processes
  // (descheduled periods do not count) still reports the per-core peak; peak = sum over threads.
  ThreadPool pool(threads);
  pool.run(threads, [&](int t) { sink[size_t(t)] += run(iters / 4); });  // clocks up
  auto thread_cpu_s = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  std::vector<double> rate(size_t(threads), 0.0);
  for (int trial = 0; trial < 5; ++trial)
    pool.run(threads, [&](int t) {
      const double t0 = thread_cpu_s();
      sink[size_t(t)] += run(iters);
      const double dt = thread_cpu_s() - t0;
      if (dt > 0) rate[size_t(t)] = std::max(rate[size_t(t)], double(iters) * flops_per_iter / dt / 1e9);
    });
  double best = 0;
  for (double r : rate) best += r;
  volatile double keep = sink[0];
  (void)keep;
  return best;
}
}  // namespace

#if defined(__x86_64__)
namespace {
__attribute__((target("avx512f,avx512bf16"))) double dpbf16_chains(int64_t iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, ~6e-8
  for (int64_t n = 0; n < iters; ++n)
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}
}  // namespace
#endif

double measure_bf16_peak_gflops(int threads) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx512bf16")) return 0.0;
  return per_core_peak(threads, 2'000'000, 24.0 * 64, dpbf16_chains);
#else
  (void)threads;
  return 0.0;
#endif
}

double measure_peak_gflops(int threads) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("fma") || !__builtin_cpu_supports("avx2")) return 0.0;
  const bool wide = __builtin_cpu_supports("avx512f");
  return per_core_peak(threads, 4'000'000, 12.0 * (wide ? 16 : 8) * 2, wide ? fma_chains<16> : fma_chains<8>);
#else
  (void)threads;
  return 0.0;
#endif
}


}  // namespace unmask::train
