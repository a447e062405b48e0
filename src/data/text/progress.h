// data/text/progress.h: a progress bar with rate and ETA on stderr, for long data jobs.
//
//   data::Progress p(/*enabled=*/true);
//   p.start("tokenizing", total_bytes, data::Progress::Unit::bytes);
//   p.add(n);                      // from any thread
//   p.finish();                    // final line with the elapsed time
//
// On a terminal the bar is redrawn in place at most ten times a second. When stderr is not a
// terminal (a log file, CI) it prints one plain line at 25%, 50% and 75% (once the phase has
// run 2 s) and one at the end (if it ran 1 s), so logs stay short. Disabled, it prints nothing.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace unmask::data {

class Progress {
 public:
  enum class Unit : uint8_t { items, bytes };
  explicit Progress(bool enabled);
  void start(std::string label, int64_t total, Unit unit = Unit::items);
  void add(int64_t n);
  void finish();
  /// Whether stderr is a terminal (the in-place bar) or not (a few plain lines).
  bool interactive() const { return interactive_; }

 private:
  void draw(int64_t done, bool final);
  std::string amount(double x) const;

  bool enabled_, interactive_;
  std::string label_;
  Unit unit_ = Unit::items;
  int64_t total_ = 0;
  std::atomic<int64_t> done_{0};
  std::chrono::steady_clock::time_point start_, last_draw_;
  int next_quarter_ = 1;  // plain mode: the next 25% step to report
  std::mutex mutex_;
};

}  // namespace unmask::data
