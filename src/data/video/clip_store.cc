// data/video/clip_store.cc: the clip store's index format, its validation and the frame reader
// (see clip_store.h). No FFmpeg here: the fuzzer links this file alone; the writer that
// decodes videos is video/clip_store_writer.cc.
#include "data/video/clip_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "unmask/error.h"

namespace unmask::video {

// ---- bad videos ----------------------------------------------------------------------------------

const char* bad_video_reason_name(BadVideoReason r) {
  switch (r) {
    case BadVideoReason::missing:
      return "missing";
    case BadVideoReason::zero_length:
      return "zero_length";
    case BadVideoReason::corrupt:
      return "corrupt";
    case BadVideoReason::truncated:
      return "truncated";
    case BadVideoReason::audio_only:
      return "audio_only";
    case BadVideoReason::unsupported_codec:
      return "unsupported_codec";
    case BadVideoReason::too_short:
      return "too_short";
  }
  return "?";
}

BadVideoReason classify_video_error(const std::string& message) {
  const std::string m = message.substr(0, message.find(" (hint:"));  // hints may say "truncated" too
  auto has = [&](const char* s) { return m.find(s) != std::string::npos; };
  if (has("no such file")) return BadVideoReason::missing;
  if (has("zero-length")) return BadVideoReason::zero_length;
  if (has("no video stream")) return BadVideoReason::audio_only;
  if (has("unsupported codec")) return BadVideoReason::unsupported_codec;
  if (has("truncated")) return BadVideoReason::truncated;  // before too_short: "too short ... truncated"
  if (has("too short")) return BadVideoReason::too_short;
  return BadVideoReason::corrupt;
}

namespace {
std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f s", s);
  return buf;
}
std::string frames_text(double s, double interval) {  // "about 14 frames"
  return interval > 0 ? "about " + std::to_string(int64_t(std::lround(s / interval))) + " frames" : seconds_text(s);
}
}  // namespace

void check_video_integrity(const VideoInfo& info, bool keep_truncated) {
  const std::string& p = info.path;
  if (!info.read_error.empty())
    throw Error("video: ", p, ": corrupt data: reading stopped on an error, not at the end of the file: ",
                info.read_error, Hint("re-download or re-encode the file"));
  const double interval = info.frame_interval_s;
  const double reference = info.container_duration_s > 0 ? info.container_duration_s : info.duration_s;
  const double slack = std::max(kWholeVideoSlackFrames * interval, kWholeVideoSlackFraction * reference);
  if (info.gaps > 0 && info.gap_s > slack)
    throw Error("video: ", p, ": corrupt data: ", frames_text(info.gap_s, interval), " (", seconds_text(info.gap_s),
                ") are missing inside the video, in ", info.gaps, " gap(s), the first ",
                seconds_text(info.first_gap_at_s), " after the first frame",
                Hint("a damaged or partly overwritten file; re-download or re-encode it"));
  const double tail = info.container_duration_s > 0 ? std::max(0.0, info.missing_end_s) : 0.0;
  if (tail + info.gap_s > slack && info.unread_bytes > info.largest_packet + kWholeVideoSlackBytes)
    throw Error("video: ", p, ": corrupt data: reading stopped ", info.unread_bytes,
                " bytes before the end of the file, ", seconds_text(tail), " before the container's ",
                seconds_text(info.container_duration_s), " (", frames_text(tail + info.gap_s, interval),
                " missing; ", info.num_frames, " readable)",
                Hint("the data after that point is damaged; re-download or re-encode the file"));
  if (keep_truncated) return;
  if (info.container_frames > info.num_frames)
    throw Error("video: ", p, ": truncated: the header lists ", info.container_frames, " frames, ", info.num_frames,
                " are complete", Hint("re-download the file, or pass --keep-truncated"));
  if (tail + info.gap_s > slack)
    throw Error("video: ", p, ": truncated: the frames end ", seconds_text(tail), " before the container's ",
                seconds_text(info.container_duration_s), " (", frames_text(tail + info.gap_s, interval),
                " missing; ", info.num_frames, " complete)",
                Hint("an interrupted download or copy; re-download the file, or pass --keep-truncated"));
}

std::string skipped_report_tsv(const std::vector<SkippedVideo>& videos) {
  auto field = [](const std::string& text) {
    std::string out;
    for (const char c : text) {
      if (c == '\t') out += "\\t";
      else if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\\') out += "\\\\";
      else out += c;
    }
    return out;
  };
  std::string tsv = "line\tpath\treason\tdetail\n";
  for (const SkippedVideo& v : videos)
    tsv += std::to_string(v.list_line) + "\t" + field(v.path) + "\t" + bad_video_reason_name(v.reason) + "\t" +
           field(v.detail) + "\n";
  return tsv;
}

void BadVideoTally::add(BadVideoReason reason, const std::string& message) {
  ++counts[size_t(reason)];
  if (examples.size() < kMaxExamples) examples.push_back(message);
}

int64_t BadVideoTally::total() const {
  int64_t n = 0;
  for (const int64_t c : counts) n += c;
  return n;
}

std::string BadVideoTally::summary() const {
  std::string s;
  for (int r = 0; r < kBadVideoReasons; ++r) {
    if (!counts[size_t(r)]) continue;
    if (!s.empty()) s += ", ";
    s += std::to_string(counts[size_t(r)]) + " " + bad_video_reason_name(BadVideoReason(r));
  }
  return s.empty() ? "none" : s;
}

std::string clip_store_chunk_name(uint32_t chunk) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "chunk-%05u.bin", chunk);
  return buf;
}

// ---- index serialisation -----------------------------------------------------------------------

namespace {

constexpr const char* kIndexName = "index.bin";
constexpr int kMaxFrameSide = 16384;  // VideoReader refuses larger frames too

class Writer {
 public:
  void bytes(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  template <typename T>
  void le(T v) {  // little-endian integer / double (x86 and ARM Linux are LE)
    static_assert(std::is_trivially_copyable_v<T>);
    bytes(&v, sizeof(T));
  }
  void str(const std::string& s) {
    le<uint32_t>(uint32_t(s.size()));
    bytes(s.data(), s.size());
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Bounds-checked reads over the index bytes; every failure names the field and the byte offset.
class Reader {
 public:
  Reader(const std::string& data, size_t end, const std::string& name) : data_(data), end_(end), name_(name) {}
  template <typename T>
  T le(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint32_t n = le<uint32_t>(what);
    need(n, what);
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return end_ - pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("clip store ", name_, ": index.bin is invalid at byte ", pos_, ": ", what,
                Hint("the store is damaged or was not written by unmask prepare-video; re-run prepare-video"));
  }

 private:
  void need(size_t n, const char* what) {
    if (n > left())
      throw Error("clip store ", name_, ": index.bin ends at byte ", end_, " while reading ", what, " (", n,
                  " bytes at byte ", pos_, ")",
                  Hint("the index is truncated; re-run unmask prepare-video to rebuild the store"));
  }
  const std::string& data_;
  size_t pos_ = 0, end_;
  const std::string& name_;
};

uint32_t crc32_of(const void* p, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  const auto* b = static_cast<const Bytef*>(p);
  while (n > 0) {  // zlib's length is a uInt
    const uInt step = n > (1u << 30) ? (1u << 30) : uInt(n);
    c = crc32(c, b, step);
    b += step;
    n -= step;
  }
  return uint32_t(c);
}

void parse_index(const std::string& data, const std::string& name, const ClipStoreOpenOptions& options,
                 ClipStoreHeader* header, std::vector<ClipStoreEntry>* entries) {
  if (data.size() < sizeof(kClipStoreMagic) || std::memcmp(data.data(), kClipStoreMagic, sizeof(kClipStoreMagic)) != 0)
    throw Error("clip store ", name, ": index.bin does not start with the magic 'UNMASKCS' (", data.size(), " bytes)",
                Hint("pass a directory written by unmask prepare-video"));
  if (data.size() < 16 + 4)
    throw Error("clip store ", name, ": index.bin is only ", data.size(), " bytes",
                Hint("the index is truncated; re-run unmask prepare-video"));
  uint32_t version = 0;
  std::memcpy(&version, data.data() + 8, 4);
  if (version != kClipStoreVersion)
    throw Error("clip store ", name, ": format version ", version, ", this build reads version ", kClipStoreVersion,
                Hint(version > kClipStoreVersion ? "the store was written by a newer unmask; update unmask"
                                                 : "re-run unmask prepare-video to rebuild the store"));
  const size_t body = data.size() - 4;  // the trailing crc32
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, data.data() + body, 4);
  if (options.verify_index_checksum && crc32_of(data.data(), body) != stored_crc)
    throw Error("clip store ", name, ": index.bin fails its checksum (crc32 ", crc32_of(data.data(), body), ", stored ",
                stored_crc, ")", Hint("the index is corrupt; re-run unmask prepare-video"));

  Reader r(data, body, name);
  r.le<uint64_t>("magic");
  header->version = r.le<uint32_t>("version");
  if (r.le<uint32_t>("flags") != 0) r.fail("unknown flags");
  header->short_side = r.le<int32_t>("short_side");
  header->frame_stride = r.le<int32_t>("frame_stride");
  header->max_frames = r.le<int32_t>("max_frames");
  header->min_frames = r.le<int32_t>("min_frames");
  if (header->short_side < 0 || header->frame_stride < 1 || header->max_frames < 0 || header->min_frames < 0)
    r.fail("bad creation parameters (short_side " + std::to_string(header->short_side) + ", stride " +
           std::to_string(header->frame_stride) + ")");
  header->chunk_limit_bytes = r.le<uint64_t>("chunk_limit");
  const uint64_t videos = r.le<uint64_t>("video count");
  const uint64_t chunks = r.le<uint64_t>("chunk count");
  header->total_frames = r.le<uint64_t>("total frames");
  // Each count must fit in the bytes left (a record is at least 48 bytes, a chunk size 8): a
  // damaged count cannot make us allocate terabytes.
  if (chunks > r.left() / 8) r.fail("chunk count " + std::to_string(chunks) + " exceeds the index size");
  if (chunks > 99999) r.fail("chunk count " + std::to_string(chunks) + " is over 99999");
  header->chunk_bytes.resize(size_t(chunks));
  for (auto& c : header->chunk_bytes) c = r.le<uint64_t>("chunk size");
  header->source_list = r.str("source list");
  if (videos > r.left() / 48) r.fail("video count " + std::to_string(videos) + " exceeds the index size");
  entries->clear();
  entries->reserve(size_t(videos));
  uint64_t frame_sum = 0;
  for (uint64_t v = 0; v < videos; ++v) {
    ClipStoreEntry e;
    e.path = r.str("video path");
    e.label = r.le<int64_t>("label");
    e.source_frames = r.le<int64_t>("source frames");
    e.fps = r.le<double>("fps");
    e.height = r.le<int32_t>("height");
    e.width = r.le<int32_t>("width");
    e.chunk = r.le<uint32_t>("chunk");
    e.offset = r.le<uint64_t>("offset");
    const uint32_t frames = r.le<uint32_t>("frame count");
    const std::string which = "video " + std::to_string(v) + " (" + e.path.substr(0, 200) + ")";
    if (e.height <= 0 || e.width <= 0 || e.height > kMaxFrameSide || e.width > kMaxFrameSide)
      r.fail(which + ": frame size " + std::to_string(e.width) + "x" + std::to_string(e.height));
    if (frames == 0 || frames > r.left() / 8) r.fail(which + ": frame count " + std::to_string(frames));
    if (e.label < 0 || e.source_frames <= 0) r.fail(which + ": label or source frame count out of range");
    if (e.chunk >= chunks) r.fail(which + ": chunk " + std::to_string(e.chunk) + " of " + std::to_string(chunks));
    e.frames = frames;
    const uint64_t need = e.frame_bytes() * frames;  // < 2^28 * 2^32 * 3 / 8: no overflow
    const uint64_t have = header->chunk_bytes[e.chunk];
    if (e.offset > have || need > have - e.offset)
      r.fail(which + ": frames at bytes [" + std::to_string(e.offset) + ", +" + std::to_string(need) +
             ") lie outside " + clip_store_chunk_name(e.chunk) + " (" + std::to_string(have) + " bytes)");
    e.source_index.resize(frames);
    e.crc.resize(frames);
    for (uint32_t f = 0; f < frames; ++f) {
      e.source_index[f] = r.le<uint32_t>("source frame index");
      e.crc[f] = r.le<uint32_t>("frame crc32");
      if (int64_t(e.source_index[f]) >= e.source_frames)
        r.fail(which + ": frame " + std::to_string(f) + " comes from source frame " +
               std::to_string(e.source_index[f]) + " of " + std::to_string(e.source_frames));
    }
    frame_sum += frames;
    entries->push_back(std::move(e));
  }
  if (r.left() != 0) r.fail(std::to_string(r.left()) + " unexpected bytes after the last video");
  if (frame_sum != header->total_frames)
    r.fail("the videos hold " + std::to_string(frame_sum) + " frames, the header says " +
           std::to_string(header->total_frames));
}

}  // namespace

std::string serialize_clip_store_index(const ClipStoreHeader& h, const std::vector<ClipStoreEntry>& entries) {
  Writer w;
  w.bytes(kClipStoreMagic, sizeof(kClipStoreMagic));
  w.le<uint32_t>(h.version);
  w.le<uint32_t>(0);
  w.le<int32_t>(h.short_side);
  w.le<int32_t>(h.frame_stride);
  w.le<int32_t>(h.max_frames);
  w.le<int32_t>(h.min_frames);
  w.le<uint64_t>(h.chunk_limit_bytes);
  w.le<uint64_t>(entries.size());
  w.le<uint64_t>(h.chunk_bytes.size());
  w.le<uint64_t>(h.total_frames);
  for (const uint64_t c : h.chunk_bytes) w.le<uint64_t>(c);
  w.str(h.source_list);
  for (const ClipStoreEntry& e : entries) {
    w.str(e.path);
    w.le<int64_t>(e.label);
    w.le<int64_t>(e.source_frames);
    w.le<double>(e.fps);
    w.le<int32_t>(e.height);
    w.le<int32_t>(e.width);
    w.le<uint32_t>(e.chunk);
    w.le<uint64_t>(e.offset);
    w.le<uint32_t>(uint32_t(e.frames));
    for (int64_t f = 0; f < e.frames; ++f) {
      w.le<uint32_t>(e.source_index[size_t(f)]);
      w.le<uint32_t>(e.crc[size_t(f)]);
    }
  }
  w.le<uint32_t>(crc32_of(w.out().data(), w.out().size()));
  return std::move(w.out());
}

// ---- the reader ----------------------------------------------------------------------------------

struct ClipStore::Impl {
  std::string dir;  // or the in-memory name
  ClipStoreHeader header;
  std::vector<ClipStoreEntry> entries;
  std::vector<std::string> memory_chunks;  // from_memory only
  bool in_memory = false;
  mutable std::mutex fd_mutex;
  mutable std::vector<int> fds;  // opened on first use; -1 = not yet

  ~Impl() {
    for (const int fd : fds)
      if (fd >= 0) ::close(fd);
  }

  std::string chunk_path(uint32_t c) const { return (std::filesystem::path(dir) / clip_store_chunk_name(c)).string(); }

  int fd_for(uint32_t c) const {
    std::lock_guard<std::mutex> lock(fd_mutex);
    if (fds[c] < 0) {
      const std::string p = chunk_path(c);
      const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        throw Error("clip store ", dir, ": cannot open ", p, ": ", std::strerror(errno),
                    Hint("the store is incomplete; re-run unmask prepare-video"));
      fds[c] = fd;
    }
    return fds[c];
  }

  void read_bytes(uint32_t c, uint64_t offset, uint8_t* dst, size_t n) const {
    if (in_memory) {
      std::memcpy(dst, memory_chunks[c].data() + offset, n);
      return;
    }
    const int fd = fd_for(c);
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd, dst + done, n - done, off_t(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw Error("clip store ", dir, ": reading ", n, " bytes at ", offset, " of ", chunk_path(c),
                    " failed: ", got < 0 ? std::strerror(errno) : "unexpected end of file",
                    Hint("the chunk was truncated after the store was opened; re-run unmask prepare-video"));
      done += size_t(got);
    }
  }
};

ClipStore::ClipStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClipStore::ClipStore(ClipStore&&) noexcept = default;
ClipStore& ClipStore::operator=(ClipStore&&) noexcept = default;
ClipStore::~ClipStore() = default;

ClipStore ClipStore::open(const std::string& dir, const ClipStoreOpenOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("clip store ", dir, ": not a directory",
                Hint(fs::exists(dir, ec) ? "a clip store is the directory written by unmask prepare-video --out"
                                         : "check the path, or create the store with unmask prepare-video"));
  const std::string index_path = (fs::path(dir) / kIndexName).string();
  std::ifstream f(index_path, std::ios::binary);
  if (!f)
    throw Error("clip store ", dir, ": no index.bin", Hint("the store is incomplete; re-run unmask prepare-video"));
  std::stringstream ss;
  ss << f.rdbuf();
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  parse_index(ss.str(), dir, options, &impl->header, &impl->entries);
  for (uint32_t c = 0; c < impl->header.chunk_bytes.size(); ++c) {
    const std::string p = impl->chunk_path(c);
    const auto size = fs::file_size(p, ec);
    if (ec)
      throw Error("clip store ", dir, ": missing chunk ", p, " (", ec.message(), ")",
                  Hint("the store is incomplete; re-run unmask prepare-video"));
    if (size != impl->header.chunk_bytes[c])
      throw Error("clip store ", dir, ": ", p, " is ", size, " bytes, the index says ", impl->header.chunk_bytes[c],
                  Hint(size < impl->header.chunk_bytes[c] ? "the chunk is truncated; re-run unmask prepare-video"
                                                          : "the chunk was replaced; re-run unmask prepare-video"));
  }
  impl->fds.assign(impl->header.chunk_bytes.size(), -1);
  return ClipStore(std::move(impl));
}

ClipStore ClipStore::from_memory(std::string index_bytes, std::vector<std::string> chunks, const std::string& name,
                                 const ClipStoreOpenOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->dir = name;
  impl->in_memory = true;
  parse_index(index_bytes, name, options, &impl->header, &impl->entries);
  if (chunks.size() != impl->header.chunk_bytes.size())
    throw Error("clip store ", name, ": ", chunks.size(), " chunks given, the index lists ",
                impl->header.chunk_bytes.size(), Hint("pass every chunk"));
  for (size_t c = 0; c < chunks.size(); ++c)
    if (chunks[c].size() != impl->header.chunk_bytes[c])
      throw Error("clip store ", name, ": chunk ", c, " is ", chunks[c].size(), " bytes, the index says ",
                  impl->header.chunk_bytes[c], Hint("the chunk is truncated or replaced"));
  impl->memory_chunks = std::move(chunks);
  return ClipStore(std::move(impl));
}

int64_t ClipStore::size() const {
  return int64_t(impl_->entries.size());
}
const ClipStoreHeader& ClipStore::header() const {
  return impl_->header;
}
const std::string& ClipStore::path() const {
  return impl_->dir;
}

const ClipStoreEntry& ClipStore::entry(int64_t i) const {
  if (i < 0 || i >= size())
    throw Error("clip store ", impl_->dir, ": video ", i, " out of range (the store holds ", size(), " videos)",
                Hint("use an index in [0, size())"));
  return impl_->entries[size_t(i)];
}

Clip ClipStore::read_frames(int64_t i, const std::vector<int64_t>& frames) const {
  const ClipStoreEntry& e = entry(i);
  Clip clip;
  clip.frames = int64_t(frames.size());
  clip.height = e.height;
  clip.width = e.width;
  const uint64_t fb = e.frame_bytes();
  clip.rgb.resize(size_t(fb * frames.size()));
  for (size_t k = 0; k < frames.size(); ++k) {
    const int64_t f = frames[k];
    if (f < 0 || f >= e.frames)
      throw Error("clip store ", impl_->dir, ": video ", i, " (", e.path, "): frame ", f,
                  " asked for, the store keeps ", e.frames, " frames of it", Hint("sample indices in [0, frames)"));
    uint8_t* dst = clip.rgb.data() + k * fb;
    if (k > 0) {  // a repeated frame (short-video padding): copy the one already read and checked
      bool copied = false;
      for (size_t j = 0; j < k && !copied; ++j)
        if (frames[j] == f) {
          std::memcpy(dst, clip.rgb.data() + j * fb, size_t(fb));
          copied = true;
        }
      if (copied) continue;
    }
    impl_->read_bytes(e.chunk, e.offset + uint64_t(f) * fb, dst, size_t(fb));
    const uint32_t crc = crc32_of(dst, size_t(fb));
    if (crc != e.crc[size_t(f)])
      throw Error("clip store ", impl_->dir, ": checksum mismatch in video ", i, " (", e.path, "), frame ", f, " (",
                  clip_store_chunk_name(e.chunk), " bytes ", e.offset + uint64_t(f) * fb, "..+", fb, "): crc32 ", crc,
                  ", index ", e.crc[size_t(f)], Hint("the chunk is corrupt; re-run unmask prepare-video"));
  }
  return clip;
}

}  // namespace unmask::video
