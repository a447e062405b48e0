// data/text/progress.cc: see progress.h.
#include "data/text/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace unmask::data {

namespace {
std::string clock_text(double seconds) {
  const auto s = int64_t(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  return buf;
}
}  // namespace

Progress::Progress(bool enabled) : enabled_(enabled), interactive_(::isatty(2) == 1) {}

void Progress::start(std::string label, int64_t total, Unit unit) {
  std::lock_guard<std::mutex> lock(mutex_);
  label_ = std::move(label);
  total_ = total;
  unit_ = unit;
  done_ = 0;
  next_quarter_ = 1;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

std::string Progress::amount(double x) const {
  char buf[32];
  if (unit_ == Unit::bytes)
    std::snprintf(buf, sizeof buf, "%.1f MB", x / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

void Progress::add(int64_t n) {
  const int64_t done = done_.fetch_add(n) + n;
  if (!enabled_) return;
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is drawing
  draw(done, false);
}

void Progress::finish() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  draw(total_ > 0 ? total_ : done_.load(), true);
}

void Progress::draw(int64_t done, bool final) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double fraction = total_ > 0 ? std::min(1.0, double(done) / double(total_)) : 1.0;
  const double rate = elapsed > 0 ? double(done) / elapsed : 0.0;
  std::string rate_text = amount(rate) + (unit_ == Unit::bytes ? "/s" : " /s");
  if (interactive_) {
    if (!final && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int filled = int(fraction * kWidth);
    std::string bar(size_t(filled), '=');
    if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), ' ');
    const std::string eta = final ? "done in " + clock_text(elapsed)
                                  : (fraction > 0 ? "ETA " + clock_text(elapsed / fraction - elapsed) : "ETA --:--");
    std::fprintf(stderr, "\r%-12s [%s] %3d%%  %s  %s   %s", label_.c_str(), bar.c_str(), int(fraction * 100),
                 rate_text.c_str(), eta.c_str(), final ? "\n" : "");
    std::fflush(stderr);
    return;
  }
  // Plain lines only for phases long enough to watch: a quick job stays silent.
  if (final) {
    if (elapsed < 1.0 && next_quarter_ == 1) return;
    std::fprintf(stderr, "prepare-text: %s done: %s in %.1f s (%s)\n", label_.c_str(), amount(double(done)).c_str(),
                 elapsed, rate_text.c_str());
    return;
  }
  if (next_quarter_ > 3 || fraction < next_quarter_ * 0.25 || fraction >= 1.0 || elapsed < 2.0) return;
  while (next_quarter_ <= 3 && fraction >= next_quarter_ * 0.25) ++next_quarter_;
  std::fprintf(stderr, "prepare-text: %s %d%% (%s of %s, ETA %s)\n", label_.c_str(), int(fraction * 100),
               amount(double(done)).c_str(), amount(double(total_)).c_str(),
               clock_text(fraction > 0 ? elapsed / fraction - elapsed : 0).c_str());
}

}  // namespace unmask::data
