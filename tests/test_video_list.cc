// tests/test_video_list.cc: the list formats of video_list.h and what reads them.
//   - every format's fields (paths with spaces and commas, comma or blank separators, --root),
//     the automatic choice, and file:line errors for every kind of bad line;
//   - ListedVideo: clip frame k of a range [s, e) is source frame s + k, bit for bit against a
//     plain VideoReader; frame folders numbered from start_idx, the list's frame count; ranges
//     and counts that do not fit are "too_short" ("truncated" past the end of a cut MP4 or
//     WebM), missing files "missing";
//   - prepare_clip_store over a V-SWIFT range list and a rawframes list: the stored frames are
//     the range's (source numbers recorded), bad ranges are skipped and counted;
//   - the clip loader over a range list gives the same batches as over the store made from it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "jpeg_test_util.h"
#include "temp_dir.h"
#include "unmask/error.h"
#include "data/video/clip_loader.h"
#include "data/video/clip_store.h"
#include "data/video/listed_video.h"
#include "data/video/synthetic.h"
#include "data/video/video_list.h"
#include "error_test_util.h"

namespace unmask::video {
namespace {

namespace fs = std::filesystem;

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("unmask_video_list") {}
};

using unmask::test::error_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- parsing ------------------------------------------------------------------------------------

TEST(VideoListFormats, VSwiftRanges) {
  const auto a = parse_video_list("k400/a b.mp4 3 10 42\nc.webm,0, 0,-1\r\n\n/abs/d.mp4\t7\t5\t6\n", "l.txt",
                                  ListFormat::vswift4, "/data");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].path, "/data/k400/a b.mp4");
  EXPECT_EQ(a[0].label, 3);
  EXPECT_EQ(a[0].start_frame, 10);
  EXPECT_EQ(a[0].end_frame, 42);
  EXPECT_TRUE(a[0].has_range());
  EXPECT_FALSE(a[0].frame_folder);
  EXPECT_EQ(a[1].path, "/data/c.webm");  // commas separate too; -1 = to the end
  EXPECT_EQ(a[1].end_frame, -1);
  EXPECT_FALSE(a[1].has_range());
  EXPECT_EQ(a[2].path, "/abs/d.mp4");
  EXPECT_EQ(a[2].start_frame, 5);

  const auto b = parse_video_list("ssv2 videos/x y.webm 12 0 30 30\nk710,k/z.mp4,1,8,16,90\n", "l.csv",
                                  ListFormat::vswift6);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].source, "ssv2");
  EXPECT_EQ(b[0].path, "videos/x y.webm");
  EXPECT_EQ(b[0].label, 12);
  EXPECT_EQ(b[0].end_frame, 30);
  EXPECT_EQ(b[0].total_frames, 30);
  EXPECT_EQ(b[1].source, "k710");
  EXPECT_EQ(b[1].path, "k/z.mp4");
  EXPECT_EQ(b[1].start_frame, 8);
  EXPECT_EQ(b[1].total_frames, 90);
}

TEST(VideoListFormats, VideoMAE2AndRawframes) {
  const auto a = parse_video_list("k400/v.mp4 0 -1\nssv2/1234 1 47\nava/clip 901 300\n", "l.txt",
                                  ListFormat::videomae2, "/d");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_FALSE(a[0].frame_folder);  // "0 -1": a video file
  EXPECT_EQ(a[0].total_frames, -1);
  EXPECT_TRUE(a[1].frame_folder);
  EXPECT_EQ(a[1].first_number, 1);
  EXPECT_EQ(a[1].total_frames, 47);
  EXPECT_EQ(a[2].path, "/d/ava/clip");
  EXPECT_EQ(a[2].first_number, 901);  // frames img_00901.jpg .. img_01200.jpg
  EXPECT_EQ(a[2].total_frames, 300);
  for (const ListEntry& e : a) EXPECT_EQ(e.label, 0);  // pretraining lists carry no label

  const auto b = parse_video_list("74225 62 140\n116154 51 127\n", "val.txt", ListFormat::rawframes);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_TRUE(b[0].frame_folder);
  EXPECT_EQ(b[0].path, "74225");
  EXPECT_EQ(b[0].total_frames, 62);
  EXPECT_EQ(b[0].label, 140);
  EXPECT_EQ(b[0].first_number, 1);
  EXPECT_FALSE(b[0].has_range());
}

TEST(VideoListFormats, AutomaticFromTheFirstLine) {
  auto format_of = [](const std::string& text, const std::string& name) {
    const auto e = parse_video_list(text, name, ListFormat::automatic);
    return e.at(0);
  };
  EXPECT_EQ(format_of("a b.mp4 3\n", "l.txt").label, 3);           // videomae, path with a space
  EXPECT_EQ(format_of("\n  \np.mp4,5\n", "l.csv").label, 5);       // vswift (first non-blank line)
  EXPECT_EQ(format_of("p,q.mp4 5\n", "l.txt").path, "p,q.mp4");    // a comma outside .csv: videomae
  EXPECT_EQ(format_of("dir/a b.mp4\t7\n", "l.txt").path, "dir/a b.mp4");  // a tab before the label
  const ListEntry r = format_of("a.mp4 2 10 20\n", "l.txt");       // three numbers: vswift4
  EXPECT_EQ(r.label, 2);
  EXPECT_EQ(r.start_frame, 10);
  EXPECT_EQ(r.end_frame, 20);
  const ListEntry s = format_of("k400,a.mp4,2,10,20,300\n", "l.csv");  // four: vswift6
  EXPECT_EQ(s.source, "k400");
  EXPECT_EQ(s.total_frames, 300);
  const ListEntry v2 = format_of("k/v.mp4 0 -1\n", "l.txt");  // ends in -1: VideoMAE v2's video line
  EXPECT_EQ(v2.path, "k/v.mp4");
  EXPECT_EQ(v2.total_frames, -1);
  const ListEntry numeric = format_of("ssv2 74225 3 0 30 30\n", "l.txt");  // vswift6 with a numeric path
  EXPECT_EQ(numeric.source, "ssv2");
  EXPECT_EQ(numeric.path, "74225");
  EXPECT_EQ(numeric.label, 3);
  EXPECT_EQ(parse_video_list("a.mp4 1\n\nb.mp4 2\n", "l.txt", ListFormat::videomae)[1].list_line, 3);
  // Two numbers are either VideoMAE v2 or rawframes: an error that says so and names the line.
  const std::string e = error_of([] { parse_video_list("\nssv2/1234 1 47\n", "l.txt", ListFormat::automatic); });
  EXPECT_TRUE(contains(e, "l.txt:2")) << e;
  EXPECT_TRUE(contains(e, "--list-format videomae2 or --list-format rawframes")) << e;
  EXPECT_TRUE(contains(error_of([] { parse_video_list("a 1 2 3 4 5 6\n", "l.txt", ListFormat::automatic); }),
                       "l.txt:1"));
}

TEST(VideoListFormats, FormatNames) {
  for (const ListFormat f : {ListFormat::videomae, ListFormat::vswift, ListFormat::vswift4, ListFormat::vswift6,
                             ListFormat::videomae2, ListFormat::rawframes, ListFormat::automatic})
    EXPECT_EQ(parse_list_format(list_format_name(f)), f);
  const std::string e = error_of([] { parse_list_format("kinetics"); });
  EXPECT_TRUE(contains(e, "'kinetics'")) << e;
  EXPECT_TRUE(contains(e, "rawframes: 'folder total_frames label'")) << e;  // the hint lists the layouts
}

TEST(VideoListFormats, BadLinesNameFileAndLine) {
  struct Case {
    ListFormat format;
    const char* text;
    const char* where;
    const char* says;
  };
  const Case cases[] = {
      {ListFormat::vswift4, "a.mp4 1 0 9\na.mp4 1 9\n", "l.txt:2", "expected"},  // a field missing
      {ListFormat::vswift4, "a.mp4 1 9 9\n", "l.txt:1", "is empty"},             // [9, 9)
      {ListFormat::vswift4, "a.mp4 1 9 4\n", "l.txt:1", "is empty"},
      {ListFormat::vswift4, "a.mp4 1 -2 4\n", "l.txt:1", "sframe '-2'"},
      {ListFormat::vswift4, "a.mp4 x 0 4\n", "l.txt:1", "label 'x'"},
      {ListFormat::vswift4, "1 0 4\n", "l.txt:1", "expected"},                   // no path
      {ListFormat::vswift6, "k400 a.mp4 1 0 40 30\n", "l.txt:1", "nframes"},    // eframe > nframes
      {ListFormat::vswift6, "k400 a.mp4 1 30 -1 30\n", "l.txt:1", "nframes"},   // starts past the end
      {ListFormat::vswift6, "a.mp4 1 0 4 30\n", "l.txt:1", "dataset name"},      // no source
      {ListFormat::vswift6, "k400 a.mp4 1 0 4 0\n", "l.txt:1", "nframes '0'"},
      {ListFormat::videomae2, "a.mp4 0 0\n", "l.txt:1", "total_frames is 0"},
      {ListFormat::videomae2, "a.mp4 3 -1\n", "l.txt:1", "must start at 0"},
      {ListFormat::videomae2, "a.mp4 0 -2\n", "l.txt:1", "total_frames '-2'"},
      {ListFormat::videomae2, "a.mp4 99999999999 5\n", "l.txt:1", "too large"},
      {ListFormat::rawframes, "f 0 3\n", "l.txt:1", "total_frames '0'"},
      {ListFormat::rawframes, "f 10 -3\n", "l.txt:1", "label '-3'"},
      {ListFormat::rawframes, "f 10\n", "l.txt:1", "expected"},
      {ListFormat::vswift4, "a.mp4,,1,0,10\n", "l.txt:1", "expected"},  // an empty field is not part of the path
      {ListFormat::vswift6, "k400,,a.mp4,1,0,10,30\n", "l.txt:1", "dataset name"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of([&] { parse_video_list(c.text, "l.txt", c.format); });
    EXPECT_TRUE(contains(e, c.where) && contains(e, c.says)) << list_format_name(c.format) << " '" << c.text
                                                             << "': " << (e.empty() ? "no error" : e);
  }
}

// ---- opening a listed clip ----------------------------------------------------------------------

constexpr int kW = 64, kH = 48, kFrames = 24;

// A 24-frame h264 video (GOP 6, so a range start inside a GOP needs a seek and a decode forward).
std::string make_video(const TempDir& dir, const std::string& name, int label = 1) {
  const std::string path = dir.file(name);
  encode_rgb_video(path, "h264", render_synthetic_video(3, label, label, kFrames, kW, kH), kFrames, kW, kH, 10, 6);
  return path;
}

ListEntry range_entry(const std::string& path, int64_t start, int64_t end) {
  ListEntry e;
  e.path = path;
  e.start_frame = start;
  e.end_frame = end;
  return e;
}

TEST(ListedVideo, RangeFrameKIsSourceFrameStartPlusK) {
  TempDir dir;
  const std::string path = make_video(dir, "v.mp4");
  VideoReader whole(path);
  ListedVideo clip(range_entry(path, 9, 17), kDefaultFrameTemplate);
  EXPECT_EQ(clip.first_frame(), 9);
  EXPECT_EQ(clip.frames(), 8);
  EXPECT_EQ(clip.source_info().num_frames, kFrames);
  DecodeOptions o;
  o.short_side = 24;
  const Clip got = clip.decode({7, 0, 3, 3}, o);
  const Clip want = whole.decode({16, 9, 12, 12}, o);
  EXPECT_EQ(got.rgb, want.rgb);
  EXPECT_NE(got.rgb, whole.decode({15, 8, 11, 11}, o).rgb);  // an off-by-one would differ
  ListedVideo to_end(range_entry(path, 20, -1));
  EXPECT_EQ(to_end.frames(), 4);
  EXPECT_EQ(to_end.decode({3}).rgb, whole.decode({23}).rgb);
  ListedVideo all(range_entry(path, 0, -1));
  EXPECT_EQ(all.frames(), kFrames);
  EXPECT_TRUE(contains(error_of([&] { clip.decode({8}); }), "clip frame 8"));
}

TEST(ListedVideo, BadRangesAndFilesAreClassified) {
  TempDir dir;
  const std::string path = make_video(dir, "v.mp4");
  for (const auto& [s, e] : std::vector<std::pair<int64_t, int64_t>>{{0, kFrames + 1}, {kFrames, -1}, {30, 40}}) {
    const std::string msg = error_of([&] { ListedVideo v(range_entry(path, s, e)); });
    EXPECT_TRUE(contains(msg, path)) << msg;
    EXPECT_EQ(classify_video_error(msg), BadVideoReason::too_short) << msg;
  }
  const std::string missing = error_of([&] { ListedVideo v(range_entry(dir.file("none.mp4"), 0, 4)); });
  EXPECT_EQ(classify_video_error(missing), BadVideoReason::missing) << missing;
  ListEntry folder;
  folder.path = dir.file("no-folder");
  folder.frame_folder = true;
  const std::string missing_folder = error_of([&] { ListedVideo v(folder); });
  EXPECT_EQ(classify_video_error(missing_folder), BadVideoReason::missing) << missing_folder;
}

TEST(ListedVideo, RangePastTheCompleteFramesOfATruncatedFileSaysTruncated) {
  if (std::system("ffmpeg -hide_banner -version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no ffmpeg CLI";
  TempDir dir;
  const std::string path = make_video(dir, "v.mp4");
  // A faststart mp4 cut in the middle: the header lists 24 frames, fewer are complete.
  const std::string fast = dir.file("fast.mp4"), cut = dir.file("cut.mp4");
  ASSERT_EQ(0, std::system(("ffmpeg -hide_banner -loglevel error -y -i " + path + " -c copy -movflags +faststart " +
                            fast).c_str()));
  {
    std::ifstream in(fast, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() * 6 / 10);
  }
  ListEntry e = range_entry(cut, 2, kFrames);
  e.list_line = 7;
  const std::string msg = error_of([&] { ListedVideo v(e); });
  EXPECT_EQ(classify_video_error(msg), BadVideoReason::truncated) << msg;
  EXPECT_TRUE(contains(msg, "(list line 7)")) << msg;
  EXPECT_TRUE(contains(msg, "[2, 24)")) << msg;
  ListedVideo early(range_entry(cut, 0, 4));  // a range inside the complete frames still opens
  EXPECT_EQ(early.frames(), 4);
}

// The same for a WebM cut in half: no frame count in the header, but its frames end before the
// container's duration (check_video_integrity's rule), so the range error says "truncated" too.
TEST(ListedVideo, RangePastTheCompleteFramesOfACutWebmSaysTruncated) {
  TempDir dir;
  const std::string path = dir.file("v.webm"), cut = dir.file("cut.webm");
  encode_rgb_video(path, "vp9", render_synthetic_video(3, 2, 2, kFrames, kW, kH), kFrames, kW, kH, 10, 6);
  {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  const std::string msg = error_of([&] { ListedVideo v(range_entry(cut, 2, kFrames)); });
  EXPECT_EQ(classify_video_error(msg), BadVideoReason::truncated) << msg;
  EXPECT_TRUE(contains(msg, "[2, 24)")) << msg;
  const std::string whole = error_of([&] { ListedVideo v(range_entry(path, 2, kFrames + 1)); });
  EXPECT_EQ(classify_video_error(whole), BadVideoReason::too_short) << whole;  // a whole file: the range is wrong
}

// Frames img_<first>.jpg .. of smooth gradients that differ per frame; returns their pixels.
std::vector<std::vector<uint8_t>> write_frames(const fs::path& dir, int first, int count, int w, int h) {
  fs::create_directories(dir);
  std::vector<std::vector<uint8_t>> frames;
  for (int t = 0; t < count; ++t) {
    std::vector<uint8_t> rgb(size_t(w * h * 3));
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        rgb[size_t((y * w + x) * 3 + 0)] = uint8_t(3 * x + 20 * t);
        rgb[size_t((y * w + x) * 3 + 1)] = uint8_t(5 * y);
        rgb[size_t((y * w + x) * 3 + 2)] = uint8_t(180 - 2 * x - y + 7 * t);
      }
    char name[32];
    std::snprintf(name, sizeof(name), "img_%05d.jpg", first + t);
    test::write_jpeg((dir / name).string(), rgb, w, h);
    frames.push_back(rgb);
  }
  return frames;
}

TEST(ListedVideo, FrameFoldersFromTheListsNumbers) {
  TempDir dir;
  write_frames(dir.path / "f", 901, 6, 32, 24);  // img_00901.jpg .. img_00906.jpg
  // VideoMAE v2 pretraining: "f 901 5" is frames 901..905 (the folder holds one more).
  const ListEntry e = parse_video_list("f 901 5\n", "l.txt", ListFormat::videomae2, dir.path.string()).at(0);
  ListedVideo v(e);
  EXPECT_EQ(v.frames(), 5);
  EXPECT_EQ(v.source_info().num_frames, 5);
  FrameFolderReader plain(dir.file("f"), kDefaultFrameTemplate, 901);
  EXPECT_EQ(v.decode({4, 0}).rgb, plain.decode({4, 0}).rgb);
  EXPECT_TRUE(contains(error_of([&] { v.decode({5}); }), "too short"));
  // More frames listed than the folder holds: too short, naming the folder and the first file.
  const ListEntry over = parse_video_list("f 901 7\n", "l.txt", ListFormat::videomae2, dir.path.string()).at(0);
  const std::string msg = error_of([&] { ListedVideo bad(over); });
  EXPECT_TRUE(contains(msg, "img_00901.jpg")) << msg;
  EXPECT_EQ(classify_video_error(msg), BadVideoReason::too_short) << msg;
  // rawframes number from 1: this folder has no img_00001.jpg.
  const ListEntry raw = parse_video_list("f 6 2\n", "l.txt", ListFormat::rawframes, dir.path.string()).at(0);
  const std::string no_first = error_of([&] { ListedVideo r(raw); });
  EXPECT_TRUE(contains(no_first, "no frames (looked for")) << no_first;
  EXPECT_TRUE(contains(no_first, "img_00001.jpg")) << no_first;
  // Another template.
  write_frames(dir.path / "g", 1, 3, 32, 24);
  for (int k = 1; k <= 3; ++k) {
    char a[32], b[32];
    std::snprintf(a, sizeof(a), "img_%05d.jpg", k);
    std::snprintf(b, sizeof(b), "frame%d.jpg", k);
    fs::rename(dir.path / "g" / a, dir.path / "g" / b);
  }
  const ListEntry g = parse_video_list("g 3 4\n", "l.txt", ListFormat::rawframes, dir.path.string()).at(0);
  ListedVideo gv(g, "frame{}.jpg");
  EXPECT_EQ(parse_frame_template("x_{:07d}.png").width, 7);
  EXPECT_EQ(parse_frame_template("x_{:07d}.png").suffix, ".png");
  EXPECT_TRUE(contains(error_of([] { parse_frame_template("img_{:99999999999}.jpg"); }), "unsupported field"));
  EXPECT_TRUE(contains(error_of([] { parse_frame_template("img.jpg"); }), "has no {} field"));
  EXPECT_EQ(gv.frames(), 3);
  EXPECT_EQ(g.label, 4);
}

// ---- prepare-video and the loader over range lists -----------------------------------------------

// Options that turn `list_text` (written to dir/list.txt, paths relative to dir) into dir/s.ucs.
PrepareOptions store_options(const TempDir& dir, const std::string& list_text, ListFormat format, int short_side) {
  std::ofstream(dir.file("list.txt")) << list_text;
  PrepareOptions o;
  o.list = dir.file("list.txt");
  o.root = dir.path.string();
  o.format = format;
  o.out = dir.file("s.ucs");
  o.short_side = short_side;
  return o;
}

TEST(VideoListStore, RangesAreStoredWithTheirSourceFrameNumbers) {
  TempDir dir;
  const std::string a = make_video(dir, "a.mp4", 1), b = make_video(dir, "b.mp4", 2);
  PrepareOptions o = store_options(dir,
                                   "a.mp4 1 4 20\n"    // 16 frames
                                   "b.mp4 2 0 -1\n"    // the whole video
                                   "a.mp4 3 20 30\n"   // past the end: skipped as too_short
                                   "b.mp4 0 17 24\n",  // the last 7 frames
                                   ListFormat::automatic, 0);
  o.frame_stride = 2;
  const PrepareReport r = prepare_clip_store(o);
  EXPECT_EQ(r.ok, 3);
  EXPECT_EQ(r.skipped.counts[size_t(BadVideoReason::too_short)], 1);
  const ClipStore store = ClipStore::open(o.out);
  ASSERT_EQ(store.size(), 3);
  struct Want {
    std::string path;
    int64_t label, first, frames;
  };
  const Want want[] = {{a, 1, 4, 8}, {b, 2, 0, 12}, {b, 0, 17, 4}};  // frames after stride 2
  for (int64_t i = 0; i < store.size(); ++i) {
    const ClipStoreEntry& e = store.entry(i);
    const Want& w = want[i];
    EXPECT_EQ(e.path, w.path);
    EXPECT_EQ(e.label, w.label);
    EXPECT_EQ(e.source_frames, kFrames);
    ASSERT_EQ(e.frames, w.frames) << i;
    VideoReader whole(w.path);
    for (int64_t k = 0; k < e.frames; ++k) {
      EXPECT_EQ(e.source_index[size_t(k)], uint32_t(w.first + 2 * k)) << i;
      EXPECT_EQ(store.read_frames(i, {k}).rgb, whole.decode({w.first + 2 * k}).rgb) << i << " frame " << k;
    }
  }
}

TEST(VideoListStore, RawframesListIntoAStore) {
  TempDir dir;
  write_frames(dir.path / "1001", 1, 5, 32, 24);
  write_frames(dir.path / "1002", 1, 2, 32, 24);  // the list says 4: skipped as too short
  const PrepareOptions o = store_options(dir, "1001 5 7\n1002 4 3\n", ListFormat::rawframes, 0);
  // A bad file-name template is one error up front, before any folder is opened or store written.
  PrepareOptions bad = o;
  bad.frame_template = "img.jpg";
  const std::string early = error_of([&] { prepare_clip_store(bad); });
  EXPECT_EQ(early.rfind("video: frame name template 'img.jpg' has no {} field", 0), 0u) << early;
  EXPECT_FALSE(fs::exists(o.out));
  ClipLoaderOptions lo;
  lo.frame_template = "img_{:x}.jpg";
  EXPECT_TRUE(contains(error_of([&] { ClipLoader::from_list(o.list, o.root, ListFormat::rawframes, 0, lo); }),
                       "unsupported field"));
  const PrepareReport r = prepare_clip_store(o);
  EXPECT_EQ(r.ok, 1);
  EXPECT_EQ(r.skipped.counts[size_t(BadVideoReason::too_short)], 1);
  const ClipStore store = ClipStore::open(o.out);
  ASSERT_EQ(store.size(), 1);
  EXPECT_EQ(store.entry(0).label, 7);
  EXPECT_EQ(store.entry(0).frames, 5);
  FrameFolderReader plain(dir.file("1001"));
  EXPECT_EQ(store.read_frames(0, {4, 1}).rgb, plain.decode({4, 1}).rgb);
}

TEST(VideoListStore, LoaderOverARangeListEqualsItsStore) {
  TempDir dir;
  make_video(dir, "a.mp4", 1);
  make_video(dir, "b.mp4", 2);
  const PrepareOptions p =
      store_options(dir, "a.mp4 0 2 21\nb.mp4 1 5 24\na.mp4 2 0 12\nb.mp4 3 11 23\n", ListFormat::vswift4, 32);
  prepare_clip_store(p);
  for (const auto mode : {ClipLoaderOptions::Mode::train, ClipLoaderOptions::Mode::test}) {
    ClipLoaderOptions o;
    o.mode = mode;
    o.batch = 2;
    o.num_frames = 4;
    o.sampling_rate = 2;
    o.crop = 16;
    o.seed = 7;
    o.test_segments = 2;
    ClipLoader from_store = ClipLoader::from_store(p.out, o);
    ClipLoader from_list = ClipLoader::from_list(p.list, p.root, ListFormat::vswift4, 32, o);
    ClipBatch x, y;
    int batches = 0;
    while (from_store.next(x)) {
      ASSERT_TRUE(from_list.next(y));
      ASSERT_EQ(x.videos.shape(), y.videos.shape());
      EXPECT_EQ(0, std::memcmp(x.videos.raw(), y.videos.raw(), x.videos.nbytes())) << "batch " << batches;
      EXPECT_EQ(x.labels, y.labels);
      EXPECT_EQ(x.view, y.view);
      ++batches;
    }
    EXPECT_FALSE(from_list.next(y));
    EXPECT_GE(batches, 2);
  }
}

}  // namespace
}  // namespace unmask::video
