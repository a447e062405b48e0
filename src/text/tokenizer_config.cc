// text/tokenizer_config.cc
#include "text/tokenizer_config.h"

#include <nlohmann/json.hpp>

#include "io/file.h"
#include "unmask/error.h"

namespace unmask::text {

TokenizerSettings read_tokenizer_config(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error("tokenizer config ", path, " is not valid JSON: ", e.what());
  }
  TokenizerSettings s;
  if (!j.is_object()) throw Error("tokenizer config ", path, " is not a JSON object");
  auto flag = [&](const char* key) -> std::optional<bool> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) throw Error("tokenizer config ", path, ": ", key, " must be true, false or null, got ", it->dump());
    return it->get<bool>();
  };
  if (auto v = flag("do_lower_case")) s.do_lower_case = *v;
  s.strip_accents = flag("strip_accents");
  if (auto v = flag("tokenize_chinese_chars")) s.tokenize_chinese_chars = *v;
  return s;
}

std::string tokenizer_config_json(const TokenizerSettings& s, int64_t model_max_length) {
  nlohmann::ordered_json j;
  j["tokenizer_class"] = "BertTokenizer";
  j["do_lower_case"] = s.do_lower_case;
  j["strip_accents"] = s.strip_accents ? nlohmann::ordered_json(*s.strip_accents) : nlohmann::ordered_json(nullptr);
  j["tokenize_chinese_chars"] = s.tokenize_chinese_chars;
  j["model_max_length"] = model_max_length;
  j["unk_token"] = "[UNK]", j["sep_token"] = "[SEP]", j["pad_token"] = "[PAD]";
  j["cls_token"] = "[CLS]", j["mask_token"] = "[MASK]";
  return j.dump(2) + "\n";
}

std::string special_tokens_map_json() {
  nlohmann::ordered_json j;
  j["unk_token"] = "[UNK]", j["sep_token"] = "[SEP]", j["pad_token"] = "[PAD]";
  j["cls_token"] = "[CLS]", j["mask_token"] = "[MASK]";
  return j.dump(2) + "\n";
}

WordPieceOptions wordpiece_options(const TokenizerSettings& s) {
  WordPieceOptions o;
  o.lowercase = s.do_lower_case;
  o.strip_accents = s.strip_accents;
  o.tokenize_chinese_chars = s.tokenize_chinese_chars;
  return o;
}

TokenizerSettings tokenizer_settings(const WordPieceOptions& o) {
  return {.do_lower_case = o.lowercase, .strip_accents = o.strip_accents, .tokenize_chinese_chars = o.tokenize_chinese_chars};
}

}  // namespace unmask::text
