// tests/test_video_io.cc: video decode (against the ffmpeg CLI), seeking, VideoMAE frame
// sampling, list files, bad inputs, and the synthetic generator behind `unmask make-videos`.
//
// The videos are made by encode_rgb_video / render_synthetic_video at a small size (64x48,
// a few dozen frames) so the whole suite stays well under the time budget. The reference for
// decoded pixels is the `ffmpeg` CLI (a separate program: libavformat's demuxer + the CLI's own
// scale filter) decoding every frame to raw rgb24.
#include <gtest/gtest.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include "io/file.h"
#include "jpeg_test_util.h"
#include "temp_dir.h"
#include "unmask/error.h"
#include "data/video/augment.h"
#include "data/video/clip_store.h"
#include "data/video/decode.h"
#include "data/video/sampling.h"
#include "data/video/synthetic.h"

namespace unmask::video {
namespace {

namespace fs = std::filesystem;

// A temp directory named for this file's tests.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("unmask_video") {}
};

bool have_ffmpeg_cli() { return std::system("ffmpeg -hide_banner -version >/dev/null 2>&1") == 0; }

// Every frame of `path` as raw rgb24 by the ffmpeg CLI (one frame per packet, no rate change).
std::vector<uint8_t> ffmpeg_cli_rgb(const std::string& path, const std::string& extra_filter = "") {
  const std::string out = path + ".rgb";
  const std::string vf = extra_filter.empty() ? "" : " -vf " + extra_filter;
  const std::string cmd = "ffmpeg -hide_banner -loglevel error -y -threads 1 -i " + path + vf +
                          " -fps_mode passthrough -f rawvideo -pix_fmt rgb24 " + out;
  if (std::system(cmd.c_str()) != 0) return {};
  std::ifstream f(out, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

struct Diff { int max = 0; double mean = 0; };
Diff compare(const uint8_t* a, const uint8_t* b, size_t n) {
  Diff d;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const int e = std::abs(int(a[i]) - int(b[i]));
    d.max = std::max(d.max, e);
    sum += e;
  }
  d.mean = n ? sum / double(n) : 0;
  return d;
}

constexpr int kW = 64, kH = 48, kFrames = 30, kFps = 10, kGop = 8;

std::string make_video(const TempDir& dir, const std::string& codec, int label = 1, int frames = kFrames) {
  const std::string path = dir.file(std::string("v_") + codec + "_" + std::to_string(label) +
                                    (codec == "vp9" ? ".webm" : ".mp4"));
  encode_rgb_video(path, codec, render_synthetic_video(7, label, label, frames, kW, kH), frames, kW, kH, kFps, kGop);
  return path;
}

class VideoDecodeCodec : public ::testing::TestWithParam<std::string> {};

TEST_P(VideoDecodeCodec, InfoAndFramesMatchFfmpegCli) {
  TempDir dir;
  const std::string path = make_video(dir, GetParam());
  VideoReader reader(path);
  const VideoInfo& info = reader.info();
  EXPECT_EQ(info.num_frames, kFrames);
  EXPECT_EQ(info.width, kW);
  EXPECT_EQ(info.height, kH);
  EXPECT_NEAR(info.fps, kFps, 1e-6);
  EXPECT_NEAR(info.duration_s, double(kFrames) / kFps, 0.02);
  EXPECT_EQ(info.num_keyframes, (kFrames + kGop - 1) / kGop) << "GOP " << kGop;
  const Clip all = reader.decode_all();
  ASSERT_EQ(all.frames, kFrames);
  if (!have_ffmpeg_cli()) GTEST_SKIP() << "no ffmpeg CLI";
  const std::vector<uint8_t> ref = ffmpeg_cli_rgb(path);
  ASSERT_EQ(ref.size(), all.rgb.size()) << "ffmpeg CLI frame count differs";
  const Diff d = compare(all.rgb.data(), ref.data(), ref.size());
  std::printf("[ %s ] decode vs ffmpeg CLI: max |diff| %d, mean %.4f\n", GetParam().c_str(), d.max, d.mean);
  EXPECT_EQ(d.max, 0) << "same libavcodec, same swscale settings: expected bit-exact";
}

TEST_P(VideoDecodeCodec, SeekedFramesEqualFullDecode) {
  TempDir dir;
  const std::string path = make_video(dir, GetParam());
  VideoReader reader(path);
  const Clip all = reader.decode_all();
  const size_t fb = size_t(kW) * kH * 3;
  // Single frames anywhere (keyframes, mid-GOP, last), out of order, with repeats.
  for (const int64_t k : {int64_t(0), int64_t(kGop), int64_t(kGop + 3), int64_t(kFrames - 1), int64_t(5), int64_t(17)}) {
    VideoReader single(path);
    const Clip c = single.decode({k});
    EXPECT_EQ(0, std::memcmp(c.frame(0), all.frame(k), fb)) << "frame " << k;
    EXPECT_EQ(single.last_stats().seeks, 1);
    EXPECT_LE(single.last_stats().frames_decoded, k % kGop + 1) << "decoded from the keyframe before " << k;
  }
  const std::vector<int64_t> want = {29, 3, 3, 20, 0, 11};
  const Clip c = reader.decode(want);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(0, std::memcmp(c.frame(int64_t(i)), all.frame(want[i]), fb)) << "slot " << i;
  // A sparse clip skips the GOPs it does not touch.
  reader.decode({1, 26});
  EXPECT_EQ(reader.last_stats().seeks, 2);
  EXPECT_EQ(reader.last_stats().frames_decoded, 2 + (26 - 24) + 1);
}

TEST_P(VideoDecodeCodec, ShortSideResizeMatchesFfmpegScale) {
  TempDir dir;
  const std::string path = make_video(dir, GetParam());
  VideoReader reader(path);
  DecodeOptions o;
  o.short_side = 32;
  const Clip c = reader.decode_all(o);
  EXPECT_EQ(c.height, 32);
  EXPECT_EQ(c.width, 42);  // int(32 * 64 / 48)
  if (!have_ffmpeg_cli()) GTEST_SKIP() << "no ffmpeg CLI";
  const std::vector<uint8_t> ref = ffmpeg_cli_rgb(path, "scale=42:32:flags=bicubic");
  ASSERT_EQ(ref.size(), c.rgb.size());
  const Diff d = compare(c.rgb.data(), ref.data(), ref.size());
  std::printf("[ %s ] resized decode vs ffmpeg CLI scale: max |diff| %d, mean %.4f\n", GetParam().c_str(), d.max,
              d.mean);
  EXPECT_LE(d.max, 1);
  EXPECT_LE(d.mean, 0.01);
}

INSTANTIATE_TEST_SUITE_P(Codecs, VideoDecodeCodec, ::testing::Values("vp9", "h264"));

TEST(VideoDecode, TooShortIsAnError) {
  TempDir dir;
  const std::string path = make_video(dir, "vp9", 0, 10);
  VideoReader reader(path);
  try {
    reader.decode({0, 4, 10});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too short"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

void expect_error(const std::string& path, const std::string& fragment) {
  try {
    VideoReader r(path);
    r.decode_all();
    FAIL() << path << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(VideoDecode, BadFilesGiveErrors) {
  TempDir dir;
  expect_error(dir.file("missing.mp4"), "no such file");
  { std::ofstream(dir.file("empty.mp4")); }
  expect_error(dir.file("empty.mp4"), "zero-length");
  { std::ofstream(dir.file("text.mp4")) << "this is not a video, just some text\n"; }
  expect_error(dir.file("text.mp4"), "cannot open");
  // Truncations of a real mp4 and webm at several points: each must be an Error, never a crash.
  for (const std::string codec : {"h264", "vp9"}) {
    const std::string good = make_video(dir, codec);
    std::ifstream f(good, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), {});
    for (const double frac : {0.1, 0.5, 0.9}) {
      const std::string cut = dir.file("cut_" + std::to_string(int(frac * 100)) + "_" + fs::path(good).filename().string());
      std::ofstream(cut, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() * frac));
      try {
        VideoReader r(cut);
        const Clip c = r.decode_all();  // a truncated webm may still hold whole frames: then they decode
        EXPECT_LT(r.info().num_frames, kFrames) << cut;
        EXPECT_EQ(c.frames, r.info().num_frames);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(cut), std::string::npos) << e.what();
      }
    }
    // Corrupted payload bytes (header intact).
    std::string noisy = bytes;
    for (size_t i = noisy.size() / 3; i < noisy.size(); i += 7) noisy[i] = char(noisy[i] ^ 0x5A);
    const std::string bad = dir.file("noisy_" + fs::path(good).filename().string());
    std::ofstream(bad, std::ios::binary).write(noisy.data(), std::streamsize(noisy.size()));
    try {
      VideoReader r(bad);
      r.decode_all();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  {  // Unsupported codec: a webm whose track says "V_QQ9" (no decoder has that codec id).
    const std::string good = make_video(dir, "vp9", 2);
    std::ifstream f(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), {});
    const size_t at = bytes.find("V_VP9");
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, 5, "V_QQ9");
    const std::string odd = dir.file("odd_codec.webm");
    std::ofstream(odd, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    expect_error(odd, "unsupported codec");
  }
  if (!have_ffmpeg_cli()) GTEST_SKIP() << "no ffmpeg CLI";
  const std::string audio = dir.file("audio.m4a");
  ASSERT_EQ(0, std::system(("ffmpeg -hide_banner -loglevel error -y -f lavfi -i sine=frequency=440:duration=0.5 " +
                            audio).c_str()));
  expect_error(audio, "no video stream");
  {  // A faststart mp4 (index first) cut in the middle: the complete frames before the cut decode
     // exactly as from the whole file; asking for later frames names the truncation.
    const std::string good = make_video(dir, "h264", 3);
    const std::string fast = dir.file("fast.mp4");
    ASSERT_EQ(0, std::system(("ffmpeg -hide_banner -loglevel error -y -i " + good + " -c copy -movflags +faststart " +
                              fast).c_str()));
    std::ifstream f(fast, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), {});
    const std::string cut = dir.file("fast_cut.mp4");
    std::ofstream(cut, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() * 6 / 10));
    VideoReader whole(good), part(cut);
    EXPECT_EQ(part.info().container_frames, kFrames);
    ASSERT_GT(part.info().num_frames, 0);
    ASSERT_LT(part.info().num_frames, kFrames);
    const Clip a = whole.decode_all(), b = part.decode_all();
    EXPECT_EQ(0, std::memcmp(a.rgb.data(), b.rgb.data(), b.rgb.size()));
    try {
      part.decode({kFrames - 1});
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    }
  }
  // A codec Debian's libavcodec can encode but that we still decode fine is no test of
  // "unsupported"; an image-only stream (a PNG) must be handled as a one-frame video.
  const std::string png = dir.file("one.png");
  ASSERT_EQ(0, std::system(("ffmpeg -hide_banner -loglevel error -y -f lavfi -i color=c=red:s=16x16 -frames:v 1 " +
                            png).c_str()));
  VideoReader r(png);
  EXPECT_EQ(r.info().num_frames, 1);
  const Clip c = r.decode({0});
  EXPECT_GE(c.frame(0)[0], 250);  // red after the RGB -> yuv -> RGB round trip
  EXPECT_LE(c.frame(0)[1], 5);
}

// `bytes` with `n` bytes from the middle on overwritten by a fixed pseudo-random sequence (the
// same on every platform: mt19937's output is specified).
std::string damage_middle(std::string bytes, size_t n, uint32_t seed = 2024) {
  std::mt19937 rng(seed);
  const size_t at = bytes.size() / 2 - std::min(bytes.size() / 2, n / 2);
  for (size_t i = at; i < std::min(bytes.size(), at + n); ++i) bytes[i] = char(rng() & 0xFF);
  return bytes;
}

std::string reason_of(const VideoInfo& info, bool keep_truncated = false) {
  try {
    check_video_integrity(info, keep_truncated);
    return "whole";
  } catch (const Error& e) {
    return bad_video_reason_name(classify_video_error(e.what()));
  }
}

// What VideoInfo says about the time line of a whole, a cut and a damaged file (WebM stores no
// frame count, so this is all there is to catch them), and check_video_integrity's verdict.
TEST(VideoDecode, TimelineTellsWholeCutAndDamagedFilesApart) {
  TempDir dir;
  for (const std::string codec : {"vp9", "h264"}) {
    const std::string good = make_video(dir, codec, 3);
    const VideoReader whole(good);
    const VideoInfo& w = whole.info();
    const double interval = 1.0 / kFps, length = kFrames * interval;
    EXPECT_NEAR(w.frame_interval_s, interval, 1e-3) << good;
    EXPECT_NEAR(w.container_duration_s, length, 0.5 * interval) << good;
    EXPECT_LT(std::abs(w.missing_end_s), 0.5 * interval) << good;
    EXPECT_EQ(w.gaps, 0) << good;
    EXPECT_EQ(w.read_error, "") << good;
    EXPECT_LE(w.unread_bytes, w.largest_packet) << good;
    EXPECT_EQ(reason_of(w), "whole") << good;
    if (codec != "vp9") continue;  // a cut MP4 (index at the end) does not open; mp4 below
    std::ifstream f(good, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), {});
    // Cut in half: the container still says 3 s, the frames end about half way, and the file
    // ends right after the last packet read.
    const std::string cut = dir.file("half.webm");
    std::ofstream(cut, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
    const VideoReader part(cut);
    const VideoInfo& c = part.info();
    EXPECT_GT(c.num_frames, 0);
    EXPECT_LT(c.num_frames, kFrames);
    EXPECT_NEAR(c.container_duration_s, length, 0.5 * interval) << cut;
    EXPECT_NEAR(c.missing_end_s, double(kFrames - c.num_frames) * interval, 0.5 * interval) << cut;
    EXPECT_LE(c.unread_bytes, c.largest_packet + kWholeVideoSlackBytes) << cut;
    EXPECT_EQ(reason_of(c), "truncated") << cut;
    EXPECT_EQ(reason_of(c, /*keep_truncated=*/true), "whole") << cut;
    // Damaged in the middle: the demuxer skips to the next cluster (a gap) or gives up with
    // much of the file unread (Matroska calls both a plain end of file). Corrupt, even when
    // keeping truncated files.
    const std::string bad = dir.file("damaged.webm");
    const std::string damaged = damage_middle(bytes, bytes.size() / 8);
    std::ofstream(bad, std::ios::binary).write(damaged.data(), std::streamsize(damaged.size()));
    const VideoReader hurt(bad);
    const VideoInfo& d = hurt.info();
    EXPECT_LT(d.num_frames, kFrames) << bad;
    EXPECT_TRUE(d.gaps > 0 || d.unread_bytes > d.largest_packet + kWholeVideoSlackBytes)
        << bad << ": " << d.gaps << " gaps, " << d.unread_bytes << " bytes unread";
    EXPECT_EQ(reason_of(d), "corrupt") << bad;
    EXPECT_EQ(reason_of(d, /*keep_truncated=*/true), "corrupt") << bad;
  }
}

// ---- sampling ----------------------------------------------------------------------------------

TEST(VideoSampling, DenseLongVideoWindow) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SampleRng rng(seed);
    const auto idx = dense_indices(300, 16, 4, rng);
    ASSERT_EQ(idx.size(), 16u);
    const int64_t start = idx[0];
    // linspace(start, start + 64, 16): step 64/15, truncated.
    for (int i = 0; i < 16; ++i) EXPECT_EQ(idx[size_t(i)], std::min(start + int64_t(64.0 * i / 15), start + 63)) << i;
    EXPECT_GE(start, 0);
    EXPECT_LE(start + 63, 299);
  }
  // Starts cover the whole range [0, n - L - 1].
  std::set<int64_t> starts;
  SampleRng rng(3);
  for (int i = 0; i < 2000; ++i) starts.insert(dense_indices(80, 4, 4, rng)[0]);  // span 16: start in [0, 63]
  EXPECT_EQ(starts.size(), 64u);
  EXPECT_EQ(*starts.begin(), 0);
  EXPECT_EQ(*starts.rbegin(), 63);
}

TEST(VideoSampling, DenseShortVideoRepeatsLastFrame) {
  SampleRng rng(1);
  // n = 30 <= 16*4: linspace(0, 30, 7) = 0,5,10,15,20,25,30 -> clipped 29, then 29 x 9.
  const std::vector<int64_t> want = {0, 5, 10, 15, 20, 25, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29};
  EXPECT_EQ(dense_indices(30, 16, 4, rng), want);
  EXPECT_EQ(dense_indices(3, 4, 4, rng), (std::vector<int64_t>{2, 2, 2, 2}));  // 3/4 = 0 spread frames
  EXPECT_EQ(dense_indices(64, 16, 4, rng).back(), 63);
}

TEST(VideoSampling, DenseTestViewsAreEvenlySpaced) {
  EXPECT_EQ(dense_test_indices(100, 4, 4, 0, 3), (std::vector<int64_t>{0, 5, 10, 15}));   // 16/3 steps
  EXPECT_EQ(dense_test_indices(100, 4, 4, 1, 3), (std::vector<int64_t>{42, 47, 52, 57}));
  EXPECT_EQ(dense_test_indices(100, 4, 4, 2, 3), (std::vector<int64_t>{84, 89, 94, 99}));
}

TEST(VideoSampling, SegmentsTsn) {
  EXPECT_EQ(segment_indices(40, 4, false, *std::make_unique<SampleRng>(0)), (std::vector<int64_t>{5, 15, 25, 35}));
  EXPECT_EQ(segment_indices(10, 4, false, *std::make_unique<SampleRng>(0)), (std::vector<int64_t>{1, 3, 6, 8}));
  SampleRng rng(5);
  for (int r = 0; r < 100; ++r) {
    const auto idx = segment_indices(43, 4, true, rng);  // segments of 10: [0,10) [10,20) [20,30) [30,40)
    for (int i = 0; i < 4; ++i) {
      EXPECT_GE(idx[size_t(i)], 10 * i);
      EXPECT_LT(idx[size_t(i)], 10 * i + 10);
    }
  }
  const auto few = segment_indices(6, 4, true, rng);  // avg 1: one frame per segment = 0..3
  EXPECT_EQ(few, (std::vector<int64_t>{0, 1, 2, 3}));
  const auto tiny = segment_indices(3, 4, true, rng);
  EXPECT_EQ(tiny, (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(VideoSampling, DeterministicBySeed) {
  SampleRng a(42), b(42), c(43);
  const auto x = dense_indices(1000, 16, 4, a), y = dense_indices(1000, 16, 4, b), z = dense_indices(1000, 16, 4, c);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
}

// ---- list files ---------------------------------------------------------------------------------

TEST(VideoList, BothFormats) {
  auto a = parse_video_list("a/b c.mp4 3\n\nx.webm 0\r\n", "l.txt", ListFormat::videomae, "/data");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].path, "/data/a/b c.mp4");
  EXPECT_EQ(a[0].label, 3);
  EXPECT_EQ(a[1].path, "/data/x.webm");
  auto b = parse_video_list("/abs/v,1.mp4,7\nrel.mp4, 2\n", "l.csv", ListFormat::vswift, "/data");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].path, "/abs/v,1.mp4");
  EXPECT_EQ(b[0].label, 7);
  EXPECT_EQ(b[1].path, "/data/rel.mp4");
  EXPECT_EQ(b[1].label, 2);
  EXPECT_EQ(parse_video_list("p.mp4,5\n", "l.csv", ListFormat::automatic)[0].label, 5);
  EXPECT_EQ(parse_video_list("p.mp4 5\n", "l.txt", ListFormat::automatic)[0].label, 5);
}

TEST(VideoList, ErrorsNameFileAndLine) {
  auto expect = [](const std::string& text, ListFormat f, const std::string& where) {
    try {
      parse_video_list(text, "list.txt", f);
      FAIL() << "no error for '" << text << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
  };
  expect("a.mp4 1\nb.mp4\n", ListFormat::videomae, "list.txt:2");
  expect("a.mp4 1\n\nb.mp4 x\n", ListFormat::videomae, "list.txt:3");
  expect("a.mp4 -1\n", ListFormat::videomae, "list.txt:1");
  expect("a.mp4 1\n", ListFormat::vswift, "list.txt:1");  // space-separated given as V-SWIFT
  expect("a.mp4,1.5\n", ListFormat::vswift, "list.txt:1");
  expect(",3\n", ListFormat::vswift, "list.txt:1");
  EXPECT_THROW(read_video_list("/nonexistent/list.txt", ListFormat::videomae), Error);
}

// ---- synthetic dataset --------------------------------------------------------------------------

TEST(VideoSynthetic, DatasetListsDecodeAndDeterminism) {
  TempDir dir;
  SyntheticOptions o;
  o.output_dir = dir.file("ds");
  o.codec = "both";
  o.videos_per_class = 2;
  o.val_fraction = 0.5;
  o.frames = 12;
  o.width = 64;
  o.height = 48;
  const SyntheticReport r = make_synthetic_dataset(o);
  EXPECT_EQ(r.train_videos, 4);
  EXPECT_EQ(r.val_videos, 4);
  ASSERT_EQ(r.list_files.size(), 5u);  // train/val x VideoMAE/V-SWIFT, and classes.txt
  EXPECT_EQ(io::read_file(o.output_dir + "/classes.txt"), "left\nright\nup\ndown\n");
  const auto train_a = read_video_list(o.output_dir + "/train_videomae.txt", ListFormat::videomae);
  const auto train_b = read_video_list(o.output_dir + "/train_vswift.csv", ListFormat::vswift);
  ASSERT_EQ(train_a.size(), 4u);
  std::set<int64_t> labels;
  for (size_t i = 0; i < train_a.size(); ++i) {
    EXPECT_EQ(train_a[i].path, train_b[i].path);
    EXPECT_EQ(train_a[i].label, train_b[i].label);
    labels.insert(train_a[i].label);
    VideoReader v(train_a[i].path);
    EXPECT_EQ(v.info().num_frames, 12);
    EXPECT_EQ(v.info().codec, i % 2 == 0 ? "vp9" : "h264");  // "both" alternates
  }
  EXPECT_EQ(labels.size(), 4u);
  // Same seed, same pixels, and byte-identical files.
  SyntheticOptions again = o;
  again.output_dir = dir.file("ds2");
  make_synthetic_dataset(again);
  for (const auto& e : train_a) {
    auto slurp = [](const std::string& p) {
      std::ifstream f(p, std::ios::binary);
      return std::string((std::istreambuf_iterator<char>(f)), {});
    };
    EXPECT_EQ(slurp(e.path), slurp(again.output_dir + "/" + fs::path(e.path).filename().string())) << e.path;
  }
  EXPECT_EQ(render_synthetic_video(9, 3, 2, 4, 32, 24), render_synthetic_video(9, 3, 2, 4, 32, 24));
  EXPECT_NE(render_synthetic_video(9, 3, 2, 4, 32, 24), render_synthetic_video(10, 3, 2, 4, 32, 24));
}

// The decoded motion goes the way the label says: the shapes (the only pixels brighter than
// lum 390: shapes have every channel >= 140, blobs <= 140, backgrounds <= 90) of frame 1 overlap
// those of frame 0 best under a circular shift (they wrap around the edges) along the label's
// direction (checked on decoded frames, so it also holds after encoding).
TEST(VideoSynthetic, MotionFollowsLabel) {
  TempDir dir;
  for (int label = 0; label < kSyntheticClasses; ++label) {
    const std::string path = dir.file("m" + std::to_string(label) + ".mp4");
    const int W = 96, H = 72, T = 6;
    encode_rgb_video(path, "h264", render_synthetic_video(11, label, label, T, W, H), T, W, H, 10, 4);
    VideoReader r(path);
    const Clip c = r.decode({0, 1});
    auto shape = [&](int t, int y, int x) {
      const uint8_t* p = c.frame(t) + 3 * (y * W + x);
      return p[0] + p[1] + p[2] > 390;
    };
    int best = -1, best_dx = 0, best_dy = 0;
    for (int dy = -20; dy <= 20; ++dy)
      for (int dx = -20; dx <= 20; ++dx) {
        int overlap = 0;
        for (int y = 0; y < H; ++y)
          for (int x = 0; x < W; ++x) overlap += shape(1, (y + dy + H) % H, (x + dx + W) % W) && shape(0, y, x);
        if (overlap > best) best = overlap, best_dx = dx, best_dy = dy;
      }
    ASSERT_GT(best, 20) << label;
    const int along = label < 2 ? best_dx : best_dy, across = label < 2 ? best_dy : best_dx;
    const int sign = label % 2 == 0 ? -1 : 1;  // left and up move towards smaller x or y
    EXPECT_GE(sign * along, 3) << "label " << label << " motion (" << best_dx << ", " << best_dy << ")";
    EXPECT_EQ(across, 0) << "label " << label << " motion (" << best_dx << ", " << best_dy << ")";
  }
}


// ---- augmentation --------------------------------------------------------------------------------

Clip random_clip(int64_t T, int H, int W, uint64_t seed) {
  Clip c;
  c.frames = T; c.height = H; c.width = W;
  c.rgb.resize(size_t(T * H * W * 3));
  SampleRng rng(seed);
  for (auto& v : c.rgb) v = uint8_t(rng.below(256));
  return c;
}

TEST(VideoAugment, MultiScaleCropSizesAndOffsets) {
  AugmentOptions o;  // 224, scales {1, .875, .75, .66}, max_distort 1
  // 320x240: base 240 -> sizes 240, 210, 180, 158 (none within 3 of 224): 4 + 3 + 3 = 10 pairs.
  const auto pairs = multiscale_crop_sizes(320, 240, o);
  const std::vector<std::pair<int, int>> want = {{240, 240}, {210, 240}, {240, 210}, {210, 210}, {180, 210},
                                                 {210, 180}, {180, 180}, {158, 180}, {180, 158}, {158, 158}};
  EXPECT_EQ(pairs, want);
  // 256 short side: 256*.875 = 224 exactly, 192, 168; 256 stays.
  EXPECT_EQ(multiscale_crop_sizes(256, 340, o)[3], (std::pair<int, int>{224, 224}));
  AugmentOptions snap; snap.input_size = 226;  // |224 - 226| < 3 snaps to 226
  EXPECT_EQ(multiscale_crop_sizes(256, 256, snap)[3], (std::pair<int, int>{226, 226}));
  // Offsets for a 240x240 crop of 320x240: steps (20, 0).
  const auto off = fixed_crop_offsets(320, 240, 240, 240, true);
  ASSERT_EQ(off.size(), 13u);
  EXPECT_EQ(off[1], (std::pair<int, int>{80, 0}));
  EXPECT_EQ(off[4], (std::pair<int, int>{40, 0}));
  EXPECT_EQ(off[12], (std::pair<int, int>{60, 0}));
  EXPECT_EQ(fixed_crop_offsets(320, 240, 158, 180, false).size(), 5u);
  // Sampling reaches every pair and stays inside the frame.
  SampleRng rng(8);
  std::set<std::pair<int, int>> seen;
  for (int i = 0; i < 2000; ++i) {
    const CropBox b = sample_multiscale_crop(320, 240, o, rng);
    seen.insert({b.width, b.height});
    ASSERT_GE(b.x, 0); ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.width, 320); ASSERT_LE(b.y + b.height, 240);
  }
  EXPECT_EQ(seen.size(), want.size());
}

TEST(VideoAugment, CropResizeNormalizeMatchesFloat64) {
  const Clip c = random_clip(3, 37, 53, 77);
  AugmentOptions o;
  for (const bool flip : {false, true})
    for (const CropBox box : {CropBox{0, 0, 53, 37}, CropBox{5, 3, 30, 29}, CropBox{20, 10, 33, 27}})
      for (const int S : {16, 29, 40}) {
        const auto fast = crop_resize_normalize(c, box, S, flip, o.mean, o.std);
        const auto ref = crop_resize_normalize_reference(c, box, S, flip, o.mean, o.std);
        ASSERT_EQ(fast.size(), ref.size());
        double worst = 0;
        for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(double(fast[i]) - ref[i]));
        EXPECT_LT(worst, 2e-5) << "flip " << flip << " S " << S << " box " << box.x << "," << box.y;
      }
  // Identity geometry: a crop the size of the output copies pixels; normalisation by hand.
  const auto id = crop_resize_normalize(c, CropBox{4, 2, 16, 16}, 16, false, o.mean, o.std);
  const int64_t T = 3;
  for (int64_t t = 0; t < T; ++t)
    for (int y = 0; y < 16; ++y)
      for (int x = 0; x < 16; ++x)
        for (int ch = 0; ch < 3; ++ch) {
          const double p = c.frame(t)[((2 + y) * 53 + 4 + x) * 3 + ch];
          ASSERT_NEAR(id[size_t(((ch * T + t) * 16 + y) * 16 + x)], (p / 255.0 - o.mean[ch]) / o.std[ch], 1e-5);
        }
  // Flip mirrors columns exactly.
  const auto fl = crop_resize_normalize(c, CropBox{4, 2, 16, 16}, 16, true, o.mean, o.std);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) ASSERT_EQ(fl[size_t(y * 16 + x)], id[size_t(y * 16 + 15 - x)]);
  // Bad boxes are Errors.
  EXPECT_THROW(crop_resize_normalize(c, CropBox{40, 0, 20, 10}, 8, false, o.mean, o.std), Error);
}

TEST(VideoAugment, TestCropBoxes) {
  auto xy = [](const std::vector<CropBox>& b) {
    std::vector<std::pair<int, int>> r;
    for (const CropBox& c : b) r.emplace_back(c.x, c.y);
    return r;
  };
  // 298x224 (a 320x240 video resized to short side 224): 3 crops at x = 0, 37, 74.
  EXPECT_EQ(xy(test_crop_boxes(298, 224, 224, 3)), (std::vector<std::pair<int, int>>{{0, 0}, {37, 0}, {74, 0}}));
  EXPECT_EQ(xy(test_crop_boxes(224, 300, 224, 3)), (std::vector<std::pair<int, int>>{{0, 0}, {0, 38}, {0, 76}}));
  EXPECT_EQ(xy(test_crop_boxes(341, 256, 224, 1)), (std::vector<std::pair<int, int>>{{58, 16}}));
  EXPECT_THROW(test_crop_boxes(200, 300, 224, 3), Error);
}

TEST(VideoAugment, AugmentClipShapeAndDeterminism) {
  const Clip c = random_clip(2, 48, 64, 5);
  AugmentOptions o;
  o.input_size = 32;
  o.flip = true;
  SampleRng a(3), b(3);
  const auto x = augment_clip(c, o, a), y = augment_clip(c, o, b);
  EXPECT_EQ(x.size(), size_t(3 * 2 * 32 * 32));
  EXPECT_EQ(x, y);
}


// ---- JPEG frame folders --------------------------------------------------------------------------

using test::write_jpeg;

TEST(VideoFrames, JpegFolderDecodesResizesAndFails) {
  TempDir dir;
  const int W = 40, H = 30, T = 5;
  fs::create_directories(dir.path / "f");
  std::vector<std::vector<uint8_t>> frames;
  for (int t = 0; t < T; ++t) {  // smooth gradients: quality-100 4:4:4 JPEG is near lossless on them
    std::vector<uint8_t> rgb(size_t(W * H * 3));
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        rgb[size_t((y * W + x) * 3 + 0)] = uint8_t(4 * x + 10 * t);
        rgb[size_t((y * W + x) * 3 + 1)] = uint8_t(6 * y);
        rgb[size_t((y * W + x) * 3 + 2)] = uint8_t(200 - 3 * x - 2 * y);
      }
    char name[32];
    std::snprintf(name, sizeof(name), "img_%05d.jpg", t + 1);
    write_jpeg((dir.path / "f" / name).string(), rgb, W, H);
    frames.push_back(rgb);
  }
  FrameFolderReader r(dir.file("f"));
  EXPECT_EQ(r.info().num_frames, T);
  EXPECT_EQ(r.info().width, W);
  EXPECT_EQ(r.info().height, H);
  const Clip c = r.decode({4, 0, 0, 2});
  for (const auto& [slot, k] : std::vector<std::pair<int, int>>{{0, 4}, {1, 0}, {2, 0}, {3, 2}}) {
    const Diff d = compare(c.frame(slot), frames[size_t(k)].data(), frames[size_t(k)].size());
    EXPECT_LE(d.max, 4) << "frame " << k;
    EXPECT_LE(d.mean, 1.0) << "frame " << k;
  }
  DecodeOptions o;
  o.short_side = 15;
  const Clip small = r.decode({1}, o);
  EXPECT_EQ(small.height, 15);
  EXPECT_EQ(small.width, 20);
  EXPECT_THROW(r.decode({T}), Error);                                  // too short
  EXPECT_THROW(FrameFolderReader(dir.file("nothing")), Error);         // missing folder
  EXPECT_THROW(FrameFolderReader(dir.file("f"), "frame_{:05}.jpg"), Error);  // no such frames
  EXPECT_THROW(FrameFolderReader(dir.file("f"), "img_%05d.jpg"), Error);     // not a {} template
  EXPECT_EQ(FrameFolderReader(dir.file("f"), "img_{:05d}.jpg", 2).info().num_frames, T - 1);
  { std::ofstream(dir.path / "f" / "img_00003.jpg") << "not a jpeg"; }
  try {
    FrameFolderReader bad(dir.file("f"));
    bad.decode({2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("img_00003.jpg"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace unmask::video
