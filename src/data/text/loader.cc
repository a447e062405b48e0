// data/text/loader.cc: PretrainLoader (see pretrain_data.h).
//
// Order: epoch e visits the files in the order of a Fisher-Yates shuffle drawn from the
// stream (seed, kStreamFileOrder, e), and the instances of file f (its index in
// options.files) in the order of a shuffle from (seed, kStreamFileSamples, e, f). A batch
// takes the next batch_size instances of that sequence, running on into the next file and
// the next epoch. Files with no instances are skipped.
//
// Dynamic masking: the instance's original tokens are restored (masked_lm_ids written back at
// masked_lm_positions, the entries before the first 0 position, as DLE's reader counts them),
// then mask_tokens (instances.h, Google's rules) runs on its real tokens with the stream
// (seed, kStreamMasking, e, f, i), i the instance's row in the file. Every random number is
// thus a pure function of its key (data/rng.h), whatever the prefetching or resume point.
//
// Prefetch: when a file becomes current, a std::thread reads the next file of the sequence;
// the batch sequence is the same with prefetch on or off, only the waiting differs.
#include <algorithm>
#include <exception>
#include <numeric>
#include <thread>

#include "data/text/instances.h"
#include "data/text/pretrain_data.h"
#include "data/rng.h"
#include "data/text/shard_io.h"
#include "unmask/error.h"

namespace unmask::data {

struct PretrainLoader::Impl {
  LoaderOptions options;
  std::vector<ShardInfo> infos;  // [files]
  int64_t seq_length = 0, max_predictions = 0, batch_predictions = 0;
  LoaderPosition pos;

  std::vector<int64_t> order;  // the file order of order_epoch
  int64_t order_epoch = -1;

  // The file being read.
  int64_t current_file = -1, current_epoch = -1;
  std::shared_ptr<const PretrainShard> current;
  std::vector<int64_t> samples;  // shuffled rows of the current file

  // The prefetch in flight (file index; -1 = none).
  int64_t pending_file = -1;
  std::thread pending_thread;
  std::shared_ptr<const PretrainShard> pending_data;
  std::exception_ptr pending_error;

  MaskingOptions masking;
  std::vector<int32_t> row, positions, labels, scratch;

  ~Impl() {
    if (pending_thread.joinable()) pending_thread.join();
  }

  // The files this loader visits in `epoch`: the epoch's shuffle of all files, then (file_ranks
  // > 1) only positions file_rank, file_rank + file_ranks, ... of it.
  const std::vector<int64_t>& file_order(int64_t epoch) {
    if (order_epoch != epoch) {
      std::vector<int64_t> all(options.files.size());
      std::iota(all.begin(), all.end(), 0);
      Rng rng(derive_key(options.seed, {kStreamFileOrder, uint64_t(epoch)}));
      rng.shuffle(all.data(), int64_t(all.size()));
      order.clear();
      for (size_t i = size_t(options.file_rank); i < all.size(); i += size_t(options.file_ranks)) order.push_back(all[i]);
      order_epoch = epoch;
    }
    return order;
  }
  int64_t files_per_epoch() const {  // this loader's share: ceil((files - file_rank) / file_ranks)
    return (int64_t(options.files.size()) - options.file_rank + options.file_ranks - 1) / options.file_ranks;
  }

  int64_t file_at(const LoaderPosition& p) { return file_order(p.epoch)[size_t(p.file_index)]; }

  // Moves p past exhausted (or empty) files to the next instance that exists.
  void normalize(LoaderPosition& p) {
    while (p.sample_index >= infos[size_t(file_at(p))].num_instances) {
      p.sample_index = 0;
      if (++p.file_index == files_per_epoch()) {
        p.file_index = 0;
        ++p.epoch;
      }
    }
  }

  std::shared_ptr<const PretrainShard> load(int64_t f) {
    auto shard = std::make_shared<PretrainShard>(read_shard(options.files[size_t(f)]));
    const ShardInfo& info = infos[size_t(f)];
    if (shard->num_instances != info.num_instances || shard->seq_length != info.seq_length ||
        shard->max_predictions != info.max_predictions)
      throw Error("shard ", options.files[size_t(f)], " changed while the loader was reading it (", shard->num_instances,
                  " instances now, ", info.num_instances, " before)");
    return shard;
  }

  void join_pending() {
    if (pending_thread.joinable()) pending_thread.join();
  }

  void start_prefetch(int64_t f) {
    join_pending();
    pending_file = f;
    pending_data.reset();
    pending_error = nullptr;
    pending_thread = std::thread([this, f] {
      try {
        pending_data = load(f);
      } catch (...) {
        pending_error = std::current_exception();
      }
    });
  }

  // Makes the file at pos current (pos normalized), then prefetches the one after it.
  void make_current() {
    const int64_t f = file_at(pos);
    if (f != current_file) {
      if (pending_file == f) {
        join_pending();
        pending_file = -1;
        if (pending_error) std::rethrow_exception(std::exchange(pending_error, nullptr));
        current = std::move(pending_data);
      } else {
        current = load(f);
      }
      current_file = f;
      current_epoch = -1;
      if (options.prefetch) {
        LoaderPosition next = pos;
        next.sample_index = infos[size_t(f)].num_instances;
        normalize(next);
        const int64_t nf = file_at(next);
        if (nf != f) start_prefetch(nf);
      }
    }
    if (current_epoch != pos.epoch) {
      samples.resize(size_t(current->num_instances));
      std::iota(samples.begin(), samples.end(), 0);
      Rng rng(derive_key(options.seed, {kStreamFileSamples, uint64_t(pos.epoch), uint64_t(f)}));
      rng.shuffle(samples.data(), int64_t(samples.size()));
      current_epoch = pos.epoch;
    }
  }

  // Copies instance `r` of the current file into batch row b.
  void copy_row(int64_t b, int64_t r, PretrainBatch& out) {
    const PretrainShard& sh = *current;
    const int64_t S = seq_length, P = sh.max_predictions, PB = batch_predictions;
    const int32_t* ids = sh.input_ids.data() + r * S;
    const int32_t* mask = sh.input_mask.data() + r * S;
    std::copy(sh.segment_ids.data() + r * S, sh.segment_ids.data() + (r + 1) * S, out.segment_ids.data<int32_t>() + b * S);
    std::copy(mask, mask + S, out.input_mask.data<int32_t>() + b * S);
    out.next_sentence_labels.data<int32_t>()[b] = sh.next_sentence_labels[size_t(r)];
    int32_t* out_ids = out.input_ids.data<int32_t>() + b * S;
    int32_t* out_pos = out.masked_lm_positions.data<int32_t>() + b * PB;
    int32_t* out_lab = out.masked_lm_ids.data<int32_t>() + b * PB;
    std::fill(out_pos, out_pos + PB, 0);
    std::fill(out_lab, out_lab + PB, 0);
    const int32_t* pos_in = sh.masked_lm_positions.data() + r * P;
    const int32_t* lab_in = sh.masked_lm_ids.data() + r * P;
    if (!options.dynamic_masking) {
      std::copy(ids, ids + S, out_ids);
      std::copy(pos_in, pos_in + P, out_pos);
      std::copy(lab_in, lab_in + P, out_lab);
      return;
    }
    row.assign(ids, ids + S);
    for (int64_t k = 0; k < P && pos_in[k] != 0; ++k) row[size_t(pos_in[k])] = lab_in[k];
    const int64_t real = std::count(mask, mask + S, 1);
    positions.clear();
    labels.clear();
    Rng rng(derive_key(options.seed, {kStreamMasking, uint64_t(pos.epoch), uint64_t(current_file), uint64_t(r)}));
    mask_tokens(row.data(), real, masking, rng, positions, labels, scratch);
    std::copy(row.begin(), row.end(), out_ids);
    std::copy(positions.begin(), positions.end(), out_pos);
    std::copy(labels.begin(), labels.end(), out_lab);
  }
};

PretrainLoader::PretrainLoader(const LoaderOptions& options, const LoaderPosition& start)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  if (options.files.empty()) throw Error("pretrain loader: no shard files", Hint("list them with data::list_shards(dir)"));
  UNMASK_CHECK(options.batch_size >= 1, "pretrain loader: batch_size must be >= 1, got ", options.batch_size);
  UNMASK_CHECK(options.file_ranks >= 1 && options.file_rank >= 0 && options.file_rank < options.file_ranks,
               "pretrain loader: file_rank ", options.file_rank, " is not in [0, file_ranks = ", options.file_ranks, ")");
  if (int64_t(options.files.size()) < options.file_ranks)
    throw Error("pretrain loader: ", options.files.size(), " shard file(s) for ", options.file_ranks,
                " ranks reading by files: some ranks would read nothing",
                Hint("write at least one shard per rank (unmask prepare-text --shards N)"));
  if (m.options.keep_end < 0) m.options.keep_end = options.batch_size;  // all rows
  UNMASK_CHECK(options.keep_begin >= 0 && options.keep_begin < m.options.keep_end &&
                   m.options.keep_end <= options.batch_size,
               "pretrain loader: kept rows [", options.keep_begin, ", ", options.keep_end,
               ") are not a non-empty part of a batch of ", options.batch_size);
  if (options.dynamic_masking) {
    UNMASK_CHECK(options.masked_lm_prob > 0 && options.masked_lm_prob <= 1,
                 "pretrain loader: masked_lm_prob must be in (0, 1], got ", options.masked_lm_prob);
    UNMASK_CHECK(options.max_predictions_per_seq >= 1, "pretrain loader: max_predictions_per_seq must be >= 1, got ",
                 options.max_predictions_per_seq);
    UNMASK_CHECK(options.vocab_size >= 1, "pretrain loader: vocab_size must be >= 1, got ", options.vocab_size);
  }
  int64_t total = 0;
  for (const std::string& f : options.files) {
    m.infos.push_back(inspect_shard(f));
    const ShardInfo& i = m.infos.back();
    const ShardInfo& first = m.infos.front();
    if (i.seq_length != first.seq_length || i.max_predictions != first.max_predictions)
      throw Error("shard ", f, " has sequence length ", i.seq_length, " and ", i.max_predictions,
                  " predictions per sequence, but ", options.files.front(), " has ", first.seq_length, " and ",
                  first.max_predictions, Hint("load the shards of one phase (one max_seq_length) at a time"));
    total += i.num_instances;
  }
  if (total == 0) throw Error("pretrain loader: the ", options.files.size(), " shard file(s) hold no instances");
  m.seq_length = m.infos.front().seq_length;
  m.max_predictions = m.infos.front().max_predictions;
  m.batch_predictions = options.dynamic_masking ? options.max_predictions_per_seq : m.max_predictions;
  m.masking = {options.masked_lm_prob, options.max_predictions_per_seq, int32_t(options.vocab_size),
               options.mask_id, options.cls_id, options.sep_id};

  const int64_t num_files = m.files_per_epoch();
  if (start.epoch < 0 || start.file_index < 0 || start.file_index >= num_files || start.sample_index < 0)
    throw Error("pretrain loader: start position (epoch ", start.epoch, ", file ", start.file_index, ", sample ",
                start.sample_index, ") is outside the ", num_files, " shard files",
                Hint("resume with the shards the run was started with"));
  m.pos = start;
  const int64_t f = m.file_at(m.pos);
  if (m.pos.sample_index > m.infos[size_t(f)].num_instances)
    throw Error("pretrain loader: start position sample ", m.pos.sample_index, " is past the ",
                m.infos[size_t(f)].num_instances, " instances of ", options.files[size_t(f)],
                Hint("resume with the shards the run was started with"));
  m.normalize(m.pos);
  m.make_current();
}

PretrainLoader::PretrainLoader(PretrainLoader&&) noexcept = default;
PretrainLoader& PretrainLoader::operator=(PretrainLoader&&) noexcept = default;
PretrainLoader::~PretrainLoader() = default;

PretrainBatch PretrainLoader::next() {
  Impl& m = *impl_;
  const int64_t B = m.options.batch_size, S = m.seq_length, P = m.batch_predictions;
  const int64_t k0 = m.options.keep_begin, k1 = m.options.keep_end;  // keep_end resolved by the constructor
  const int64_t K = k1 - k0;  // rows built
  PretrainBatch out;
  out.input_ids = Tensor::empty({K, S}, DType::i32);
  out.segment_ids = Tensor::empty({K, S}, DType::i32);
  out.input_mask = Tensor::empty({K, S}, DType::i32);
  out.masked_lm_positions = Tensor::empty({K, P}, DType::i32);
  out.masked_lm_ids = Tensor::empty({K, P}, DType::i32);
  out.next_sentence_labels = Tensor::empty({K}, DType::i32);
  for (int64_t b = 0; b < B; ++b) {
    m.normalize(m.pos);
    m.make_current();  // every row's file is made current, kept or not (the order and prefetch)
    if (b >= k0 && b < k1) m.copy_row(b - k0, m.samples[size_t(m.pos.sample_index)], out);
    ++m.pos.sample_index;
  }
  m.normalize(m.pos);
  return out;
}

LoaderPosition PretrainLoader::position() const { return impl_->pos; }

int64_t PretrainLoader::seq_length() const { return impl_->seq_length; }

int64_t PretrainLoader::num_instances() const {
  int64_t n = 0;
  for (const ShardInfo& i : impl_->infos) n += i.num_instances;
  return n;
}

}  // namespace unmask::data
