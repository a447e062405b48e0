// data/video/synthetic.cc: synthetic moving-shape videos and the libavcodec encoders that write them.
#include "data/video/synthetic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/file.h"
#include "unmask/error.h"
#include "data/video/ffmpeg_util.h"

extern "C" {
#include <libavutil/opt.h>
}

namespace unmask::video {

namespace {

// SplitMix64: a counter-based generator, so each video's draws depend only on (seed, number).
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  int integer(int lo, int hi) { return lo + int(uniform() * (hi - lo + 1)); }       // [lo, hi]
};

void encode_and_write(AVCodecContext* enc, AVFrame* frame, AVFormatContext* out, AVStream* st, AVPacket* pkt,
                      const std::string& path) {
  int rc = avcodec_send_frame(enc, frame);
  if (rc < 0) throw Error("video: ", path, ": encoder rejected a frame: ", ff::error_string(rc));
  while (true) {
    rc = avcodec_receive_packet(enc, pkt);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
    if (rc < 0) throw Error("video: ", path, ": encoding failed: ", ff::error_string(rc));
    av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
    pkt->stream_index = st->index;
    rc = av_interleaved_write_frame(out, pkt);  // takes the packet's reference
    if (rc < 0) throw Error("video: ", path, ": writing a packet failed: ", ff::error_string(rc));
  }
}

}  // namespace

const char* synthetic_class_name(int label) {
  static const char* names[kSyntheticClasses] = {"left", "right", "up", "down"};
  return label >= 0 && label < kSyntheticClasses ? names[label] : "?";
}

void encode_rgb_video(const std::string& path, const std::string& codec, const std::vector<uint8_t>& rgb,
                      int frames, int width, int height, int fps, int gop) {
  ff::quiet_logs();
  UNMASK_CHECK(width > 0 && height > 0 && width % 2 == 0 && height % 2 == 0,
               "encode_rgb_video: width and height must be positive and even, got ", width, "x", height);
  UNMASK_CHECK(frames > 0 && rgb.size() == size_t(frames) * width * height * 3, "encode_rgb_video: ", rgb.size(),
               " bytes for ", frames, " frames of ", width, "x", height, "x3");
  std::string encoder_name, muxer;
  if (codec == "vp9") { encoder_name = "libvpx-vp9"; muxer = "webm"; }
  else if (codec == "h264") { encoder_name = "libx264"; muxer = "mp4"; }
  else throw Error("video: unknown codec '", codec, "'", Hint("use vp9 (webm) or h264 (mp4)"));
  const AVCodec* encoder = avcodec_find_encoder_by_name(encoder_name.c_str());
  if (!encoder) throw Error("video: FFmpeg has no ", encoder_name, " encoder",
                            Hint("install an FFmpeg build with it (Debian's libavcodec59 has libvpx-vp9 and libx264)"));

  AVFormatContext* raw = nullptr;
  int rc = avformat_alloc_output_context2(&raw, nullptr, muxer.c_str(), path.c_str());
  if (rc < 0 || !raw) throw Error("video: ", path, ": cannot create a ", muxer, " muxer: ", ff::error_string(rc));
  ff::OutputPtr out(raw);
  AVStream* st = avformat_new_stream(out.get(), nullptr);
  ff::CodecPtr enc(avcodec_alloc_context3(encoder));
  ff::PacketPtr pkt(av_packet_alloc());
  ff::FramePtr yuv(av_frame_alloc());
  if (!st || !enc || !pkt || !yuv) throw Error("video: out of memory creating the encoder for ", path);

  enc->width = width;
  enc->height = height;
  enc->pix_fmt = AV_PIX_FMT_YUV420P;
  enc->time_base = AVRational{1, fps};
  enc->framerate = AVRational{fps, 1};
  enc->gop_size = gop;
  enc->max_b_frames = 0;
  enc->thread_count = 1;
  enc->flags |= AV_CODEC_FLAG_BITEXACT;  // no encoder version strings: the same seed gives the same bytes
  out->flags |= AVFMT_FLAG_BITEXACT;     // no random matroska UIDs or creation times
  if (out->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary* opts = nullptr;
  if (codec == "vp9") {
    av_dict_set(&opts, "deadline", "realtime", 0);
    av_dict_set(&opts, "cpu-used", "8", 0);
    av_dict_set(&opts, "crf", "30", 0);
    enc->bit_rate = 0;
    av_dict_set(&opts, "keyint_min", std::to_string(gop).c_str(), 0);
  } else {
    av_dict_set(&opts, "preset", "ultrafast", 0);
    av_dict_set(&opts, "crf", "23", 0);
    av_dict_set(&opts, "x264-params", ("keyint=" + std::to_string(gop) + ":min-keyint=" + std::to_string(gop) +
                                       ":scenecut=0").c_str(), 0);
  }
  rc = avcodec_open2(enc.get(), encoder, &opts);
  av_dict_free(&opts);
  if (rc < 0) throw Error("video: ", path, ": cannot open ", encoder_name, ": ", ff::error_string(rc));
  rc = avcodec_parameters_from_context(st->codecpar, enc.get());
  if (rc < 0) throw Error("video: ", path, ": codec parameters: ", ff::error_string(rc));
  st->time_base = enc->time_base;
  st->avg_frame_rate = enc->framerate;

  rc = avio_open(&out->pb, path.c_str(), AVIO_FLAG_WRITE);
  if (rc < 0) throw Error("video: cannot write ", path, ": ", ff::error_string(rc), Hint("check the directory exists"));
  rc = avformat_write_header(out.get(), nullptr);
  if (rc < 0) throw Error("video: ", path, ": cannot write the header: ", ff::error_string(rc));

  yuv->format = AV_PIX_FMT_YUV420P;
  yuv->width = width;
  yuv->height = height;
  rc = av_frame_get_buffer(yuv.get(), 0);
  if (rc < 0) throw Error("video: out of memory for a ", width, "x", height, " frame");
  ff::SwsPtr sws(sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P, SWS_BICUBIC,
                                nullptr, nullptr, nullptr));
  if (!sws) throw Error("video: cannot create the RGB -> YUV converter");
  const size_t frame_bytes = size_t(width) * height * 3;
  for (int t = 0; t < frames; ++t) {
    rc = av_frame_make_writable(yuv.get());
    if (rc < 0) throw Error("video: frame not writable: ", ff::error_string(rc));
    const uint8_t* src[4] = {rgb.data() + t * frame_bytes, nullptr, nullptr, nullptr};
    const int src_stride[4] = {width * 3, 0, 0, 0};
    sws_scale(sws.get(), src, src_stride, 0, height, yuv->data, yuv->linesize);
    yuv->pts = t;
    encode_and_write(enc.get(), yuv.get(), out.get(), st, pkt.get(), path);
  }
  encode_and_write(enc.get(), nullptr, out.get(), st, pkt.get(), path);  // flush
  rc = av_write_trailer(out.get());
  if (rc < 0) throw Error("video: ", path, ": cannot finish the file: ", ff::error_string(rc));
}

std::vector<uint8_t> render_synthetic_video(uint64_t seed, int64_t number, int label, int frames, int width,
                                            int height) {
  UNMASK_CHECK(label >= 0 && label < kSyntheticClasses, "render_synthetic_video: label ", label, " not in [0, 4)");
  Rng rng{seed * 0x632BE59BD9B4E019ull + uint64_t(number) * 0x9E3779B97F4A7C15ull + 0x1234567ull};
  for (int i = 0; i < 4; ++i) rng.next();
  const double scale = height / 240.0;
  uint8_t bg[3], fg[3];
  for (int c = 0; c < 3; ++c) bg[c] = uint8_t(rng.integer(0, 90));
  for (int c = 0; c < 3; ++c) fg[c] = uint8_t(rng.integer(140, 255));
  const bool disc = rng.uniform() < 0.5;
  const double half = std::max(2.0, rng.integer(20, 36) * scale);  // half size / radius
  // Three copies of the shape, one per third of the frame along the axis across the motion, so
  // any crop a clip sampler takes shows at least one of them.
  constexpr int kShapes = 3;
  double sx[kShapes], sy[kShapes];
  for (int k = 0; k < kShapes; ++k) {
    const double across = (k + rng.uniform()) / kShapes, along = rng.uniform();
    sx[k] = (label < 2 ? along : across) * width;
    sy[k] = (label < 2 ? across : along) * height;
  }
  const double dx[4] = {-1, 1, 0, 0}, dy[4] = {0, 0, -1, 1};
  // The shape crosses 35-70% of the frame along its direction over the video, whatever the
  // length, so a clip of a few sampled frames shows the motion at any resolution.
  const double extent = label < 2 ? width : height;
  const double speed = (0.35 + 0.35 * rng.uniform()) * extent / std::max(1, frames - 1);
  struct Blob { double x, y, r; uint8_t c[3]; };
  std::vector<Blob> blobs(3);
  for (Blob& b : blobs) {
    b.x = rng.uniform() * width; b.y = rng.uniform() * height; b.r = std::max(1.0, rng.integer(6, 14) * scale);
    for (int c = 0; c < 3; ++c) b.c[c] = uint8_t(rng.integer(40, 140));
  }
  std::vector<uint8_t> rgb(size_t(frames) * width * height * 3);
  for (int t = 0; t < frames; ++t) {
    uint8_t* f = rgb.data() + size_t(t) * width * height * 3;
    for (int i = 0; i < width * height; ++i) std::copy(bg, bg + 3, f + 3 * i);
    for (const Blob& b : blobs)
      for (int py = std::max(0, int(b.y - b.r)); py <= std::min(height - 1, int(b.y + b.r)); ++py)
        for (int px = std::max(0, int(b.x - b.r)); px <= std::min(width - 1, int(b.x + b.r)); ++px)
          if ((px - b.x) * (px - b.x) + (py - b.y) * (py - b.y) <= b.r * b.r) std::copy(b.c, b.c + 3, f + 3 * (py * width + px));
    // Draw each shape at its wrapped position (and its copies across the edges).
    for (int k = 0; k < kShapes; ++k) {
    const double cx = sx[k] + dx[label] * speed * t, cy = sy[k] + dy[label] * speed * t;
    for (int py = 0; py < height; ++py)
      for (int px = 0; px < width; ++px) {
        double ox = std::fmod(px - cx, double(width)), oy = std::fmod(py - cy, double(height));
        if (ox < -width / 2.0) ox += width;
        if (ox > width / 2.0) ox -= width;
        if (oy < -height / 2.0) oy += height;
        if (oy > height / 2.0) oy -= height;
        const bool inside = disc ? ox * ox + oy * oy <= half * half : std::abs(ox) <= half && std::abs(oy) <= half;
        if (inside) std::copy(fg, fg + 3, f + 3 * (py * width + px));
      }
    }
  }
  return rgb;
}

SyntheticReport make_synthetic_dataset(const SyntheticOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  UNMASK_CHECK(!o.output_dir.empty(), "make-videos: the output directory is required");
  UNMASK_CHECK(o.videos_per_class > 0 && o.frames > 0 && o.fps > 0 && o.gop > 0,
               "make-videos: videos_per_class, frames, fps and gop must be positive");
  UNMASK_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "make-videos: val_fraction must be in [0, 1), got ",
               o.val_fraction);
  if (o.codec != "vp9" && o.codec != "h264" && o.codec != "both")
    throw Error("make-videos: unknown codec '", o.codec, "'", Hint("use vp9, h264 or both"));
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const std::vector<std::string> held = io::directory_entries(o.output_dir); !held.empty())
    throw Error("make-videos: ", o.output_dir, " is not empty (it holds ", held.size(), " entries, e.g. ", held.front(),
                "); its videos and lists would be overwritten or mixed with the new ones",
                Hint("choose a new or empty --output directory"));
  fs::create_directories(o.output_dir, ec);
  if (ec) throw Error("make-videos: cannot create ", o.output_dir, ": ", ec.message());
  const int val_per_class = int(std::lround(o.videos_per_class * o.val_fraction));
  struct Item { std::string path; int label; };
  std::vector<Item> train, val;
  int64_t number = 0;
  for (int i = 0; i < o.videos_per_class; ++i)
    for (int label = 0; label < kSyntheticClasses; ++label, ++number) {
      const std::string codec = o.codec == "both" ? (number % 2 == 0 ? "vp9" : "h264") : o.codec;
      char name[64];
      std::snprintf(name, sizeof(name), "%s_%05lld.%s", synthetic_class_name(label), (long long)number,
                    codec == "vp9" ? "webm" : "mp4");
      const std::string path = (fs::path(o.output_dir) / name).string();
      encode_rgb_video(path, codec, render_synthetic_video(o.seed, number, label, o.frames, o.width, o.height),
                       o.frames, o.width, o.height, o.fps, o.gop);
      (i < o.videos_per_class - val_per_class ? train : val).push_back({path, label});
    }
  SyntheticReport report;
  report.train_videos = int64_t(train.size());
  report.val_videos = int64_t(val.size());
  for (const auto& [split, items] : {std::pair<std::string, const std::vector<Item>*>{"train", &train}, {"val", &val}}) {
    for (const bool vswift : {false, true}) {
      const std::string file = (fs::path(o.output_dir) / (split + (vswift ? "_vswift.csv" : "_videomae.txt"))).string();
      std::ofstream f(file);
      for (const Item& it : *items) f << it.path << (vswift ? ',' : ' ') << it.label << '\n';
      if (!f) throw Error("make-videos: cannot write ", file);
      report.list_files.push_back(file);
    }
  }
  // The class names in label order (finetune-video puts them in the model's id2label).
  const std::string classes = (fs::path(o.output_dir) / "classes.txt").string();
  std::string names;
  for (int label = 0; label < kSyntheticClasses; ++label) names += std::string(synthetic_class_name(label)) + "\n";
  io::write_file_atomic(classes, names);
  report.list_files.push_back(classes);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace unmask::video
