// data/video/sampling.h: VideoMAE's frame sampling (the list files it reads are in video_list.h).
//
//   video::SampleRng rng(seed);
//   auto idx = video::dense_indices(300, 16, 4, rng);          // pretraining / K400 fine-tune
//   auto seg = video::segment_indices(300, 16, /*train=*/true, rng);  // SSv2 TSN segments
//   auto list = video::read_video_list("train.csv", video::ListFormat::videomae);
//
// Dense (VideoMAE v1 kinetics.py, train): a window of L = num_frames * rate frames.
//   - n > L: end uniform in [L, n), start = end - L, indices = linspace(start, end, num_frames)
//     truncated and clipped to [start, end - 1] (so the step is L / (num_frames - 1), slightly more
//     than `rate`, exactly as VideoMAE does with np.linspace).
//   - n <= L (short video): linspace(0, n, n / rate) then padded with n up to num_frames, all
//     clipped to n - 1 (the last frame repeats) — VideoMAE's short-video rule.
// Dense test view `dense_test_indices` (view v of `views`): the window start is
// v * (n - L) / max(views - 1, 1) (VideoMAE test_num_segment clips evenly spaced), same clip rules.
// Segments (VideoMAE ssv2.py, TSN): n split into num_frames segments of length n // num_frames;
//   train: one uniform frame per segment; if n < num_frames: sorted uniform draws in [0, n)
//   (n > num_frames) or zeros; test: the middle frame of each segment, int(tick/2 + tick*i),
//   tick = n / num_frames.
// Every draw comes from SampleRng (SplitMix64), so indices are a function of the seed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/video/video_list.h"  // the list formats, for the files that include this header for them

namespace unmask::video {

class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed * 0xD1342543DE82EF95ull + 0x2545F4914F6CDD1Dull) {}
  uint64_t next();
  int64_t below(int64_t n);  // uniform in [0, n), n > 0

 private:
  uint64_t state_;
};

std::vector<int64_t> dense_indices(int64_t video_frames, int num_frames, int sampling_rate, SampleRng& rng);
std::vector<int64_t> dense_test_indices(int64_t video_frames, int num_frames, int sampling_rate, int view, int views);
std::vector<int64_t> segment_indices(int64_t video_frames, int num_frames, bool train, SampleRng& rng);

}  // namespace unmask::video
