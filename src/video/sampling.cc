// video/sampling.cc: VideoMAE frame sampling and list-file parsing (see sampling.h).
#include "video/sampling.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

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

std::vector<ListEntry> parse_video_list(const std::string& text, const std::string& name, ListFormat format,
                                        const std::string& root) {
  if (format == ListFormat::automatic) {
    const std::string first = text.substr(0, text.find('\n'));
    const bool csv = name.size() >= 4 && name.compare(name.size() - 4, 4, ".csv") == 0;
    format = csv && first.find(',') != std::string::npos ? ListFormat::vswift : ListFormat::videomae;
  }
  const char sep = format == ListFormat::vswift ? ',' : ' ';
  const char* fmt_name = format == ListFormat::vswift ? "V-SWIFT 'path,label'" : "VideoMAE 'path label'";
  std::vector<ListEntry> out;
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto not_space = line.find_first_not_of(" \t");
    if (not_space == std::string::npos) continue;  // blank
    const auto last = line.find_last_not_of(" \t");
    line = line.substr(not_space, last - not_space + 1);
    const auto cut = line.rfind(sep);
    auto where = [&] { return name + ":" + std::to_string(line_no); };
    if (cut == std::string::npos || cut == 0)
      throw Error("video list ", where(), ": expected ", fmt_name, ", got '", line.substr(0, 80), "'",
                  Hint(format == ListFormat::vswift ? "separate path and label with a comma"
                                                    : "separate path and label with a space"));
    std::string path = line.substr(0, cut), label_text = line.substr(cut + 1);
    while (!path.empty() && (path.back() == ' ' || path.back() == '\t')) path.pop_back();
    while (!label_text.empty() && (label_text.front() == ' ' || label_text.front() == '\t')) label_text.erase(0, 1);
    int64_t label = -1;
    const auto [ptr, ec] = std::from_chars(label_text.data(), label_text.data() + label_text.size(), label);
    if (ec != std::errc() || ptr != label_text.data() + label_text.size() || label < 0)
      throw Error("video list ", where(), ": label '", label_text.substr(0, 40), "' is not a non-negative integer",
                  Hint(std::string("each line must be ") + fmt_name));
    if (path.empty()) throw Error("video list ", where(), ": empty path", Hint("each line must start with a path"));
    if (!root.empty() && std::filesystem::path(path).is_relative()) path = (std::filesystem::path(root) / path).string();
    out.push_back({path, label});
  }
  return out;
}

std::vector<ListEntry> read_video_list(const std::string& file, ListFormat format, const std::string& root) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw Error("video list: cannot open ", file, Hint("check the path"));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_video_list(ss.str(), file, format, root);
}

}  // namespace unmask::video
