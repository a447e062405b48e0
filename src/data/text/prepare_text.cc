// data/text/prepare_text.cc: text -> DLE HDF5 shards (`unmask prepare-text`, see pretrain_data.h).
//
// Steps: read and tokenize the inputs (text_input.cc, parallel over lines); build the instances
// of every (dupe, document) pair with its own RNG stream (instances.cc, parallel over
// contiguous ranges of pairs, concatenated in pair order); shuffle all instances with the
// stream (seed, kStreamShuffle) as Google does; cut the shuffled list into num_shards
// contiguous, near-equal parts and write each as shard_NNNNN.hdf5 (shard_io.cc, atomic).
// Every random draw is keyed by the seed and the pair, never by the thread that makes it, so
// any thread count writes byte-identical shards.
//
// Memory: like Google's script, the tokenized corpus and all instances are held in memory
// (about 4 bytes per token plus ~0.7 KB per instance at max_seq_length 128); split a very
// large corpus into several runs (with different seeds) writing to different directories.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "data/text/instances.h"
#include "data/text/parallel.h"
#include "data/text/pretrain_data.h"
#include "data/text/progress.h"
#include "data/rng.h"
#include "data/text/shard_io.h"
#include "data/text/text_input.h"
#include "io/file.h"
#include "data/text/tokenizer_config.h"
#include "data/text/wordpiece.h"
#include "unmask/error.h"

namespace unmask::data {

namespace {

void validate(const PrepareOptions& o) {
  if (o.max_seq_length < 5 || o.max_seq_length > 4096)
    throw Error("max_seq_length must be in [5, 4096], got ", o.max_seq_length,
                Hint("[CLS] A [SEP] B [SEP] needs at least 5 positions; DLE uses 128 (phase 1) and 512 (phase 2)"));
  if (o.max_predictions_per_seq < 1 || o.max_predictions_per_seq > o.max_seq_length)
    throw Error("max_predictions_per_seq must be in [1, max_seq_length = ", o.max_seq_length, "], got ",
                o.max_predictions_per_seq, Hint("DLE uses 20 at length 128 and 80 at length 512"));
  if (!(o.masked_lm_prob > 0 && o.masked_lm_prob <= 1))
    throw Error("masked_lm_prob must be in (0, 1], got ", o.masked_lm_prob, Hint("BERT uses 0.15"));
  if (!(o.short_seq_prob >= 0 && o.short_seq_prob <= 1))
    throw Error("short_seq_prob must be in [0, 1], got ", o.short_seq_prob, Hint("BERT uses 0.1"));
  if (o.dupe_factor < 1) throw Error("dupe_factor must be >= 1, got ", o.dupe_factor, Hint("DLE uses 5"));
  if (o.num_shards < 1 || o.num_shards > 99999) throw Error("num_shards must be in [1, 99999], got ", o.num_shards);
  if (o.num_threads < 0) throw Error("num_threads must be >= 0 (0 = all cores), got ", o.num_threads);
  if (o.output_dir.empty()) throw Error("no output directory given", Hint("pass --output DIR"));
}

// Creates `dir`; its .hdf5 files of an earlier run (the loader reads every .hdf5 file of a
// directory, so they would mix with the new shards) are refused, or removed under `force`.
int64_t prepare_output_dir(const std::string& dir, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create output directory ", dir, ": ", ec.message(), Hint("check the path and its permissions"));
  if (!fs::is_directory(dir)) throw Error("output ", dir, " exists and is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error("output directory ", dir, " is not writable", Hint("choose another --output or fix its permissions"));
  std::vector<std::string> old;
  for (const std::string& name : io::directory_entries(dir))
    if (fs::path(name).extension() == ".hdf5" || fs::path(name).extension() == ".h5") old.push_back(name);
  if (old.empty()) return 0;
  if (!force)
    throw Error("output directory ", dir, " already holds ", old.size(), " shard file(s) (", old.front(),
                old.size() > 1 ? ", ..." : "", "); the loader reads every .hdf5 / .h5 file of a directory, so new shards "
                "would mix with them",
                Hint("choose an empty --output, or pass --force to remove them first"));
  for (const std::string& name : old) {
    fs::remove(fs::path(dir) / name, ec);
    if (ec) throw Error("cannot remove ", (fs::path(dir) / name).string(), ": ", ec.message());
  }
  return int64_t(old.size());
}

std::string shard_name(const std::string& dir, int64_t k) {
  char name[32];
  std::snprintf(name, sizeof name, "shard_%05lld.hdf5", (long long)k);
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace

PrepareReport prepare_text(const PrepareOptions& options) {
  validate(options);
  const int threads = options.num_threads > 0 ? options.num_threads
                                              : int(std::max(1u, std::thread::hardware_concurrency()));
  text::Vocab vocab = text::Vocab::load(options.vocab);
  if (vocab.mask_id() < 0)
    throw Error("vocabulary ", options.vocab, " has no [MASK] token", Hint("use a BERT vocab.txt"));
  InstanceOptions io{options.max_seq_length, options.short_seq_prob,
                     {options.masked_lm_prob, options.max_predictions_per_seq, vocab.size(), vocab.mask_id(),
                      vocab.cls_id(), vocab.sep_id()}};
  text::WordPieceOptions wordpiece;
  wordpiece.lowercase = options.lower_case;
  text::WordPieceTokenizer tokenizer(std::move(vocab), wordpiece);
  const std::vector<std::string> files = expand_inputs(options.inputs);
  for (const std::string& in : options.inputs)
    if (std::filesystem::is_directory(in) && io::paths_overlap(in, options.output_dir))
      throw Error("--input ", in, " and --output ", options.output_dir,
                  " overlap: the shards would be written among (or over) the text they are made from",
                  Hint("write the shards to a directory outside the input"));
  PrepareReport report;
  report.removed_shards = prepare_output_dir(options.output_dir, options.force);
  Progress progress(options.progress);
  int64_t total_bytes = 0;
  for (const auto& f : files) {
    std::error_code ec;
    total_bytes += int64_t(std::filesystem::file_size(f, ec));
  }
  progress.start("tokenizing", total_bytes, Progress::Unit::bytes);
  CorpusStats stats;
  Corpus corpus = read_corpus(files, options.format, tokenizer, threads, &progress, stats);
  progress.finish();
  report.files = stats.files;
  report.invalid_utf8_lines = stats.invalid_utf8_lines;
  report.first_invalid_utf8 = stats.first_invalid_utf8;
  report.documents = corpus.num_documents();
  report.sentences = corpus.num_sentences();
  report.tokens = int64_t(corpus.tokens.size());
  if (report.documents == 0)
    throw Error("the inputs hold no text that tokenizes to anything (", files.size(), " file(s))");

  // Instances: (dupe, document) pairs in contiguous ranges, one buffer per range.
  const int64_t pairs = options.dupe_factor * report.documents;
  const int64_t range = std::max<int64_t>(1, std::min<int64_t>(256, pairs / (int64_t(threads) * 8) + 1));
  std::vector<InstanceBuffer> parts(size_t((pairs + range - 1) / range));
  progress.start("instances", pairs);
  parallel_chunks(pairs, range, threads, [&](int64_t begin, int64_t end) {
    InstanceBuffer& out = parts[size_t(begin / range)];
    for (int64_t p = begin; p < end; ++p) {
      const int64_t dupe = p / report.documents, doc = p % report.documents;
      Rng rng(derive_key(options.seed, {kStreamDocument, uint64_t(dupe), uint64_t(doc)}));
      create_instances_from_document(corpus, doc, io, rng, out);
    }
    progress.add(end - begin);
  });
  progress.finish();
  // Instance i (in (dupe, document) order) is instance i - part_begin[p] of parts[p]; the parts
  // are indexed in place rather than concatenated.
  std::vector<int64_t> part_begin{0};
  for (const InstanceBuffer& part : parts) part_begin.push_back(part_begin.back() + part.size());
  report.instances = part_begin.back();
  if (report.instances < options.num_shards)
    throw Error("only ", report.instances, " instances for ", options.num_shards, " shards",
                Hint("use fewer --shards or more text"));

  std::vector<int64_t> order(size_t(report.instances));
  for (int64_t i = 0; i < report.instances; ++i) order[size_t(i)] = i;
  Rng(derive_key(options.seed, {kStreamShuffle})).shuffle(order.data(), report.instances);

  const int64_t S = options.max_seq_length, P = options.max_predictions_per_seq;
  progress.start("writing", report.instances);
  PretrainShard sh;  // reused: its buffers keep their pages from one shard to the next
  for (int64_t k = 0; k < options.num_shards; ++k) {
    const int64_t lo = report.instances * k / options.num_shards, hi = report.instances * (k + 1) / options.num_shards;
    sh.num_instances = hi - lo;
    sh.seq_length = S;
    sh.max_predictions = P;
    sh.input_ids.assign(size_t(sh.num_instances * S), 0);
    sh.input_mask.assign(size_t(sh.num_instances * S), 0);
    sh.segment_ids.assign(size_t(sh.num_instances * S), 0);
    sh.masked_lm_positions.assign(size_t(sh.num_instances * P), 0);
    sh.masked_lm_ids.assign(size_t(sh.num_instances * P), 0);
    sh.next_sentence_labels.assign(size_t(sh.num_instances), 0);
    for (int64_t r = 0; r < sh.num_instances; ++r) {
      const int64_t g = order[size_t(lo + r)];
      const size_t p = size_t(std::upper_bound(part_begin.begin(), part_begin.end(), g) - part_begin.begin() - 1);
      const InstanceBuffer& part = parts[p];
      const int64_t i = g - part_begin[p];
      const int64_t n = part.length(i), m = part.num_masked(i);
      const int32_t* t = part.tokens.data() + part.token_begin[size_t(i)];
      std::copy(t, t + n, sh.input_ids.begin() + r * S);
      std::fill_n(sh.input_mask.begin() + r * S, n, 1);
      std::fill(sh.segment_ids.begin() + r * S + part.a_length[size_t(i)] + 2, sh.segment_ids.begin() + r * S + n, 1);
      const size_t mb = size_t(part.masked_begin[size_t(i)]);
      std::copy_n(part.masked_positions.begin() + mb, m, sh.masked_lm_positions.begin() + r * P);
      std::copy_n(part.masked_ids.begin() + mb, m, sh.masked_lm_ids.begin() + r * P);
      sh.next_sentence_labels[size_t(r)] = part.is_random_next[size_t(i)];
    }
    const std::string path = shard_name(options.output_dir, k);
    write_shard(path, sh, threads);
    report.shards.push_back(path);
    progress.add(sh.num_instances);
  }
  progress.finish();
  // How the shards were tokenized, for `pretrain` to put in every checkpoint (a cased corpus
  // trains a cased model, which must not be lowercased when it is used).
  io::write_file_atomic((std::filesystem::path(options.output_dir) / "tokenizer_config.json").string(),
                        text::tokenizer_config_json(text::tokenizer_settings(wordpiece), options.max_seq_length));
  return report;
}

}  // namespace unmask::data
