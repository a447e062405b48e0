// data/video/clip_store.h: the decode-once clip store (`unmask prepare-video`) and its reader.
//
//   video::PrepareOptions o; o.list = "train.csv"; o.out = "train.ucs"; o.short_side = 128;
//   video::PrepareReport r = video::prepare_clip_store(o);      // decodes every video once
//   video::ClipStore store = video::ClipStore::open("train.ucs");
//   const video::ClipStoreEntry& e = store.entry(3);             // label, frames, H, W, path
//   video::Clip c = store.read_frames(3, {0, 4, 8, 12});         // uint8 [T, H, W, 3], checksummed
//
// Layout of a store (a directory, so no single file grows without bound):
//   STORE/index.bin          header + one record per video (below), ends with its own crc32
//   STORE/chunk-00000.bin    the frames of consecutive videos, packed: [frames, H, W, 3] uint8 RGB
//   STORE/chunk-00001.bin    ... a new chunk starts when the next video would pass --chunk-mb
//   STORE/skipped.tsv        every listed video that was skipped: list line, path, reason,
//                            error message (a header line only when none was); not read back
// index.bin, every integer little-endian:
//   char[8] "UNMASKCS"; u32 format version (kClipStoreVersion); u32 flags (0)
//   i32 short_side, frame_stride, max_frames (0 = all), min_frames; u64 chunk_limit_bytes
//   u64 videos; u64 chunks; u64 total frames; u64 chunk_bytes[chunks]; str source list
//   (a "video" is one listed clip: a whole file, a frame range of one (V-SWIFT lists) or a frame
//   folder; a range keeps its frames' numbers in the source, source_frames is the whole source's)
//   per video: str path; i64 label; i64 source_frames; f64 fps; i32 height, width; u32 chunk;
//              u64 offset (bytes into the chunk); u32 frames; per frame: u32 source frame index,
//              u32 crc32 of the frame's H*W*3 bytes
//   u32 crc32 of every byte before it                       (str = u32 length + bytes)
// Checksums: zlib's crc32 per frame (and over the index). It finds every burst of up to 32
// flipped bits and misses random damage with probability 2^-32 per frame, which is what a
// storage check needs (this is not an adversarial setting); zlib runs it at several GB/s, far
// above the read rate, and is already linked.
//
// Writing is atomic: everything goes to a sibling temp directory (STORE.tmp-<pid>) which is
// renamed into place at the end (an existing store is swapped with RENAME_EXCHANGE, then
// removed), so a failed or interrupted run never leaves a half-written store behind, and an
// existing store is replaced only with --force. The output bytes do not depend on the thread
// count: videos decode in parallel and are committed in list order. The index holds no clock
// time, so the same inputs and options give the same bytes.
//
// The reader validates the header, version, index and chunk sizes when opening (errors say
// what is wrong, where, and how to fix it), reads frames with pread (thread-safe: concurrent
// read_frames calls on one ClipStore are fine) and checks the crc32 of every frame it reads.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/video/decode.h"
#include "data/video/sampling.h"

namespace unmask::video {

constexpr uint32_t kClipStoreVersion = 1;
constexpr char kClipStoreMagic[8] = {'U', 'N', 'M', 'A', 'S', 'K', 'C', 'S'};

// ---- bad videos (shared by prepare_clip_store and the clip loader) -----------------------------

enum class BadVideoReason { missing, zero_length, corrupt, truncated, audio_only, unsupported_codec, too_short };
constexpr int kBadVideoReasons = 7;
const char* bad_video_reason_name(BadVideoReason reason);  // "corrupt", "too_short", ...
/// The reason behind a VideoReader error message (decode.cc's wording).
BadVideoReason classify_video_error(const std::string& message);

/// Whether a video file is whole: the one rule prepare-video and the clip loader's list input
/// (pretrain-video --data LIST, bench loader --list) apply before using a file. Returns normally
/// for a whole file (and for frame folders, which carry no container claims); otherwise throws
/// an Error naming info.path in classify_video_error's wording:
///   corrupt:   the demuxer stopped on a read error rather than at the end of the file
///              (info.read_error), or frames are lost inside the video: its gaps (steps over 2.5
///              frame intervals and twice their neighbours; VideoReader measures them) lose more
///              than the tolerance below, or the frames end early (as below) with more of the
///              file unread than a packet cut in two leaves (unread_bytes > largest_packet +
///              kWholeVideoSlackBytes): the demuxer gave up on damaged data, which Matroska
///              reports as a plain end of file;
///   truncated: (unless keep_truncated) the header lists more frames than there are (MP4), or
///              the frames end before the container's duration (any container: WebM/Matroska
///              store no frame count) by more than the tolerance, gaps included, and the file
///              ends there (an interrupted download).
/// Tolerance: max(kWholeVideoSlackFrames frame intervals, kWholeVideoSlackFraction of the
/// duration (the container's, else the frames' span)). Why these: a whole file can miss its
/// container's end by up to about one frame (timestamps rounded to the time base, WebM stores no
/// last-frame length so one median interval is assumed, muxers differ on whether the duration
/// counts the last frame), so 1.5 intervals is the least that means a whole frame is gone. The
/// 5% absorbs what is not damage: a file duration that counts an audio track running a few
/// tenths of a second past the video (Matroska files without per-track DURATION tags) and the
/// approximate interval of variable-frame-rate video. An interrupted download loses far more
/// (SSv2: half of a 2-6 s file) and a lost Matroska cluster a keyframe interval or more.
/// A frame the decoder flags as damaged is found only when decoded (VideoReader::decode throws
/// "corrupt"): prepare-video decodes every kept frame, the loader only the GOPs it samples.
constexpr double kWholeVideoSlackFrames = 1.5;
constexpr double kWholeVideoSlackFraction = 0.05;
constexpr int64_t kWholeVideoSlackBytes = 1024;  // a cut file: the partial packet plus element headers
void check_video_integrity(const VideoInfo& info, bool keep_truncated);

/// Skipped videos counted per reason, plus the first few error messages.
struct BadVideoTally {
  std::array<int64_t, kBadVideoReasons> counts{};
  std::vector<std::string> examples;  // the first kMaxExamples messages (they name the file)
  static constexpr size_t kMaxExamples = 5;
  void add(BadVideoReason reason, const std::string& message);
  int64_t total() const;
  std::string summary() const;  // "2 corrupt, 1 too_short" ("none" when empty)
};

// ---- writing ------------------------------------------------------------------------------------

struct PrepareProgress {
  int64_t done = 0, total = 0;  // videos committed (ok or skipped) / listed
  int64_t ok = 0, skipped = 0, frames = 0, bytes = 0;
  double seconds = 0;
};

struct PrepareOptions {
  std::string list;  // list file (any video_list.h format)
  std::string root;  // joined to relative paths of the list
  ListFormat format = ListFormat::automatic;
  std::string frame_template = "img_{:05}.jpg";          // file names in frame folders (videomae2, rawframes)
  std::string out;                                       // store directory to create
  int short_side = 128;                                  // resize so min(H, W) == short_side; 0 = native size
  int frame_stride = 1;                                  // keep source frames 0, s, 2s, ...
  int max_frames = 0;                                    // keep at most this many (0 = all)
  int min_frames = 1;                                    // fewer kept frames -> skipped as too_short
  int64_t chunk_bytes = int64_t(256) << 20;              // chunk size limit (a larger video gets a chunk alone)
  int threads = 2;                                       // decoding threads (output bytes do not depend on it)
  bool strict = false;                                   // the first bad video is an Error naming it
  bool force = false;                                    // replace an existing store
  bool keep_truncated = false;                           // keep the complete frames of a truncated file
  std::function<void(const PrepareProgress&)> progress;  // called after each committed video
};

/// One listed video prepare-video skipped, as STORE/skipped.tsv lists it.
struct SkippedVideo {
  int64_t list_line = 0;  // its line in the list file (0 = unknown)
  std::string path;
  BadVideoReason reason = BadVideoReason::corrupt;
  std::string detail;  // the error message
};

struct PrepareReport {
  int64_t listed = 0, ok = 0, frames = 0, bytes = 0, chunks = 0;
  BadVideoTally skipped;
  std::vector<SkippedVideo> skipped_videos;  // every skipped video, in list order
  std::string skipped_report;                // STORE/skipped.tsv: the same, one line each (always written)
  double seconds = 0;
};

/// "skipped.tsv": the store's report of skipped videos (see the layout above).
constexpr const char* kSkippedReportName = "skipped.tsv";
/// Its text: a header line "line\tpath\treason\tdetail", then one line per video; a tab, newline,
/// carriage return or backslash inside a field is written as \t, \n, \r or \\.
std::string skipped_report_tsv(const std::vector<SkippedVideo>& videos);

/// Decodes every listed video once and writes the store (see the top of this file).
PrepareReport prepare_clip_store(const PrepareOptions& options);

/// Serialises a store's index (used by the writer; exposed for tests and the fuzzer's seeds).
struct ClipStoreHeader {
  uint32_t version = kClipStoreVersion;
  int short_side = 0, frame_stride = 1, max_frames = 0, min_frames = 1;
  uint64_t chunk_limit_bytes = 0;
  uint64_t total_frames = 0;
  std::vector<uint64_t> chunk_bytes;  // size of each chunk file
  std::string source_list;
};

struct ClipStoreEntry {
  std::string path;  // the video's path as listed (after --root)
  int64_t label = 0;
  int64_t source_frames = 0;  // frames of the source video
  double fps = 0;
  int height = 0, width = 0;  // stored (resized) frame size
  uint32_t chunk = 0;
  uint64_t offset = 0;                 // byte offset of frame 0 in the chunk
  int64_t frames = 0;                  // kept frames
  std::vector<uint32_t> source_index;  // [frames] source frame number of each kept frame
  std::vector<uint32_t> crc;           // [frames] crc32 of each frame's bytes
  uint64_t frame_bytes() const { return uint64_t(height) * uint64_t(width) * 3; }
};

std::string serialize_clip_store_index(const ClipStoreHeader& header, const std::vector<ClipStoreEntry>& entries);

// ---- reading ------------------------------------------------------------------------------------

struct ClipStoreOpenOptions {
  bool verify_index_checksum = true;  // the fuzzer turns it off to reach the parser behind it
};

class ClipStore {
 public:
  /// Opens STORE/index.bin and checks every chunk file's size against the index.
  static ClipStore open(const std::string& dir, const ClipStoreOpenOptions& options = {});
  /// A store held in memory (tests, fuzzer): `name` appears in errors.
  static ClipStore from_memory(std::string index_bytes, std::vector<std::string> chunks,
                               const std::string& name = "<memory>", const ClipStoreOpenOptions& options = {});

  ClipStore(ClipStore&&) noexcept;
  ClipStore& operator=(ClipStore&&) noexcept;
  ~ClipStore();

  int64_t size() const;  // videos
  const ClipStoreEntry& entry(int64_t i) const;
  const ClipStoreHeader& header() const;
  const std::string& path() const;
  /// Frames `frames` (indices into the kept frames, any order, repeats allowed) of video i as
  /// uint8 [T, H, W, 3]. Verifies each frame's crc32: a mismatch is an Error naming the store,
  /// the video and the frame.
  Clip read_frames(int64_t i, const std::vector<int64_t>& frames) const;

 private:
  struct Impl;
  explicit ClipStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// "chunk-00003.bin"
std::string clip_store_chunk_name(uint32_t chunk);

}  // namespace unmask::video
