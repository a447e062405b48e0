// app/model_dir.cc
#include "model_dir.h"

#include "io/file.h"
#include "text/tokenizer_config.h"
#include "unmask/error.h"

namespace unmask::cli {

text::WordPieceTokenizer load_tokenizer(const std::string& dir, int64_t model_vocab_size) {
  const std::string vocab_path = dir + "/vocab.txt";
  if (!io::file_exists(vocab_path))
    throw Error("no vocab.txt in ", dir, Hint("a BERT model directory needs vocab.txt (one WordPiece token per line)"));
  const std::string cfg_path = dir + "/tokenizer_config.json";
  const text::WordPieceOptions opt =
      text::wordpiece_options(io::file_exists(cfg_path) ? text::read_tokenizer_config(cfg_path) : TokenizerSettings{});
  text::WordPieceTokenizer tokenizer(text::Vocab::load(vocab_path), opt);  // its own checks first ([SEP], ...)
  const int64_t n = tokenizer.vocab().size();
  if (n != model_vocab_size && (n > model_vocab_size || (n + 7) / 8 * 8 != model_vocab_size))
    throw Error(vocab_path, " holds ", n, " tokens but the model's config.json says vocab_size = ", model_vocab_size,
                ": the vocabulary belongs to another model, and its token ids would select other rows of the "
                "embedding",
                Hint("put the model's own vocab.txt beside it (bert-base-uncased: 30,522 tokens)"));
  return tokenizer;
}

}  // namespace unmask::cli
