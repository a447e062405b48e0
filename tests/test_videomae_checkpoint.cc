// tests/test_videomae_checkpoint.cc: VideoMAE checkpoint save / load (src/models/videomae/checkpoint.h).
//
// Round trips (both namings, both models), the pretrain -> classifier encoder transfer, the error
// paths (missing q_bias, shape and config mismatches, learned tables, strict mode, a directory
// with foreign files), positional-table regeneration for another clip length, HF config.json
// reading, and a real fp16 V-SWIFT-style .pth written by torch 1.13 (skipped without torch).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "io/file.h"
#include "io/safetensors.h"
#include "unmask/error.h"
#include "unmask/videomae.h"
#include "models/videomae/checkpoint.h"
#include "nn/resample_table.h"
#include "error_test_util.h"
#include "temp_dir.h"

namespace unmask {

const std::string& torch_fixture_dir();  // tests/test_torch_pickle.cc: files written by torch 1.13

namespace {

namespace fs = std::filesystem;
using video::VideoMAENaming;

using unmask::test::TempDir;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
}

const Param& find(const std::vector<Param>& ps, const std::string& name) {
  for (const auto& p : ps)
    if (p.name == name) return p;
  throw Error("no param ", name);
}

using unmask::test::error_of;

// A copy of every parameter value (to check that a failed load leaves them untouched).
std::vector<Tensor> snapshot(const std::vector<Param>& ps) {
  std::vector<Tensor> out;
  for (const auto& p : ps) out.push_back(p.value.contiguous());
  return out;
}

// Rewrites dir/model.safetensors, dropping `drop` and adding `add`.
void edit_weights(const std::string& dir, const std::set<std::string>& drop, const video::NamedTensors& add = {}) {
  const auto f = io::SafeTensorsFile::open(dir + "/model.safetensors");
  video::NamedTensors kept;
  for (const auto& info : f.tensors())
    if (!drop.count(info.name)) kept.emplace_back(info.name, f.tensor(info.name).contiguous());
  for (const auto& a : add) kept.push_back(a);
  io::write_safetensors(dir + "/model.safetensors", kept);
}

TEST(VideoMAECheckpoint, ExpectedShapesAreTheModelsParams) {
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel pm = VideoMAEPretrainModel::random(c, 1);
  const auto pe = video::videomae_expected_shapes(c, true, 0);
  ASSERT_EQ(pe.size(), pm.params().size());
  std::set<std::string> names;
  for (const auto& [n, s] : pe) {
    names.insert(n);
    EXPECT_EQ(find(pm.params(), n).value.shape(), s) << n;
  }
  EXPECT_EQ(names.size(), pe.size());
  VideoMAEClassifier cm = VideoMAEClassifier::random(c, 7, 1);
  const auto fe = video::videomae_expected_shapes(c, false, 7);
  ASSERT_EQ(fe.size(), cm.params().size());
  for (const auto& [n, s] : fe) EXPECT_EQ(find(cm.params(), n).value.shape(), s) << n;
}

TEST(VideoMAECheckpoint, PretrainRoundTripBothNamings) {
  TempDir tmp;
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel a = VideoMAEPretrainModel::random(c, 11);
  for (VideoMAENaming naming : {VideoMAENaming::original, VideoMAENaming::hf}) {
    const std::string dir = tmp / (naming == VideoMAENaming::hf ? "hf" : "orig");
    video::save_videomae(dir, c, a.params(), naming);
    // The file carries the chosen names.
    const auto f = io::SafeTensorsFile::open(dir + "/model.safetensors");
    if (naming == VideoMAENaming::hf) {
      EXPECT_NE(f.find("videomae.encoder.layer.1.attention.attention.key.weight"), nullptr);
      EXPECT_NE(f.find("videomae.encoder.layer.1.attention.attention.q_bias"), nullptr);
      EXPECT_NE(f.find("decoder.decoder_layers.0.attention.attention.v_bias"), nullptr);
      EXPECT_EQ(f.find("encoder.blocks.0.attn.qkv.weight"), nullptr);
      EXPECT_EQ(f.tensors().size(), a.params().size() + 2 * size_t(c.depth + c.decoder_depth));
    } else {
      EXPECT_NE(f.find("encoder.blocks.1.attn.qkv.weight"), nullptr);
      EXPECT_EQ(f.tensors().size(), a.params().size());
    }
    const auto j = nlohmann::json::parse(io::read_file(dir + "/config.json"));
    // Only Hugging Face names claim a transformers model (original names would load there with
    // every weight freshly initialised); the original layout says what it is instead.
    if (naming == VideoMAENaming::hf) {
      EXPECT_EQ(j["model_type"], "videomae");
      EXPECT_EQ(j["architectures"][0], "VideoMAEForPreTraining");
    } else {
      EXPECT_FALSE(j.contains("model_type"));
      EXPECT_FALSE(j.contains("architectures"));
      EXPECT_NE(j["note"].get<std::string>().find("convert-videomae"), std::string::npos);
    }
    EXPECT_EQ(j["layer_norm_eps"].get<double>(), 1e-6);
    EXPECT_EQ(j["use_mean_pooling"], false);
    EXPECT_EQ(j["hidden_size"], 64);
    EXPECT_EQ(j["intermediate_size"], 256);
    EXPECT_EQ(j["decoder_num_hidden_layers"], 1);
    EXPECT_EQ(j["unmask"]["naming"], naming == VideoMAENaming::hf ? "hf" : "original");

    VideoMAEPretrainModel b = VideoMAEPretrainModel::random(c, 12);
    const auto r = video::load_videomae(dir, c, b.params(), {.strict = true});
    EXPECT_EQ(r.loaded, int64_t(a.params().size()));
    EXPECT_EQ(r.naming, naming);
    EXPECT_TRUE(r.pretrain_checkpoint);
    EXPECT_TRUE(r.unused.empty() && r.dropped.empty() && r.kept_init.empty()) << r.summary();
    for (size_t i = 0; i < a.params().size(); ++i)
      EXPECT_TRUE(same_bits(a.params()[i].value, b.params()[i].value)) << a.params()[i].name;
    const VideoMAEConfig back = video::read_videomae_config(dir);
    EXPECT_EQ(back.dim, c.dim);
    EXPECT_EQ(back.decoder_heads, c.decoder_heads);
    EXPECT_EQ(back.num_frames, c.num_frames);
    EXPECT_EQ(back.mlp_ratio, c.mlp_ratio);
    EXPECT_EQ(back.norm_eps, c.norm_eps);
  }
}

TEST(VideoMAECheckpoint, ClassifierRoundTripBothNamings) {
  TempDir tmp;
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEClassifier a = VideoMAEClassifier::random(c, 5, 21, 1.0f);
  for (VideoMAENaming naming : {VideoMAENaming::original, VideoMAENaming::hf}) {
    const std::string dir = tmp / (naming == VideoMAENaming::hf ? "hf" : "orig");
    video::save_videomae(dir, c, a.params(), naming, 0, {"a", "b", "c", "d", "e"});  // num_classes from head.weight
    const auto j = nlohmann::json::parse(io::read_file(dir + "/config.json"));
    EXPECT_EQ(j.contains("architectures"), naming == VideoMAENaming::hf);
    if (naming == VideoMAENaming::hf) EXPECT_EQ(j["architectures"][0], "VideoMAEForVideoClassification");
    EXPECT_EQ(j["num_labels"], 5);
    EXPECT_EQ(j["id2label"].size(), 5u);
    EXPECT_EQ(j["id2label"]["3"], "d");
    EXPECT_EQ(j["label2id"]["e"], 4);
    EXPECT_EQ(j["use_mean_pooling"], true);
    if (naming == VideoMAENaming::hf)
      EXPECT_NE(io::SafeTensorsFile::open(dir + "/model.safetensors").find("classifier.weight"), nullptr);
    VideoMAEClassifier b = VideoMAEClassifier::random(c, 5, 22);
    const auto r = video::load_videomae(dir, c, b.params(), {.strict = true});
    EXPECT_EQ(r.loaded, int64_t(a.params().size()));
    EXPECT_FALSE(r.pretrain_checkpoint);
    for (size_t i = 0; i < a.params().size(); ++i)
      EXPECT_TRUE(same_bits(a.params()[i].value, b.params()[i].value)) << a.params()[i].name;
    EXPECT_EQ(video::read_videomae_checkpoint_config(dir).num_classes, 5);
  }
  // A different number of classes: a shape error naming both shapes, parameters untouched.
  VideoMAEClassifier other = VideoMAEClassifier::random(c, 3, 23);
  const auto before = snapshot(other.params());
  const std::string e = error_of([&] { video::load_videomae(tmp / "orig", c, other.params()); });
  EXPECT_NE(e.find("head.weight is [5,64], the model's head.weight is [3,64]"), std::string::npos) << e;
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(same_bits(before[i], other.params()[i].value));
}

TEST(VideoMAECheckpoint, PretrainCheckpointInitialisesTheClassifierEncoder) {
  TempDir tmp;
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel pre = VideoMAEPretrainModel::random(c, 31);
  video::save_videomae(tmp / "pt", c, pre.params(), VideoMAENaming::hf);
  VideoMAEClassifier cls = VideoMAEClassifier::random(c, 4, 32);
  // Without allowing a fresh head it is an error naming the missing parameters and the option.
  const std::string e = error_of([&] { video::load_videomae(tmp / "pt", c, cls.params()); });
  EXPECT_NE(e.find("head.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("allow_missing_prefixes"), std::string::npos) << e;
  const Tensor head_before = find(cls.params(), "head.weight").value.contiguous();
  const auto r = video::load_videomae(tmp / "pt", c, cls.params(), {.allow_missing_prefixes = {"head.", "fc_norm."}});
  EXPECT_TRUE(r.pretrain_checkpoint);
  EXPECT_EQ(r.loaded, int64_t(cls.params().size()) - 4);
  EXPECT_EQ(r.kept_init.size(), 4u);
  for (const auto& p : cls.params()) {
    if (p.name.rfind("head.", 0) == 0 || p.name.rfind("fc_norm.", 0) == 0) continue;
    EXPECT_TRUE(same_bits(p.value, find(pre.params(), "encoder." + p.name).value)) << p.name;
  }
  EXPECT_TRUE(same_bits(find(cls.params(), "head.weight").value, head_before));
  // Decoder, encoder_to_decoder, mask_token and encoder.norm are dropped with reasons, not "unused".
  EXPECT_TRUE(r.unused.empty());
  std::string dropped;
  for (const auto& d : r.dropped) dropped += d + "\n";
  EXPECT_NE(dropped.find("encoder.norm.weight (VideoMAE's fine-tune model has no final encoder norm"),
            std::string::npos);
  EXPECT_NE(dropped.find("mask_token (pretraining decoder)"), std::string::npos);
  EXPECT_NE(dropped.find("encoder_to_decoder.weight"), std::string::npos);
  EXPECT_NE(dropped.find("decoder.blocks.0.attn.qkv.weight"), std::string::npos);
  EXPECT_NE(r.summary().find("kept their initial values (4)"), std::string::npos) << r.summary();
}

TEST(VideoMAECheckpoint, MissingQBiasIsAnErrorEvenWhenMissingIsAllowed) {
  TempDir tmp;
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel a = VideoMAEPretrainModel::random(c, 41);
  video::save_videomae(tmp / "m", c, a.params(), VideoMAENaming::original);
  edit_weights(tmp / "m", {"encoder.blocks.1.attn.q_bias"});
  VideoMAEPretrainModel b = VideoMAEPretrainModel::random(c, 42);
  const auto before = snapshot(b.params());
  for (const std::vector<std::string>& allow : {std::vector<std::string>{}, std::vector<std::string>{"encoder."}}) {
    const std::string e =
        error_of([&] { video::load_videomae(tmp / "m", c, b.params(), {.allow_missing_prefixes = allow}); });
    EXPECT_NE(e.find("encoder.blocks.1.attn.q_bias (its block's qkv.weight is in the checkpoint"), std::string::npos)
        << e;
  }
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(same_bits(before[i], b.params()[i].value));
  // In HF naming the conversion itself refuses it.
  video::save_videomae(tmp / "h", c, a.params(), VideoMAENaming::hf);
  edit_weights(tmp / "h", {"videomae.encoder.layer.0.attention.attention.v_bias"});
  const std::string e = error_of([&] { video::load_videomae(tmp / "h", c, b.params()); });
  EXPECT_NE(e.find("has no v_bias"), std::string::npos) << e;
}

TEST(VideoMAECheckpoint, ConfigAndShapeMismatchesNameBothValues) {
  TempDir tmp;
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel a = VideoMAEPretrainModel::random(c, 51);
  video::save_videomae(tmp / "m", c, a.params(), VideoMAENaming::original);
  VideoMAEConfig wide = c;
  wide.dim = 32;
  wide.heads = 1;
  VideoMAEPretrainModel b = VideoMAEPretrainModel::random(wide, 52);
  std::string e = error_of([&] { video::load_videomae(tmp / "m", wide, b.params()); });
  EXPECT_NE(e.find("hidden size (dim): checkpoint 64, model 32"), std::string::npos) << e;
  EXPECT_NE(e.find("attention heads: checkpoint 2, model 1"), std::string::npos) << e;
  // Heads alone differ: only config.json can tell.
  VideoMAEConfig heads = c;
  heads.heads = 4;
  VideoMAEPretrainModel h = VideoMAEPretrainModel::random(heads, 53);
  e = error_of([&] { video::load_videomae(tmp / "m", heads, h.params()); });
  EXPECT_NE(e.find("attention heads: checkpoint 2, model 4"), std::string::npos) << e;
  // Without config.json (a lone file), the shapes give it away.
  fs::copy_file(tmp / "m/model.safetensors", tmp / "lone.safetensors");
  e = error_of([&] { video::load_videomae(tmp / "lone.safetensors", wide, b.params()); });
  EXPECT_NE(e.find("encoder.patch_embed.proj.weight is [64,3,2,16,16], the model's encoder.patch_embed.proj.weight "
                   "is [32,3,2,16,16]"),
            std::string::npos)
      << e;
  const auto r = video::load_videomae(tmp / "lone.safetensors", c, a.params());
  EXPECT_NE(r.summary().find("no config.json"), std::string::npos);
}

TEST(VideoMAECheckpoint, OtherClipLengthRegeneratesSinusoidTables) {
  TempDir tmp;
  const VideoMAEConfig c = VideoMAEConfig::tiny();  // 4 frames: 2x2x2 = 8 tokens
  VideoMAEPretrainModel a = VideoMAEPretrainModel::random(c, 61);
  video::save_videomae(tmp / "m", c, a.params(), VideoMAENaming::original);
  // V-SWIFT stores its fixed tables as buffers.
  edit_weights(tmp / "m", {},
               {{"encoder.pos_embed", video::sinusoid_position_table(8, c.dim)},
                {"decoder.pos_embed", video::sinusoid_position_table(8, c.decoder_dim)}});
  VideoMAEConfig longer = c;
  longer.num_frames = 8;  // 4x2x2 = 16 tokens
  VideoMAEPretrainModel b = VideoMAEPretrainModel::random(longer, 62);
  auto r = video::load_videomae(tmp / "m", longer, b.params(), {.strict = true});
  ASSERT_EQ(r.regenerated.size(), 2u) << r.summary();
  EXPECT_NE(r.regenerated[0].find("fixed sinusoid table of 8 tokens regenerated for 4x2x2 = 16 tokens"),
            std::string::npos)
      << r.regenerated[0];
  EXPECT_NE(r.summary().find("checkpoint clips are 4 frames of 32px, the model's 8 of 32px"), std::string::npos);
  EXPECT_TRUE(same_bits(find(a.params(), "encoder.blocks.0.attn.qkv.weight").value,
                        find(b.params(), "encoder.blocks.0.attn.qkv.weight").value));
  // Same grid: checked, reported as matching.
  VideoMAEPretrainModel same = VideoMAEPretrainModel::random(c, 63);
  r = video::load_videomae(tmp / "m", c, same.params());
  ASSERT_EQ(r.regenerated.size(), 2u);
  EXPECT_NE(r.regenerated[0].find("checked; the model computes the same"), std::string::npos) << r.regenerated[0];
  // A learned table cannot go into a model with a fixed one.
  Tensor learned = video::sinusoid_position_table(8, c.dim);
  learned.data<float>()[5] += 0.5f;
  edit_weights(tmp / "m", {"encoder.pos_embed"}, {{"encoder.pos_embed", learned}});
  const std::string e = error_of([&] { video::load_videomae(tmp / "m", c, same.params()); });
  EXPECT_NE(e.find("is a learned table"), std::string::npos) << e;
}

TEST(VideoMAECheckpoint, LearnedTableParameterIsInterpolated) {
  // A model with a learned `pos_embed` parameter (not one of ours; the loader is generic).
  TempDir tmp;
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEClassifier a = VideoMAEClassifier::random(c, 2, 71);
  Tensor table = video::sinusoid_position_table(8, c.dim);
  for (int64_t i = 0; i < table.numel(); ++i) table.data<float>()[i] += 0.01f * float(i % 7);
  video::NamedTensors ts;
  for (const auto& p : a.params()) ts.emplace_back(p.name, p.value);
  ts.emplace_back("pos_embed", table);
  video::save_videomae_tensors(tmp / "m", c, ts, VideoMAENaming::original, 0);
  VideoMAEConfig longer = c;
  longer.num_frames = 8;
  VideoMAEClassifier b = VideoMAEClassifier::random(longer, 2, 72);
  std::vector<Param> params = b.params();
  Tensor slot = Tensor::zeros({1, 16, c.dim}, DType::f32);
  params.push_back(Param{"pos_embed", slot, Tensor(), false});
  const auto r = video::load_videomae(tmp / "m", longer, params);
  ASSERT_EQ(r.regenerated.size(), 1u);
  EXPECT_NE(r.regenerated[0].find("interpolated from 2x2x2 = 8 tokens to 4x2x2 = 16 tokens"), std::string::npos);
  const Tensor want = train::resample_table(table, 2, 2, 2, 4, 2, 2);
  EXPECT_TRUE(same_bits(slot, want));
}

TEST(VideoMAECheckpoint, StrictUnusedAndForeignDirectories) {
  TempDir tmp;
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel a = VideoMAEPretrainModel::random(c, 81);
  video::save_videomae(tmp / "m", c, a.params(), VideoMAENaming::original);
  edit_weights(tmp / "m", {}, {{"encoder.blocks.0.gamma_1", Tensor::zeros({c.dim}, DType::f32)}});
  const auto r = video::load_videomae(tmp / "m", c, a.params());
  ASSERT_EQ(r.unused.size(), 1u);
  EXPECT_EQ(r.unused[0], "encoder.blocks.0.gamma_1 [64]");
  const std::string e = error_of([&] { video::load_videomae(tmp / "m", c, a.params(), {.strict = true}); });
  EXPECT_NE(e.find("no place in the model (strict): encoder.blocks.0.gamma_1"), std::string::npos) << e;
  // Saving over a model directory replaces it; over a directory with other files is refused.
  video::save_videomae(tmp / "m", c, a.params(), VideoMAENaming::hf);
  EXPECT_NE(io::SafeTensorsFile::open(tmp / "m/model.safetensors").find("mask_token"), nullptr);
  io::write_file_atomic(tmp / "m/notes.txt", "keep me");
  const std::string e2 = error_of([&] { video::save_videomae(tmp / "m", c, a.params()); });
  EXPECT_NE(e2.find("holds other files (notes.txt)"), std::string::npos) << e2;
  EXPECT_TRUE(fs::exists(tmp / "m/notes.txt"));
  for (const auto& entry : fs::directory_iterator(tmp.path))
    EXPECT_EQ(entry.path().filename().string().rfind(".tmp-", 0), std::string::npos) << entry.path();
  // Tensors that are not a model of the config are refused before anything is written.
  VideoMAEConfig deeper = c;
  deeper.depth = 3;
  const std::string e3 = error_of([&] { video::save_videomae(tmp / "d", deeper, a.params()); });
  EXPECT_NE(e3.find("encoder.blocks.2.attn.qkv.weight is missing"), std::string::npos) << e3;
  EXPECT_FALSE(fs::exists(tmp / "d"));
}

TEST(VideoMAECheckpoint, ShardedDirectoryLoads) {
  TempDir tmp;
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEClassifier a = VideoMAEClassifier::random(c, 2, 101, 1.0f);
  video::save_videomae(tmp / "m", c, a.params(), VideoMAENaming::hf);
  // Split model.safetensors into two shards + model.safetensors.index.json, as HF does for big models.
  const auto whole = io::SafeTensorsFile::open(tmp / "m/model.safetensors");
  video::NamedTensors shard[2];
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < whole.tensors().size(); ++i) {
    const auto& info = whole.tensors()[i];
    shard[i % 2].emplace_back(info.name, whole.tensor(info.name).contiguous());
    index["weight_map"][info.name] = "model-0000" + std::to_string(i % 2 + 1) + "-of-00002.safetensors";
  }
  io::write_safetensors(tmp / "m/model-00001-of-00002.safetensors", shard[0]);
  io::write_safetensors(tmp / "m/model-00002-of-00002.safetensors", shard[1]);
  io::write_file_atomic(tmp / "m/model.safetensors.index.json", index.dump());
  fs::remove(tmp / "m/model.safetensors");
  VideoMAEClassifier b = VideoMAEClassifier::random(c, 2, 102);
  const auto r = video::load_videomae(tmp / "m", c, b.params(), {.strict = true});
  EXPECT_EQ(r.loaded, int64_t(a.params().size()));
  for (size_t i = 0; i < a.params().size(); ++i)
    EXPECT_TRUE(same_bits(a.params()[i].value, b.params()[i].value)) << a.params()[i].name;
}

TEST(VideoMAECheckpoint, HfConfigDivergencesAreCorrected) {
  TempDir tmp;
  nlohmann::json j = {{"model_type", "videomae"},
                      {"hidden_size", 384},
                      {"num_attention_heads", 16},
                      {"intermediate_size", 1536},
                      {"layer_norm_eps", 1e-12},
                      {"decoder_hidden_size", 192},
                      {"decoder_num_attention_heads", 3},
                      {"architectures", {"VideoMAEForPreTraining"}},
                      {"id2label", {{"0", "a"}, {"1", "b"}}}};
  io::write_file_atomic(tmp / "config.json", j.dump());
  const auto r = video::read_videomae_checkpoint_config(tmp.path.string());
  EXPECT_EQ(r.config.heads, 6);
  EXPECT_EQ(r.config.norm_eps, 1e-6f);
  EXPECT_EQ(r.config.depth, 12);  // HF default
  EXPECT_EQ(r.config.mlp_hidden(384), 1536);
  EXPECT_EQ(r.num_classes, 0);  // a pretraining architecture
  EXPECT_EQ(r.notes.size(), 2u);
  io::write_file_atomic(tmp / "config.json", R"({"model_type": "bert"})");
  EXPECT_NE(error_of([&] { video::read_videomae_config(tmp.path.string()); }).find("not \"videomae\""),
            std::string::npos);
  io::write_file_atomic(tmp / "config.json", "{not json");
  EXPECT_NE(error_of([&] { video::read_videomae_config(tmp.path.string()); }).find("not valid JSON"),
            std::string::npos);
  // Giant's 48/11 MLP ratio survives HF's integer intermediate_size.
  j = {{"hidden_size", 1408}, {"num_attention_heads", 16}, {"intermediate_size", 6144}, {"patch_size", 14}};
  io::write_file_atomic(tmp / "config.json", j.dump());
  EXPECT_EQ(video::read_videomae_config(tmp.path.string()).mlp_hidden(1408), 6144);
}

TEST(VideoMAECheckpoint, LoadsATorchSavedFp16VSwiftCheckpoint) {
  if (torch_fixture_dir().empty()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  const std::string dir = torch_fixture_dir();
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(c, 91);
  const auto r = video::load_videomae(dir + "/videomae_pt.pth", c, m.params(), {.strict = true});
  EXPECT_EQ(r.format, "pytorch");
  EXPECT_EQ(r.loaded, int64_t(m.params().size()));
  EXPECT_EQ(r.regenerated.size(), 2u);
  EXPECT_NE(r.summary().find("unwrapped {'model': state_dict}"), std::string::npos) << r.summary();
  EXPECT_NE(r.summary().find("converted 51 f16 tensor(s) to f32"), std::string::npos) << r.summary();
  const auto expect = io::SafeTensorsFile::open(dir + "/videomae_pt.expect.safetensors");
  for (const auto& p : m.params()) {
    ASSERT_NE(expect.find(p.name), nullptr) << p.name;
    EXPECT_TRUE(same_bits(p.value, expect.tensor(p.name))) << p.name;
  }
}

}  // namespace
}  // namespace unmask
