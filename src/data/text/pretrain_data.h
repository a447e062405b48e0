// data/text/pretrain_data.h: BERT pretraining data: text -> DLE HDF5 shards -> micro-batches.
//
//   data::PrepareOptions po;                        // unmask prepare-text
//   po.inputs = {"corpus.txt"}; po.vocab = "vocab.txt"; po.output_dir = "shards128";
//   data::PrepareReport r = data::prepare_text(po);
//
//   data::LoaderOptions lo;                         // the trainer's loader
//   lo.files = data::list_shards("shards128"); lo.batch_size = 8; lo.seed = 42;
//   data::PretrainLoader loader(lo);                // background prefetch
//   PretrainBatch b = loader.next();
//   data::LoaderPosition pos = loader.position();   // saved in checkpoints; resume from it
//
// Shards use exactly DLE's (legacy, create_pretraining_data.py / h5py) layout: datasets
// input_ids i4 [N, S], input_mask i1 [N, S], segment_ids i1 [N, S], masked_lm_positions i4
// [N, P], masked_lm_ids i4 [N, P], next_sentence_labels i1 [N], every one gzip-compressed.
//
// Implementation map: data/text_input.* (reading, UTF-8 checks, sentence splitter,
// tokenizing), data/instances.* (Google's instance and masking rules), data/prepare_text.cc,
// data/shard_io.* (HDF5), data/loader.cc, data/rng.h (the counter-based SplitMix64 streams every
// random draw comes from), data/progress.* and data/parallel.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "unmask/train.h"

namespace unmask::data {

// ---- text -> shards --------------------------------------------------------------------------

enum class TextFormat : uint8_t {
  sentences,  // one sentence per line, a blank line between documents (the BERT convention)
  documents,  // one document per line, split into sentences by a rule-based splitter
};

struct PrepareOptions {
  std::vector<std::string> inputs;   // text files, or directories: every regular file below them
                                     // (recursively, names starting with '.' skipped), sorted
  std::string vocab;                 // vocab.txt
  bool lower_case = true;
  TextFormat format = TextFormat::sentences;
  std::string output_dir;
  int64_t max_seq_length = 128;
  int64_t max_predictions_per_seq = 20;
  double masked_lm_prob = 0.15;
  double short_seq_prob = 0.1;
  int64_t dupe_factor = 5;
  uint64_t seed = 12345;
  int64_t num_shards = 1;            // instances are spread over this many shard files
  int num_threads = 0;               // 0 = all cores
  bool progress = true;              // progress bar with ETA on stderr (when it is a terminal)
  bool force = false;                // output_dir holds .hdf5 shards: remove them first (else refused)
};

struct PrepareReport {
  int64_t files = 0, documents = 0, sentences = 0, instances = 0, tokens = 0;  // tokens of the corpus
  int64_t invalid_utf8_lines = 0;    // skipped, counted, reported
  std::string first_invalid_utf8;    // "file:line" of the first skipped line ("" if none)
  std::vector<std::string> shards;   // written paths: output_dir/shard_00000.hdf5, ...
  int64_t removed_shards = 0;        // .hdf5 files of an earlier run removed under `force`
};

/// Tokenizes the inputs and writes shards by Google's create_pretraining_data rules (short_seq_prob,
/// 50% random next sentence from another document, truncate_seq_pair, masked_lm_prob capped at
/// max_predictions_per_seq, 80/10/10, dupe_factor), deterministic for a given seed whatever the
/// thread count. Empty or binary inputs are errors naming the file.
///
/// Details (data/instances.h, data/text_input.h, data/prepare_text.cc): every (dupe, document)
/// pair draws from its own SplitMix64 stream keyed by (seed, dupe, document) (data/rng.h), and
/// the instance order is one seeded shuffle, so shards are byte-identical for any num_threads.
/// The shuffled instances are cut into num_shards contiguous, near-equal parts, written as
/// output_dir/shard_NNNNN.hdf5 (atomically). Invalid UTF-8 lines are skipped and counted; a file
/// with a NUL byte or mostly invalid UTF-8 is rejected as binary, one without text as empty.
/// A new input file always starts a new document.
PrepareReport prepare_text(const PrepareOptions& options);

// ---- shards ---------------------------------------------------------------------------------

/// One shard in memory (all i32, row-major).
struct PretrainShard {
  int64_t num_instances = 0, seq_length = 0, max_predictions = 0;
  std::vector<int32_t> input_ids, input_mask, segment_ids;  // [N, S]
  std::vector<int32_t> masked_lm_positions, masked_lm_ids;  // [N, P]
  std::vector<int32_t> next_sentence_labels;                // [N]
};

/// Reads a shard written by unmask or by DLE; a missing key, wrong rank/dtype class or ragged
/// lengths throw an Error naming the file, the dataset and what was expected. Any integer type
/// on disk (signed or unsigned, 8 to 64 bits) is read through HDF5's conversion to int32. The
/// values are checked too: input_mask, segment_ids and next_sentence_labels in {0, 1},
/// input_mask of the form 1...1 0...0, masked_lm_positions in [0, seq_length), ids >= 0.
PretrainShard read_shard(const std::string& path);
/// Writes a shard (DLE dtypes: i4 / i1 little-endian; chunked, gzip level 4 as h5py's
/// compression='gzip') atomically: the file is built in memory and renamed into place.
void write_shard(const std::string& path, const PretrainShard& shard);
/// The *.hdf5 / *.h5 files in a directory (sorted), or the file itself.
std::vector<std::string> list_shards(const std::string& path);

// ---- loader ---------------------------------------------------------------------------------

struct LoaderOptions {
  std::vector<std::string> files;
  int64_t batch_size = 8;
  uint64_t seed = 42;
  /// Dynamic masking: ignore the shard's masks and draw new ones per (epoch, instance) from a
  /// counter-based RNG (80/10/10, masked_lm_prob, capped at max_predictions_per_seq).
  bool dynamic_masking = false;
  double masked_lm_prob = 0.15;
  int64_t max_predictions_per_seq = 20;
  int64_t vocab_size = 30522;
  int32_t mask_id = 103, cls_id = 101, sep_id = 102, pad_id = 0;
  bool prefetch = true;              // read the next shard on a background thread
  /// Rows [keep_begin, keep_end) of every batch are built and returned; the others are passed over
  /// (not copied, not masked) but still consumed, so the sequence of instances is unchanged. A
  /// data-parallel rank of a global batch builds only its own rows. keep_end = -1: all rows.
  int64_t keep_begin = 0, keep_end = -1;
  /// Data parallel by files (DLE's run_pretraining): every epoch's shuffled file order is the same
  /// on every rank, and this loader visits only its positions file_rank, file_rank + file_ranks,
  /// ... of it, so the ranks read disjoint files within an epoch and other files the next.
  int file_rank = 0, file_ranks = 1;
};

/// Where the loader is: epoch, index into that epoch's shuffled file order (this rank's part of
/// it with file_ranks > 1), and the next instance within the file (in the file's shuffled
/// instance order).
struct LoaderPosition {
  int64_t epoch = 0, file_index = 0, sample_index = 0;
  bool operator==(const LoaderPosition&) const = default;
};

/// Yields full micro-batches of batch_size instances forever (epochs roll over). Files are
/// shuffled per epoch by (seed, epoch); instances within a file by (seed, epoch, file). The
/// sequence of batches is a pure function of (options, start position): resuming from a saved
/// position yields exactly the batches an uninterrupted run would have.
///
/// Details (data/loader.cc): a batch may span files and epochs; "file" in the keys is the index
/// in options.files, so resume with the same list. The constructor reads every file's metadata
/// (sizes, types; all files must share seq_length and max predictions) and the first file.
/// With dynamic masking the shard's masks are undone and redrawn by Google's rules from the
/// SplitMix64 stream keyed (seed, epoch, file, row) (data/rng.h); masked_lm_positions /
/// masked_lm_ids then have max_predictions_per_seq columns, else the shard's width. With
/// prefetch the next file is read on a std::thread while the current one is consumed; the
/// batches are identical either way. Errors of a prefetched read surface in next().
class PretrainLoader {
 public:
  explicit PretrainLoader(const LoaderOptions& options, const LoaderPosition& start = {});
  PretrainLoader(PretrainLoader&&) noexcept;
  PretrainLoader& operator=(PretrainLoader&&) noexcept;
  ~PretrainLoader();  // joins the prefetch thread
  PretrainBatch next();
  /// The position of the next batch next() will return (normalized: sample_index is always
  /// inside a non-empty file).
  LoaderPosition position() const;
  int64_t seq_length() const;
  int64_t num_instances() const;  // over all of options.files (from the metadata the constructor read)
  struct Impl;
 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace unmask::data
