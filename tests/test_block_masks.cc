// tests/test_block_masks.cc: BEiT's block-wise masks and BEVT's tubes (data/video/block_masks.h):
// pure functions of (seed, sample); in distribution the masks of BEiT's own generator in Python
// (tests/python/block_mask_reference.py: the masked-count histogram and every cell's masking
// frequency over 4,000 draws each); tubes that are one block mask over a cyclic run of 4 to 8 of
// the 8 slices, every start and length drawn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "data/video/block_masks.h"
#include "io/npy.h"
#include "python_reference.h"
#include "temp_dir.h"
#include "unmask/error.h"

using namespace unmask;
using unmask::test::TempDir;
using unmask::test::python_has;
using unmask::test::run_python_reference;

TEST(BlockMasks, PureFunctionsOfSeedAndSample) {
  const video::BlockMaskOptions o;
  EXPECT_EQ(video::block_mask(o, 7, 3), video::block_mask(o, 7, 3));
  EXPECT_NE(video::block_mask(o, 7, 3), video::block_mask(o, 7, 4));
  EXPECT_NE(video::block_mask(o, 7, 3), video::block_mask(o, 8, 3));
  video::BlockMaskOptions bad = o;
  bad.count = 197;
  EXPECT_THROW(video::block_mask(bad, 0, 0), Error);
}

TEST(BlockMasks, MatchBeitsGeneratorInDistribution) {
  if (!python_has("numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no numpy";
  constexpr int kDraws = 4000;
  TempDir tmp;
  const std::string dir = tmp.path.string();
  ASSERT_EQ(run_python_reference("block_mask_reference.py", dir + " " + std::to_string(kDraws), dir), "");
  const Tensor counts = io::read_npy(dir + "/counts.npy"), freq = io::read_npy(dir + "/freq.npy");
  ASSERT_EQ(counts.numel(), kDraws);
  std::vector<double> ours(196, 0.0);
  double mean = 0, theirs_mean = 0;
  int exact = 0, theirs_exact = 0;
  int64_t lowest = 196;
  for (int s = 0; s < kDraws; ++s) {
    const std::vector<uint8_t> m = video::block_mask({}, 2026, uint64_t(s));
    int64_t n = 0;
    for (size_t c = 0; c < m.size(); ++c) n += m[c], ours[c] += m[c];
    ASSERT_LE(n, 98);
    mean += double(n) / kDraws;
    exact += n == 98;
    lowest = std::min(lowest, n);
    const int64_t t = counts.data<int64_t>()[s];
    theirs_mean += double(t) / kDraws;
    theirs_exact += t == 98;
  }
  std::printf("[ block masks ] masked cells: mean %.3f (BEiT %.3f), exactly 98 in %.3f (BEiT %.3f), fewest %lld\n",
              mean, theirs_mean, double(exact) / kDraws, double(theirs_exact) / kDraws, (long long)lowest);
  EXPECT_NEAR(mean, theirs_mean, 0.3);
  EXPECT_NEAR(double(exact) / kDraws, double(theirs_exact) / kDraws, 0.04);
  // per cell: sampling noise of a frequency near 0.5 over 4,000 draws is ~0.008 a side
  double worst = 0, worst_edge_gap = 0;
  for (int c = 0; c < 196; ++c) {
    const double a = ours[size_t(c)] / kDraws, b = freq.data<double>()[c];
    worst = std::max(worst, std::fabs(a - b));
    if (c / 14 == 0 || c % 14 == 0) worst_edge_gap = std::max(worst_edge_gap, std::fabs(a - b));
  }
  std::printf("[ block masks ] per-cell frequency: worst |ours - BEiT| %.4f (edge cells %.4f)\n", worst, worst_edge_gap);
  EXPECT_LT(worst, 0.05);
}

TEST(BlockMasks, BevtTubesAreOneMaskOverACyclicRun) {
  const video::BlockMaskOptions o;
  std::set<int64_t> starts, lengths;
  for (uint64_t s = 0; s < 400; ++s) {
    const std::vector<uint8_t> m = video::bevt_tube_mask(o, 8, 11, s);
    ASSERT_EQ(m.size(), 8u * 196u);
    std::vector<int> on;
    for (int t = 0; t < 8; ++t) on.push_back(std::any_of(m.begin() + t * 196, m.begin() + (t + 1) * 196, [](uint8_t v) { return v; }));
    const int64_t length = std::count(on.begin(), on.end(), 1);
    ASSERT_GE(length, 4);
    ASSERT_LE(length, 8);
    // the run's first slice: masked, with its cyclic predecessor unmasked (all 8: any start)
    int64_t start = 0;
    if (length < 8)
      for (int t = 0; t < 8; ++t)
        if (on[size_t(t)] && !on[size_t((t + 7) % 8)]) start = t;
    for (int64_t k = 0; k < length; ++k) {
      const int64_t t = (start + k) % 8;
      ASSERT_TRUE(on[size_t(t)]) << "the masked slices are not one cyclic run";
      ASSERT_TRUE(std::equal(m.begin() + t * 196, m.begin() + (t + 1) * 196, m.begin() + start * 196))
          << "slice " << t << " holds another mask";
    }
    if (length < 8) starts.insert(start);
    lengths.insert(length);
  }
  EXPECT_EQ(starts.size(), 8u) << "every start 0..7 is drawn";
  EXPECT_EQ(lengths.size(), 5u) << "every length 4..8 is drawn";
}
