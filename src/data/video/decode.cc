// data/video/decode.cc: VideoReader (see decode.h for the contract).
#include "data/video/decode.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <map>
#include <mutex>

#include "unmask/error.h"
#include "data/video/ffmpeg_util.h"

namespace unmask::video {

namespace ff {
void quiet_logs() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(AV_LOG_FATAL); });
}
}  // namespace ff

void resized_size(int width, int height, int short_side, int* out_width, int* out_height) {
  if (short_side <= 0 || width <= 0 || height <= 0) {
    *out_width = width;
    *out_height = height;
    return;
  }
  if (width <= height) {
    *out_width = short_side;
    *out_height = int(int64_t(short_side) * height / width);
  } else {
    *out_height = short_side;
    *out_width = int(int64_t(short_side) * width / height);
  }
}

struct VideoReader::Impl {
  VideoInfo info;
  ff::InputPtr fmt;
  ff::CodecPtr codec;
  ff::PacketPtr packet;
  ff::FramePtr frame;
  ff::SwsPtr sws;
  int sws_colorspace = -1, sws_src_full = -1;  // the colour details `sws` was last set up with
  int stream = -1;
  std::vector<int64_t> pts_sorted;       // frame k's pts = pts_sorted[k] (stream time base)
  std::vector<int64_t> keyframe_index;   // frame indices of keyframes, ascending
  int64_t last_index = -1;               // index of the last frame the decoder returned; -1 = after a seek
  bool at_eof = false;
  DecodeStats stats;

  [[noreturn]] void fail(const std::string& what, const std::string& hint) const {
    throw Error("video: ", info.path, ": ", what, Hint(hint));
  }

  void open(const std::string& path) {
    ff::quiet_logs();
    info.path = path;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) fail("no such file", "check the path in the list file");
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) fail("cannot read the file size: " + ec.message(), "check permissions");
    if (size == 0) fail("zero-length file", "the file is empty; re-download or re-encode it");

    AVFormatContext* raw = nullptr;
    // "file:" keeps a name like "pipe:0" or "concat:a|b" from being read as an FFmpeg protocol.
    const std::string url = "file:" + path;
    int rc = avformat_open_input(&raw, url.c_str(), nullptr, nullptr);  // frees raw on failure
    if (rc < 0) fail("cannot open as a media file: " + ff::error_string(rc),
                     "the header is corrupt or truncated, or this is not a video file");
    fmt.reset(raw);
    rc = avformat_find_stream_info(fmt.get(), nullptr);
    if (rc < 0) fail("cannot read stream info: " + ff::error_string(rc), "the file is corrupt or truncated");

    const AVCodec* decoder = nullptr;
    rc = av_find_best_stream(fmt.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
    if (rc == AVERROR_STREAM_NOT_FOUND)
      fail("no video stream (audio-only or data-only file)", "use a file with a video track");
    if (rc == AVERROR_DECODER_NOT_FOUND || (rc >= 0 && !decoder)) {
      const AVStream* s = fmt->streams[av_find_best_stream(fmt.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0)];
      fail(std::string("unsupported codec '") + avcodec_get_name(s->codecpar->codec_id) + "'",
           "re-encode to H.264 or VP9, e.g. ffmpeg -i in -c:v libx264 out.mp4");
    }
    if (rc < 0) fail("cannot select the video stream: " + ff::error_string(rc), "the file is corrupt");
    stream = rc;
    AVStream* st = fmt->streams[stream];

    codec.reset(avcodec_alloc_context3(decoder));
    if (!codec) fail("out of memory allocating the decoder", "free memory");
    rc = avcodec_parameters_to_context(codec.get(), st->codecpar);
    if (rc < 0) fail("bad codec parameters: " + ff::error_string(rc), "the file is corrupt");
    codec->thread_count = 1;  // the loader parallelizes over clips; one thread keeps decode deterministic
    rc = avcodec_open2(codec.get(), decoder, nullptr);
    if (rc < 0) fail(std::string("cannot open the ") + decoder->name + " decoder: " + ff::error_string(rc),
                     "unsupported profile or corrupt codec parameters");
    if (codec->width <= 0 || codec->height <= 0) fail("video stream has no frame size", "the file is corrupt");
    if (codec->width > 16384 || codec->height > 16384)
      fail("frame size " + std::to_string(codec->width) + "x" + std::to_string(codec->height) + " is over 16384",
           "the header is corrupt, or downscale the video first");

    packet.reset(av_packet_alloc());
    frame.reset(av_frame_alloc());
    if (!packet || !frame) fail("out of memory", "free memory");

    index_packets();
    measure_timeline(st);
    info.codec = decoder->name;
    info.container_frames = st->nb_frames > 0 ? st->nb_frames : 0;
    info.width = codec->width;
    info.height = codec->height;
    AVRational rate = st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
    info.fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0.0;
    const double tb = av_q2d(st->time_base);
    const int64_t n = info.num_frames;
    const double frame_s = info.fps > 0 ? 1.0 / info.fps : 0.0;
    info.duration_s = n > 0 ? double(pts_sorted.back() - pts_sorted.front()) * tb + frame_s : 0.0;
  }

  // Demuxes every packet once to count the frames and find the keyframes. The scan ends at the
  // end of the file, at a packet cut short (a truncated tail) or at a read error; the frames
  // before it stay usable, and info.read_error tells an error from the end of the file.
  void index_packets() {
    std::vector<std::pair<int64_t, bool>> entries;  // (pts, keyframe)
    int64_t fallback_pts = 0;
    int64_t last_end = 0;  // end of the furthest packet read, in bytes
    while (true) {
      const int rc = av_read_frame(fmt.get(), packet.get());
      if (rc < 0) {
        if (rc != AVERROR_EOF)
          info.read_error = ff::error_string(rc) + " after " + std::to_string(entries.size()) + " frames";
        break;
      }
      if (packet->pos >= 0) last_end = std::max(last_end, packet->pos + int64_t(packet->size));
      info.largest_packet = std::max(info.largest_packet, int64_t(packet->size));
      if (packet->stream_index == stream && (packet->flags & AV_PKT_FLAG_CORRUPT)) {
        av_packet_unref(packet.get());  // a packet cut short by truncation: the frames before it stay usable
        break;
      }
      if (packet->stream_index == stream) {
        int64_t pts = packet->pts != AV_NOPTS_VALUE ? packet->pts : packet->dts;
        if (pts == AV_NOPTS_VALUE) pts = fallback_pts;
        fallback_pts = pts + 1;
        entries.emplace_back(pts, (packet->flags & AV_PKT_FLAG_KEY) != 0);
      }
      av_packet_unref(packet.get());
    }
    if (entries.empty()) fail("the video stream has no frames", "the file is truncated or empty");
    const int64_t file_bytes = fmt->pb ? avio_size(fmt->pb) : -1;
    info.unread_bytes = file_bytes > 0 && last_end > 0 ? std::max<int64_t>(0, file_bytes - last_end) : 0;
    std::sort(entries.begin(), entries.end());
    for (const auto& [pts, key] : entries) {
      if (!pts_sorted.empty() && pts_sorted.back() == pts) continue;  // duplicate timestamps: one frame
      if (key || pts_sorted.empty()) keyframe_index.push_back(int64_t(pts_sorted.size()));
      pts_sorted.push_back(pts);
    }
    info.num_frames = int64_t(pts_sorted.size());
    info.num_keyframes = int64_t(keyframe_index.size());
    last_index = -1;
    at_eof = true;  // the demuxer sits at the end: the first decode must seek
  }

  // Where the container says the video stream ends and how long it lasts, in seconds; false
  // when it says nothing or libavformat only guessed from the bit rate (no claim to check).
  // MP4 (and most formats) give a length from the stream's start. Matroska's durations, the
  // Segment's and each track's DURATION tag (written by ffmpeg's and mkvmerge's muxers), are end
  // times: its timestamps count from the segment's start, and a clip cut out of a longer file
  // with -c copy starts later. The file's duration is the longest track's (audio may run on), so
  // the video track's own tag comes first.
  bool container_timeline(const AVStream* st, double* end_s, double* duration_s) const {
    if (fmt->duration_estimation_method == AVFMT_DURATION_FROM_BITRATE) return false;
    const double tb = av_q2d(st->time_base);
    const double start = st->start_time != AV_NOPTS_VALUE ? double(st->start_time) * tb
                                                          : double(pts_sorted.front()) * tb;
    const char* format = fmt->iformat && fmt->iformat->name ? fmt->iformat->name : "";
    const bool matroska = std::strncmp(format, "matroska", 8) == 0;  // "matroska,webm"
    double end = 0;
    if (!matroska && st->duration != AV_NOPTS_VALUE && st->duration > 0) {  // MP4's mdhd, AVI's header, ...
      end = start + double(st->duration) * tb;
    } else if (const AVDictionaryEntry* tag = matroska ? av_dict_get(st->metadata, "DURATION", nullptr, 0) : nullptr) {
      int h = 0, m = 0;  // "HH:MM:SS.nnnnnnnnn"
      double sec = 0;
      if (std::sscanf(tag->value, "%d:%d:%lf", &h, &m, &sec) != 3 || h < 0 || m < 0 || sec < 0) return false;
      end = h * 3600.0 + m * 60.0 + sec;
    } else if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0) {
      const double fmt_start = fmt->start_time != AV_NOPTS_VALUE ? double(fmt->start_time) / AV_TIME_BASE : 0.0;
      end = (matroska ? 0.0 : fmt_start) + double(fmt->duration) / AV_TIME_BASE;
    } else {
      return false;
    }
    *end_s = end;
    *duration_s = end - start;
    return *duration_s > 0;
  }

  // Fills VideoInfo's time-line fields (decode.h) from the indexed frames. The frame interval is
  // the median step, so lost frames or a variable frame rate do not shift it. A gap is a step over
  // 2.5 intervals and over twice each neighbouring step: damage loses whole clusters (a keyframe
  // interval or more) between frames at the usual rate, while a dropped frame (a step of 2) or a
  // stretch of variable-frame-rate video at a lower rate (its neighbours as long) is no gap.
  void measure_timeline(const AVStream* st) {
    const double tb = av_q2d(st->time_base);
    const size_t n = pts_sorted.size();
    std::vector<int64_t> steps;  // steps[i] = pts[i + 1] - pts[i]
    for (size_t i = 1; i < n; ++i) steps.push_back(pts_sorted[i] - pts_sorted[i - 1]);
    double interval = 0;
    if (!steps.empty()) {
      std::vector<int64_t> sorted = steps;
      std::nth_element(sorted.begin(), sorted.begin() + ptrdiff_t(sorted.size() / 2), sorted.end());
      interval = double(sorted[sorted.size() / 2]) * tb;
    } else {
      const AVRational rate = st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
      if (rate.num > 0 && rate.den > 0) interval = 1.0 / av_q2d(rate);
    }
    info.frame_interval_s = interval;
    for (size_t i = 0; interval > 0 && i < steps.size(); ++i) {
      const int64_t neighbour = std::max(i > 0 ? steps[i - 1] : 0, i + 1 < steps.size() ? steps[i + 1] : 0);
      const double step = double(steps[i]) * tb;
      if (step <= 2.5 * interval || steps[i] <= 2 * neighbour) continue;
      if (info.gaps == 0) info.first_gap_at_s = double(pts_sorted[i] - pts_sorted[0]) * tb + interval;
      ++info.gaps;
      info.gap_s += step - interval;
    }
    double end = 0, duration = 0;
    if (container_timeline(st, &end, &duration)) {
      info.container_duration_s = duration;
      info.missing_end_s = end - (double(pts_sorted.back()) * tb + interval);
    }
  }

  int64_t index_of(int64_t pts) const {
    auto it = std::lower_bound(pts_sorted.begin(), pts_sorted.end(), pts);
    if (it == pts_sorted.end()) return int64_t(pts_sorted.size()) - 1;
    if (*it != pts && it != pts_sorted.begin() && pts - *(it - 1) < *it - pts) --it;
    return int64_t(it - pts_sorted.begin());
  }

  void seek_to_frame(int64_t k) {
    const int rc = av_seek_frame(fmt.get(), stream, pts_sorted[size_t(k)], AVSEEK_FLAG_BACKWARD);
    if (rc < 0) fail("seek to frame " + std::to_string(k) + " failed: " + ff::error_string(rc),
                     "the file's index is damaged; re-mux it (ffmpeg -i in -c copy out)");
    avcodec_flush_buffers(codec.get());
    ++stats.seeks;
    last_index = -1;
    at_eof = false;
  }

  // Decodes the next frame into `frame`; false at the end of the stream.
  bool next_frame() {
    while (true) {
      int rc = avcodec_receive_frame(codec.get(), frame.get());
      if (rc >= 0) {
        int64_t ts = frame->best_effort_timestamp;
        if (ts == AV_NOPTS_VALUE) ts = frame->pts;
        last_index = ts == AV_NOPTS_VALUE ? last_index + 1 : index_of(ts);
        ++stats.frames_decoded;
        if (frame_damaged()) ++stats.damaged_frames;
        return true;
      }
      if (rc == AVERROR_EOF) return false;
      if (rc != AVERROR(EAGAIN))
        fail("decoding failed after frame " + std::to_string(last_index) + ": " + ff::error_string(rc),
             "the video data is corrupt");
      if (at_eof) return false;
      rc = av_read_frame(fmt.get(), packet.get());
      if (rc < 0) {
        at_eof = true;
        avcodec_send_packet(codec.get(), nullptr);  // drain the frames the decoder still holds
        continue;
      }
      if (packet->stream_index != stream) {
        av_packet_unref(packet.get());
        continue;
      }
      rc = avcodec_send_packet(codec.get(), packet.get());
      av_packet_unref(packet.get());
      if (rc < 0 && rc != AVERROR(EAGAIN))
        fail("corrupt packet after frame " + std::to_string(last_index) + ": " + ff::error_string(rc),
             "the video data is corrupt or truncated");
    }
  }

  // The decoder hid an error in this frame (concealment, a missing reference): its pixels are not
  // the video's. Whole VP9, VP8, MPEG-4 and H.264 files (B-frames, open GOPs, random seeks)
  // raised none when checked; an MP4 with damaged bytes does.
  bool frame_damaged() const {
    return frame->decode_error_flags != 0 || (frame->flags & AV_FRAME_FLAG_CORRUPT) != 0;
  }

  void convert(uint8_t* dst, int out_w, int out_h) {
    const auto src_fmt = AVPixelFormat(frame->format);
    SwsContext* before = sws.get();
    sws.reset(sws_getCachedContext(sws.release(), frame->width, frame->height, src_fmt, out_w, out_h,
                                   AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr));
    if (!sws) fail(std::string("cannot convert pixel format ") + (av_get_pix_fmt_name(src_fmt) ? av_get_pix_fmt_name(src_fmt) : "?") + " to RGB24",
                   "unsupported pixel format");
    // The frame's own matrix and range, as the ffmpeg CLI's scale filter applies them.
    // (Re-)initializing the tables is costly: only when the context or the frame's colour changes.
    const int cs = frame->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : int(frame->colorspace);
    const int src_full = frame->color_range == AVCOL_RANGE_JPEG ? 1 : 0;
    if (sws.get() != before || cs != sws_colorspace || src_full != sws_src_full) {
      int* inv = nullptr; int* tab = nullptr; int src_range = 0, dst_range = 0, b = 0, c = 0, s = 0;
      if (sws_getColorspaceDetails(sws.get(), &inv, &src_range, &tab, &dst_range, &b, &c, &s) >= 0)
        sws_setColorspaceDetails(sws.get(), sws_getCoefficients(cs), src_full, tab, dst_range, b, c, s);
      sws_colorspace = cs;
      sws_src_full = src_full;
    }
    uint8_t* planes[4] = {dst, nullptr, nullptr, nullptr};
    int strides[4] = {out_w * 3, 0, 0, 0};
    sws_scale(sws.get(), frame->data, frame->linesize, 0, frame->height, planes, strides);
  }

  Clip decode(const std::vector<int64_t>& indices, const DecodeOptions& options) {
    stats = {};
    const int64_t n = info.num_frames;
    for (const int64_t k : indices)
      if (k < 0 || k >= n)
        fail("too short: frame " + std::to_string(k) + " asked for, the video has " + std::to_string(n) + " frames" +
                 (info.container_frames > n ? " (its header lists " + std::to_string(info.container_frames) +
                                                  ": the file is truncated)" : ""),
             "sample fewer frames or a lower sampling rate, or drop this video");
    Clip clip;
    resized_size(info.width, info.height, options.short_side, &clip.width, &clip.height);
    clip.frames = int64_t(indices.size());
    const size_t frame_bytes = size_t(clip.width) * clip.height * 3;
    clip.rgb.resize(frame_bytes * indices.size());
    std::map<int64_t, std::vector<size_t>> slots;  // wanted frame -> output positions
    for (size_t i = 0; i < indices.size(); ++i) slots[indices[i]].push_back(i);

    auto store = [&](int64_t k) {
      auto it = slots.find(k);
      if (it == slots.end() || it->second.empty()) return;
      if (frame_damaged())
        fail("corrupt frame " + std::to_string(k) + ": the decoder reports damaged data (error flags " +
                 std::to_string(frame->decode_error_flags) + ")",
             "the video data is corrupt; re-download or re-encode the file");
      uint8_t* first = clip.rgb.data() + it->second[0] * frame_bytes;
      convert(first, clip.width, clip.height);
      for (size_t j = 1; j < it->second.size(); ++j)
        std::copy(first, first + frame_bytes, clip.rgb.data() + it->second[j] * frame_bytes);
      it->second.clear();  // done
    };

    for (const auto& [wanted, where] : slots) {
      if (where.empty()) continue;  // stored while decoding towards an earlier one
      const auto kf_it = std::upper_bound(keyframe_index.begin(), keyframe_index.end(), wanted);
      const int64_t keyframe = kf_it == keyframe_index.begin() ? 0 : *(kf_it - 1);
      // Seek when the decoder is not positioned before `wanted`, or a keyframe lies between
      // the position and `wanted` (skipping whole GOPs is cheaper than decoding them).
      bool from_start = false;
      if (at_eof || last_index < 0 || last_index >= wanted || last_index < keyframe - 1) seek_to_frame(keyframe);
      while (true) {
        if (!next_frame())
          fail("stream ends before frame " + std::to_string(wanted) + " of " + std::to_string(n),
               "the file is truncated or corrupt");
        store(last_index);
        if (last_index == wanted) break;
        if (last_index > wanted) {
          if (from_start) fail("cannot reach frame " + std::to_string(wanted) + " (timestamps out of order)",
                               "re-mux the file: ffmpeg -i in -c copy out");
          from_start = true;  // the seek overshot: decode from the very first frame instead
          seek_to_frame(0);
        }
      }
    }
    return clip;
  }
};

VideoReader::VideoReader(const std::string& path) : impl_(std::make_unique<Impl>()) { impl_->open(path); }
VideoReader::~VideoReader() = default;
const VideoInfo& VideoReader::info() const { return impl_->info; }
const DecodeStats& VideoReader::last_stats() const { return impl_->stats; }

Clip VideoReader::decode(const std::vector<int64_t>& indices, const DecodeOptions& options) {
  return impl_->decode(indices, options);
}

Clip VideoReader::decode_all(const DecodeOptions& options) {
  std::vector<int64_t> all(size_t(impl_->info.num_frames));
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  return impl_->decode(all, options);
}

// ---- JPEG frame folders ------------------------------------------------------------------------

FrameTemplate parse_frame_template(const std::string& name_template) {
  FrameTemplate t;
  const auto open = name_template.find('{'), close = name_template.find('}');
  if (open == std::string::npos || close == std::string::npos || close < open)
    throw Error("video: frame name template '", name_template, "' has no {} field",
                Hint("use e.g. img_{:05}.jpg"));
  t.prefix = name_template.substr(0, open);
  t.suffix = name_template.substr(close + 1);
  const std::string field = name_template.substr(open + 1, close - open - 1);  // "", ":05", ":05d"
  if (!field.empty()) {
    size_t i = field[0] == ':' ? 1 : 0;
    while (i < field.size() && std::isdigit(static_cast<unsigned char>(field[i])) && t.width <= 64)
      t.width = t.width * 10 + (field[i++] - '0');
    if (i < field.size() && field[i] == 'd') ++i;
    if (i != field.size() || field[0] != ':' || t.width > 64)
      throw Error("video: frame name template '", name_template, "': unsupported field {", field, "}",
                  Hint("use {}, {:05} or {:05d} (a width up to 64)"));
  }
  return t;
}

FrameFolderReader::FrameFolderReader(const std::string& dir, const std::string& name_template, int first_number,
                                     int64_t expected_frames)
    : dir_(dir), first_number_(first_number) {
  info_.path = dir;
  info_.codec = "jpeg";
  const FrameTemplate t = parse_frame_template(name_template);
  prefix_ = t.prefix;
  suffix_ = t.suffix;
  width_field_ = t.width;
  std::error_code ec;
  const bool exists = std::filesystem::exists(dir, ec);
  if (ec) throw Error("video: ", dir, ": cannot access: ", ec.message(), Hint("check the folder's permissions"));
  if (!exists)  // the wording classify_video_error counts as "missing"
    throw Error("video: ", dir, ": no such file or directory", Hint("check the path in the list file"));
  if (!std::filesystem::is_directory(dir, ec))
    throw Error("video: ", dir, ": not a directory of frames", Hint("check the path in the list file"));
  if (expected_frames > 0 && std::filesystem::exists(frame_path(0), ec) &&
      std::filesystem::exists(frame_path(expected_frames - 1), ec))
    info_.num_frames = expected_frames;
  else
    while (std::filesystem::exists(frame_path(info_.num_frames), ec)) ++info_.num_frames;
  if (info_.num_frames == 0)
    throw Error("video: ", dir, ": no frames (looked for ", frame_path(0), ")",
                Hint("pass the right --fname-tmpl (and list the right first frame number)"));
  tj_ = tjInitDecompress();
  if (!tj_) throw Error("video: cannot create a libturbojpeg decompressor");
  // The size of the first frame is the folder's; its header says it without decoding the pixels
  // (a loader opens a folder for every clip it reads).
  decode_jpeg(0, &info_.width, &info_.height, /*header_only=*/true);
  info_.num_keyframes = info_.num_frames;
}

FrameFolderReader::~FrameFolderReader() {
  if (tj_) tjDestroy(tj_);
}

std::string FrameFolderReader::frame_path(int64_t k) const {
  std::string number = std::to_string(first_number_ + k);
  if (int(number.size()) < width_field_) number.insert(0, size_t(width_field_) - number.size(), '0');
  return (std::filesystem::path(dir_) / (prefix_ + number + suffix_)).string();
}

namespace {

// The JPEG file `path` (`what` names it in errors: "frame 3 (path)") decoded to RGB24 by `tj`;
// header_only: its size alone.
std::vector<uint8_t> decode_jpeg_file(tjhandle tj, const std::string& path, const std::string& what, int* width,
                                      int* height, bool header_only) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("video: cannot read ", what, Hint("the file is missing: check the list or the folder"));
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), {});
  if (bytes.empty()) throw Error("video: ", what, " is a zero-length file", Hint("re-extract or re-download it"));
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, bytes.data(), (unsigned long)bytes.size(), &w, &h, &subsamp, &colorspace) != 0)
    throw Error("video: ", what, " is not a valid JPEG: ", tjGetErrorStr2(tj), Hint("re-extract or re-download it"));
  *width = w;
  *height = h;
  if (header_only) return {};
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  if (tjDecompress2(tj, bytes.data(), (unsigned long)bytes.size(), rgb.data(), w, w * 3, h, TJPF_RGB, 0) != 0 &&
      tjGetErrorCode(tj) == TJERR_FATAL)
    throw Error("video: ", what, ": JPEG decode failed: ", tjGetErrorStr2(tj), Hint("the JPEG is corrupt or truncated"));
  return rgb;
}

}  // namespace

std::vector<uint8_t> FrameFolderReader::decode_jpeg(int64_t k, int* width, int* height, bool header_only) {
  const std::string path = frame_path(k);
  return decode_jpeg_file(static_cast<tjhandle>(tj_), path, "frame " + std::to_string(k) + " (" + path + ")", width,
                          height, header_only);
}

Clip decode_image(const std::string& path, const DecodeOptions& options) {
  tjhandle tj = tjInitDecompress();
  if (!tj) throw Error("video: cannot create a libturbojpeg decompressor");
  int w = 0, h = 0;
  std::vector<uint8_t> rgb;
  try {
    rgb = decode_jpeg_file(tj, path, path, &w, &h, false);
  } catch (...) {
    tjDestroy(tj);
    throw;
  }
  tjDestroy(tj);
  Clip clip;
  clip.frames = 1;
  resized_size(w, h, options.short_side, &clip.width, &clip.height);
  if (clip.width == w && clip.height == h) {
    clip.rgb = std::move(rgb);
    return clip;
  }
  clip.rgb.resize(size_t(clip.width) * clip.height * 3);
  ff::SwsPtr sws(sws_getContext(w, h, AV_PIX_FMT_RGB24, clip.width, clip.height, AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr,
                                nullptr, nullptr));
  if (!sws) throw Error("video: ", path, ": cannot create the resizer");
  const uint8_t* src[4] = {rgb.data(), nullptr, nullptr, nullptr};
  const int src_stride[4] = {w * 3, 0, 0, 0};
  uint8_t* planes[4] = {clip.rgb.data(), nullptr, nullptr, nullptr};
  int strides[4] = {clip.width * 3, 0, 0, 0};
  sws_scale(sws.get(), src, src_stride, 0, h, planes, strides);
  return clip;
}

Clip FrameFolderReader::decode(const std::vector<int64_t>& indices, const DecodeOptions& options) {
  Clip clip;
  resized_size(info_.width, info_.height, options.short_side, &clip.width, &clip.height);
  clip.frames = int64_t(indices.size());
  const size_t frame_bytes = size_t(clip.width) * clip.height * 3;
  clip.rgb.resize(frame_bytes * indices.size());
  ff::SwsPtr sws;
  if (clip.width != info_.width || clip.height != info_.height) {
    sws.reset(sws_getContext(info_.width, info_.height, AV_PIX_FMT_RGB24, clip.width, clip.height, AV_PIX_FMT_RGB24,
                             SWS_BICUBIC, nullptr, nullptr, nullptr));
    if (!sws) throw Error("video: ", dir_, ": cannot create the resizer");
  }
  std::map<int64_t, size_t> done;  // frame -> first slot holding it
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t k = indices[i];
    if (k < 0 || k >= info_.num_frames)
      throw Error("video: ", dir_, ": too short: frame ", k, " asked for, the folder has ", info_.num_frames,
                  " frames", Hint("sample fewer frames or a lower sampling rate, or drop this video"));
    uint8_t* dst = clip.rgb.data() + i * frame_bytes;
    if (auto it = done.find(k); it != done.end()) {
      std::copy(clip.rgb.data() + it->second * frame_bytes, clip.rgb.data() + (it->second + 1) * frame_bytes, dst);
      continue;
    }
    int w = 0, h = 0;
    const std::vector<uint8_t> rgb = decode_jpeg(k, &w, &h);
    if (w != info_.width || h != info_.height)
      throw Error("video: frame ", k, " (", frame_path(k), ") is ", w, "x", h, ", the first frame is ", info_.width,
                  "x", info_.height, Hint("every frame of a folder must have one size"));
    if (!sws) {
      std::copy(rgb.begin(), rgb.end(), dst);
    } else {
      const uint8_t* src[4] = {rgb.data(), nullptr, nullptr, nullptr};
      const int src_stride[4] = {w * 3, 0, 0, 0};
      uint8_t* planes[4] = {dst, nullptr, nullptr, nullptr};
      int strides[4] = {clip.width * 3, 0, 0, 0};
      sws_scale(sws.get(), src, src_stride, 0, h, planes, strides);
    }
    done[k] = i;
  }
  return clip;
}

}  // namespace unmask::video
