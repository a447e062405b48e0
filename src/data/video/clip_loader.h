// data/video/clip_loader.h: the multi-threaded, prefetching clip loader behind video training and
// evaluation. It reads clips from a clip store (video/clip_store.h, decode-once) or decodes a
// list file on the fly (the slow baseline: any video_list.h format, through ListedVideo, so a
// listed frame range is the whole "video" the samplers see), samples frames as VideoMAE does,
// augments, normalises and assembles batches on worker threads, a bounded number of batches
// ahead of the consumer.
//
//   video::ClipLoaderOptions o; o.batch = 8; o.num_frames = 16; o.sampling_rate = 4; o.seed = 1;
//   auto loader = video::ClipLoader::from_store("train.ucs", o);
//   video::ClipBatch b;
//   while (loader.next(b)) { ... b.videos: f32 [B, 3, T, crop, crop] ... }   // one epoch
//   while (loader.next(b)) { ... }                                           // the next, reshuffled
//   video::LoaderTimes t = loader.times();  // clips/s and the read / augment / copy / wait split
//
// Rows. Each video of an epoch is a "unit" that yields R rows from ONE read/decode:
//   pretrain, train: R = num_sample (VideoMAE v2's repeated augmentation; 1 = VideoMAE v1): one
//     frame sample, R independent multi-scale crops (train mode: each with a random h-flip);
//   test: R = test_segments * test_crops, in the order view = segment * test_crops + crop; the
//     union of the segments' frames is decoded once (VideoMAE decodes once per view).
// Frames (T = num_frames), from the video's n frames (a store's kept frames):
//   dense (segments = false): pretrain/train dense_indices(n, T, rate), test
//     dense_test_indices(n, T, rate, segment, test_segments) (video/sampling.h);
//   segments = true (TSN, SSv2): train segment_indices(n, T, true); test: frame i of segment view
//     s is int(tick * (i + (s + 0.5) / test_segments)), tick = n / T (= VideoMAE's middle frame
//     for one view; evenly spread offsets inside each segment for several).
//   A store written with --frame-stride s keeps every s-th frame: the dense sampling_rate (in
//   source frames) must then be a multiple of s and is divided by it.
// Space: pretrain/train: sample_multiscale_crop (scales 1, .875, .75, .66; 13 fixed offsets)
//   resized to crop x crop (video/augment.h); test: test_crop_boxes of side min(H, W) (the centre,
//   or test_crops boxes along the long side), resized to crop x crop (= VideoMAE's resize of the
//   short side to `crop` followed by crop x crop crops). Then (x / 255 - mean) / std.
//
// Order and determinism. An epoch visits the videos in a permutation drawn from (seed, epoch)
// (identity without shuffle; test mode never shuffles). Every random draw of unit u of epoch e
// comes from an RNG seeded by (seed, e, u, attempt): batches are the same for any thread
// count, queue depth or timing, and the same for a store and for the list it was made from
// (same frames, same pixels) when the store keeps every frame (stride 1, no --max-frames).
// drop_last (train/pretrain) drops the rows past the last full batch; test keeps all rows.
//
// Bad videos (from_list; a store holds only good ones). A video that cannot be opened, that
// check_video_integrity refuses (clip_store.h: prepare-video's rule for truncated and corrupt
// files, the same function) or that fails to decode is counted in times().skipped (once per
// video) and, in pretrain/train, replaced by the next video of the epoch's order (attempt 1, 2,
// ...; deterministic since failures are a property of the files); in test mode its rows are
// left out of the batch (B shrinks). With strict = true the first failure is an Error thrown
// from next(). Store read errors (checksum mismatch, a chunk truncated after opening) are always
// Errors from next().
//
// Threads. `threads` workers each claim the next unit, read, augment and copy its rows into the
// batch tensors; at most queue_depth batches are in flight past the one the consumer waits for.
// The destructor stops and joins the workers (no hang when the consumer stops early).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "unmask/tensor.h"
#include "data/video/clip_store.h"
#include "data/video/sampling.h"

namespace unmask::video {

struct ClipLoaderOptions {
  int batch = 8;          // rows per batch
  int num_frames = 16;    // T
  int sampling_rate = 4;  // dense sampling step, in source frames (VideoMAE K400: 4; SSv2 pretrain: 2)
  bool segments = false;  // TSN segment sampling (SSv2 fine-tuning) instead of dense
  int crop = 224;         // output H = W
  enum class Mode { pretrain, train, test };
  Mode mode = Mode::pretrain;  // pretrain: multi-scale crop, no flip; train: + random h-flip; test: views
  bool flip = true;            // train mode's random h-flip; set false when labels are directions (SSv2, make-videos)
  int num_sample = 1;          // pretrain/train: augmented clips per decoded video
  int test_segments = 1, test_crops = 1;  // test views: temporal clips x spatial crops
  int threads = 2, queue_depth = 4;
  uint64_t seed = 0;
  bool shuffle = true;    // pretrain/train (test mode keeps list order)
  bool drop_last = true;  // pretrain/train (test mode keeps every row)
  bool strict = false;    // from_list: the first bad video is an Error from next()
  bool keep_truncated = false;  // from_list: use the complete frames of truncated files (--keep-truncated)
  std::string frame_template = "img_{:05}.jpg";  // from_list: file names in frame folders (videomae2, rawframes)
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, std{0.229f, 0.224f, 0.225f};
  // Data parallel (pretrain/train; dist/shard.h has V-SWIFT's two modes): this rank's part.
  //   slice (every machine holds the data): the epoch's order, the same permutation on every rank,
  //     is cut into blocks of batch / num_sample videos and rank r reads blocks r, r + ranks, ...;
  //     every random draw is keyed by the video's position in that global order. So rank r's batch
  //     b is rows [r * batch, (r + 1) * batch) of batch b of ONE loader with batch x ranks (same
  //     videos, frames, crops, flips), and no two ranks read the same video in an epoch. The epoch
  //     keeps the videos of whole global batches (drop_last over batch x ranks).
  //   resample (each machine holds only its part): this loader's data is the rank's own;
  //     rank_counts holds every rank's video count, and epoch e visits
  //     dist::resample_to_equal(rank_counts, rank, seed, e): max(rank_counts) videos on every rank
  //     (a rank with fewer videos revisits them), so all ranks take the same number of steps.
  enum class Sharding { none, slice, resample };
  Sharding sharding = Sharding::none;
  int rank = 0, ranks = 1;
  std::vector<int64_t> rank_counts;  // resample
  /// Resume (pretrain/train): the global batch to start at, counting every batch next() returned
  /// since epoch 0 (epoch start_batch / batches_per_epoch). The batches from there on are those an
  /// uninterrupted loader would return.
  int64_t start_batch = 0;
};

struct ClipBatch {
  Tensor videos;                     // f32 [B, 3, T, crop, crop], normalised; B <= options.batch
  std::vector<int64_t> labels;       // [B]
  std::vector<int64_t> video_index;  // [B] the video's position in the list / store
  std::vector<int64_t> view;         // [B] test: segment * test_crops + crop; else the sample number
  int64_t epoch = 0, batch = 0;      // batch number within the epoch
};

struct LoaderTimes {
  double read_s = 0;        // open + decode (from_list) or store read + checksum, summed over workers
  double augment_s = 0;     // crop, resize, flip, normalise, summed over workers
  double copy_s = 0;        // copying rows into the batch tensors, summed over workers
  double wait_s = 0;        // the consumer's time blocked in next()
  double wall_s = 0;        // since the loader was made
  int64_t clips = 0;        // rows delivered by next()
  int64_t batches = 0;      // batches delivered by next()
  int64_t videos_read = 0;  // successful reads/decodes (units)
  BadVideoTally skipped;    // bad videos, once each
};

class ClipLoader {
 public:
  /// Clips from a clip store (decode-once).
  static ClipLoader from_store(const std::string& store_dir, const ClipLoaderOptions& options);
  /// Clips decoded on the fly from a list file (video files or frame folders), resized to `short_side` (0 = native).
  static ClipLoader from_list(const std::string& list_file, const std::string& root, ListFormat format, int short_side,
                              const ClipLoaderOptions& options);

  ClipLoader(ClipLoader&&) noexcept;
  ClipLoader& operator=(ClipLoader&&) noexcept;
  ~ClipLoader();  // stops and joins the workers

  /// The next batch of the current epoch; false (once) at the end of the epoch, after which the
  /// next call starts the next epoch. Rethrows a worker's Error.
  bool next(ClipBatch& batch);
  int64_t size() const;               // videos in the store / list (this rank's with resample)
  int64_t videos_per_epoch() const;   // videos (decodes) an epoch reads on this rank
  int64_t batches_per_epoch() const;  // upper bound in test mode with bad videos (empty batches are skipped)
  int64_t rows_per_video() const;     // R above
  int64_t epoch() const;              // the epoch next() is in
  LoaderTimes times() const;
  const ClipLoaderOptions& options() const;

  struct Impl;

 private:
  explicit ClipLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// One line on what the loader did: "loader: N clips, read Xs, augment Ys, copy Zs (worker
/// seconds), trainer waited Ws; skipped videos: ...".
std::string loader_summary(const LoaderTimes& times);

/// Frame indices of test view `segment` of `segments` for TSN sampling (the rule above).
std::vector<int64_t> segment_test_indices(int64_t video_frames, int num_frames, int segment, int segments);

}  // namespace unmask::video
