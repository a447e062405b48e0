// text/tokenizer_config.cc
#include "data/text/tokenizer_config.h"

#include <nlohmann/json.hpp>

#include "io/file.h"
#include "unmask/error.h"

namespace unmask::text {

namespace {

// `what` (e.g. "tokenizer config") names the file in the error.
nlohmann::json parse_json_file(const std::string& path, const char* what) {
  try {
    return nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(what, " ", path, " is not valid JSON: ", e.what());
  }
}

// A true / false setting: absent or null = nullopt (the library's default); anything else is an
// Error naming `where` (the file and the object) and the key.
std::optional<bool> optional_flag(const nlohmann::json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) throw Error(where, key, " must be true, false or null, got ", it->dump());
  return it->get<bool>();
}

}  // namespace

TokenizerSettings read_tokenizer_config(const std::string& path) {
  const nlohmann::json j = parse_json_file(path, "tokenizer config");
  TokenizerSettings s;
  if (!j.is_object()) throw Error("tokenizer config ", path, " is not a JSON object");
  const std::string where = "tokenizer config " + path + ": ";
  if (auto v = optional_flag(j, "do_lower_case", where)) s.do_lower_case = *v;
  s.strip_accents = optional_flag(j, "strip_accents", where);
  if (auto v = optional_flag(j, "tokenize_chinese_chars", where)) s.tokenize_chinese_chars = *v;
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

TokenizerJson read_tokenizer_json(const std::string& path) {
  const nlohmann::json j = parse_json_file(path, "tokenizer");
  const auto model = j.is_object() ? j.find("model") : j.end();
  if (!j.is_object() || model == j.end() || !model->is_object())
    throw Error("tokenizer ", path, " has no \"model\" object", Hint("expected a tokenizers-library tokenizer.json"));
  const std::string type = model->value("type", std::string("?"));
  if (type != "WordPiece")
    throw Error("tokenizer ", path, " holds a ", type, " model; BERT's tokenizer is WordPiece",
                Hint("this checkpoint is not a BERT-family model unmask can tokenize for"));
  if (auto it = model->find("continuing_subword_prefix"); it != model->end() && (!it->is_string() || *it != "##"))
    throw Error("tokenizer ", path, ": continuing_subword_prefix is ", it->dump(), ", unmask's WordPiece uses \"##\"");
  const auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object() || vocab->empty())
    throw Error("tokenizer ", path, ": model.vocab is missing or empty");
  TokenizerJson out;
  out.vocab.assign(vocab->size(), std::string());
  std::vector<char> seen(vocab->size(), 0);
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= int64_t(vocab->size()))
      throw Error("tokenizer ", path, ": the id of '", token, "' is ", id.dump(), ", not in [0, ", vocab->size(), ")",
                  Hint("the ids of model.vocab must be 0 .. V-1, each once"));
    const size_t k = size_t(id.get<int64_t>());
    if (seen[k]) throw Error("tokenizer ", path, ": id ", k, " is given to two tokens ('", out.vocab[k], "', '", token, "')");
    seen[k] = 1, out.vocab[k] = token;
  }
  // The normalizer: null = none (no lowercasing, accents and CJK left alone).
  TokenizerSettings& s = out.settings;
  const auto norm = j.find("normalizer");
  if (norm == j.end() || norm->is_null()) {
    s = {.do_lower_case = false, .strip_accents = false, .tokenize_chinese_chars = false};
    return out;
  }
  auto one = [&](const nlohmann::json& n, bool in_sequence) {
    const std::string t = n.is_object() ? n.value("type", std::string("?")) : std::string("?");
    if (t == "BertNormalizer") {
      // a key that is absent or null takes the tokenizers library's default
      const std::string where = "tokenizer " + path + ": normalizer.";
      s.do_lower_case = optional_flag(n, "lowercase", where).value_or(true);
      s.strip_accents = optional_flag(n, "strip_accents", where);
      s.tokenize_chinese_chars = optional_flag(n, "handle_chinese_chars", where).value_or(true);
    } else if (in_sequence && t == "Lowercase") {
      s.do_lower_case = true;
    } else if (in_sequence && t == "StripAccents") {
      s.strip_accents = true;
    } else if (in_sequence && t == "NFD") {
    } else {
      throw Error("tokenizer ", path, ": normalizer ", t, " is not one unmask applies (BertNormalizer, or a Sequence of "
                  "NFD, Lowercase and StripAccents)", Hint("tokenizing with other rules would give other ids"));
    }
  };
  if (norm->is_object() && norm->value("type", std::string()) == "Sequence" && norm->contains("normalizers")) {
    s = {.do_lower_case = false, .strip_accents = false, .tokenize_chinese_chars = false};
    for (const auto& n : (*norm)["normalizers"]) one(n, true);
  } else {
    one(*norm, false);
  }
  return out;
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
