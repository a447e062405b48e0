// data/video/sampling.cc: VideoMAE frame sampling (see sampling.h).
#include "data/video/sampling.h"

#include <algorithm>

#include "unmask/error.h"

namespace unmask::video {

uint64_t SampleRng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t SampleRng::below(int64_t n) {
  UNMASK_CHECK(n > 0, "SampleRng::below: n must be positive, got ", n);
  return int64_t(next() % uint64_t(n));  // bias < n / 2^64: negligible for frame counts
}

namespace {

void check_args(int64_t video_frames, int num_frames, int rate) {
  UNMASK_CHECK(video_frames > 0, "frame sampling: the video has ", video_frames, " frames");
  UNMASK_CHECK(num_frames > 0 && rate > 0, "frame sampling: num_frames and sampling_rate must be positive, got ",
               num_frames, " and ", rate);
}

// np.linspace(start, end, count) truncated to int64 then clipped to [lo, hi].
std::vector<int64_t> linspace_clip(double start, double end, int64_t count, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) {
    const double v = count == 1 ? start : start + (end - start) * double(i) / double(count - 1);
    out.push_back(std::clamp(int64_t(v), lo, hi));
  }
  return out;
}

// The short-video rule: spread n / rate frames over the video, then repeat the last frame.
std::vector<int64_t> short_video(int64_t n, int num_frames, int rate) {
  std::vector<int64_t> idx = linspace_clip(0, double(n), n / rate, 0, n - 1);
  while (int64_t(idx.size()) < num_frames) idx.push_back(n - 1);
  idx.resize(size_t(num_frames));
  return idx;
}

}  // namespace

std::vector<int64_t> dense_indices(int64_t n, int num_frames, int rate, SampleRng& rng) {
  check_args(n, num_frames, rate);
  const int64_t span = int64_t(num_frames) * rate;
  if (n <= span) return short_video(n, num_frames, rate);
  const int64_t end = span + rng.below(n - span);  // np.random.randint(span, n)
  const int64_t start = end - span;
  return linspace_clip(double(start), double(end), num_frames, start, end - 1);
}

std::vector<int64_t> dense_test_indices(int64_t n, int num_frames, int rate, int view, int views) {
  check_args(n, num_frames, rate);
  UNMASK_CHECK(views > 0 && view >= 0 && view < views, "dense_test_indices: view ", view, " of ", views);
  const int64_t span = int64_t(num_frames) * rate;
  if (n <= span) return short_video(n, num_frames, rate);
  const int64_t start = (n - span) * view / std::max(views - 1, 1);
  return linspace_clip(double(start), double(start + span), num_frames, start, start + span - 1);
}

std::vector<int64_t> segment_indices(int64_t n, int num_frames, bool train, SampleRng& rng) {
  check_args(n, num_frames, 1);
  std::vector<int64_t> idx;
  if (!train) {
    const double tick = double(n) / num_frames;
    for (int i = 0; i < num_frames; ++i) idx.push_back(std::min(n - 1, int64_t(tick / 2 + tick * i)));
    return idx;
  }
  const int64_t avg = n / num_frames;
  if (avg > 0) {
    for (int i = 0; i < num_frames; ++i) idx.push_back(i * avg + rng.below(avg));
  } else if (n > num_frames) {
    for (int i = 0; i < num_frames; ++i) idx.push_back(rng.below(n));
    std::sort(idx.begin(), idx.end());
  } else {
    idx.assign(size_t(num_frames), 0);
  }
  return idx;
}

}  // namespace unmask::video
