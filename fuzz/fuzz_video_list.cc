// fuzz/fuzz_video_list.cc: libFuzzer target for the video list-file parser (video/video_list.h):
// every format (VideoMAE v1/v2, V-SWIFT's four, rawframes) and the automatic choice.
//
// parse_video_list must either throw unmask::Error (naming the file) or return entries with a
// non-empty path, a non-negative label, a non-empty frame range ([start, end) with end > start,
// or end -1) and a positive frame count for frame folders; never crash.
//
// Input layout: byte 0's low 3 bits pick the format (ListFormat's order, 7 = automatic too),
// bit 3 whether the name ends in .csv and bit 4 whether a root directory is joined; the rest is
// the file text.
//
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
//       fuzz/fuzz_video_list.cc src/data/video/video_list.cc -o /tmp/fuzz_video_list
//   /tmp/fuzz_video_list -max_total_time=60 fuzz/corpus_video_list
#include <cstdint>
#include <cstdlib>
#include <string>

#include "unmask/error.h"
#include "data/video/sampling.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();  // an invariant broke: let libFuzzer record the input
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using unmask::video::ListFormat;
  const int pick = data[0] & 7;
  const ListFormat format = pick <= int(ListFormat::automatic) ? ListFormat(pick) : ListFormat::automatic;
  const std::string name = (data[0] & 8) ? "fuzz.csv" : "fuzz.txt";
  const std::string root = (data[0] & 16) ? "/data/root" : "";
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const auto entries = unmask::video::parse_video_list(text, name, format, root);
    size_t lines = 1;
    for (const char c : text) lines += c == '\n';
    check(entries.size() <= lines);
    for (const auto& e : entries) {
      check(!e.path.empty());
      check(e.label >= 0);
      check(e.start_frame >= 0 && (e.end_frame == -1 || e.end_frame > e.start_frame));
      check(!e.frame_folder || e.total_frames > 0);
      check(e.total_frames == -1 || e.total_frames > 0);
      check(e.total_frames <= 0 || e.frame_folder || e.end_frame <= e.total_frames);
      if (!root.empty() && e.path[0] != '/') check(false);  // relative paths are joined to the root
    }
  } catch (const unmask::Error& e) {
    check(std::string(e.what()).find(name) != std::string::npos);  // errors name the file
  }
  return 0;
}
