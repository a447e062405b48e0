// data/video/clip_store_writer.cc: prepare_clip_store, the decode-once writer behind
// `unmask prepare-video` (format and guarantees in clip_store.h).
//
// Threads: `threads` workers each claim the next listed video, decode its kept frames through
// VideoReader (short-side resize) and checksum them; the calling thread commits finished videos
// strictly in list order (chunk assignment, offsets, index records), so the bytes written do
// not depend on the thread count or on timing. A worker may run at most `2 * threads` videos
// ahead of the commit point, which bounds the frames held in memory.
//
// Bad videos: each listed video is opened (ListedVideo), judged by check_video_integrity
// (clip_store.h: truncated or corrupt files; the clip loader's list input applies the same
// function) and decoded; a failure is skipped, counted per reason and written to
// STORE/skipped.tsv, or with strict ends the run.
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "io/file.h"
#include "unmask/error.h"
#include "data/video/clip_store.h"
#include "data/video/listed_video.h"

namespace unmask::video {

namespace {

namespace fs = std::filesystem;

struct DecodedVideo {
  bool ok = false;
  BadVideoReason reason = BadVideoReason::corrupt;
  std::string error;
  ClipStoreEntry entry;      // chunk and offset are set when committed
  std::vector<uint8_t> rgb;  // [frames, H, W, 3]
};

DecodedVideo decode_one(const ListEntry& item, const PrepareOptions& o) {
  DecodedVideo d;
  d.entry.path = item.path;
  d.entry.label = item.label;
  try {
    ListedVideo reader(item, o.frame_template);  // the listed clip: a frame range of a file or a frame folder
    const VideoInfo& info = reader.source_info();
    check_video_integrity(info, o.keep_truncated);  // the clip loader's list input applies the same rule
    std::vector<int64_t> keep;  // clip frames; the store records their source frame numbers
    for (int64_t k = 0; k < reader.frames(); k += o.frame_stride) {
      if (o.max_frames > 0 && int64_t(keep.size()) >= o.max_frames) break;
      keep.push_back(k);
    }
    if (int64_t(keep.size()) < o.min_frames)
      throw Error("video: ", item.path, ": too short: ", keep.size(), " frames kept (", reader.frames(),
                  " frames, stride ", o.frame_stride, "), --min-frames is ", o.min_frames,
                  Hint("lower --min-frames or drop this video"));
    if (info.num_frames > int64_t(UINT32_MAX)) throw Error("video: ", item.path, ": over 2^32 frames");
    DecodeOptions dopt;
    dopt.short_side = o.short_side;
    Clip clip = reader.decode(keep, dopt);
    ClipStoreEntry& e = d.entry;
    e.source_frames = info.num_frames;
    e.fps = info.fps;
    e.height = clip.height;
    e.width = clip.width;
    e.frames = clip.frames;
    const size_t fb = size_t(e.frame_bytes());
    for (size_t f = 0; f < keep.size(); ++f) {
      e.source_index.push_back(uint32_t(reader.first_frame() + keep[f]));
      e.crc.push_back(uint32_t(crc32(crc32(0L, Z_NULL, 0), clip.rgb.data() + f * fb, uInt(fb))));
    }
    d.rgb = std::move(clip.rgb);
    d.ok = true;
  } catch (const Error& err) {
    d.error = err.what();
    d.reason = classify_video_error(d.error);
  } catch (const std::bad_alloc&) {
    d.error = "video: " + item.path + ": out of memory while decoding (lower --short-side or set --max-frames)";
    d.reason = BadVideoReason::corrupt;
  } catch (const std::exception& err) {  // nothing may escape a worker thread (std::terminate)
    d.error = "video: " + item.path + ": " + err.what();
    d.reason = BadVideoReason::corrupt;
  }
  return d;
}

// A file written in append mode; every failure is an Error naming it.
class ChunkFile {
 public:
  explicit ChunkFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~ChunkFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd_, b, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("write failed");
      b += w;
      n -= size_t(w);
      size_ += uint64_t(w);
    }
  }
  void finish() {  // on disk before the store is renamed into place
    if (::fsync(fd_) != 0) fail("fsync failed");
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail("close failed");
    }
    fd_ = -1;
  }
  uint64_t size() const { return size_; }

 private:
  [[noreturn]] void fail(const char* what) {
    throw Error("clip store: ", what, " for ", path_, ": ", std::strerror(errno),
                Hint("check free disk space and permissions of the --out directory's parent"));
  }
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Removes the temp directory unless the store was renamed into place.
struct TempDirGuard {
  std::string path;
  bool keep = false;
  ~TempDirGuard() {
    if (keep || path.empty()) return;
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

bool is_clip_store(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::exists(fs::path(dir) / "index.bin", ec);
}

void check_options(const PrepareOptions& o) {
  UNMASK_CHECK(!o.list.empty(), "clip store: no list file given");
  UNMASK_CHECK(!o.out.empty(), "clip store: no output store given");
  if (o.short_side < 0 || o.short_side > 16384)
    throw Error("clip store: --short-side must be in [0, 16384], got ", o.short_side,
                Hint("e.g. 128 or 256; 0 keeps the native size"));
  if (o.frame_stride < 1) throw Error("clip store: --frame-stride must be >= 1, got ", o.frame_stride);
  if (o.max_frames < 0) throw Error("clip store: --max-frames must be >= 0 (0 = all), got ", o.max_frames);
  if (o.min_frames < 1) throw Error("clip store: --min-frames must be >= 1, got ", o.min_frames);
  if (o.chunk_bytes < 1)
    throw Error("clip store: the chunk size must be positive, got ", o.chunk_bytes, " bytes",
                Hint("e.g. --chunk-mb 256"));
  if (o.threads < 1 || o.threads > 256) throw Error("clip store: --threads must be in [1, 256], got ", o.threads);
  parse_frame_template(o.frame_template);  // a bad template fails here, not once per folder
}

// Puts `tmp` at `out`: a plain rename, or an atomic swap with the store already there.
void install(const std::string& tmp, const std::string& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) {
    if (std::rename(tmp.c_str(), out.c_str()) != 0)
      throw Error("clip store: cannot rename ", tmp, " to ", out, ": ", std::strerror(errno),
                  Hint("check permissions of the --out directory's parent"));
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp, ec);  // now the old store
    return;
  }
  // No RENAME_EXCHANGE (old kernel or file system): move the old store aside first.
  const std::string old = out + ".old-" + std::to_string(::getpid());
  if (std::rename(out.c_str(), old.c_str()) != 0 || std::rename(tmp.c_str(), out.c_str()) != 0)
    throw Error("clip store: cannot replace ", out, ": ", std::strerror(errno),
                Hint("the new store is left in " + tmp + "; move it by hand"));
  fs::remove_all(old, ec);
}

}  // namespace

PrepareReport prepare_clip_store(const PrepareOptions& o) {
  check_options(o);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const std::vector<ListEntry> list = read_video_list(o.list, o.format, o.root);
  if (list.empty()) throw Error("clip store: ", o.list, " lists no videos", Hint("check the list file"));

  std::string out = o.out;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!o.force)
      throw Error("clip store: ", out, " already exists", Hint("pass --force to replace it, or choose another --out"));
    if (!is_clip_store(out))
      throw Error("clip store: ", out, " exists and is not a clip store (no index.bin); refusing to replace it",
                  Hint("remove it yourself or choose another --out"));
  }
  TempDirGuard tmp;
  tmp.path = out + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp.path, ec);
  if (!fs::create_directories(tmp.path, ec))
    throw Error("clip store: cannot create ", tmp.path, ": ", ec.message(),
                Hint("check that the --out directory's parent exists and is writable"));

  // ---- workers ----
  const int64_t n = int64_t(list.size());
  const int64_t window = 2 * int64_t(o.threads);
  std::mutex mu;
  std::condition_variable worker_cv, commit_cv;
  std::map<int64_t, DecodedVideo> finished;  // decoded, not yet committed
  int64_t next_claim = 0, committed = 0;
  bool stop = false;
  auto worker = [&] {
    while (true) {
      int64_t v;
      {
        std::unique_lock<std::mutex> lock(mu);
        worker_cv.wait(lock, [&] { return stop || next_claim >= n || next_claim < committed + window; });
        if (stop || next_claim >= n) return;
        v = next_claim++;
      }
      DecodedVideo d = decode_one(list[size_t(v)], o);
      std::lock_guard<std::mutex> lock(mu);
      finished.emplace(v, std::move(d));
      commit_cv.notify_all();
    }
  };
  std::vector<std::thread> threads;
  struct Joiner {  // stops and joins the workers on every exit path
    std::vector<std::thread>& threads;
    std::mutex& mu;
    bool& stop;
    std::condition_variable& cv;
    ~Joiner() {
      {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
      }
      cv.notify_all();
      for (auto& t : threads)
        if (t.joinable()) t.join();
    }
  } joiner{threads, mu, stop, worker_cv};
  for (int t = 0; t < std::min<int64_t>(o.threads, n); ++t) threads.emplace_back(worker);

  // ---- commit in list order ----
  PrepareReport report;
  report.listed = n;
  ClipStoreHeader header;
  header.short_side = o.short_side;
  header.frame_stride = o.frame_stride;
  header.max_frames = o.max_frames;
  header.min_frames = o.min_frames;
  header.chunk_limit_bytes = uint64_t(o.chunk_bytes);
  header.source_list = o.list;
  std::vector<ClipStoreEntry> entries;
  std::unique_ptr<ChunkFile> chunk;
  auto close_chunk = [&] {
    if (!chunk) return;
    chunk->finish();
    header.chunk_bytes.push_back(chunk->size());
    chunk.reset();
  };
  for (int64_t v = 0; v < n; ++v) {
    DecodedVideo d;
    {
      std::unique_lock<std::mutex> lock(mu);
      commit_cv.wait(lock, [&] { return finished.count(v) != 0; });
      d = std::move(finished[v]);
      finished.erase(v);
      committed = v + 1;
    }
    worker_cv.notify_all();
    if (!d.ok) {
      if (o.strict)
        throw Error("clip store: --strict stops at the first bad video (", bad_video_reason_name(d.reason),
                    "): ", d.error);
      report.skipped.add(d.reason, d.error);
      report.skipped_videos.push_back({list[size_t(v)].list_line, list[size_t(v)].path, d.reason, d.error});
    } else {
      const uint64_t bytes = d.rgb.size();
      if (chunk && chunk->size() > 0 && chunk->size() + bytes > uint64_t(o.chunk_bytes)) close_chunk();
      if (!chunk)
        chunk = std::make_unique<ChunkFile>(
            (fs::path(tmp.path) / clip_store_chunk_name(uint32_t(header.chunk_bytes.size()))).string());
      d.entry.chunk = uint32_t(header.chunk_bytes.size());
      d.entry.offset = chunk->size();
      chunk->write(d.rgb.data(), d.rgb.size());
      report.ok++;
      report.frames += d.entry.frames;
      report.bytes += int64_t(bytes);
      header.total_frames += uint64_t(d.entry.frames);
      entries.push_back(std::move(d.entry));
    }
    if (o.progress) {
      PrepareProgress p;
      p.done = v + 1;
      p.total = n;
      p.ok = report.ok;
      p.skipped = report.skipped.total();
      p.frames = report.frames;
      p.bytes = report.bytes;
      p.seconds = seconds();
      o.progress(p);
    }
  }
  close_chunk();
  if (report.ok == 0)
    throw Error("clip store: none of the ", n, " listed videos could be used (", report.skipped.summary(),
                "); first: ", report.skipped.examples.empty() ? "?" : report.skipped.examples[0],
                Hint("check the list paths and --root"));
  {
    const std::string index = serialize_clip_store_index(header, entries);
    ChunkFile f((fs::path(tmp.path) / "index.bin").string());
    f.write(index.data(), index.size());
    f.finish();
    report.bytes += int64_t(index.size());
  }
  // Every skipped video with its reason (the summary names only the first few). Written inside
  // the temp directory, so it appears with the store or not at all.
  io::write_file_atomic((fs::path(tmp.path) / kSkippedReportName).string(), skipped_report_tsv(report.skipped_videos));
  report.skipped_report = (fs::path(out) / kSkippedReportName).string();
  report.chunks = int64_t(header.chunk_bytes.size());
  if (fs::exists(out, ec) && !(o.force && is_clip_store(out)))  // appeared while we worked
    throw Error("clip store: ", out, " appeared while the store was being written",
                Hint("pass --force or choose another --out"));
  install(tmp.path, out);
  tmp.keep = true;
  report.seconds = seconds();
  return report;
}

}  // namespace unmask::video
