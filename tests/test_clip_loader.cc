// tests/test_clip_loader.cc: the prefetching clip loader: test-mode rows equal an independent
// float64 pipeline (VideoReader decode -> VideoMAE test indices -> test crop boxes -> bilinear
// resize + normalise); batches are identical for 1 and 3 worker threads and for a store and the
// list it was made from; epochs cover every video and reshuffle; test-mode views come in a fixed
// order; bad videos are skipped and counted (strict: an Error), a list by prepare-video's rule
// for truncated files; destroying a loader early returns promptly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "temp_dir.h"
#include "unmask/error.h"
#include "data/video/augment.h"
#include "data/video/clip_loader.h"
#include "data/video/clip_store.h"
#include "data/video/decode.h"
#include "data/video/synthetic.h"
#include "error_test_util.h"

namespace unmask::video {
namespace {

namespace fs = std::filesystem;

// A temp directory named for this file's tests.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("unmask_loader") {}
};

constexpr int kW = 64, kH = 48, kShort = 32, kVideos = 6;

// Six short videos (both codecs, 18-26 frames, so dense clips both fit and pad) + list + store.
struct Data {
  TempDir dir;
  std::vector<std::string> videos;
  std::string list, store;
  Data() {
    list = dir.file("list.txt");
    std::ofstream f(list);
    for (int i = 0; i < kVideos; ++i) {
      const std::string codec = i % 2 ? "h264" : "vp9";
      const int frames = 18 + 2 * i;
      const std::string path = dir.file("v" + std::to_string(i) + (i % 2 ? ".mp4" : ".webm"));
      encode_rgb_video(path, codec, render_synthetic_video(5, i, i % 4, frames, kW, kH), frames, kW, kH, 10, 6);
      videos.push_back(path);
      f << path << " " << (i % 4) << "\n";
    }
    f.close();
    PrepareOptions o;
    o.list = list;
    o.out = store = dir.file("s.ucs");
    o.short_side = kShort;
    prepare_clip_store(o);
  }
};

ClipLoaderOptions small(ClipLoaderOptions::Mode mode) {
  ClipLoaderOptions o;
  o.mode = mode;
  o.batch = 4;
  o.num_frames = 4;
  o.sampling_rate = 3;
  o.crop = 16;
  o.seed = 42;
  return o;
}

std::vector<ClipBatch> epoch_of(ClipLoader& l) {
  std::vector<ClipBatch> out;
  ClipBatch b;
  while (l.next(b)) out.push_back(b);
  return out;
}

void expect_same(const std::vector<ClipBatch>& a, const std::vector<ClipBatch>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].videos.shape(), b[i].videos.shape()) << what << " batch " << i;
    EXPECT_EQ(0, std::memcmp(a[i].videos.raw(), b[i].videos.raw(), a[i].videos.nbytes())) << what << " batch " << i;
    EXPECT_EQ(a[i].labels, b[i].labels) << what << " batch " << i;
    EXPECT_EQ(a[i].video_index, b[i].video_index) << what << " batch " << i;
    EXPECT_EQ(a[i].view, b[i].view) << what << " batch " << i;
  }
}

using unmask::test::error_of;

TEST(ClipLoader, TestViewsMatchFloat64PipelineInFixedOrder) {
  Data d;
  ClipLoaderOptions o = small(ClipLoaderOptions::Mode::test);
  o.test_segments = 2;
  o.test_crops = 3;
  o.batch = 5;  // views of one video straddle batches
  o.threads = 3;
  ClipLoader loader = ClipLoader::from_store(d.store, o);
  EXPECT_EQ(loader.rows_per_video(), 6);
  const std::vector<ClipBatch> batches = epoch_of(loader);
  ASSERT_EQ(batches.size(), size_t((kVideos * 6 + 4) / 5));  // every row, the last batch short
  EXPECT_EQ(batches.back().videos.size(0), kVideos * 6 % 5);
  int64_t row = 0;
  double max_err = 0;
  const int64_t row_floats = 3 * 4 * 16 * 16;
  for (const ClipBatch& b : batches) {
    ASSERT_EQ(b.videos.ndim(), 5);
    EXPECT_EQ(b.videos.size(1), 3);
    EXPECT_EQ(b.videos.size(2), 4);
    EXPECT_EQ(b.videos.size(3), 16);
    for (int64_t i = 0; i < b.videos.size(0); ++i, ++row) {
      const int64_t v = row / 6, view = row % 6, seg = view / 3, crop = view % 3;
      ASSERT_EQ(b.video_index[size_t(i)], v);
      ASSERT_EQ(b.view[size_t(i)], view);
      EXPECT_EQ(b.labels[size_t(i)], v % 4);
      // The reference: decode the video itself, VideoMAE's test indices and crops, float64 resize.
      VideoReader reader(d.videos[size_t(v)]);
      DecodeOptions dopt;
      dopt.short_side = kShort;
      const auto idx = dense_test_indices(reader.info().num_frames, 4, 3, int(seg), 2);
      const Clip clip = reader.decode(idx, dopt);
      const auto boxes = test_crop_boxes(clip.width, clip.height, kShort, 3);
      const auto ref =
          crop_resize_normalize_reference(clip, boxes[size_t(crop)], 16, false, o.mean.data(), o.std.data());
      const float* got = b.videos.data<float>() + i * row_floats;
      for (int64_t k = 0; k < row_floats; ++k) max_err = std::max(max_err, std::abs(double(got[k]) - ref[size_t(k)]));
    }
  }
  EXPECT_EQ(row, kVideos * 6);
  std::printf("[ loader ] test views vs float64 pipeline: max |diff| %.3g\n", max_err);
  EXPECT_LT(max_err, 2e-5);
  ClipBatch extra;
  EXPECT_TRUE(loader.next(extra)) << "a second pass starts after the end of the first";
  EXPECT_EQ(extra.epoch, 1);
  EXPECT_EQ(extra.video_index[0], 0) << "test mode never shuffles";
}

TEST(ClipLoader, SameBatchesForAnyThreadCountAndQueueDepth) {
  Data d;
  for (const auto mode : {ClipLoaderOptions::Mode::train, ClipLoaderOptions::Mode::pretrain}) {
    ClipLoaderOptions o = small(mode);
    o.num_sample = 2;
    o.threads = 1;
    o.queue_depth = 1;
    ClipLoader one = ClipLoader::from_store(d.store, o);
    o.threads = 3;
    o.queue_depth = 3;
    ClipLoader three = ClipLoader::from_store(d.store, o);
    for (int e = 0; e < 2; ++e) expect_same(epoch_of(one), epoch_of(three), "epoch " + std::to_string(e));
    const LoaderTimes t = three.times();
    EXPECT_EQ(t.clips, 2 * kVideos * 2 / 4 * 4);
    EXPECT_GT(t.read_s, 0);
    EXPECT_GT(t.augment_s, 0);
    EXPECT_GT(t.copy_s, 0);
    EXPECT_EQ(t.skipped.total(), 0);
  }
}

TEST(ClipLoader, StoreEqualsListDecodedOnTheFly) {
  Data d;
  for (const bool segments : {false, true}) {
    ClipLoaderOptions o = small(ClipLoaderOptions::Mode::train);
    o.segments = segments;
    o.num_frames = segments ? 8 : 6;  // dense 6 x 3 = 18: every video fits; segments: 8 per video
    ClipLoader a = ClipLoader::from_store(d.store, o);
    ClipLoader b = ClipLoader::from_list(d.list, "", ListFormat::videomae, kShort, o);
    expect_same(epoch_of(a), epoch_of(b), segments ? "segments" : "dense");
  }
}

TEST(ClipLoader, EpochsCoverEveryVideoAndReshuffle) {
  Data d;
  ClipLoaderOptions o = small(ClipLoaderOptions::Mode::pretrain);
  o.batch = 3;  // 6 videos: two full batches, nothing dropped
  ClipLoader loader = ClipLoader::from_store(d.store, o);
  EXPECT_EQ(loader.size(), kVideos);
  EXPECT_EQ(loader.batches_per_epoch(), 2);
  std::vector<std::vector<int64_t>> orders;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> order;
    for (const ClipBatch& b : epoch_of(loader)) {
      EXPECT_EQ(b.epoch, e);
      order.insert(order.end(), b.video_index.begin(), b.video_index.end());
      for (size_t i = 0; i < b.labels.size(); ++i) EXPECT_EQ(b.labels[i], b.video_index[i] % 4);
    }
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), size_t(kVideos)) << "epoch " << e;
    orders.push_back(order);
  }
  EXPECT_TRUE(orders[0] != orders[1] || orders[1] != orders[2]) << "the order never changed";
  // drop_last: 6 videos, batch 4 -> one batch; without it two (the last holds 2).
  o.batch = 4;
  ClipLoader dropped = ClipLoader::from_store(d.store, o);
  EXPECT_EQ(epoch_of(dropped).size(), 1u);
  o.drop_last = false;
  ClipLoader kept = ClipLoader::from_store(d.store, o);
  const auto all = epoch_of(kept);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].videos.size(0), 2);
  // No shuffle: list order.
  o.shuffle = false;
  o.batch = 6;
  ClipLoader plain = ClipLoader::from_store(d.store, o);
  EXPECT_EQ(epoch_of(plain)[0].video_index, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

// Data parallel, mode 1: rank r's batch b is rows [r * B, (r + 1) * B) of batch b of one loader
// with batch B x ranks, bit for bit (same videos, frames, crops), and the ranks never read the
// same video in an epoch.
TEST(ClipLoader, SlicesAreRowsOfOneLoadersGlobalBatches) {
  Data d;
  struct Case { int ranks, rank_batch, num_sample; };
  for (const Case c : {Case{3, 1, 1}, Case{2, 2, 1}, Case{2, 2, 2}}) {
    const std::string what = std::to_string(c.ranks) + " ranks x batch " + std::to_string(c.rank_batch) +
                             ", num_sample " + std::to_string(c.num_sample);
    ClipLoaderOptions o = small(ClipLoaderOptions::Mode::train);
    o.num_sample = c.num_sample;
    o.batch = c.rank_batch * c.ranks;
    ClipLoader one = ClipLoader::from_store(d.store, o);
    std::vector<ClipLoader> ranks;
    for (int r = 0; r < c.ranks; ++r) {
      ClipLoaderOptions ro = o;
      ro.batch = c.rank_batch;
      ro.sharding = ClipLoaderOptions::Sharding::slice;
      ro.rank = r, ro.ranks = c.ranks;
      ro.threads = 1 + r % 2;
      ranks.push_back(ClipLoader::from_store(d.store, ro));
    }
    for (int e = 0; e < 2; ++e) {
      const std::vector<ClipBatch> global = epoch_of(one);
      std::vector<std::vector<ClipBatch>> parts;
      for (ClipLoader& l : ranks) parts.push_back(epoch_of(l));
      std::set<int64_t> read_by_rank[3];
      for (int r = 0; r < c.ranks; ++r) {
        ASSERT_EQ(parts[size_t(r)].size(), global.size()) << what << ": every rank takes the global batch count";
        EXPECT_EQ(ranks[size_t(r)].batches_per_epoch(), one.batches_per_epoch()) << what;
      }
      for (size_t b = 0; b < global.size(); ++b) {
        const ClipBatch& g = global[b];
        const int64_t row = g.videos.numel() / g.videos.size(0);
        for (int r = 0; r < c.ranks; ++r) {
          const ClipBatch& p = parts[size_t(r)][b];
          ASSERT_EQ(p.videos.size(0), c.rank_batch) << what;
          const int64_t at = int64_t(r) * c.rank_batch;
          EXPECT_EQ(0, std::memcmp(p.videos.data<float>(), g.videos.data<float>() + at * row,
                                   size_t(c.rank_batch * row) * sizeof(float)))
              << what << ", epoch " << e << ", batch " << b << ", rank " << r;
          for (int64_t i = 0; i < c.rank_batch; ++i) {
            EXPECT_EQ(p.video_index[size_t(i)], g.video_index[size_t(at + i)]) << what;
            EXPECT_EQ(p.labels[size_t(i)], g.labels[size_t(at + i)]) << what;
            read_by_rank[r].insert(p.video_index[size_t(i)]);
          }
        }
      }
      for (int r = 0; r < c.ranks; ++r)
        for (int q = r + 1; q < c.ranks; ++q)
          for (int64_t v : read_by_rank[r]) EXPECT_EQ(read_by_rank[q].count(v), 0u) << what << ": video " << v << " on two ranks";
    }
  }
  ClipLoaderOptions bad = small(ClipLoaderOptions::Mode::train);
  bad.sharding = ClipLoaderOptions::Sharding::slice;
  bad.ranks = 2, bad.rank = 0, bad.batch = 3, bad.num_sample = 2;
  EXPECT_NE(error_of([&] { ClipLoader::from_store(d.store, bad); }).find("not a multiple of num_sample"), std::string::npos);
  bad.batch = 4, bad.num_sample = 1;
  EXPECT_NE(error_of([&] { ClipLoader::from_store(d.store, bad); }).find("no full global batch"), std::string::npos)
      << "6 videos, 2 ranks x 4";
}

// Data parallel, mode 2: a rank holding fewer videos than the largest rank visits max(counts) per
// epoch, each of its videos floor(max / n) or one more times; the rank with most reads each once.
TEST(ClipLoader, ResampleToEqualCounts) {
  Data d;
  ClipLoaderOptions o = small(ClipLoaderOptions::Mode::pretrain);
  o.batch = 3;
  o.sharding = ClipLoaderOptions::Sharding::resample;
  o.ranks = 2, o.rank = 0;
  o.rank_counts = {kVideos, 14};  // this rank holds the store's 6; the other 14
  ClipLoader small_rank = ClipLoader::from_store(d.store, o);
  EXPECT_EQ(small_rank.batches_per_epoch(), 4) << "14 videos a epoch, batches of 3, drop_last";
  std::vector<int64_t> seen_first;
  for (int e = 0; e < 2; ++e) {
    std::map<int64_t, int> times;
    std::vector<int64_t> order;
    for (const ClipBatch& b : epoch_of(small_rank))
      for (int64_t v : b.video_index) ++times[v], order.push_back(v);
    EXPECT_EQ(order.size(), 12u);
    int64_t total = 0;
    for (const auto& [v, n] : times) {
      EXPECT_TRUE(v >= 0 && v < kVideos);
      EXPECT_LE(n, 3) << "video " << v;  // 14 entries over 6 videos: 2 or 3 each, 12 of them used
      total += n;
    }
    EXPECT_EQ(total, 12);
    if (e == 0) seen_first = order;
    else EXPECT_NE(order, seen_first) << "epochs reshuffle";
  }
  o.rank_counts = {kVideos, 3};  // the largest rank: each of its videos once
  ClipLoader big_rank = ClipLoader::from_store(d.store, o);
  std::map<int64_t, int> once;
  for (const ClipBatch& b : epoch_of(big_rank))
    for (int64_t v : b.video_index) ++once[v];
  EXPECT_EQ(once.size(), size_t(kVideos));
  for (const auto& [v, n] : once) EXPECT_EQ(n, 1) << "video " << v;
  o.rank_counts = {5, 14};
  EXPECT_NE(error_of([&] { ClipLoader::from_store(d.store, o); }).find("rank_counts"), std::string::npos);
}

TEST(ClipLoader, BadVideosSkippedCountedOrStrict) {
  Data d;
  const std::string list = d.dir.file("mixed.txt");
  {
    std::ofstream f(list);
    f << d.videos[0] << " 0\n" << d.dir.file("missing.mp4") << " 1\n";
    std::ofstream(d.dir.file("empty.webm")).close();
    f << d.dir.file("empty.webm") << " 2\n" << d.videos[3] << " 3\n";
  }
  ClipLoaderOptions o = small(ClipLoaderOptions::Mode::train);
  o.batch = 2;
  ClipLoader train = ClipLoader::from_list(list, "", ListFormat::videomae, kShort, o);
  for (int e = 0; e < 2; ++e)
    for (const ClipBatch& b : epoch_of(train))
      for (const int64_t v : b.video_index) EXPECT_TRUE(v == 0 || v == 3) << "row from bad video " << v;
  const LoaderTimes t = train.times();
  EXPECT_EQ(t.skipped.total(), 2);
  EXPECT_EQ(t.skipped.counts[size_t(BadVideoReason::missing)], 1);
  EXPECT_EQ(t.skipped.counts[size_t(BadVideoReason::zero_length)], 1);
  EXPECT_EQ(t.clips, 2 * 4);  // replaced, not dropped: every epoch still has 4 rows
  // Test mode: the bad videos' rows are left out.
  o.mode = ClipLoaderOptions::Mode::test;
  o.test_crops = 2;
  o.batch = 3;
  ClipLoader test = ClipLoader::from_list(list, "", ListFormat::videomae, kShort, o);
  std::vector<int64_t> seen;
  for (const ClipBatch& b : epoch_of(test)) {
    EXPECT_EQ(b.videos.size(0), int64_t(b.video_index.size()));
    seen.insert(seen.end(), b.video_index.begin(), b.video_index.end());
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 0, 3, 3}));
  // strict: an Error from next() naming the file.
  o.mode = ClipLoaderOptions::Mode::train;
  o.strict = true;
  o.shuffle = false;
  ClipLoader strict = ClipLoader::from_list(list, "", ListFormat::videomae, kShort, o);
  const std::string m = error_of([&] { epoch_of(strict); });
  EXPECT_TRUE(m.find("missing.mp4") != std::string::npos || m.find("empty.webm") != std::string::npos) << m;
  EXPECT_NE(m.find("strict"), std::string::npos) << m;
}

// A list read directly applies prepare-video's rule (check_video_integrity): a WebM cut in half
// still has complete frames to sample, but it is skipped as truncated (strict: an Error), unless
// keep_truncated.
TEST(ClipLoader, ListAppliesPrepareVideosWholeVideoRule) {
  Data d;
  std::ifstream in(d.videos[0], std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string cut = d.dir.file("cut.webm");
  std::ofstream(cut, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
  const std::string list = d.dir.file("cut.txt");
  {
    std::ofstream f(list);
    f << d.videos[1] << " 1\n" << cut << " 0\n" << d.videos[3] << " 3\n";
  }
  ClipLoaderOptions o = small(ClipLoaderOptions::Mode::train);
  o.batch = 3;
  o.num_frames = 2;  // the cut file's complete frames are enough for a clip
  o.sampling_rate = 1;
  ClipLoader train = ClipLoader::from_list(list, "", ListFormat::videomae, kShort, o);
  for (const ClipBatch& b : epoch_of(train))
    for (const int64_t v : b.video_index) EXPECT_NE(v, 1) << "a row from the cut file";
  const LoaderTimes t = train.times();
  EXPECT_EQ(t.skipped.total(), 1);
  EXPECT_EQ(t.skipped.counts[size_t(BadVideoReason::truncated)], 1) << t.skipped.summary();
  ASSERT_EQ(t.skipped.examples.size(), 1u);
  EXPECT_NE(t.skipped.examples[0].find("cut.webm: truncated: the frames end"), std::string::npos)
      << t.skipped.examples[0];
  // The very same verdict prepare-video gives.
  const std::string prepared = error_of([&] {
    PrepareOptions p;
    p.list = list;
    p.out = d.dir.file("cut.ucs");
    p.strict = true;
    prepare_clip_store(p);
  });
  EXPECT_NE(prepared.find(t.skipped.examples[0]), std::string::npos) << prepared;
  // strict: an Error from next().
  o.strict = true;
  ClipLoader strict = ClipLoader::from_list(list, "", ListFormat::videomae, kShort, o);
  const std::string m = error_of([&] { epoch_of(strict); });
  EXPECT_NE(m.find("cut.webm: truncated"), std::string::npos) << m;
  EXPECT_NE(m.find("strict"), std::string::npos) << m;
  // keep_truncated: its complete frames are used.
  o.strict = false;
  o.keep_truncated = true;
  ClipLoader keep = ClipLoader::from_list(list, "", ListFormat::videomae, kShort, o);
  std::set<int64_t> seen;
  for (const ClipBatch& b : epoch_of(keep)) seen.insert(b.video_index.begin(), b.video_index.end());
  EXPECT_EQ(keep.times().skipped.total(), 0);
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1, 2}));
}

TEST(ClipLoader, EarlyDestructionReturnsPromptly) {
  Data d;
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < 3; ++k) {
    ClipLoaderOptions o = small(ClipLoaderOptions::Mode::train);
    o.threads = 3;
    o.queue_depth = 1;
    o.batch = 1;
    ClipLoader l = k == 0 ? ClipLoader::from_store(d.store, o)
                          : ClipLoader::from_list(d.list, "", ListFormat::videomae, kShort, o);
    ClipBatch b;
    if (k < 2) EXPECT_TRUE(l.next(b));  // k == 2: destroyed before any batch
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0);
}

TEST(ClipLoader, OptionErrors) {
  Data d;
  ClipLoaderOptions o = small(ClipLoaderOptions::Mode::train);
  o.batch = 7;  // 6 videos, drop_last: no full batch
  EXPECT_NE(error_of([&] { ClipLoader::from_store(d.store, o); }).find("no full batch"), std::string::npos);
  o = small(ClipLoaderOptions::Mode::train);
  o.num_frames = 0;
  EXPECT_NE(error_of([&] { ClipLoader::from_store(d.store, o); }).find("num_frames"), std::string::npos);
  // A store that keeps every 2nd frame needs an even dense rate.
  PrepareOptions p;
  p.list = d.list;
  p.out = d.dir.file("s2.ucs");
  p.short_side = kShort;
  p.frame_stride = 2;
  prepare_clip_store(p);
  o = small(ClipLoaderOptions::Mode::train);
  o.sampling_rate = 3;
  EXPECT_NE(error_of([&] { ClipLoader::from_store(p.out, o); }).find("frame stride 2"), std::string::npos);
  o.sampling_rate = 4;
  ClipLoader ok = ClipLoader::from_store(p.out, o);
  ClipBatch b;
  EXPECT_TRUE(ok.next(b));
  EXPECT_NE(error_of([&] { ClipLoader::from_store(d.dir.file("nope.ucs"), o); }).find("nope.ucs"), std::string::npos);
}

TEST(ClipLoader, SegmentTestIndices) {
  SampleRng rng(1);
  for (const int64_t n : {5, 16, 37, 300})
    EXPECT_EQ(segment_test_indices(n, 8, 0, 1), segment_indices(n, 8, false, rng)) << n;
  // Two views: quarter and three-quarter points of each segment of 10 frames.
  EXPECT_EQ(segment_test_indices(40, 4, 0, 2), (std::vector<int64_t>{2, 12, 22, 32}));
  EXPECT_EQ(segment_test_indices(40, 4, 1, 2), (std::vector<int64_t>{7, 17, 27, 37}));
}

}  // namespace
}  // namespace unmask::video
