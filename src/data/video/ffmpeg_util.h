// data/video/ffmpeg_util.h: RAII owners for FFmpeg objects and error-string helpers (decode and
// synthetic share them). Every allocation goes straight into one of these handles, so an early
// throw on any error path frees everything already allocated.
#pragma once
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/error.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}
#include <memory>
#include <string>

namespace unmask::video::ff {

struct InputCloser { void operator()(AVFormatContext* c) const { avformat_close_input(&c); } };
struct OutputCloser {
  void operator()(AVFormatContext* c) const {
    if (c->pb && !(c->oformat->flags & AVFMT_NOFILE)) avio_closep(&c->pb);
    avformat_free_context(c);
  }
};
struct CodecCloser { void operator()(AVCodecContext* c) const { avcodec_free_context(&c); } };
struct PacketCloser { void operator()(AVPacket* p) const { av_packet_free(&p); } };
struct FrameCloser { void operator()(AVFrame* f) const { av_frame_free(&f); } };
struct SwsCloser { void operator()(SwsContext* s) const { sws_freeContext(s); } };

using InputPtr = std::unique_ptr<AVFormatContext, InputCloser>;
using OutputPtr = std::unique_ptr<AVFormatContext, OutputCloser>;
using CodecPtr = std::unique_ptr<AVCodecContext, CodecCloser>;
using PacketPtr = std::unique_ptr<AVPacket, PacketCloser>;
using FramePtr = std::unique_ptr<AVFrame, FrameCloser>;
using SwsPtr = std::unique_ptr<SwsContext, SwsCloser>;

inline std::string error_string(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof(buf));
  return std::string(buf) + " (" + std::to_string(code) + ")";
}

/// Lowers libav's log level once (to errors only) so bad inputs do not flood stderr; our
/// Errors carry the message instead.
void quiet_logs();

}  // namespace unmask::video::ff
