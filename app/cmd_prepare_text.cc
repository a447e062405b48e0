// app/cmd_prepare_text.cc: `unmask prepare-text`, text files -> DLE HDF5 pretraining shards.
#include <chrono>
#include <cstdio>
#include <sstream>

#include "cli.h"
#include "data/pretrain_data.h"
#include "unmask/error.h"

namespace unmask::cli {

namespace {

// --input may repeat and each value may be a comma-separated list.
std::vector<std::string> input_list(const Args& args) {
  std::vector<std::string> out;
  for (const std::string& v : args.get_all("input")) {
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) out.push_back(item);
  }
  if (out.empty()) throw Error("--input is required", Hint("pass --input FILE|DIR (repeat it or use a comma list)"));
  return out;
}

}  // namespace

int cmd_prepare_text(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"input", "FILE|DIR", "text file or directory (every file below it); repeat or comma-separate", ""},
      {"vocab", "FILE", "WordPiece vocab.txt", ""},
      {"output", "DIR", "directory for the shards (shard_00000.hdf5, ...); created if missing", ""},
      {"format", "F", "sentences: one sentence per line, blank line between documents; "
                      "documents: one document per line, split into sentences by rules", "sentences"},
      {"max-seq", "N", "max_seq_length (tokens per instance, [CLS]/[SEP] included)", "128"},
      {"max-pred", "N", "max_predictions_per_seq", "20"},
      {"masked-lm-prob", "P", "fraction of tokens to mask", "0.15"},
      {"short-seq-prob", "P", "probability of a shorter random target length per document", "0.1"},
      {"dupe-factor", "N", "copies of the corpus, each with different masks and pairs", "5"},
      {"seed", "N", "random seed (the shards are identical for a seed, whatever --threads)", "12345"},
      {"shards", "N", "number of shard files", "1"},
      {"threads", "N", "threads (0 = all cores)", "0"},
      {"cased", "", "keep case and accents (for cased vocabularies)", ""},
      {"quiet", "", "no progress output", ""},
      {"force", "", "remove the .hdf5 shards an earlier run left in --output first (else refused)", ""},
  };
  auto args = Args::parse("prepare-text",
                          "Tokenizes text and writes BERT pretraining shards in NVIDIA DLE's HDF5 layout, by Google's "
                          "create_pretraining_data rules (NSP pairs, 80/10/10 masking).",
                          specs, argc, argv, 2);
  if (!args) return 0;
  data::PrepareOptions o;
  o.inputs = input_list(*args);
  o.vocab = args->require("vocab");
  o.output_dir = args->require("output");
  const std::string format = args->get("format");
  if (format == "sentences") o.format = data::TextFormat::sentences;
  else if (format == "documents") o.format = data::TextFormat::documents;
  else throw Error("--format must be sentences or documents, got '", format, "'");
  o.max_seq_length = args->get_int("max-seq");
  o.max_predictions_per_seq = args->get_int("max-pred");
  o.masked_lm_prob = args->get_double("masked-lm-prob");
  o.short_seq_prob = args->get_double("short-seq-prob");
  o.dupe_factor = args->get_int("dupe-factor");
  const int64_t seed = args->get_int("seed");
  if (seed < 0) throw Error("--seed must be >= 0, got ", seed);
  o.seed = uint64_t(seed);
  o.num_shards = args->get_int("shards");
  const int64_t threads = args->get_int("threads");
  if (threads < 0 || threads > 4096) throw Error("--threads must be in [0, 4096], got ", threads);
  o.num_threads = int(threads);
  o.lower_case = !args->has("cased");
  o.progress = !args->has("quiet");
  o.force = args->has("force");

  const auto t0 = std::chrono::steady_clock::now();
  const data::PrepareReport r = data::prepare_text(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.removed_shards > 0)
    std::printf("prepare-text: --force: removed %lld .hdf5 file(s) of an earlier run from %s\n",
                (long long)r.removed_shards, o.output_dir.c_str());
  std::printf("prepare-text: %lld file(s), %lld documents, %lld sentences, %lld tokens\n", (long long)r.files,
              (long long)r.documents, (long long)r.sentences, (long long)r.tokens);
  std::printf("prepare-text: %lld instances (max_seq %lld, dupe_factor %lld) in %lld shard(s) under %s\n",
              (long long)r.instances, (long long)o.max_seq_length, (long long)o.dupe_factor, (long long)r.shards.size(),
              o.output_dir.c_str());
  std::printf("prepare-text: %.2f s, %.0f instances/s\n", seconds, seconds > 0 ? double(r.instances) / seconds : 0.0);
  if (r.invalid_utf8_lines > 0)
    std::printf("prepare-text: skipped %lld line(s) of invalid UTF-8 (the first at %s)\n",
                (long long)r.invalid_utf8_lines, r.first_invalid_utf8.c_str());
  for (const std::string& w : r.warnings) std::fprintf(stderr, "unmask prepare-text: warning: %s\n", w.c_str());
  return 0;
}

}  // namespace unmask::cli
