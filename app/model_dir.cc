// app/model_dir.cc
#include "model_dir.h"

#include <optional>

#include "io/file.h"
#include "models/bert/checkpoint.h"
#include "data/text/tokenizer_config.h"
#include "unmask/error.h"

namespace unmask::cli {

text::WordPieceTokenizer load_tokenizer(const std::string& model, int64_t model_vocab_size) {
  const std::string dir = bert_checkpoint_dir(model);
  std::string vocab_path = dir + "/vocab.txt";
  const std::string json_path = dir + "/tokenizer.json";
  std::optional<text::WordPieceTokenizer> from_json;
  if (!io::file_exists(vocab_path)) {
    if (!io::file_exists(json_path))
      throw Error("no vocab.txt or tokenizer.json in ", dir,
                  Hint("a BERT model directory needs vocab.txt (one WordPiece token per line) or tokenizer.json"));
    // The vocabulary and the normalizer's casing come from tokenizer.json.
    text::TokenizerJson t = text::read_tokenizer_json(json_path);
    from_json.emplace(text::Vocab::from_tokens(std::move(t.vocab)), text::wordpiece_options(t.settings));
    vocab_path = json_path;
  }
  const std::string cfg_path = dir + "/tokenizer_config.json";
  text::WordPieceTokenizer tokenizer =
      from_json ? std::move(*from_json)
                : text::WordPieceTokenizer(text::Vocab::load(vocab_path),  // its own checks first ([SEP], ...)
                                           text::wordpiece_options(io::file_exists(cfg_path)
                                                                       ? text::read_tokenizer_config(cfg_path)
                                                                       : TokenizerSettings{}));
  const int64_t n = tokenizer.vocab().size();
  // Padded embeddings are fine: vocab_size rounded up from the vocabulary to a multiple of 8
  // (NVIDIA DLE: 30522 -> 30528), 64 or 128 (Megatron: 30592); ids past the vocabulary are never made.
  auto padded_to = [&](int64_t m) { return (n + m - 1) / m * m == model_vocab_size; };
  if (n != model_vocab_size && (n > model_vocab_size || !(padded_to(8) || padded_to(64) || padded_to(128))))
    throw Error(vocab_path, " holds ", n, " tokens but the model's config.json says vocab_size = ", model_vocab_size,
                ": the vocabulary belongs to another model, and its token ids would select other rows of the "
                "embedding",
                Hint("put the model's own vocab.txt beside it (bert-base-uncased: 30,522 tokens)"));
  return tokenizer;
}

}  // namespace unmask::cli
