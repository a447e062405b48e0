// data/text/tokenizer_config.h: tokenizer_config.json and special_tokens_map.json of a BERT model
// directory (Hugging Face's BertTokenizer keys), read and written.
//
//   TokenizerSettings s = text::read_tokenizer_config("model/tokenizer_config.json");
//   io::write_file_atomic("out/tokenizer_config.json", text::tokenizer_config_json(s, 512));
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/text/wordpiece.h"
#include "unmask/bert.h"

namespace unmask::text {

/// The settings in a tokenizer_config.json; HF's defaults for the keys it lacks. Errors name the
/// file (invalid JSON, a key of the wrong type).
TokenizerSettings read_tokenizer_config(const std::string& path);
/// The file's text: do_lower_case, strip_accents, tokenize_chinese_chars, the special tokens,
/// tokenizer_class BertTokenizer and model_max_length.
std::string tokenizer_config_json(const TokenizerSettings& settings, int64_t model_max_length);
/// special_tokens_map.json: BERT's five special tokens.
std::string special_tokens_map_json();

/// A tokenizers-library tokenizer.json of a WordPiece (BERT) model: the vocabulary in id order
/// and the normalizer's settings (BertNormalizer, or a Sequence of NFD / Lowercase /
/// StripAccents). Any other model or normalizer is refused, naming it.
struct TokenizerJson {
  std::vector<std::string> vocab;  // [V], token of each id
  TokenizerSettings settings;
};
TokenizerJson read_tokenizer_json(const std::string& path);

WordPieceOptions wordpiece_options(const TokenizerSettings& settings);
TokenizerSettings tokenizer_settings(const WordPieceOptions& options);

}  // namespace unmask::text
