// data/video/decode.h: FFmpeg-backed random access to the frames of one video file.
//
//   video::VideoReader r("clip.webm");               // opens, indexes packets (no decode)
//   const video::VideoInfo& in = r.info();           // frames, fps, duration, size, codec
//   video::DecodeOptions o; o.short_side = 128;      // optional short-side resize
//   video::Clip c = r.decode({0, 4, 8, 12}, o);      // uint8 RGB, [T, H, W, 3], in the given order
//
// Opening demuxes every packet once (cheap: no decoding) to build a table of presentation
// timestamps and keyframes. Frame k is the k-th smallest pts of the video stream, so indices do
// not depend on container timestamps being contiguous or on B-frame reordering. decode() seeks
// to the keyframe at or before the first wanted frame, decodes forward, keeps the wanted frames
// and seeks again when a later wanted frame lies past another keyframe (so a sparse clip of a
// long video decodes only the GOPs it touches).
//
// Every FFmpeg object is owned by a RAII handle; every failure throws unmask::Error naming the
// file and what failed: missing or zero-length file, not a media file / corrupt header, no video
// stream (audio-only), no decoder for the codec, an index past the end ("too short"), a frame
// that cannot be decoded or that the decoder flags as damaged (truncated or corrupt data).
// Opening a damaged file succeeds when it holds frames: VideoInfo says what the container
// claims and what is there, and check_video_integrity (clip_store.h) decides whether to use it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace unmask::video {

struct VideoInfo {
  std::string path;
  std::string codec;         // decoder name, e.g. "h264", "vp9"
  int64_t num_frames = 0;    // exact: counted packets of the video stream
  double fps = 0;            // average frame rate (stream avg_frame_rate, else r_frame_rate)
  double duration_s = 0;     // (last pts - first pts + one frame) in seconds
  int width = 0, height = 0;
  int64_t num_keyframes = 0;
  int64_t container_frames = 0;  // what the container's header claims (0 = unknown); more than
                                 // num_frames means the file is truncated
  // What the container says about the video's time line, against the frames that are there
  // (check_video_integrity in clip_store.h judges these; frame folders leave them 0). Matroska /
  // WebM stores no frame count, so its truncation and lost clusters show only here.
  double container_duration_s = 0;  // the video stream's duration per the container: the stream's
                                    // own (MP4), Matroska's per-track DURATION tag, else the file's
                                    // (0 = unknown, or only guessed from the bit rate)
  double frame_interval_s = 0;      // the median step between consecutive frames (1 / fps if < 2 frames)
  double missing_end_s = 0;         // the container's end time minus the end of the last frame (its
                                    // pts + one interval); > 0: the tail is missing
  int64_t gaps = 0;                 // steps between consecutive frames over 2.5 intervals and twice
                                    // their neighbours: frames lost inside
  double gap_s = 0;                 // the time those gaps lose: sum of (step - one interval)
  double first_gap_at_s = 0;        // where the first gap starts (seconds from the first frame)
  std::string read_error;           // the demuxer stopped on an error, not at the end of the file
                                    // (e.g. "Invalid data found ... after 13 frames"); "" = a clean end
  int64_t unread_bytes = 0;         // bytes of the file past the end of the last packet read (any
                                    // stream): about one packet when the file is cut, much more when
                                    // the demuxer gave up on damaged data (Matroska then reports a
                                    // plain end of file, so this is what tells the two apart)
  int64_t largest_packet = 0;       // bytes of the largest packet read (any stream)
};

struct DecodeOptions {
  int short_side = 0;  // 0 = native size; else resize so min(H, W) == short_side (long side truncated
                       // like torchvision's Resize(int): long = int(short_side * long / short))
};

/// Size of a frame after the short-side resize (the rule above).
void resized_size(int width, int height, int short_side, int* out_width, int* out_height);

/// A decoded clip: frames [T, H, W, 3] uint8 RGB, row-major, frame after frame.
struct Clip {
  int64_t frames = 0;
  int height = 0, width = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* frame(int64_t t) const { return rgb.data() + t * int64_t(height) * width * 3; }
};

/// Counters of one decode() (for the loader's time split and the seek tests).
struct DecodeStats {
  int64_t seeks = 0;           // av_seek_frame calls
  int64_t frames_decoded = 0;  // frames out of the decoder (wanted or not)
  int64_t damaged_frames = 0;  // of those, frames the decoder flagged (concealed errors, missing
                               // references); a wanted one is an Error ("corrupt")
};

class VideoReader {
 public:
  explicit VideoReader(const std::string& path);
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  const VideoInfo& info() const;
  /// Decodes the frames at `indices` (any order, repeats allowed; each must be < num_frames).
  Clip decode(const std::vector<int64_t>& indices, const DecodeOptions& options = {});
  /// Decodes every frame.
  Clip decode_all(const DecodeOptions& options = {});
  const DecodeStats& last_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One JPEG image (an ImageNet-style file) decoded with libturbojpeg, resized like the frames
/// (swscale bicubic, the short side to options.short_side when given): a one-frame Clip.
Clip decode_image(const std::string& path, const DecodeOptions& options = {});

/// A frame-file name template ("img_{:05}.jpg"): the text around its one {} field and the field's
/// zero-padded width. Anything else (no field, "%05d", "{:x}", a width over 64) throws an Error
/// naming the template, so a command can check --fname-tmpl before it opens any folder.
struct FrameTemplate {
  std::string prefix, suffix;
  int width = 0;
};
FrameTemplate parse_frame_template(const std::string& name_template);

/// A folder of JPEG frames (VideoMAE v2 / SSv2 "rawframes": img_00001.jpg, img_00002.jpg, ...),
/// decoded with libturbojpeg. Frame k is the file named by `name_template` with number
/// first_number + k; the frame count is the length of the run of existing files from
/// first_number, or the list's count when one is given and its first and last files exist (a
/// missing file inside is then found by the decode that asks for it). The template holds one "{:0Nd}"-style field, written "{:05}" (Python's
/// format, as VideoMAE v2's --fname_tmpl) or "{}" (no padding). Resizing uses swscale bicubic,
/// as VideoReader does; every frame must have the size of the first.
class FrameFolderReader {
 public:
  /// `expected_frames` > 0 (a list's count): when the folder's frames 0 and expected_frames - 1
  /// exist, the count is taken as expected_frames without looking at every file (a folder may
  /// hold tens of thousands); otherwise the run is counted as usual.
  explicit FrameFolderReader(const std::string& dir, const std::string& name_template = "img_{:05}.jpg",
                             int first_number = 1, int64_t expected_frames = 0);
  ~FrameFolderReader();
  FrameFolderReader(const FrameFolderReader&) = delete;
  FrameFolderReader& operator=(const FrameFolderReader&) = delete;

  const VideoInfo& info() const { return info_; }  // codec "jpeg"; fps 0 (unknown)
  Clip decode(const std::vector<int64_t>& indices, const DecodeOptions& options = {});
  std::string frame_path(int64_t k) const;

 private:
  std::string dir_, prefix_, suffix_;
  int width_field_ = 0;
  int first_number_ = 1;
  VideoInfo info_;
  void* tj_ = nullptr;  // tjhandle
  // Frame k's pixels; header_only: just its size (no pixels decoded, an empty vector).
  std::vector<uint8_t> decode_jpeg(int64_t k, int* width, int* height, bool header_only = false);
};

}  // namespace unmask::video
