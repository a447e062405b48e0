// tests/test_bert.cc: BERT loading (names, legacy names, one error listing every problem),
// config validation, and packed == padded outputs on a tiny random model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "io/file.h"
#include "io/safetensors.h"
#include "unmask/bert.h"
#include "temp_dir.h"

using namespace unmask;
namespace fs = std::filesystem;

namespace {

uint64_t test_seed() {
  const char* s = std::getenv("UNMASK_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261122ull;
}

BertConfig tiny_config() {
  BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 24;
  c.max_position_embeddings = 40;
  c.type_vocab_size = 2;
  c.architectures = {"BertForPreTraining"};
  return c;
}

Tensor randn(const Shape& s, std::mt19937_64& rng, float scale = 0.2f) {
  Tensor t = Tensor::empty(s, DType::f32);
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng);
  return t;
}

// All HF tensor names of a BertForPreTraining checkpoint for `c`, with random values.
std::vector<std::pair<std::string, Tensor>> hf_tensors(const BertConfig& c, std::mt19937_64& rng, const std::string& prefix = "bert.") {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  std::vector<std::pair<std::string, Tensor>> t;
  auto add = [&](const std::string& n, const Shape& s) { t.emplace_back(n, randn(s, rng)); };
  add(prefix + "embeddings.word_embeddings.weight", {c.vocab_size, C});
  add(prefix + "embeddings.position_embeddings.weight", {c.max_position_embeddings, C});
  add(prefix + "embeddings.token_type_embeddings.weight", {c.type_vocab_size, C});
  add(prefix + "embeddings.LayerNorm.weight", {C});
  add(prefix + "embeddings.LayerNorm.bias", {C});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    std::string L = prefix + "encoder.layer." + std::to_string(l) + ".";
    for (const char* qkv : {"query", "key", "value"}) {
      add(L + "attention.self." + qkv + ".weight", {C, C});
      add(L + "attention.self." + qkv + ".bias", {C});
    }
    add(L + "attention.output.dense.weight", {C, C});
    add(L + "attention.output.dense.bias", {C});
    add(L + "attention.output.LayerNorm.weight", {C});
    add(L + "attention.output.LayerNorm.bias", {C});
    add(L + "intermediate.dense.weight", {I, C});
    add(L + "intermediate.dense.bias", {I});
    add(L + "output.dense.weight", {C, I});
    add(L + "output.dense.bias", {C});
    add(L + "output.LayerNorm.weight", {C});
    add(L + "output.LayerNorm.bias", {C});
  }
  add(prefix + "pooler.dense.weight", {C, C});
  add(prefix + "pooler.dense.bias", {C});
  if (prefix == "bert.") {
    add("cls.predictions.bias", {c.vocab_size});
    add("cls.predictions.transform.dense.weight", {C, C});
    add("cls.predictions.transform.dense.bias", {C});
    add("cls.predictions.transform.LayerNorm.weight", {C});
    add("cls.predictions.transform.LayerNorm.bias", {C});
    add("cls.seq_relationship.weight", {2, C});
    add("cls.seq_relationship.bias", {2});
  }
  return t;
}

using unmask::test::TempDir;

void write_model(const fs::path& dir, const BertConfig& c, const std::vector<std::pair<std::string, Tensor>>& t) {
  io::write_file_atomic((dir / "config.json").string(), c.to_json());
  io::write_safetensors((dir / "model.safetensors").string(), t);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return m;
}

}  // namespace

TEST(BertConfig, RejectsMissingAndAbsurdValues) {
  EXPECT_THROW(BertConfig::from_json_string("{\"hidden_size\": 8}", "c.json"), Error);
  try {
    BertConfig::from_json_string("{\"vocab_size\": 10, \"hidden_size\": 10, \"num_hidden_layers\": 1, "
                                 "\"num_attention_heads\": 3, \"intermediate_size\": 4}", "c.json");
    FAIL() << "heads not dividing hidden must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide"), std::string::npos) << e.what();
  }
  try {
    BertConfig::from_json_string("{\"vocab_size\": 10, \"hidden_size\": -8, \"num_hidden_layers\": 1, "
                                 "\"num_attention_heads\": 2, \"intermediate_size\": 4}", "c.json");
    FAIL() << "negative hidden_size must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_size = -8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BertConfig::from_json_string("not json", "c.json"), Error);
  EXPECT_THROW(BertConfig::from_json_string("[1,2]", "c.json"), Error);
  EXPECT_THROW(BertConfig::from_json_string("{\"vocab_size\": 10, \"hidden_size\": 8, \"num_hidden_layers\": 1, "
                                            "\"num_attention_heads\": 2, \"intermediate_size\": 4, \"hidden_act\": \"swish\"}", "c.json"), Error);
  BertConfig ok = BertConfig::from_json_string(tiny_config().to_json(), "c.json");
  EXPECT_EQ(ok.hidden_size, 16);
  EXPECT_EQ(ok.num_attention_heads, 4);
}

TEST(BertLoad, OneErrorListsMissingUnexpectedAndMisshaped) {
  std::mt19937_64 rng(test_seed());
  BertConfig c = tiny_config();
  auto t = hf_tensors(c, rng);
  // drop one, add one, mis-shape one
  t.erase(std::find_if(t.begin(), t.end(), [](auto& p) { return p.first == "bert.encoder.layer.1.output.dense.bias"; }));
  t.emplace_back("bert.encoder.layer.7.extra.weight", randn({3}, rng));
  for (auto& [n, v] : t)
    if (n == "bert.pooler.dense.weight") v = randn({16, 8}, rng);
  TempDir d;
  write_model(d.path, c, t);
  try {
    BertModel::load(d.path.string());
    FAIL() << "expected a load error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("bert.encoder.layer.1.output.dense.bias"), std::string::npos) << m;
    EXPECT_NE(m.find("bert.encoder.layer.7.extra.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("bert.pooler.dense.weight: expected [16,16], found [16,8]"), std::string::npos) << m;
  }
}

TEST(BertLoad, LegacyNamesAndBareModelLoadTheSameWeights) {
  BertConfig c = tiny_config();
  std::mt19937_64 rng1(test_seed()), rng2(test_seed());
  auto standard = hf_tensors(c, rng1, "");  // bare BertModel (no "bert." prefix, no heads)
  auto legacy = hf_tensors(c, rng2, "");
  for (auto& [n, v] : legacy) {
    if (n.size() > 16 && n.compare(n.size() - 16, 16, "LayerNorm.weight") == 0) n = n.substr(0, n.size() - 6) + "gamma";
    else if (n.size() > 14 && n.compare(n.size() - 14, 14, "LayerNorm.bias") == 0) n = n.substr(0, n.size() - 4) + "beta";
  }
  TempDir a, b;
  write_model(a.path, c, standard);
  write_model(b.path, c, legacy);
  BertModel ma = BertModel::load(a.path.string()), mb = BertModel::load(b.path.string());
  EXPECT_TRUE(ma.heads().pooler);
  EXPECT_FALSE(ma.heads().mlm);
  Context ctx({.num_threads = 2});
  BertInput in;
  in.input_ids = Tensor::empty({1, 5}, DType::i64);
  for (int i = 0; i < 5; ++i) in.input_ids.data<int64_t>()[i] = 3 + i;
  BertOutputs oa = ma.forward(ctx, in), ob = mb.forward(ctx, in);
  EXPECT_EQ(max_abs_diff(oa.last_hidden_state, ob.last_hidden_state), 0.0);
  EXPECT_EQ(max_abs_diff(oa.pooler_output, ob.pooler_output), 0.0);
}

TEST(BertForward, PackedEqualsPaddedOnRealTokens) {
  std::mt19937_64 rng(test_seed());
  BertConfig c = tiny_config();
  TempDir d;
  write_model(d.path, c, hf_tensors(c, rng));
  BertModel m = BertModel::load(d.path.string());
  ASSERT_TRUE(m.heads().mlm && m.heads().nsp && m.heads().pooler);
  Context ctx({.num_threads = 2});
  const std::vector<int32_t> lengths = {7, 1, 13, 4};
  const int64_t B = 4, T = 13, C = c.hidden_size, V = c.vocab_size;
  BertInput padded, packed;
  padded.input_ids = Tensor::zeros({B, T}, DType::i64);
  padded.token_type_ids = Tensor::zeros({B, T}, DType::i64);
  padded.attention_mask = Tensor::zeros({B, T}, DType::i64);
  int64_t N = 0;
  for (auto l : lengths) N += l;
  packed.input_ids = Tensor::empty({N}, DType::i32);
  packed.token_type_ids = Tensor::empty({N}, DType::i32);
  packed.cu_seqlens = Tensor::empty({B + 1}, DType::i32);
  packed.cu_seqlens.data<int32_t>()[0] = 0;
  std::uniform_int_distribution<int> tok(0, int(V) - 1);
  for (int64_t b = 0, r = 0; b < B; ++b) {
    for (int64_t t = 0; t < lengths[b]; ++t, ++r) {
      int id = tok(rng), tt = t > lengths[b] / 2 ? 1 : 0;
      padded.input_ids.data<int64_t>()[b * T + t] = id;
      padded.token_type_ids.data<int64_t>()[b * T + t] = tt;
      padded.attention_mask.data<int64_t>()[b * T + t] = 1;
      packed.input_ids.data<int32_t>()[r] = id;
      packed.token_type_ids.data<int32_t>()[r] = tt;
    }
    packed.cu_seqlens.data<int32_t>()[b + 1] = packed.cu_seqlens.data<int32_t>()[b] + lengths[b];
  }
  BertOutputs pa = m.forward(ctx, padded), pk = m.forward(ctx, packed);
  ASSERT_EQ(pa.last_hidden_state.shape(), Shape({B, T, C}));
  ASSERT_EQ(pk.last_hidden_state.shape(), Shape({N, C}));
  double worst = 0, scale = 0;
  for (int64_t b = 0, r = 0; b < B; ++b)
    for (int64_t t = 0; t < lengths[b]; ++t, ++r) {
      for (int64_t j = 0; j < C; ++j) {
        float x = pa.last_hidden_state.data<float>()[(b * T + t) * C + j], y = pk.last_hidden_state.data<float>()[r * C + j];
        worst = std::max(worst, double(std::fabs(x - y)));
        scale = std::max(scale, double(std::fabs(x)));
      }
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, double(std::fabs(pa.mlm_logits.data<float>()[(b * T + t) * V + v] - pk.mlm_logits.data<float>()[r * V + v])));
    }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 1e-5 * std::max(1.0, scale)) << "seed " << test_seed();
  EXPECT_LT(max_abs_diff(pa.pooler_output, pk.pooler_output), 1e-5);
  EXPECT_LT(max_abs_diff(pa.nsp_logits, pk.nsp_logits), 1e-5);
  // Different sequences must give different outputs (guards against a forward that ignores input).
  EXPECT_GT(std::fabs(pk.pooler_output.data<float>()[0] - pk.pooler_output.data<float>()[C]), 1e-6);
}

TEST(BertForward, BadInputsGiveClearErrors) {
  std::mt19937_64 rng(test_seed());
  BertConfig c = tiny_config();
  TempDir d;
  write_model(d.path, c, hf_tensors(c, rng));
  BertModel m = BertModel::load(d.path.string());
  Context ctx({.num_threads = 1});
  BertInput in;
  in.input_ids = Tensor::zeros({1, 41}, DType::i64);  // longer than 40 positions
  try {
    m.forward(ctx, in);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("40 positions"), std::string::npos) << e.what();
  }
  in.input_ids = Tensor::zeros({1, 4}, DType::i64);
  in.input_ids.data<int64_t>()[2] = 50;  // == vocab_size
  EXPECT_THROW(m.forward(ctx, in), Error);
  in.input_ids.data<int64_t>()[2] = 1;
  in.token_type_ids = Tensor::zeros({1, 4}, DType::i64);
  in.token_type_ids.data<int64_t>()[1] = 2;  // type_vocab_size 2
  EXPECT_THROW(m.forward(ctx, in), Error);
  BertInput pk;
  pk.input_ids = Tensor::zeros({5}, DType::i32);
  pk.cu_seqlens = Tensor::empty({3}, DType::i32);
  pk.cu_seqlens.data<int32_t>()[0] = 0;
  pk.cu_seqlens.data<int32_t>()[1] = 3;
  pk.cu_seqlens.data<int32_t>()[2] = 3;  // empty sequence
  EXPECT_THROW(m.forward(ctx, pk), Error);
}

TEST(BertLoad, MissingFilesNameTheDirectory) {
  TempDir d;
  try {
    BertModel::load(d.path.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
  io::write_file_atomic((d.path / "config.json").string(), tiny_config().to_json());
  EXPECT_THROW(BertModel::load(d.path.string()), Error);  // no model.safetensors
}
