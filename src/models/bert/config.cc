// models/bert/config.cc: HF BertConfig (config.json) parsing and validation.
#include <nlohmann/json.hpp>

#include "io/file.h"
#include "unmask/bert.h"
#include "unmask/error.h"

namespace unmask {

namespace {

using json = nlohmann::json;

// Reads an integer key; `required` keys must be present. Non-integers are an error.
int64_t get_int(const json& j, const char* key, int64_t fallback, bool required, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required)
      throw Error("config ", origin, ": missing required key \"", key, "\"",
                  Hint("a BERT config.json needs vocab_size, hidden_size, num_hidden_layers, "
                       "num_attention_heads and intermediate_size"));
    return fallback;
  }
  if (!it->is_number_integer() && !(it->is_number_float() && it->get<double>() == double(int64_t(it->get<double>()))))
    throw Error("config ", origin, ": key \"", key, "\" must be an integer, got ", it->dump());
  return it->is_number_integer() ? it->get<int64_t>() : int64_t(it->get<double>());
}

}  // namespace

BertConfig BertConfig::from_json_string(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error("config ", origin, " is not valid JSON: ", e.what(), Hint("check the file was written completely"));
  }
  if (!j.is_object()) throw Error("config ", origin, ": top level must be a JSON object, got ", j.type_name());
  BertConfig c;
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    std::string mt = it->get<std::string>();
    if (mt != "bert")
      throw Error("config ", origin, ": model_type is \"", mt, "\", unmask loads \"bert\" models here",
                  Hint("use a BERT checkpoint (BertModel, BertForMaskedLM, BertForPreTraining, ...)"));
  }
  c.vocab_size = get_int(j, "vocab_size", c.vocab_size, true, origin);
  c.hidden_size = get_int(j, "hidden_size", c.hidden_size, true, origin);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", c.num_hidden_layers, true, origin);
  c.num_attention_heads = get_int(j, "num_attention_heads", c.num_attention_heads, true, origin);
  c.intermediate_size = get_int(j, "intermediate_size", c.intermediate_size, true, origin);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", 512, false, origin);
  c.type_vocab_size = get_int(j, "type_vocab_size", 2, false, origin);
  c.pad_token_id = get_int(j, "pad_token_id", 0, false, origin);
  if (auto it = j.find("layer_norm_eps"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) throw Error("config ", origin, ": layer_norm_eps must be a number, got ", it->dump());
    c.layer_norm_eps = it->get<double>();
  }
  if (auto it = j.find("hidden_act"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) throw Error("config ", origin, ": hidden_act must be a string, got ", it->dump());
    std::string act = it->get<std::string>();
    if (act == "gelu") c.hidden_act = HiddenAct::gelu;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") c.hidden_act = HiddenAct::gelu_tanh;
    else throw Error("config ", origin, ": hidden_act \"", act, "\" is not supported",
                     Hint("supported: gelu (exact erf), gelu_new / gelu_pytorch_tanh (tanh approximation)"));
  }
  // Only learned absolute positions are implemented: relative_key / relative_key_query add a
  // distance embedding inside every attention score, so running them as absolute would give
  // wrong outputs without a sign.
  if (auto it = j.find("position_embedding_type"); it != j.end() && !it->is_null())
    if (!it->is_string() || it->get<std::string>() != "absolute")
      throw Error("config ", origin, ": position_embedding_type is ", it->dump(),
                  "; unmask implements \"absolute\" (learned position embeddings) only",
                  Hint("relative position embeddings change every attention score: this checkpoint cannot run "
                       "correctly here"));
  if (auto it = j.find("architectures"); it != j.end() && it->is_array())
    for (auto& a : *it)
      if (a.is_string()) c.architectures.push_back(a.get<std::string>());
  if (auto it = j.find("id2label"); it != j.end() && it->is_object()) {
    c.id2label.assign(it->size(), "");
    for (auto& [k, v] : it->items()) {
      size_t idx = 0;
      try { idx = std::stoul(k); } catch (...) { throw Error("config ", origin, ": id2label key \"", k, "\" is not an integer"); }
      if (idx >= c.id2label.size()) throw Error("config ", origin, ": id2label key ", k, " out of range (", c.id2label.size(), " labels)");
      c.id2label[idx] = v.is_string() ? v.get<std::string>() : v.dump();
    }
    c.num_labels = int64_t(c.id2label.size());
  }
  if (j.contains("num_labels")) c.num_labels = get_int(j, "num_labels", c.num_labels, false, origin);
  c.validate(origin);
  return c;
}

BertConfig BertConfig::from_json_file(const std::string& path) {
  if (!io::file_exists(path))
    throw Error("config ", path, " not found", Hint("a Hugging Face model directory holds config.json, model.safetensors and vocab.txt"));
  return from_json_string(io::read_file(path), path);
}

void BertConfig::validate(const std::string& origin) const {
  auto range = [&](const char* key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      throw Error("config ", origin, ": ", key, " = ", v, " is out of range [", lo, ", ", hi, "]",
                  Hint("the config is corrupt or not a BERT config"));
  };
  range("vocab_size", vocab_size, 1, 10'000'000);
  range("hidden_size", hidden_size, 1, 65536);
  range("num_hidden_layers", num_hidden_layers, 1, 1000);
  range("num_attention_heads", num_attention_heads, 1, 4096);
  range("intermediate_size", intermediate_size, 1, 1 << 20);
  range("max_position_embeddings", max_position_embeddings, 1, 1 << 20);
  range("type_vocab_size", type_vocab_size, 1, 1 << 16);
  range("num_labels", num_labels, 1, 1 << 20);
  if (hidden_size % num_attention_heads != 0)
    throw Error("config ", origin, ": num_attention_heads = ", num_attention_heads,
                " does not divide hidden_size = ", hidden_size,
                Hint("the head size is hidden_size / num_attention_heads and must be an integer"));
  if (!(layer_norm_eps > 0.0 && layer_norm_eps < 1.0))
    throw Error("config ", origin, ": layer_norm_eps = ", layer_norm_eps, " must be in (0, 1)");
}

std::string BertConfig::to_json() const {
  json j;
  j["model_type"] = "bert";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["intermediate_size"] = intermediate_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["type_vocab_size"] = type_vocab_size;
  j["pad_token_id"] = pad_token_id;
  j["layer_norm_eps"] = layer_norm_eps;
  j["hidden_act"] = hidden_act == HiddenAct::gelu ? "gelu" : "gelu_new";
  j["hidden_dropout_prob"] = 0.1;
  j["attention_probs_dropout_prob"] = 0.1;
  j["initializer_range"] = 0.02;
  if (!architectures.empty()) j["architectures"] = architectures;
  return j.dump(2);
}

BertConfig BertConfig::base() { return BertConfig{}; }

BertConfig BertConfig::large() {
  BertConfig c;
  c.hidden_size = 1024;
  c.num_hidden_layers = 24;
  c.num_attention_heads = 16;
  c.intermediate_size = 4096;
  return c;
}

}  // namespace unmask
