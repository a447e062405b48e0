// app/model_dir.cc
#include "model_dir.h"

#include <nlohmann/json.hpp>

#include "io/file.h"
#include "unmask/error.h"

namespace unmask::cli {

text::WordPieceTokenizer load_tokenizer(const std::string& dir) {
  const std::string vocab_path = dir + "/vocab.txt";
  if (!io::file_exists(vocab_path))
    throw Error("no vocab.txt in ", dir, Hint("a BERT model directory needs vocab.txt (one WordPiece token per line)"));
  text::WordPieceOptions opt;
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (io::file_exists(cfg_path)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(io::read_file(cfg_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error("tokenizer config ", cfg_path, " is not valid JSON: ", e.what());
    }
    if (j.is_object()) {
      if (auto it = j.find("do_lower_case"); it != j.end() && it->is_boolean()) opt.lowercase = it->get<bool>();
      if (auto it = j.find("strip_accents"); it != j.end() && it->is_boolean()) opt.strip_accents = it->get<bool>();
      if (auto it = j.find("tokenize_chinese_chars"); it != j.end() && it->is_boolean())
        opt.tokenize_chinese_chars = it->get<bool>();
    }
  }
  return text::WordPieceTokenizer(text::Vocab::load(vocab_path), opt);
}

}  // namespace unmask::cli
