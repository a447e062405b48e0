// app/cmd_prepare_text.cc: the text data commands: `unmask prepare-text` (text files -> DLE
// HDF5 pretraining shards) and `unmask train-vocab` (text files -> a WordPiece vocabulary).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "cli.h"
#include "data/text/pretrain_data.h"
#include "data/text/text_input.h"
#include "io/file.h"
#include "data/text/tokenizer_config.h"
#include "data/text/vocab_trainer.h"
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
    std::printf("prepare-text: --force: removed %lld shard file(s) of an earlier run from %s\n",
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
  return 0;
}

int cmd_train_vocab(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"input", "FILE|DIR", "text file or directory (every file below it); repeat or comma-separate", ""},
      {"output", "DIR", "where vocab.txt and tokenizer_config.json are written (created if missing)", ""},
      {"vocab-size", "N", "tokens in the vocabulary, special tokens included", "30522"},
      {"min-frequency", "N", "a pair must occur this often to be merged", "2"},
      {"limit-alphabet", "N", "characters kept in the alphabet (the most frequent)", "1000"},
      {"cased", "", "keep case (and accents, unless --strip-accents)", ""},
      {"strip-accents", "", "strip accents even when cased", ""},
      {"no-chinese-chars", "", "do not split CJK ideographs into words of their own", ""},
      {"force", "", "replace an existing DIR/vocab.txt", ""},
  };
  auto args = Args::parse("train-vocab",
                          "Trains a WordPiece vocabulary from raw text (the algorithm of Hugging Face's "
                          "BertWordPieceTokenizer.train): special tokens first, then the alphabet, ## continuations "
                          "and the merged pieces.",
                          specs, argc, argv, 2);
  if (!args) return 0;
  text::VocabTrainerOptions o;
  const int64_t size = args->get_int("vocab-size"), min_freq = args->get_int("min-frequency"),
                alphabet = args->get_int("limit-alphabet");
  if (size < 6 || size > 10'000'000) throw Error("--vocab-size must be in [6, 10000000], got ", size);
  o.vocab_size = size, o.min_frequency = min_freq, o.limit_alphabet = alphabet;
  o.normalizer.lowercase = !args->has("cased");
  if (args->has("strip-accents")) o.normalizer.strip_accents = true;
  o.normalizer.tokenize_chinese_chars = !args->has("no-chinese-chars");
  const std::string out = args->require("output");
  const std::string vocab_path = (std::filesystem::path(out) / "vocab.txt").string();
  if (io::file_exists(vocab_path) && !args->has("force"))
    throw Error(vocab_path, " exists", Hint("choose another --output, or pass --force to replace it"));
  const std::vector<std::string> files = data::expand_inputs(input_list(*args));

  const auto t0 = std::chrono::steady_clock::now();
  const text::VocabTrainerReport r = text::train_wordpiece_vocab(files, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw Error("cannot create ", out, ": ", ec.message());
  std::string lines;
  for (const std::string& t : r.vocab) lines += t + "\n";
  io::write_file_atomic(vocab_path, lines);
  const TokenizerSettings settings = text::tokenizer_settings(o.normalizer);
  io::write_file_atomic((std::filesystem::path(out) / "tokenizer_config.json").string(),
                        text::tokenizer_config_json(settings, 512));
  std::printf("train-vocab: %lld lines, %lld words (%lld distinct) from %zu file(s) in %.1f s\n", (long long)r.lines,
              (long long)r.words, (long long)r.unique_words, files.size(), seconds);
  std::printf("train-vocab: %zu tokens (%lld characters in the alphabet%s, %lld merges)%s -> %s\n", r.vocab.size(),
              (long long)r.alphabet,
              r.dropped_characters ? (", " + std::to_string(r.dropped_characters) + " rarer ones dropped").c_str() : "",
              (long long)r.merges,
              r.stopped_by_min_frequency                 ? "; stopped early: no pair occurs --min-frequency times"
              : int64_t(r.vocab.size()) < o.vocab_size ? "; stopped early: every word is one token"
                                                        : "",
              vocab_path.c_str());
  return 0;
}

}  // namespace unmask::cli
