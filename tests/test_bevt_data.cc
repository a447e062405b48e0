// tests/test_bevt_data.cc: BEVT's input streams (data/video/bevt_data.h) and its FLOP count
// (models/bevt/flops.h): the Lanczos copy against OpenCV, the synthetic source as a pure function
// of (seed, sample index), the masks' grid, and the analytic counts against the reference's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "data/video/bevt_data.h"
#include "data/video/synthetic.h"
#include "jpeg_test_util.h"
#include "io/npy.h"
#include "models/bevt/flops.h"
#include "python_reference.h"
#include "temp_dir.h"

namespace unmask {
namespace {

using test::python_has;
using test::TempDir;
using test::run_python_reference;

// Lanczos-4 as cv2.resize computes it (BEVT's 224 -> 112 copy and other factors): OpenCV's
// uint8 result exactly.
TEST(BevtData, LanczosCopyMatchesOpenCv) {
  if (!python_has("cv2, numpy")) GTEST_SKIP() << "/usr/bin/python3 has no cv2 (python3-opencv) or numpy";
  std::mt19937 gen(5);
  struct Case { int h, w, oh, ow; };
  for (const Case c : {Case{64, 64, 32, 32}, Case{56, 40, 28, 20}, Case{30, 50, 45, 20}}) {
    TempDir tmp;
    const std::string dir = tmp.path.string();
    // A smooth picture plus noise and hard edges, so every tap matters.
    Tensor img = Tensor::empty({c.h, c.w, 3}, DType::u8);
    uint8_t* p = static_cast<uint8_t*>(img.raw());
    for (int y = 0; y < c.h; ++y)
      for (int x = 0; x < c.w; ++x)
        for (int ch = 0; ch < 3; ++ch) {
          const double v = 128 + 80 * std::sin(0.3 * x + ch) * std::cos(0.2 * y) + int(gen() % 40) - 20 +
                           ((x / 7 + y / 5) % 2 ? 30 : -30);
          p[(y * c.w + x) * 3 + ch] = uint8_t(std::clamp(v, 0.0, 255.0));
        }
    Tensor size = Tensor::empty({2}, DType::i64);
    size.data<int64_t>()[0] = c.oh, size.data<int64_t>()[1] = c.ow;
    io::write_npy(dir + "/image.npy", img);
    io::write_npy(dir + "/size.npy", size);
    const std::vector<float> ours = video::lanczos4_resize(p, c.h, c.w, c.oh, c.ow);
    ASSERT_EQ(run_python_reference("opencv_resize_reference.py", dir, dir), "");
    const Tensor ref = io::read_npy(dir + "/ref.npy");
    ASSERT_EQ(ref.numel(), int64_t(ours.size()));
    int worst = 0, off = 0;
    for (int y = 0; y < c.oh; ++y)
      for (int x = 0; x < c.ow; ++x)
        for (int ch = 0; ch < 3; ++ch) {
          const int mine = int(ours[(size_t(ch) * c.oh + y) * c.ow + x]);
          const int theirs = static_cast<const uint8_t*>(ref.raw())[(y * c.ow + x) * 3 + ch];
          worst = std::max(worst, std::abs(mine - theirs));
          off += mine != theirs;
        }
    std::printf("[ lanczos4 %dx%d -> %dx%d ] worst %d grey level(s), %d of %d values differ\n", c.h, c.w, c.oh, c.ow,
                worst, off, c.oh * c.ow * 3);
    EXPECT_EQ(worst, 0);
  }
}

// The synthetic source: clips and images are functions of (seed, index), whatever the batch.
TEST(BevtData, SyntheticSamplesAreFunctionsOfTheirIndex) {
  video::BevtDataOptions o;
  o.frames = 4, o.crop = 64, o.seed = 3;
  const video::BevtBatch both = video::synthetic_bevt_batch(o, 5, 2, 11, 3);
  ASSERT_EQ(both.videos.shape(), (Shape{2, 3, 4, 64, 64}));
  ASSERT_EQ(both.video_frames.shape(), (Shape{8, 3, 32, 32}));
  ASSERT_EQ(both.images.shape(), (Shape{3, 3, 64, 64}));
  ASSERT_EQ(both.image_frames.shape(), (Shape{3, 3, 32, 32}));
  ASSERT_EQ(both.video_masks.size(), size_t(2 * 2 * 16));
  ASSERT_EQ(both.image_masks.size(), size_t(3 * 16));
  const video::BevtBatch second = video::synthetic_bevt_batch(o, 6, 1, 13, 1);
  const int64_t clip = 3 * 4 * 64 * 64, image = 3 * 64 * 64;
  EXPECT_EQ(std::memcmp(both.videos.data<float>() + clip, second.videos.data<float>(), clip * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(both.images.data<float>() + 2 * image, second.images.data<float>(), image * sizeof(float)), 0);
  EXPECT_TRUE(std::equal(second.video_masks.begin(), second.video_masks.end(), both.video_masks.begin() + 32));
  EXPECT_TRUE(std::equal(second.image_masks.begin(), second.image_masks.end(), both.image_masks.begin() + 32));
  // Different samples differ; the tokenizer copies are mapped into [0.1, 0.9].
  EXPECT_NE(std::memcmp(both.videos.data<float>(), second.videos.data<float>(), clip * sizeof(float)), 0);
  for (const Tensor* t : {&both.video_frames, &both.image_frames})
    for (int64_t i = 0; i < t->numel(); ++i) {
      ASSERT_GE(t->data<float>()[i], 0.1f - 1e-6f);
      ASSERT_LE(t->data<float>()[i], 0.9f + 1e-6f);
    }
  // Each image mask covers half its 4 x 4 grid (or a little less: BEiT's generator may stop early).
  for (int i = 0; i < 3; ++i) {
    int n = 0;
    for (int k = 0; k < 16; ++k) n += both.image_masks[size_t(i * 16 + k)];
    EXPECT_GE(n, 6);
    EXPECT_LE(n, 8);
  }
}

// Files through the project's decoders: clips from a video list (one entry broken: skipped),
// images from an ImageNet-style folder; samples are functions of (seed, index); labels follow
// the sorted class folders.
TEST(BevtData, ListsAndFoldersThroughTheDecoders) {
  TempDir tmp;
  namespace fs = std::filesystem;
  const fs::path dir = tmp.path;
  std::ofstream list(dir / "videos.txt");
  for (int v = 0; v < 3; ++v) {
    const std::string name = "clip" + std::to_string(v) + ".webm";
    video::encode_rgb_video((dir / name).string(), "vp9", video::render_synthetic_video(1, v, v % 4, 20, 80, 64), 20,
                            80, 64, 12, 4);
    list << name << " " << v % 4 << "\n";
  }
  list << "missing.webm 1\n";  // fails to open: skipped, the next in the order taken instead
  list.close();
  for (const char* cls : {"n02", "n01"})
    for (int k = 0; k < 2; ++k) {
      fs::create_directories(dir / "imgs" / cls);
      test::write_jpeg((dir / "imgs" / cls / ("i" + std::to_string(k) + ".JPEG")).string(),
                       video::render_synthetic_video(2, k + (cls[2] == '2' ? 10 : 0), 0, 1, 72, 64), 72, 64);
    }
  const std::vector<video::ImageEntry> entries = video::read_image_source((dir / "imgs").string());
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].label, 0);  // n01 sorts first
  EXPECT_NE(entries[0].path.find("n01"), std::string::npos);
  EXPECT_EQ(entries[3].label, 1);

  video::BevtDataOptions o;
  o.frames = 4, o.crop = 32, o.frame_interval = 3, o.seed = 9;
  video::BevtSource src(o, (dir / "videos.txt").string(), (dir / "imgs").string());
  EXPECT_EQ(src.videos(), 4);
  EXPECT_EQ(src.image_files(), 4);
  const video::BevtBatch a = src.batch(0, 8, 0, 6);  // two epochs of each: the missing video comes up
  ASSERT_EQ(a.videos.shape(), (Shape{8, 3, 4, 32, 32}));
  ASSERT_EQ(a.images.shape(), (Shape{6, 3, 32, 32}));
  ASSERT_EQ(a.video_masks.size(), size_t(8 * 2 * 4));
  ASSERT_EQ(a.image_masks.size(), size_t(6 * 4));
  EXPECT_GE(src.skipped(), 1);
  video::BevtSource again(o, (dir / "videos.txt").string(), (dir / "imgs").string());
  const video::BevtBatch b = again.batch(5, 1, 4, 1);
  const int64_t clip = 3 * 4 * 32 * 32, image = 3 * 32 * 32;
  EXPECT_EQ(std::memcmp(a.videos.data<float>() + 5 * clip, b.videos.data<float>(), clip * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.images.data<float>() + 4 * image, b.images.data<float>(), image * sizeof(float)), 0);
  // Real content: not constant, and the tokenizer copies inside [0.1, 0.9].
  float lo = 1e9f, hi = -1e9f;
  for (int64_t i = 0; i < a.videos.numel(); ++i) lo = std::min(lo, a.videos.data<float>()[i]), hi = std::max(hi, a.videos.data<float>()[i]);
  EXPECT_GT(hi - lo, 1.0f);
  for (int64_t i = 0; i < a.image_frames.numel(); ++i) {
    ASSERT_GE(a.image_frames.data<float>()[i], 0.1f - 1e-6f);
    ASSERT_LE(a.image_frames.data<float>()[i], 0.9f + 1e-6f);
  }
  // Decoded by 3 threads, or made in the background (prefetch), the batch is the same bytes, the
  // broken entry still skipped; a prefetch of other samples is dropped, not returned.
  video::BevtDataOptions o3 = o;
  o3.workers = 3;
  video::BevtSource par(o3, (dir / "videos.txt").string(), (dir / "imgs").string());
  par.prefetch(0, 8, 0, 6);
  const video::BevtBatch c = par.batch(0, 8, 0, 6);
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.shape() == y.shape() && std::memcmp(x.data<float>(), y.data<float>(), size_t(x.numel()) * 4) == 0;
  };
  EXPECT_TRUE(same(c.videos, a.videos) && same(c.video_frames, a.video_frames)) << "3 workers, prefetched: clips";
  EXPECT_TRUE(same(c.images, a.images) && same(c.image_frames, a.image_frames)) << "3 workers, prefetched: images";
  EXPECT_EQ(c.video_masks, a.video_masks);
  EXPECT_EQ(c.image_masks, a.image_masks);
  EXPECT_GE(par.skipped(), 1);
  par.prefetch(8, 2, 6, 2);
  const video::BevtBatch d = par.batch(5, 1, 4, 1);  // not the prefetched samples
  EXPECT_TRUE(same(d.videos, b.videos) && same(d.images, b.images));
  const video::BevtLoaderStats st = par.stats();
  EXPECT_EQ(st.prefetched, 1);
  EXPECT_EQ(st.batches, 3);  // the dropped prefetch was made too
  EXPECT_EQ(st.clips, 8 + 2 + 1);
  EXPECT_GT(st.make_s, 0.0);
  std::ofstream((dir / "bad.txt").string()) << "a.jpg 0\nb.jpg cat\n";
  try {
    video::read_image_source((dir / "bad.txt").string());
    ADD_FAILURE() << "a list line without a numeric label was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt:2"), std::string::npos) << e.what();
  }
}

// The analytic counts against the reference's (bevt.md 1.7, Swin-B, 16 x 224^2, DALL-E 8192).
TEST(BevtFlops, MatchTheReferenceCounts) {
  const bevt::SwinConfig c = bevt::SwinConfig::preset("base");
  const bevt::DalleEncoderConfig t;  // DALL-E: 4 groups of 2 blocks, 256 wide, 8192 codes
  const bevt::BevtStreamFlops v = bevt::bevt_stream_flops(c, 8192, t, false, 16, 224);
  const bevt::BevtStreamFlops i = bevt::bevt_stream_flops(c, 8192, t, true, 1, 224);
  auto near = [](double got, double want, double tol) { return std::abs(got - want) <= tol; };
  EXPECT_TRUE(near(v.backbone, 281.3e9, 0.1e9)) << v.backbone;  // = 2 x torchvision's 140.67 GMAC
  EXPECT_TRUE(near(v.neck, 14.8e9, 0.1e9)) << v.neck;
  EXPECT_TRUE(near(v.head, 52.6e9, 0.1e9)) << v.head;
  EXPECT_TRUE(near(i.backbone, 30.9e9, 0.1e9)) << i.backbone;
  EXPECT_TRUE(near(i.neck, 1.0e9, 0.1e9)) << i.neck;
  EXPECT_TRUE(near(i.head, 3.3e9, 0.1e9)) << i.head;
  EXPECT_TRUE(near(v.tokenizer, 52.1e9, 0.1e9)) << v.tokenizer;
  const double it = bevt::bevt_iteration_flops(c, 8192, t, 4, 16, 32, 224);  // BS = 8: 4 clips + 32 images
  EXPECT_TRUE(near(it, 12.57e12, 0.01e12)) << it;
  // Masked positions only, 12 of 16 frames tokenized: ~11.0 TFLOP (bevt.md 6).
  const double run = bevt::bevt_step_flops_run(c, 8192, t, 4, 16, 32, 224, 0.375, 0.5, 4 * 12 + 32);
  std::printf("[ bevt flops ] video %.1f + %.1f + %.1f G, image %.1f + %.1f + %.1f G, dVAE %.1f G a frame; "
              "iteration %.2f TF as defined, %.2f TF at the masked positions\n",
              v.backbone / 1e9, v.neck / 1e9, v.head / 1e9, i.backbone / 1e9, i.neck / 1e9, i.head / 1e9,
              v.tokenizer / 1e9, it / 1e12, run / 1e12);
  EXPECT_TRUE(near(run, 11.0e12, 0.15e12)) << run;
}

}  // namespace
}  // namespace unmask
