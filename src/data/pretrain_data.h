// data/pretrain_data.h: BERT pretraining data: text -> DLE HDF5 shards -> micro-batches.
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
  std::vector<std::string> inputs;   // text files (or directories: every regular file, sorted)
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
};

struct PrepareReport {
  int64_t files = 0, documents = 0, sentences = 0, instances = 0, tokens = 0;
  int64_t invalid_utf8_lines = 0;    // skipped, counted, reported
  std::vector<std::string> shards;   // written paths
};

/// Tokenizes the inputs and writes shards by Google's create_pretraining_data rules (short_seq_prob,
/// 50% random next sentence from another document, truncate_seq_pair, masked_lm_prob capped at
/// max_predictions_per_seq, 80/10/10, dupe_factor), deterministic for a given seed whatever the
/// thread count. Empty or binary inputs are errors naming the file.
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
/// lengths throw an Error naming the file, the dataset and what was expected.
PretrainShard read_shard(const std::string& path);
/// Writes a shard (DLE dtypes, gzip) atomically.
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
};

/// Where the loader is: epoch, index into that epoch's shuffled file order, and the next
/// instance within the file (in the file's shuffled instance order).
struct LoaderPosition {
  int64_t epoch = 0, file_index = 0, sample_index = 0;
};

/// Yields full micro-batches of batch_size instances forever (epochs roll over). Files are
/// shuffled per epoch by (seed, epoch); instances within a file by (seed, epoch, file). The
/// sequence of batches is a pure function of (options, start position): resuming from a saved
/// position yields exactly the batches an uninterrupted run would have.
class PretrainLoader {
 public:
  explicit PretrainLoader(const LoaderOptions& options, const LoaderPosition& start = {});
  ~PretrainLoader();
  PretrainBatch next();
  /// The position of the next batch next() will return.
  LoaderPosition position() const;
  int64_t seq_length() const;
  struct Impl;
 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace unmask::data
