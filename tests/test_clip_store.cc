// tests/test_clip_store.cc: the decode-once clip store (`unmask prepare-video`): frames read back
// equal a VideoReader decode with the same resize byte for byte; the bytes written do not depend
// on the thread count; checksum corruption, truncated chunks, bad magic, future versions and out-
// of-range reads are Errors naming what and where; bad videos are skipped and counted per reason
// (--strict fails), with WebM cut or damaged in the middle caught by check_video_integrity (whose
// thresholds are tested on hand-made VideoInfo) and every skipped video listed in skipped.tsv;
// an existing store is refused without force and survives a failed run.
//
// Videos are tiny (64x48, 20 frames) encoded by encode_rgb_video, so the suite stays fast.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "temp_dir.h"
#include "unmask/error.h"
#include "data/video/clip_store.h"
#include "data/video/decode.h"
#include "data/video/synthetic.h"
#include "error_test_util.h"

namespace unmask::video {
namespace {

namespace fs = std::filesystem;

// A temp directory named for this file's tests.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("unmask_store") {}
};

constexpr int kW = 64, kH = 48, kFrames = 20, kShort = 32;

std::string make_video(const TempDir& dir, const std::string& name, const std::string& codec, int label,
                       int frames = kFrames) {
  const std::string path = dir.file(name + (codec == "vp9" ? ".webm" : ".mp4"));
  encode_rgb_video(path, codec, render_synthetic_video(11, label, label % 4, frames, kW, kH), frames, kW, kH, 10, 6);
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

// Four good videos (both codecs) and a VideoMAE list of them.
struct Dataset {
  TempDir dir;
  std::vector<std::string> videos;
  std::string list;
  Dataset() {
    for (int i = 0; i < 4; ++i) videos.push_back(make_video(dir, "v" + std::to_string(i), i % 2 ? "h264" : "vp9", i));
    list = dir.file("list.txt");
    std::ofstream f(list);
    for (int i = 0; i < 4; ++i) f << videos[size_t(i)] << " " << (10 + i) << "\n";
  }
};

PrepareOptions options_for(const Dataset& d, const std::string& out) {
  PrepareOptions o;
  o.list = d.list;
  o.out = out;
  o.short_side = kShort;
  o.threads = 2;
  return o;
}

using unmask::test::error_of;

#define EXPECT_HAS(text, fragment) EXPECT_NE(std::string(text).find(fragment), std::string::npos) << (text)

TEST(ClipStore, RoundTripEqualsVideoReaderByteForByte) {
  Dataset d;
  PrepareOptions o = options_for(d, d.dir.file("s.ucs"));
  o.chunk_bytes = 60000;  // a video is 20 x 42 x 32 x 3 = 80640 bytes: one chunk per video
  const PrepareReport r = prepare_clip_store(o);
  EXPECT_EQ(r.ok, 4);
  EXPECT_EQ(r.skipped.total(), 0);
  EXPECT_EQ(r.frames, 4 * kFrames);
  EXPECT_EQ(r.chunks, 4);
  const ClipStore store = ClipStore::open(o.out);
  ASSERT_EQ(store.size(), 4);
  EXPECT_EQ(store.header().short_side, kShort);
  EXPECT_EQ(store.header().version, kClipStoreVersion);
  EXPECT_EQ(store.header().total_frames, uint64_t(4 * kFrames));
  for (int64_t i = 0; i < 4; ++i) {
    const ClipStoreEntry& e = store.entry(i);
    EXPECT_EQ(e.path, d.videos[size_t(i)]);
    EXPECT_EQ(e.label, 10 + i);
    EXPECT_EQ(e.frames, kFrames);
    EXPECT_EQ(e.source_frames, kFrames);
    EXPECT_EQ(e.height, kShort);
    EXPECT_EQ(e.width, kShort * kW / kH);  // 42: the long side truncated as VideoReader does
    EXPECT_NEAR(e.fps, 10.0, 1e-9);
    EXPECT_EQ(e.chunk, uint32_t(i));
    VideoReader reader(e.path);
    DecodeOptions dopt;
    dopt.short_side = kShort;
    const Clip ref = reader.decode_all(dopt);
    std::vector<int64_t> all(kFrames);
    for (int f = 0; f < kFrames; ++f) all[size_t(f)] = f;
    const Clip got = store.read_frames(i, all);
    ASSERT_EQ(got.rgb.size(), ref.rgb.size());
    EXPECT_EQ(0, std::memcmp(got.rgb.data(), ref.rgb.data(), ref.rgb.size())) << "video " << i;
    // Any order, repeats.
    const std::vector<int64_t> pick = {19, 3, 3, 0, 11};
    const Clip part = store.read_frames(i, pick);
    const size_t fb = size_t(e.frame_bytes());
    for (size_t k = 0; k < pick.size(); ++k)
      EXPECT_EQ(0, std::memcmp(part.frame(int64_t(k)), ref.frame(pick[k]), fb)) << "video " << i << " slot " << k;
  }
  // Chunks hold more than one video when they fit; stride and max-frames keep the right frames.
  PrepareOptions o2 = options_for(d, d.dir.file("s2.ucs"));
  o2.frame_stride = 3;
  o2.max_frames = 5;
  const PrepareReport r2 = prepare_clip_store(o2);
  EXPECT_EQ(r2.chunks, 1);
  const ClipStore s2 = ClipStore::open(o2.out);
  const ClipStoreEntry& e = s2.entry(2);
  EXPECT_EQ(s2.header().frame_stride, 3);
  EXPECT_EQ(e.frames, 5);
  EXPECT_EQ(e.source_index, (std::vector<uint32_t>{0, 3, 6, 9, 12}));
  VideoReader reader(e.path);
  DecodeOptions dopt;
  dopt.short_side = kShort;
  const Clip ref = reader.decode({0, 3, 6, 9, 12}, dopt);
  const Clip got = s2.read_frames(2, {0, 1, 2, 3, 4});
  EXPECT_EQ(got.rgb, ref.rgb);
}

TEST(ClipStore, SameBytesForAnyThreadCount) {
  Dataset d;
  std::vector<std::string> outs;
  for (const int threads : {1, 3}) {
    PrepareOptions o = options_for(d, d.dir.file("t" + std::to_string(threads) + ".ucs"));
    o.threads = threads;
    o.chunk_bytes = 170000;  // two videos (80640 bytes each) per chunk
    prepare_clip_store(o);
    outs.push_back(o.out);
  }
  std::vector<std::string> names;
  for (const auto& f : fs::directory_iterator(outs[0])) names.push_back(f.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"chunk-00000.bin", "chunk-00001.bin", "index.bin", "skipped.tsv"}));
  for (const auto& n : names)
    EXPECT_EQ(read_file(outs[0] + "/" + n), read_file(outs[1] + "/" + n)) << n << " differs between 1 and 3 threads";
  EXPECT_EQ(std::distance(fs::directory_iterator(outs[1]), fs::directory_iterator()), 4);
}

TEST(ClipStore, CorruptionAndDamageAreErrorsNamingWhatAndWhere) {
  Dataset d;
  const std::string out = d.dir.file("s.ucs");
  prepare_clip_store(options_for(d, out));
  const std::string index = read_file(out + "/index.bin"), chunk = read_file(out + "/chunk-00000.bin");
  {  // One flipped byte inside frame 7 of video 1: that frame fails, the others read fine.
    const ClipStore store = ClipStore::open(out);
    const ClipStoreEntry& e = store.entry(1);
    std::string bad = chunk;
    bad[size_t(e.offset + 7 * e.frame_bytes() + 100)] ^= 0x01;
    write_file(out + "/chunk-00000.bin", bad);
    const std::string m = error_of([&] { store.read_frames(1, {6, 7}); });
    EXPECT_HAS(m, "checksum mismatch");
    EXPECT_HAS(m, out);
    EXPECT_HAS(m, "video 1");
    EXPECT_HAS(m, e.path);
    EXPECT_HAS(m, "frame 7");
    EXPECT_NO_THROW(store.read_frames(1, {6, 8}));
    EXPECT_NO_THROW(store.read_frames(0, {7}));
    write_file(out + "/chunk-00000.bin", chunk);
  }
  {  // Index access out of range.
    const ClipStore store = ClipStore::open(out);
    EXPECT_HAS(error_of([&] { store.entry(4); }), "video 4 out of range");
    EXPECT_HAS(error_of([&] { store.entry(-1); }), "out of range");
    EXPECT_HAS(error_of([&] { store.read_frames(0, {kFrames}); }), "frame 20 asked for");
  }
  // Truncated chunk.
  write_file(out + "/chunk-00000.bin", chunk.substr(0, chunk.size() - 5));
  std::string m = error_of([&] { ClipStore::open(out); });
  EXPECT_HAS(m, "chunk-00000.bin");
  EXPECT_HAS(m, "truncated");
  write_file(out + "/chunk-00000.bin", chunk);
  // Bad magic.
  std::string bad = index;
  bad[0] = 'X';
  write_file(out + "/index.bin", bad);
  EXPECT_HAS(error_of([&] { ClipStore::open(out); }), "magic");
  // A future version.
  bad = index;
  bad[8] = char(kClipStoreVersion + 1);
  write_file(out + "/index.bin", bad);
  m = error_of([&] { ClipStore::open(out); });
  EXPECT_HAS(m, "format version 2");
  EXPECT_HAS(m, "newer unmask");
  // A flipped byte in the index: its own checksum.
  bad = index;
  bad[index.size() / 2] ^= 0x10;
  write_file(out + "/index.bin", bad);
  EXPECT_HAS(error_of([&] { ClipStore::open(out); }), "fails its checksum");
  // A truncated index (checksum off, so the parser itself must notice).
  write_file(out + "/index.bin", index.substr(0, index.size() - 40));
  ClipStoreOpenOptions no_crc;
  no_crc.verify_index_checksum = false;
  EXPECT_HAS(error_of([&] { ClipStore::open(out, no_crc); }), "index.bin");
  // Missing chunk, missing index, not a directory.
  write_file(out + "/index.bin", index);
  fs::remove(out + "/chunk-00000.bin");
  EXPECT_HAS(error_of([&] { ClipStore::open(out); }), "missing chunk");
  fs::remove(out + "/index.bin");
  EXPECT_HAS(error_of([&] { ClipStore::open(out); }), "no index.bin");
  EXPECT_HAS(error_of([&] { ClipStore::open(d.list); }), "not a directory");
  // from_memory: the same checks without files.
  EXPECT_HAS(error_of([&] { ClipStore::from_memory(index, {chunk.substr(1)}); }), "chunk 0 is");
  const ClipStore mem = ClipStore::from_memory(index, {chunk}, "mem");
  EXPECT_EQ(mem.size(), 4);
  EXPECT_EQ(mem.read_frames(3, {1}).rgb.size(), size_t(kShort) * 42 * 3);
}

TEST(ClipStore, BadVideosSkippedCountedAndStrict) {
  Dataset d;
  const TempDir& dir = d.dir;
  std::vector<std::pair<std::string, BadVideoReason>> bad;
  bad.push_back({dir.file("missing.mp4"), BadVideoReason::missing});
  write_file(dir.file("empty.mp4"), "");
  bad.push_back({dir.file("empty.mp4"), BadVideoReason::zero_length});
  write_file(dir.file("text.webm"), "not a video at all\n");
  bad.push_back({dir.file("text.webm"), BadVideoReason::corrupt});
  {  // unsupported codec: a webm track whose codec id no decoder knows
    std::string bytes = read_file(d.videos[0]);
    const size_t at = bytes.find("V_VP9");
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, 5, "V_QQ9");
    write_file(dir.file("odd.webm"), bytes);
    bad.push_back({dir.file("odd.webm"), BadVideoReason::unsupported_codec});
  }
  bad.push_back({make_video(dir, "short", "vp9", 1, 6), BadVideoReason::too_short});
  const bool cli = std::system("ffmpeg -hide_banner -version >/dev/null 2>&1") == 0;
  if (cli) {
    const std::string audio = dir.file("audio.m4a");
    ASSERT_EQ(
        0,
        std::system(
            ("ffmpeg -hide_banner -loglevel error -y -f lavfi -i sine=frequency=440:duration=0.3 " + audio).c_str()));
    bad.push_back({audio, BadVideoReason::audio_only});
    // A faststart mp4 cut in the middle: the header lists 20 frames, fewer are complete.
    const std::string fast = dir.file("fast.mp4");
    ASSERT_EQ(0, std::system(("ffmpeg -hide_banner -loglevel error -y -i " + d.videos[1] +
                              " -c copy -movflags +faststart " + fast)
                                 .c_str()));
    const std::string bytes = read_file(fast);
    write_file(dir.file("cut.mp4"), bytes.substr(0, bytes.size() * 6 / 10));
    bad.push_back({dir.file("cut.mp4"), BadVideoReason::truncated});
  }
  const std::string list = dir.file("mixed.txt");
  {
    std::ofstream f(list);
    f << d.videos[0] << " 0\n";
    for (const auto& [path, reason] : bad) f << path << " 1\n";
    f << d.videos[1] << " 1\n";
  }
  PrepareOptions o = options_for(d, dir.file("m.ucs"));
  o.list = list;
  o.min_frames = 8;
  const PrepareReport r = prepare_clip_store(o);
  EXPECT_EQ(r.listed, int64_t(bad.size()) + 2);
  EXPECT_EQ(r.ok, 2);
  EXPECT_EQ(r.skipped.total(), int64_t(bad.size()));
  for (const auto& [path, reason] : bad)
    EXPECT_EQ(r.skipped.counts[size_t(reason)], 1) << bad_video_reason_name(reason) << " (" << path << ")";
  ASSERT_EQ(r.skipped.examples.size(), BadVideoTally::kMaxExamples);
  EXPECT_HAS(r.skipped.examples[0], "missing.mp4");
  EXPECT_HAS(r.skipped.summary(), "1 missing, 1 zero_length");
  const ClipStore store = ClipStore::open(o.out);
  ASSERT_EQ(store.size(), 2);
  EXPECT_EQ(store.entry(0).path, d.videos[0]);
  EXPECT_EQ(store.entry(1).path, d.videos[1]);
  // keep_truncated keeps the complete frames of the cut file.
  if (cli) {
    o.out = dir.file("k.ucs");
    o.keep_truncated = true;
    EXPECT_EQ(prepare_clip_store(o).skipped.counts[size_t(BadVideoReason::truncated)], 0);
  }
  // --strict: the first bad video (in list order) is an Error naming it; nothing is written.
  o.out = dir.file("strict.ucs");
  o.strict = true;
  const std::string m = error_of([&] { prepare_clip_store(o); });
  EXPECT_HAS(m, "missing.mp4");
  EXPECT_HAS(m, "--strict");
  EXPECT_FALSE(fs::exists(o.out));
  for (const auto& f : fs::directory_iterator(dir.path))
    EXPECT_EQ(f.path().filename().string().find(".tmp-"), std::string::npos) << "left behind: " << f.path();
  // Every video bad: an Error, no store.
  write_file(list, dir.file("missing.mp4") + " 0\n" + dir.file("empty.mp4") + " 1\n");
  o.strict = false;
  EXPECT_HAS(error_of([&] { prepare_clip_store(o); }), "none of the 2 listed videos");
  EXPECT_FALSE(fs::exists(o.out));
}

// check_video_integrity's thresholds on hand-made VideoInfo: max(1.5 frame intervals, 5% of the
// duration) of missing time; gaps and a demuxer that gave up with data left are "corrupt", a
// missing tail of a file that simply ends is "truncated" (kept with keep_truncated).
std::string verdict(const VideoInfo& info, bool keep_truncated = false) {
  try {
    check_video_integrity(info, keep_truncated);
    return "whole";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), info.path);
    return bad_video_reason_name(classify_video_error(e.what()));
  }
}

VideoInfo webm_info(double seconds, double fps = 10) {  // a whole WebM: no frame count, a duration
  VideoInfo i;
  i.path = "/data/v.webm";
  i.codec = "vp9";
  i.fps = fps;
  i.num_frames = int64_t(std::lround(seconds * fps));
  i.duration_s = seconds;
  i.frame_interval_s = 1 / fps;
  i.container_duration_s = seconds;
  i.largest_packet = 900;
  return i;
}

TEST(ClipStore, WholeVideoRuleThresholds) {
  EXPECT_EQ(verdict(webm_info(4)), "whole");
  {  // 1 s at 10 fps: the slack is 1.5 frames (0.15 s) > 5% (0.05 s)
    VideoInfo i = webm_info(1);
    i.missing_end_s = 0.14;
    EXPECT_EQ(verdict(i), "whole");
    i.missing_end_s = 0.16;
    EXPECT_EQ(verdict(i), "truncated");
    EXPECT_EQ(verdict(i, /*keep_truncated=*/true), "whole");
    i.missing_end_s = -0.5;  // frames past the container's end are no damage
    EXPECT_EQ(verdict(i), "whole");
  }
  {  // 100 s: the slack is 5% (5 s) > 1.5 frames
    VideoInfo i = webm_info(100);
    i.missing_end_s = 4.9;
    EXPECT_EQ(verdict(i), "whole");
    i.missing_end_s = 5.1;
    EXPECT_EQ(verdict(i), "truncated");
  }
  {  // frames lost inside (4 s: slack 0.2 s): corrupt, also when keeping truncated files
    VideoInfo i = webm_info(4);
    i.gaps = 1;
    i.gap_s = 0.1;  // within the slack
    EXPECT_EQ(verdict(i), "whole");
    i.gap_s = 0.3;
    EXPECT_EQ(verdict(i), "corrupt");
    EXPECT_EQ(verdict(i, true), "corrupt");
    i.gap_s = 0.15;  // gaps and a missing tail add up
    i.missing_end_s = 0.1;
    EXPECT_EQ(verdict(i), "truncated");
  }
  {  // the tail is missing: truncated when the file ends there, corrupt when data is left unread
    VideoInfo i = webm_info(4);
    i.missing_end_s = 2;
    i.unread_bytes = i.largest_packet + kWholeVideoSlackBytes;  // a packet cut in two
    EXPECT_EQ(verdict(i), "truncated");
    EXPECT_EQ(verdict(i, true), "whole");
    i.unread_bytes += 1;
    EXPECT_EQ(verdict(i), "corrupt");
    EXPECT_EQ(verdict(i, true), "corrupt");
  }
  {  // a read error, not the end of the file
    VideoInfo i = webm_info(4);
    i.read_error = "Invalid data found when processing input after 12 frames";
    EXPECT_EQ(verdict(i), "corrupt");
    EXPECT_HAS(error_of([&] { check_video_integrity(i, false); }), "after 12 frames");
  }
  {  // MP4: the header's frame count
    VideoInfo i = webm_info(4);
    i.container_frames = 40;
    i.num_frames = 30;
    EXPECT_EQ(verdict(i), "truncated");
    EXPECT_EQ(verdict(i, true), "whole");
  }
  {  // no container duration: no tail to judge; gaps against the frames' own span
    VideoInfo i = webm_info(4);
    i.container_duration_s = 0;
    i.missing_end_s = 0;
    EXPECT_EQ(verdict(i), "whole");
    i.gaps = 2;
    i.gap_s = 0.3;
    EXPECT_EQ(verdict(i), "corrupt");
  }
  VideoInfo folder;  // a frame folder carries no container claims
  folder.path = "/data/frames";
  folder.codec = "jpeg";
  folder.num_frames = 30;
  EXPECT_EQ(verdict(folder), "whole");
  const std::string m = error_of([] {
    VideoInfo i = webm_info(4);
    i.missing_end_s = 2;
    check_video_integrity(i, false);
  });
  EXPECT_HAS(m, "truncated: the frames end 2.000 s before the container's 4.000 s (about 20 frames missing");
  EXPECT_HAS(m, "--keep-truncated");
}

TEST(ClipStore, SkippedReportEscapesFields) {
  EXPECT_EQ(skipped_report_tsv({}), "line\tpath\treason\tdetail\n");
  const std::string tsv = skipped_report_tsv(
      {{3, "/a\tb.webm", BadVideoReason::truncated, "x\ny\\z"}, {0, "c", BadVideoReason::missing, ""}});
  EXPECT_EQ(tsv, "line\tpath\treason\tdetail\n3\t/a\\tb.webm\ttruncated\tx\\ny\\\\z\n0\tc\tmissing\t\n");
}

// WebM stores no frame count: a file cut in half and one with damaged bytes in the middle used to
// be stored as good videos with fewer frames. Now they are skipped (--strict: an Error), and
// STORE/skipped.tsv lists every skipped video with its reason.
TEST(ClipStore, CutAndDamagedWebmSkippedAndEveryOneReported) {
  Dataset d;
  TempDir& dir = d.dir;
  const std::string webm = read_file(d.videos[0]);
  write_file(dir.file("cut.webm"), webm.substr(0, webm.size() / 2));
  std::string damaged = read_file(d.videos[2]);
  std::mt19937 rng(2024);  // a fixed sequence: mt19937's output is specified
  for (size_t i = damaged.size() / 2 - damaged.size() / 16; i < damaged.size() / 2 + damaged.size() / 16; ++i)
    damaged[i] = char(rng() & 0xFF);
  write_file(dir.file("damaged.webm"), damaged);
  const std::string list = dir.file("mixed.txt");
  write_file(list, d.videos[0] + " 0\n" + dir.file("cut.webm") + " 1\n" + d.videos[1] + " 2\n" +
                       dir.file("damaged.webm") + " 3\n" + dir.file("gone.mp4") + " 4\n" + d.videos[3] + " 5\n");
  PrepareOptions o = options_for(d, dir.file("m.ucs"));
  o.list = list;
  const PrepareReport r = prepare_clip_store(o);
  EXPECT_EQ(r.ok, 3);
  EXPECT_EQ(r.skipped.summary(), "1 missing, 1 corrupt, 1 truncated");
  ASSERT_EQ(r.skipped_videos.size(), 3u);
  EXPECT_EQ(r.skipped_videos[0].path, dir.file("cut.webm"));
  EXPECT_EQ(r.skipped_videos[0].reason, BadVideoReason::truncated);
  EXPECT_EQ(r.skipped_videos[0].list_line, 2);
  EXPECT_EQ(r.skipped_videos[1].path, dir.file("damaged.webm"));
  EXPECT_EQ(r.skipped_videos[1].reason, BadVideoReason::corrupt);
  EXPECT_EQ(r.skipped_videos[2].reason, BadVideoReason::missing);
  EXPECT_EQ(r.skipped_report, o.out + "/skipped.tsv");
  const std::string tsv = read_file(r.skipped_report);
  EXPECT_EQ(tsv, skipped_report_tsv(r.skipped_videos));
  EXPECT_HAS(tsv, "\n2\t" + dir.file("cut.webm") + "\ttruncated\tvideo: " + dir.file("cut.webm") + ": truncated: ");
  EXPECT_HAS(tsv, "\n4\t" + dir.file("damaged.webm") + "\tcorrupt\t");
  EXPECT_HAS(tsv, "\n5\t" + dir.file("gone.mp4") + "\tmissing\t");
  EXPECT_EQ(ClipStore::open(o.out).size(), 3);  // the report does not disturb the reader
  // keep_truncated keeps the cut file's complete frames; the damaged one stays out.
  o.out = dir.file("k.ucs");
  o.keep_truncated = true;
  const PrepareReport k = prepare_clip_store(o);
  EXPECT_EQ(k.ok, 4);
  EXPECT_EQ(k.skipped.summary(), "1 missing, 1 corrupt");
  // --strict: the cut file (the first bad one) is an Error.
  o.out = dir.file("strict.ucs");
  o.keep_truncated = false;
  o.strict = true;
  const std::string m = error_of([&] { prepare_clip_store(o); });
  EXPECT_HAS(m, "cut.webm: truncated");
  EXPECT_FALSE(fs::exists(o.out));
  // A store without bad videos has a report with the header only.
  const PrepareReport g = prepare_clip_store(options_for(d, dir.file("g.ucs")));
  EXPECT_EQ(read_file(g.skipped_report), "line\tpath\treason\tdetail\n");
}

TEST(ClipStore, ExistingStoreRefusedWithoutForceAndSurvivesFailedRun) {
  Dataset d;
  const std::string out = d.dir.file("s.ucs");
  PrepareOptions o = options_for(d, out);
  prepare_clip_store(o);
  const std::string index = read_file(out + "/index.bin");
  EXPECT_HAS(error_of([&] { prepare_clip_store(o); }), "already exists");
  EXPECT_EQ(read_file(out + "/index.bin"), index);
  // --force with a run that fails (strict + a missing video): the old store is intact.
  const std::string list2 = d.dir.file("list2.txt");
  write_file(list2, d.videos[0] + " 0\n" + d.dir.file("gone.mp4") + " 1\n");
  PrepareOptions bad = o;
  bad.list = list2;
  bad.force = true;
  bad.strict = true;
  EXPECT_HAS(error_of([&] { prepare_clip_store(bad); }), "gone.mp4");
  EXPECT_EQ(read_file(out + "/index.bin"), index);
  EXPECT_EQ(ClipStore::open(out).size(), 4);
  // --force with a good run replaces it.
  bad.strict = false;
  EXPECT_EQ(prepare_clip_store(bad).ok, 1);
  EXPECT_EQ(ClipStore::open(out).size(), 1);
  size_t entries = 0;
  for (const auto& f : fs::directory_iterator(d.dir.path))
    entries += f.path().filename().string().find(".tmp-") != std::string::npos;
  EXPECT_EQ(entries, 0u);
  // --force never replaces something that is not a clip store.
  fs::create_directories(d.dir.file("precious"));
  write_file(d.dir.file("precious/keep.txt"), "x");
  o.out = d.dir.file("precious");
  o.force = true;
  EXPECT_HAS(error_of([&] { prepare_clip_store(o); }), "not a clip store");
  EXPECT_TRUE(fs::exists(d.dir.file("precious/keep.txt")));
}

TEST(ClipStore, IndexSerializationRoundTripAndReasonNames) {
  ClipStoreHeader h;
  h.short_side = 128;
  h.chunk_bytes = {24};
  h.total_frames = 2;
  h.source_list = "list.csv";
  ClipStoreEntry e;
  e.path = "a b.mp4";
  e.label = 3;
  e.source_frames = 5;
  e.fps = 29.97;
  e.height = 2;
  e.width = 2;
  e.frames = 2;
  e.source_index = {0, 4};
  std::string chunk(24, '\0');
  for (int i = 0; i < 24; ++i) chunk[size_t(i)] = char(i * 7);
  for (int f = 0; f < 2; ++f)
    e.crc.push_back(uint32_t(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(chunk.data()) + 12 * f, 12)));
  const ClipStore s = ClipStore::from_memory(serialize_clip_store_index(h, {e}), {chunk});
  EXPECT_EQ(s.entry(0).path, "a b.mp4");
  EXPECT_EQ(s.entry(0).label, 3);
  EXPECT_EQ(s.entry(0).fps, 29.97);
  EXPECT_EQ(s.entry(0).source_index, e.source_index);
  EXPECT_EQ(s.header().source_list, "list.csv");
  EXPECT_EQ(s.header().short_side, 128);
  const Clip c = s.read_frames(0, {1, 0});
  EXPECT_EQ(std::string(c.rgb.begin(), c.rgb.end()), chunk.substr(12) + chunk.substr(0, 12));
  // A wrong stored crc is caught; a source index past the source's frames is refused at open.
  ClipStoreEntry wrong = e;
  wrong.crc[1] ^= 1;
  EXPECT_HAS(
      error_of([&] { ClipStore::from_memory(serialize_clip_store_index(h, {wrong}), {chunk}).read_frames(0, {1}); }),
      "checksum mismatch");
  wrong = e;
  wrong.source_index[1] = 5;
  EXPECT_HAS(error_of([&] { ClipStore::from_memory(serialize_clip_store_index(h, {wrong}), {chunk}); }),
             "source frame 5 of 5");
  wrong = e;
  wrong.offset = 1;  // frames would run past the chunk's 24 bytes
  EXPECT_HAS(error_of([&] { ClipStore::from_memory(serialize_clip_store_index(h, {wrong}), {chunk}); }),
             "outside chunk-00000.bin");
  EXPECT_EQ(classify_video_error("video: x: too short: frame 9 asked for"), BadVideoReason::too_short);
  EXPECT_EQ(
      classify_video_error("video: x: too short: frame 30 asked for, the video has 12 frames (its header lists 20: "
                           "the file is truncated)"),
      BadVideoReason::truncated);
  EXPECT_EQ(classify_video_error("video: x: decoding failed after frame 3"), BadVideoReason::corrupt);
  EXPECT_STREQ(bad_video_reason_name(BadVideoReason::unsupported_codec), "unsupported_codec");
}

}  // namespace
}  // namespace unmask::video
