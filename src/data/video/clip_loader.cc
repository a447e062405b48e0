// data/video/clip_loader.cc: the prefetching clip loader (contract in clip_loader.h).
//
// Bookkeeping. Units and batches are numbered globally across epochs: global unit U is unit
// U % units_per_epoch of epoch U / units_per_epoch; its rows are the epoch's rows
// [u * R, min((u + 1) * R, rows_per_epoch)), and epoch row r lands in global batch
// epoch * batches_per_epoch + r / batch. A worker may claim unit U only while the batch of its
// first row is < consumed + queue_depth (bounded memory); it allocates the batches it writes to
// on first touch, copies its rows in without holding the lock, and marks them filled. next()
// hands out global batch `consumed` once all its rows are filled.
#include "data/video/clip_loader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "dist/shard.h"
#include "unmask/error.h"
#include "data/video/augment.h"
#include "data/video/decode.h"
#include "data/video/listed_video.h"

namespace unmask::video {

std::vector<int64_t> segment_test_indices(int64_t n, int num_frames, int segment, int segments) {
  UNMASK_CHECK(n > 0 && num_frames > 0, "segment_test_indices: ", n, " frames, ", num_frames, " segments");
  UNMASK_CHECK(segments > 0 && segment >= 0 && segment < segments, "segment_test_indices: view ", segment, " of ",
               segments);
  const double tick = double(n) / num_frames;
  const double offset = (segment + 0.5) / segments;
  std::vector<int64_t> idx;
  for (int i = 0; i < num_frames; ++i) idx.push_back(std::min(n - 1, int64_t(tick * (i + offset))));
  return idx;
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t mix(uint64_t a, uint64_t b) {  // SplitMix64 finaliser over a combination: seeds per unit
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Marks an error from a video's decode as a "bad video" (skippable), not a store/loader failure.
struct BadVideo {
  BadVideoReason reason;
  std::string message;
};

// Batch tensors come from a small pool of 64-byte-aligned buffers. A buffer goes back to the
// pool when the last Tensor viewing it is dropped (the consumer's, or ours), so steady state
// allocates nothing: fresh multi-MB buffers are mmap'ed and page-faulted on first touch, which
// measured 5-10x slower than the copy itself (BENCHMARKS.md, clip loader section).
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  BufferPool(size_t bytes, size_t keep) : bytes_(bytes), keep_(keep) {}
  ~BufferPool() {
    for (void* p : free_) std::free(p);
  }
  Tensor tensor(const Shape& shape) {  // shape.numel() * 4 <= bytes_
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        p = free_.back();
        free_.pop_back();
      }
    }
    if (!p) p = std::aligned_alloc(64, (bytes_ + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    std::weak_ptr<BufferPool> weak = weak_from_this();
    std::shared_ptr<void> keepalive(p, [weak](void* q) {
      if (auto pool = weak.lock())
        pool->give_back(q);
      else
        std::free(q);
    });
    return Tensor::from_blob(p, shape, DType::f32, Device::cpu, std::move(keepalive));
  }

 private:
  void give_back(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < keep_)
      free_.push_back(p);
    else
      std::free(p);
  }
  std::mutex mu_;
  std::vector<void*> free_;
  size_t bytes_, keep_;
};

struct PendingBatch {
  Tensor videos;  // [rows, 3, T, S, S]
  std::vector<int64_t> labels, video_index, view;
  std::vector<uint8_t> valid;
  int64_t rows = 0, filled = 0;
};

}  // namespace

struct ClipLoader::Impl {
  ClipLoaderOptions o;
  // Source: a store, or a list decoded on the fly.
  std::optional<ClipStore> store;
  std::vector<ListEntry> list;
  int short_side = 0;
  int store_stride = 1;
  int64_t videos = 0, rows_per_unit = 1, rows_per_epoch = 0, batches_per_epoch = 0, units_per_epoch = 0;
  int64_t order_length = 0;  // entries of an epoch's order: videos, or max(rank_counts) with resample
  int64_t block_units = 0;   // slice: videos per rank per batch (batch / num_sample)
  int dense_rate = 1;  // sampling rate in the source's frames

  // Shared state, guarded by mu.
  mutable std::mutex mu;
  std::condition_variable worker_cv, consumer_cv;
  int64_t next_unit = 0, consumed = 0;
  int64_t resume_batch = 0;  // options.start_batch: rows of earlier batches (a unit straddling it) are dropped
  std::map<int64_t, PendingBatch> pending;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders;  // epoch -> video order
  std::vector<uint8_t> open_failed, counted_bad;                          // per video
  bool stop = false;
  std::exception_ptr error;
  LoaderTimes times;
  Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  std::shared_ptr<BufferPool> pool;  // batch buffers

  // Consumer-only state.
  int64_t epoch_batch = 0, epoch = 0;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    worker_cv.notify_all();
    for (auto& t : workers)
      if (t.joinable()) t.join();
  }

  bool test() const { return o.mode == ClipLoaderOptions::Mode::test; }

  void setup(int64_t n) {
    const auto& p = o;
    auto positive = [](int v, const char* name, int hi) {
      if (v < 1 || v > hi) throw Error("clip loader: ", name, " must be in [1, ", hi, "], got ", v);
    };
    positive(p.batch, "batch", 1 << 20);
    positive(p.num_frames, "num_frames", 1 << 16);
    positive(p.sampling_rate, "sampling_rate", 1 << 16);
    positive(p.crop, "crop", 16384);
    positive(p.num_sample, "num_sample", 1024);
    positive(p.test_segments, "test_segments", 1024);
    positive(p.test_crops, "test_crops", 1024);
    positive(p.threads, "threads", 256);
    positive(p.queue_depth, "queue_depth", 1 << 16);
    for (int c = 0; c < 3; ++c)
      if (!(p.std[size_t(c)] > 0)) throw Error("clip loader: std[", c, "] must be positive, got ", p.std[size_t(c)]);
    videos = n;
    if (n == 0) throw Error("clip loader: no videos", Hint("check the list file or store"));
    if (!p.segments) {
      if (p.sampling_rate % store_stride != 0)
        throw Error("clip loader: sampling rate ", p.sampling_rate, " is not a multiple of the store's frame stride ",
                    store_stride,
                    Hint("use a sampling rate that is a multiple of the stride, or prepare the store with "
                         "--frame-stride 1"));
      dense_rate = p.sampling_rate / store_stride;
    }
    rows_per_unit = test() ? int64_t(p.test_segments) * p.test_crops : p.num_sample;
    order_length = n;
    using S = ClipLoaderOptions::Sharding;
    if (p.sharding != S::none) {
      if (test()) throw Error("clip loader: sharding is for pretrain/train; test mode reads every video");
      if (p.ranks < 1 || p.rank < 0 || p.rank >= p.ranks)
        throw Error("clip loader: rank ", p.rank, " is not in [0, ", p.ranks, ")");
      if (!p.drop_last) throw Error("clip loader: sharding needs drop_last (every rank takes the same steps)");
    }
    if (p.sharding == S::slice) {
      if (p.batch % p.num_sample != 0)
        throw Error("clip loader: batch ", p.batch, " is not a multiple of num_sample ", p.num_sample,
                    Hint("with data-parallel slices each rank's batch holds whole videos"));
      block_units = p.batch / p.num_sample;
      const int64_t global_block = block_units * p.ranks;
      units_per_epoch = n / global_block * block_units;
      if (units_per_epoch == 0)
        throw Error("clip loader: ", n, " videos make no full global batch of ", global_block, " videos (", p.ranks,
                    " ranks x ", block_units, ")", Hint("lower the batch size or use fewer ranks"));
      rows_per_epoch = units_per_epoch * rows_per_unit;
    } else {
      if (p.sharding == S::resample) {
        if (int64_t(p.rank_counts.size()) != p.ranks || p.rank_counts[size_t(p.rank)] != n)
          throw Error("clip loader: rank_counts must hold ", p.ranks, " counts with this rank's (", n, ") at ", p.rank);
        order_length = *std::max_element(p.rank_counts.begin(), p.rank_counts.end());
      }
      rows_per_epoch = order_length * rows_per_unit;
      if (!test() && p.drop_last) rows_per_epoch -= rows_per_epoch % p.batch;
    }
    if (rows_per_epoch == 0)
      throw Error("clip loader: ", n, " videos x ", rows_per_unit, " clips make no full batch of ", p.batch,
                  Hint("lower the batch size or turn drop_last off"));
    batches_per_epoch = (rows_per_epoch + p.batch - 1) / p.batch;
    units_per_epoch = (rows_per_epoch + rows_per_unit - 1) / rows_per_unit;
    const size_t batch_bytes = size_t(p.batch) * 3 * p.num_frames * size_t(p.crop) * p.crop * sizeof(float);
    pool = std::make_shared<BufferPool>(batch_bytes, size_t(p.queue_depth) + 4);
    open_failed.assign(size_t(n), 0);
    counted_bad.assign(size_t(n), 0);
    // Resume: start at global batch start_batch, as if the batches before it had been consumed
    // (every draw is keyed by epoch and position, so the batches that follow are the same).
    if (p.start_batch < 0) throw Error("clip loader: start_batch must be >= 0, got ", p.start_batch);
    if (p.start_batch > 0 && test()) throw Error("clip loader: test mode always starts at the first batch");
    resume_batch = consumed = p.start_batch;
    epoch = p.start_batch / batches_per_epoch;
    epoch_batch = p.start_batch % batches_per_epoch;
    next_unit = epoch * units_per_epoch + epoch_batch * p.batch / rows_per_unit;
    for (int t = 0; t < p.threads; ++t) workers.emplace_back([this] { work(); });
  }

  int64_t label_of(int64_t v) const { return store ? store->entry(v).label : list[size_t(v)].label; }

  std::shared_ptr<const std::vector<int64_t>> order_of(int64_t e) {  // under mu
    auto it = orders.find(e);
    if (it != orders.end()) return it->second;
    std::shared_ptr<std::vector<int64_t>> ord;
    if (o.sharding == ClipLoaderOptions::Sharding::resample) {  // shuffled passes over this rank's videos
      ord = std::make_shared<std::vector<int64_t>>(dist::resample_to_equal(o.rank_counts, o.rank, o.seed, uint64_t(e)));
    } else {
      ord = std::make_shared<std::vector<int64_t>>(size_t(videos));
      for (int64_t i = 0; i < videos; ++i) (*ord)[size_t(i)] = i;
      if (o.shuffle && !test()) {
        SampleRng rng(mix(mix(o.seed, uint64_t(e)), 0x5EED0F0D0E5ull));
        for (int64_t i = videos - 1; i > 0; --i) std::swap((*ord)[size_t(i)], (*ord)[size_t(rng.below(i + 1))]);
      }
    }
    while (orders.size() > 2) orders.erase(orders.begin());  // older epochs are done
    orders[e] = ord;
    return ord;
  }

  // Reads frames `idx` of video v: uint8 [T, H, W, 3]. A decode failure throws BadVideo.
  Clip read(int64_t v, const std::function<std::vector<int64_t>(int64_t n)>& indices_for, double* read_s) {
    const auto t0 = Clock::now();
    if (store) {
      const std::vector<int64_t> idx = indices_for(store->entry(v).frames);
      Clip c = store->read_frames(v, idx);  // a store error is an Error, not a bad video
      *read_s += since(t0);
      return c;
    }
    const std::string& path = list[size_t(v)].path;
    std::unique_ptr<ListedVideo> reader;
    try {
      reader = std::make_unique<ListedVideo>(list[size_t(v)], o.frame_template);
      check_video_integrity(reader->source_info(), o.keep_truncated);  // prepare-video's rule, the same function
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      open_failed[size_t(v)] = 1;  // opening fails the same way every time: skip it from now on
      *read_s += since(t0);
      throw BadVideo{classify_video_error(e.what()), e.what()};
    }
    try {
      DecodeOptions d;
      d.short_side = short_side;
      Clip c = reader->decode(indices_for(reader->frames()), d);
      *read_s += since(t0);
      return c;
    } catch (const Error& e) {
      *read_s += since(t0);
      throw BadVideo{classify_video_error(e.what()), e.what()};
    } catch (const std::bad_alloc&) {
      throw;  // out of memory is the loader's failure, not the video's
    } catch (const std::exception& e) {
      *read_s += since(t0);
      throw BadVideo{BadVideoReason::corrupt, "video: " + path + ": " + e.what()};
    }
  }

  // Computes the rows of one unit; rows[j] = float [3, T, S, S] of row j (empty = not produced).
  void produce(int64_t v, uint64_t rng_seed, int64_t nrows, std::vector<std::vector<float>>* rows, double* read_s,
               double* aug_s) {
    SampleRng rng(rng_seed);
    const int T = o.num_frames, S = o.crop;
    AugmentOptions aug;
    aug.input_size = S;
    for (int c = 0; c < 3; ++c) aug.mean[c] = o.mean[size_t(c)], aug.std[c] = o.std[size_t(c)];
    rows->assign(size_t(nrows), {});
    if (!test()) {
      Clip clip = read(
          v,
          [&](int64_t n) {
            return o.segments ? segment_indices(n, T, true, rng) : dense_indices(n, T, dense_rate, rng);
          },
          read_s);
      const auto t0 = Clock::now();
      for (int64_t j = 0; j < nrows; ++j) {
        const CropBox box = sample_multiscale_crop(clip.width, clip.height, aug, rng);
        const bool flip = o.mode == ClipLoaderOptions::Mode::train && o.flip && (rng.next() & 1);
        (*rows)[size_t(j)] = crop_resize_normalize(clip, box, S, flip, aug.mean, aug.std);
      }
      *aug_s += since(t0);
      return;
    }
    // Test: the union of every segment's frames in one read, then the crops of each segment.
    const int segs = o.test_segments;
    Clip all = read(
        v,
        [&](int64_t n) {
          std::vector<int64_t> idx;
          for (int s = 0; s < segs; ++s) {
            const auto part =
                o.segments ? segment_test_indices(n, T, s, segs) : dense_test_indices(n, T, dense_rate, s, segs);
            idx.insert(idx.end(), part.begin(), part.end());
          }
          return idx;
        },
        read_s);
    const auto t0 = Clock::now();
    const size_t fb = size_t(all.width) * all.height * 3;
    const std::vector<CropBox> boxes =
        test_crop_boxes(all.width, all.height, std::min(all.width, all.height), o.test_crops);
    for (int s = 0; s < segs; ++s) {
      Clip part;
      part.frames = T;
      part.height = all.height;
      part.width = all.width;
      part.rgb.assign(all.rgb.begin() + ptrdiff_t(size_t(s) * T * fb),
                      all.rgb.begin() + ptrdiff_t(size_t(s + 1) * T * fb));
      for (int c = 0; c < o.test_crops; ++c) {
        const int64_t j = int64_t(s) * o.test_crops + c;
        if (j < nrows) (*rows)[size_t(j)] = crop_resize_normalize(part, boxes[size_t(c)], S, false, aug.mean, aug.std);
      }
    }
    *aug_s += since(t0);
  }

  void note_bad(int64_t v, const BadVideo& b) {  // under mu
    if (counted_bad[size_t(v)]) return;
    counted_bad[size_t(v)] = 1;
    times.skipped.add(b.reason, b.message);
  }

  void work() {
    try {
      while (true) {
        int64_t U;
        {
          std::unique_lock<std::mutex> lock(mu);
          auto first_batch = [&](int64_t unit) {
            const int64_t e = unit / units_per_epoch, u = unit % units_per_epoch;
            return e * batches_per_epoch + u * rows_per_unit / o.batch;
          };
          worker_cv.wait(lock, [&] { return stop || first_batch(next_unit) < consumed + o.queue_depth; });
          if (stop) return;
          U = next_unit++;
        }
        run_unit(U);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      stop = true;
      consumer_cv.notify_all();
      worker_cv.notify_all();
    }
  }

  void run_unit(int64_t U) {
    const int64_t e = U / units_per_epoch, u = U % units_per_epoch;
    const int64_t row0 = u * rows_per_unit;
    const int64_t nrows = std::min(rows_per_unit, rows_per_epoch - row0);
    std::shared_ptr<const std::vector<int64_t>> order;
    {
      std::lock_guard<std::mutex> lock(mu);
      order = order_of(e);
    }
    std::vector<std::vector<float>> rows;
    double read_s = 0, aug_s = 0;
    int64_t video = -1;
    const int64_t attempts = test() ? 1 : std::min<int64_t>(order_length, 64);
    // The unit's position in the epoch's order, which also keys its random draws: with slices, the
    // position in the order all ranks share (block u / block_units of this rank).
    const int64_t g = o.sharding == ClipLoaderOptions::Sharding::slice
                          ? ((u / block_units) * o.ranks + o.rank) * block_units + u % block_units
                          : u;
    std::string first_error;
    for (int64_t a = 0; a < attempts && video < 0; ++a) {
      const int64_t v = (*order)[size_t((g + a) % order_length)];
      {
        std::lock_guard<std::mutex> lock(mu);
        if (open_failed[size_t(v)]) {
          if (o.strict) throw Error("clip loader: bad video ", list[size_t(v)].path, " (strict)");
          continue;
        }
      }
      try {
        produce(v, mix(mix(mix(o.seed, uint64_t(e)), uint64_t(g)), uint64_t(a)), nrows, &rows, &read_s, &aug_s);
        video = v;
      } catch (const BadVideo& b) {
        if (o.strict) throw Error("clip loader: ", b.message, " [", bad_video_reason_name(b.reason), "; strict]");
        std::lock_guard<std::mutex> lock(mu);
        note_bad(v, b);
        if (first_error.empty()) first_error = b.message;
      }
    }
    if (video < 0 && !test())
      throw Error("clip loader: ", attempts, " videos in a row could not be read, starting at position ", g,
                  " of epoch ", e, "; first: ", first_error,
                  Hint("check the list file; prepare-video reports every bad video"));
    if (video < 0) {  // test mode: this video's rows are left out
      video = (*order)[size_t(u)];
      rows.assign(size_t(nrows), {});
    }
    // Copy the rows into their batches (allocated on first touch).
    double copy_s = 0;
    const int64_t row_floats = 3 * int64_t(o.num_frames) * o.crop * o.crop;
    for (int64_t j = 0; j < nrows; ++j) {
      const int64_t r = row0 + j;
      const int64_t g = e * batches_per_epoch + r / o.batch, slot = r % o.batch;
      if (g < resume_batch) continue;
      Tensor dst;
      {
        std::lock_guard<std::mutex> lock(mu);
        PendingBatch& pb = pending[g];
        if (!pb.videos.defined()) {
          pb.rows = std::min<int64_t>(o.batch, rows_per_epoch - (r / o.batch) * o.batch);
          pb.videos = pool->tensor({pb.rows, 3, o.num_frames, o.crop, o.crop});
          pb.labels.assign(size_t(pb.rows), -1);
          pb.video_index.assign(size_t(pb.rows), -1);
          pb.view.assign(size_t(pb.rows), -1);
          pb.valid.assign(size_t(pb.rows), 0);
        }
        dst = pb.videos;
      }
      const bool ok = !rows[size_t(j)].empty();
      if (ok) {
        const auto t0 = Clock::now();
        std::memcpy(dst.data<float>() + slot * row_floats, rows[size_t(j)].data(), size_t(row_floats) * sizeof(float));
        copy_s += since(t0);
      }
      std::lock_guard<std::mutex> lock(mu);
      PendingBatch& pb = pending[g];
      pb.labels[size_t(slot)] = label_of(video);
      pb.video_index[size_t(slot)] = video;
      pb.view[size_t(slot)] = j;
      pb.valid[size_t(slot)] = ok;
      if (++pb.filled == pb.rows) consumer_cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu);
    times.read_s += read_s;
    times.augment_s += aug_s;
    times.copy_s += copy_s;
    if (!rows.empty() && !rows[0].empty()) ++times.videos_read;
  }

  bool next(ClipBatch& out) {
    while (true) {
      if (epoch_batch == batches_per_epoch) {
        epoch_batch = 0;
        ++epoch;
        return false;
      }
      PendingBatch pb;
      int64_t g;
      {
        const auto t0 = Clock::now();
        std::unique_lock<std::mutex> lock(mu);
        g = consumed;
        consumer_cv.wait(lock, [&] {
          if (error) return true;
          auto it = pending.find(g);
          return it != pending.end() && it->second.rows > 0 && it->second.filled == it->second.rows;
        });
        times.wait_s += since(t0);
        if (error) std::rethrow_exception(error);
        pb = std::move(pending[g]);
        pending.erase(g);
        ++consumed;
      }
      worker_cv.notify_all();
      const int64_t b = epoch_batch++;
      int64_t valid = 0;
      for (const uint8_t v : pb.valid) valid += v;
      if (valid == 0) continue;  // every row's video was bad (test mode)
      out.epoch = epoch;
      out.batch = b;
      if (valid == pb.rows) {
        out.videos = std::move(pb.videos);
        out.labels = std::move(pb.labels);
        out.video_index = std::move(pb.video_index);
        out.view = std::move(pb.view);
      } else {  // leave out the rows of bad videos
        const int64_t row = pb.videos.numel() / pb.rows;
        out.videos = pool->tensor({valid, 3, o.num_frames, o.crop, o.crop});
        out.labels.clear();
        out.video_index.clear();
        out.view.clear();
        int64_t k = 0;
        for (int64_t i = 0; i < pb.rows; ++i) {
          if (!pb.valid[size_t(i)]) continue;
          std::memcpy(out.videos.data<float>() + k * row, pb.videos.data<float>() + i * row,
                      size_t(row) * sizeof(float));
          out.labels.push_back(pb.labels[size_t(i)]);
          out.video_index.push_back(pb.video_index[size_t(i)]);
          out.view.push_back(pb.view[size_t(i)]);
          ++k;
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      times.clips += valid;
      times.batches += 1;
      return true;
    }
  }
};

ClipLoader::ClipLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClipLoader::ClipLoader(ClipLoader&&) noexcept = default;
ClipLoader& ClipLoader::operator=(ClipLoader&&) noexcept = default;
ClipLoader::~ClipLoader() = default;

ClipLoader ClipLoader::from_store(const std::string& store_dir, const ClipLoaderOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  impl->store.emplace(ClipStore::open(store_dir));
  impl->store_stride = impl->store->header().frame_stride;
  impl->setup(impl->store->size());
  return ClipLoader(std::move(impl));
}

ClipLoader ClipLoader::from_list(const std::string& list_file, const std::string& root, ListFormat format,
                                 int short_side, const ClipLoaderOptions& options) {
  if (short_side < 0 || short_side > 16384)
    throw Error("clip loader: short side must be in [0, 16384], got ", short_side);
  parse_frame_template(options.frame_template);  // a bad template fails here, not once per folder
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  impl->list = read_video_list(list_file, format, root);
  impl->short_side = short_side;
  impl->setup(int64_t(impl->list.size()));
  return ClipLoader(std::move(impl));
}

bool ClipLoader::next(ClipBatch& batch) {
  return impl_->next(batch);
}
int64_t ClipLoader::size() const {
  return impl_->videos;
}
int64_t ClipLoader::videos_per_epoch() const {
  return impl_->units_per_epoch;
}
int64_t ClipLoader::batches_per_epoch() const {
  return impl_->batches_per_epoch;
}
int64_t ClipLoader::rows_per_video() const {
  return impl_->rows_per_unit;
}
int64_t ClipLoader::epoch() const {
  return impl_->epoch;
}
const ClipLoaderOptions& ClipLoader::options() const {
  return impl_->o;
}

LoaderTimes ClipLoader::times() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  LoaderTimes t = impl_->times;
  t.wall_s = since(impl_->start);
  return t;
}

std::string loader_summary(const LoaderTimes& t) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "loader: %lld clips, read %.2fs, augment %.2fs, copy %.2fs (worker seconds), trainer waited %.2fs; "
                "skipped videos: %s",
                (long long)t.clips, t.read_s, t.augment_s, t.copy_s, t.wait_s, t.skipped.summary().c_str());
  return buf;
}

}  // namespace unmask::video
