// fuzz/fuzz_video_list.cc: libFuzzer target for the video list-file parser (video/sampling.h):
// VideoMAE "path label" and V-SWIFT "path,label" lines, and the automatic choice between them.
//
// parse_video_list must either throw unmask::Error (naming the file and line) or return entries
// with a non-empty path and a non-negative label; never crash.
//
// Input layout: byte 0 picks the format (0 videomae, 1 vswift, 2 automatic), whether the name
// ends in .csv (bit 2) and whether a root directory is joined (bit 3); the rest is the file text.
//
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
//       fuzz/fuzz_video_list.cc src/video/sampling.cc -o /tmp/fuzz_video_list
//   /tmp/fuzz_video_list -max_total_time=60 fuzz/corpus_video_list
#include <cstdint>
#include <cstdlib>
#include <string>

#include "unmask/error.h"
#include "video/sampling.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();  // an invariant broke: let libFuzzer record the input
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using unmask::video::ListFormat;
  const int pick = data[0] % 3;
  const ListFormat format = pick == 0 ? ListFormat::videomae : pick == 1 ? ListFormat::vswift : ListFormat::automatic;
  const std::string name = (data[0] & 4) ? "fuzz.csv" : "fuzz.txt";
  const std::string root = (data[0] & 8) ? "/data/root" : "";
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const auto entries = unmask::video::parse_video_list(text, name, format, root);
    size_t lines = 1;
    for (const char c : text) lines += c == '\n';
    check(entries.size() <= lines);
    for (const auto& e : entries) {
      check(!e.path.empty());
      check(e.label >= 0);
      if (!root.empty() && e.path[0] != '/') check(false);  // relative paths are joined to the root
    }
  } catch (const unmask::Error& e) {
    check(std::string(e.what()).find(name) != std::string::npos);  // errors name the file
  }
  return 0;
}
