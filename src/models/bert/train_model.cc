// models/bert/train_model.cc: BertTrainModel's parameters: building them from a checkpoint or at
// random, their HF names, saving an HF directory, and the inference model.
//
// Storage: every parameter is an owned contiguous f32 tensor with a gradient of the same shape
// (train::PV). q, k and v of a layer live in one fused [3C, C] value (and [3C] bias) so the
// forward runs one QKV GEMM; their three Params are row-slice views of the fused value and
// gradient buffers. The MLM decoder is the word embedding (one Param: the gradients of the
// lookup and of the decoder both accumulate into it).
//
// The passes themselves are in bert_train_step.cc.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "io/file.h"
#include "io/safetensors.h"
#include "data/text/tokenizer_config.h"
#include "models/bert/checkpoint.h"
#include "models/bert/weights.h"
#include "models/bert/train_model_impl.h"

namespace unmask {

using train::PV;

namespace {

// normal(0, 0.02) weights for heads the checkpoint lacks (HF's _init_weights for Linear).
class HeadInit {
 public:
  explicit HeadInit(uint64_t seed) : rng_(seed) {}
  PV normal(const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::f32);
    std::normal_distribution<float> d(0.0f, 0.02f);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng_);
    return train::make_pv(t);
  }
  static PV fill(const Shape& shape, float v) {
    Tensor t = Tensor::empty(shape, DType::f32);
    std::fill(t.data<float>(), t.data<float>() + t.numel(), v);
    return train::make_pv(t);
  }

 private:
  std::mt19937_64 rng_;
};

// The checkpoint's tensor, or a fresh one when it has none (init(shape)).
template <typename Init> PV from_or(const Tensor& t, const Shape& shape, Init&& init) {
  return t.defined() ? train::make_pv(t) : init(shape);
}

bool no_weight_decay(const std::string& name) {
  for (const char* s : {"bias", "LayerNorm", "gamma", "beta"})
    if (name.find(s) != std::string::npos) return true;
  return false;
}

std::string architecture_for(const BertHeads& h) {
  if (h.qa) return "BertForQuestionAnswering";
  if (h.seqcls) return "BertForSequenceClassification";
  if (h.tokcls) return "BertForTokenClassification";
  if (h.mlm && h.nsp) return "BertForPreTraining";
  if (h.mlm) return "BertForMaskedLM";
  if (h.nsp) return "BertForNextSentencePrediction";
  return "BertModel";
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;  // best effort: the files themselves were fsynced by their writers
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

// ---- Impl -----------------------------------------------------------------------------------

std::vector<PV*> BertTrainModel::Impl::storages() {
  std::vector<PV*> s = {&emb.word, &emb.pos, &emb.type, &emb.ln_g, &emb.ln_b};
  for (auto& l : layers)
    for (PV* p : {&l.qkv_w, &l.qkv_b, &l.attn_out_w, &l.attn_out_b, &l.ln1_g, &l.ln1_b, &l.ffn_in_w, &l.ffn_in_b,
                  &l.ffn_out_w, &l.ffn_out_b, &l.ln2_g, &l.ln2_b})
      s.push_back(p);
  for (PV* p : {&pooler_w, &pooler_b, &mlm_dense_w, &mlm_dense_b, &mlm_ln_g, &mlm_ln_b, &mlm_bias, &nsp_w, &nsp_b, &qa_w,
                &qa_b, &cls_w, &cls_b})
    if (p->defined()) s.push_back(p);
  return s;
}

void BertTrainModel::Impl::build_params() {
  params.clear();
  auto add = [&](const std::string& name, const Tensor& v, const Tensor& g) {
    Param p;
    p.name = name;
    p.value = v;
    p.grad = g;
    p.weight_decay = !no_weight_decay(name);
    params.push_back(std::move(p));
  };
  auto add_pv = [&](const std::string& name, const PV& pv) { add(name, pv.value, pv.grad); };
  const int64_t C = config.hidden_size;
  layer_first.clear();
  add_pv("bert.embeddings.word_embeddings.weight", emb.word);
  add_pv("bert.embeddings.position_embeddings.weight", emb.pos);
  add_pv("bert.embeddings.token_type_embeddings.weight", emb.type);
  add_pv("bert.embeddings.LayerNorm.weight", emb.ln_g);
  add_pv("bert.embeddings.LayerNorm.bias", emb.ln_b);
  for (size_t l = 0; l < layers.size(); ++l) {
    layer_first.push_back(int64_t(params.size()));
    const auto& L = layers[l];
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    const char* qkv[3] = {"query", "key", "value"};
    for (int i = 0; i < 3; ++i) {  // row slices of the fused [3C, C] / [3C] storage
      add(p + "attention.self." + qkv[i] + ".weight", L.qkv_w.value.slice(0, i * C, (i + 1) * C),
          L.qkv_w.grad.slice(0, i * C, (i + 1) * C));
      add(p + "attention.self." + qkv[i] + ".bias", L.qkv_b.value.slice(0, i * C, (i + 1) * C),
          L.qkv_b.grad.slice(0, i * C, (i + 1) * C));
    }
    add_pv(p + "attention.output.dense.weight", L.attn_out_w);
    add_pv(p + "attention.output.dense.bias", L.attn_out_b);
    add_pv(p + "attention.output.LayerNorm.weight", L.ln1_g);
    add_pv(p + "attention.output.LayerNorm.bias", L.ln1_b);
    add_pv(p + "intermediate.dense.weight", L.ffn_in_w);
    add_pv(p + "intermediate.dense.bias", L.ffn_in_b);
    add_pv(p + "output.dense.weight", L.ffn_out_w);
    add_pv(p + "output.dense.bias", L.ffn_out_b);
    add_pv(p + "output.LayerNorm.weight", L.ln2_g);
    add_pv(p + "output.LayerNorm.bias", L.ln2_b);
  }
  layer_first.push_back(int64_t(params.size()));  // the heads start here
  if (heads.pooler) {
    add_pv("bert.pooler.dense.weight", pooler_w);
    add_pv("bert.pooler.dense.bias", pooler_b);
  }
  if (heads.mlm) {  // BertLMPredictionHead registers its own bias before the transform
    add_pv("cls.predictions.bias", mlm_bias);
    add_pv("cls.predictions.transform.dense.weight", mlm_dense_w);
    add_pv("cls.predictions.transform.dense.bias", mlm_dense_b);
    add_pv("cls.predictions.transform.LayerNorm.weight", mlm_ln_g);
    add_pv("cls.predictions.transform.LayerNorm.bias", mlm_ln_b);
  }
  if (heads.nsp) {
    add_pv("cls.seq_relationship.weight", nsp_w);
    add_pv("cls.seq_relationship.bias", nsp_b);
  }
  if (heads.qa) {
    add_pv("qa_outputs.weight", qa_w);
    add_pv("qa_outputs.bias", qa_b);
  }
  if (heads.seqcls || heads.tokcls) {
    add_pv("classifier.weight", cls_w);
    add_pv("classifier.bias", cls_b);
  }
}

namespace {

// Owned copies of `w`'s encoder plus the heads `want` asks for (from `w` when it has them,
// else freshly initialised from `seed`); heads `w` has but `want` lacks are dropped.
std::unique_ptr<BertTrainModel::Impl> impl_from_weights(const BertWeights& w, const BertHeads& want_in,
                                                        uint64_t seed) {
  BertHeads want = want_in;
  UNMASK_CHECK(!(want.seqcls && want.tokcls), "BertTrainModel: seqcls and tokcls share the classifier parameters; ask for one",
               Hint("fine-tune one classification task per model"));
  if (want.nsp || want.seqcls) want.pooler = true;  // these heads read the pooled output
  const BertConfig& cfg = w.config;
  const int64_t C = cfg.hidden_size, V = cfg.vocab_size, L = cfg.num_labels;
  auto impl = std::make_unique<BertTrainModel::Impl>();
  impl->config = cfg;
  impl->heads = want;
  HeadInit init(seed);
  auto normal = [&](const Shape& s) { return init.normal(s); };
  auto zeros = [](const Shape& s) { return HeadInit::fill(s, 0.0f); };
  auto ones = [](const Shape& s) { return HeadInit::fill(s, 1.0f); };

  impl->emb.word = train::make_pv(w.word_emb);
  impl->emb.pos = train::make_pv(w.pos_emb);
  impl->emb.type = train::make_pv(w.type_emb);
  impl->emb.ln_g = train::make_pv(w.emb_ln_g);
  impl->emb.ln_b = train::make_pv(w.emb_ln_b);
  for (const BertLayerWeights& lw : w.layers) {
    UNMASK_CHECK(lw.qkv_w.defined() && lw.ffn_in_w.defined(),
                 "BertTrainModel: the source weights were packed for inference and their f32 copies released");
    train::EncoderLayerParams p;
    p.qkv_w = train::make_pv(lw.qkv_w);
    p.qkv_b = train::make_pv(lw.qkv_b);
    p.attn_out_w = train::make_pv(lw.attn_out_w);
    p.attn_out_b = train::make_pv(lw.attn_out_b);
    p.ln1_g = train::make_pv(lw.ln1_g);
    p.ln1_b = train::make_pv(lw.ln1_b);
    p.ffn_in_w = train::make_pv(lw.ffn_in_w);
    p.ffn_in_b = train::make_pv(lw.ffn_in_b);
    p.ffn_out_w = train::make_pv(lw.ffn_out_w);
    p.ffn_out_b = train::make_pv(lw.ffn_out_b);
    p.ln2_g = train::make_pv(lw.ln2_g);
    p.ln2_b = train::make_pv(lw.ln2_b);
    impl->layers.push_back(std::move(p));
  }
  // Heads, in a fixed order so the random ones do not depend on which others exist.
  auto& I = *impl;
  if (want.pooler) {
    I.pooler_w = from_or(w.pooler_w, {C, C}, normal);
    I.pooler_b = from_or(w.pooler_b, {C}, zeros);
  }
  if (want.mlm) {  // the decoder is always the word embedding (HF ties an untied save on load too)
    const bool have = w.heads.mlm;
    I.mlm_dense_w = from_or(have ? w.mlm_dense_w : Tensor(), {C, C}, normal);
    I.mlm_dense_b = from_or(have ? w.mlm_dense_b : Tensor(), {C}, zeros);
    I.mlm_ln_g = from_or(have ? w.mlm_ln_g : Tensor(), {C}, ones);
    I.mlm_ln_b = from_or(have ? w.mlm_ln_b : Tensor(), {C}, zeros);
    I.mlm_bias = from_or(have ? w.mlm_bias : Tensor(), {V}, zeros);
  }
  if (want.nsp) {
    I.nsp_w = from_or(w.nsp_w, {2, C}, normal);
    I.nsp_b = from_or(w.nsp_b, {2}, zeros);
  }
  if (want.qa) {
    I.qa_w = from_or(w.qa_w, {2, C}, normal);
    I.qa_b = from_or(w.qa_b, {2}, zeros);
  }
  if (want.seqcls || want.tokcls) {
    const bool have = w.cls_w.defined() && w.cls_w.shape() == Shape({L, C});
    I.cls_w = from_or(have ? w.cls_w : Tensor(), {L, C}, normal);
    I.cls_b = from_or(have ? w.cls_b : Tensor(), {L}, zeros);
  }
  impl->saved.resize(impl->layers.size());
  impl->build_params();
  return impl;
}

}  // namespace

// ---- BertTrainModel ---------------------------------------------------------------------------

BertTrainModel::BertTrainModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BertTrainModel::BertTrainModel(BertTrainModel&&) noexcept = default;
BertTrainModel& BertTrainModel::operator=(BertTrainModel&&) noexcept = default;
BertTrainModel::~BertTrainModel() = default;

BertTrainModel BertTrainModel::load(const std::string& path, const BertHeads& heads, uint64_t seed) {
  BertCheckpoint c = open_bert_checkpoint(path);
  std::unique_ptr<BertWeights> w = bert_weights_from_files(c.config, std::move(c.files), c.origin);
  return BertTrainModel(impl_from_weights(*w, heads, seed));
}

BertTrainModel BertTrainModel::random(const BertConfig& config, const BertHeads& heads, uint64_t seed) {
  config.validate("random model");
  BertHeads all = heads;
  if (all.seqcls && all.tokcls) all.tokcls = false;  // reported by impl_from_weights
  // bert_weights_random draws every requested head too (normal(0, 0.02), biases 0, LayerNorm 1/0).
  std::unique_ptr<BertWeights> w = bert_weights_random(config, all, seed);
  return BertTrainModel(impl_from_weights(*w, heads, seed));
}

const BertConfig& BertTrainModel::config() const { return impl_->config; }
const BertHeads& BertTrainModel::heads() const { return impl_->heads; }
std::vector<Param>& BertTrainModel::params() { return impl_->params; }

void BertTrainModel::zero_grad() {
  for (PV* p : impl_->storages()) train::zero_tensor(p->grad);
  impl_->weight_copies_made = false;  // a new accumulation: the next forward rounds the masters again
}

void BertTrainModel::zero_grad(Context& ctx) {
  train::zero_grads(ctx, impl_->storages());
  impl_->weight_copies_made = false;  // a new accumulation: the next forward rounds the masters again
}

Device BertTrainModel::device() const { return impl_->emb.word.value.device(); }

void BertTrainModel::to(Context& ctx) {
  Impl& I = *impl_;
  const Device device = ctx.device();
  if (device == this->device()) return;
  train::pvs_to(ctx, I.storages());
  I.build_params();  // the Params are views of the storages: rebuild them over the new copies
  I.weight_copies_made = false;  // (pv_to dropped the bf16 copies too)
  // Saved activations point into the old workspace; the next step re-takes them.
  I.emb_saved = {};
  for (train::LayerSaved& s : I.saved) s = {};
  I.scratch = {};
  I.ws.set_device(device);
}

BertModel BertTrainModel::to_inference_model() const {
  const Impl& I = *impl_;
  auto w = std::make_unique<BertWeights>();
  w->config = I.config;
  w->heads = I.heads;
  // Host copies (the inference model runs on the CPU; to() moves it elsewhere).
  auto copy = [](const PV& p) {
    if (!p.defined()) return Tensor();
    return p.value.device() == Device::cpu ? p.value.contiguous() : p.value.to(Device::cpu);
  };
  w->word_emb = copy(I.emb.word);
  w->pos_emb = copy(I.emb.pos);
  w->type_emb = copy(I.emb.type);
  w->emb_ln_g = copy(I.emb.ln_g);
  w->emb_ln_b = copy(I.emb.ln_b);
  for (const auto& L : I.layers) {
    BertLayerWeights lw;
    lw.qkv_w = copy(L.qkv_w);
    lw.qkv_b = copy(L.qkv_b);
    lw.attn_out_w = copy(L.attn_out_w);
    lw.attn_out_b = copy(L.attn_out_b);
    lw.ln1_g = copy(L.ln1_g);
    lw.ln1_b = copy(L.ln1_b);
    lw.ffn_in_w = copy(L.ffn_in_w);
    lw.ffn_in_b = copy(L.ffn_in_b);
    lw.ffn_out_w = copy(L.ffn_out_w);
    lw.ffn_out_b = copy(L.ffn_out_b);
    lw.ln2_g = copy(L.ln2_g);
    lw.ln2_b = copy(L.ln2_b);
    w->layers.push_back(std::move(lw));
  }
  w->pooler_w = copy(I.pooler_w);
  w->pooler_b = copy(I.pooler_b);
  w->mlm_dense_w = copy(I.mlm_dense_w);
  w->mlm_dense_b = copy(I.mlm_dense_b);
  w->mlm_ln_g = copy(I.mlm_ln_g);
  w->mlm_ln_b = copy(I.mlm_ln_b);
  w->mlm_bias = copy(I.mlm_bias);
  if (I.heads.mlm) w->mlm_decoder_w = w->word_emb;  // tied
  w->nsp_w = copy(I.nsp_w);
  w->nsp_b = copy(I.nsp_b);
  w->qa_w = copy(I.qa_w);
  w->qa_b = copy(I.qa_b);
  w->cls_w = copy(I.cls_w);
  w->cls_b = copy(I.cls_b);
  return BertModel(std::move(w));
}

// ---- save_pretrained ------------------------------------------------------------------------

namespace {

// config.json for the saved heads: BertConfig::to_json plus HF's architectures and, for the
// classification heads, id2label/label2id (HF derives num_labels from them).
std::string saved_config_json(const BertConfig& cfg, const BertHeads& heads) {
  nlohmann::json j = nlohmann::json::parse(cfg.to_json());
  j["architectures"] = nlohmann::json::array({architecture_for(heads)});
  // BertForQuestionAnswering: qa_outputs is [num_labels = 2, C]. Like HF, id2label is written
  // whenever it differs from the default two labels, so num_labels survives the round trip.
  const int64_t labels = heads.qa ? 2 : cfg.num_labels;
  if (labels != 2 || heads.seqcls || heads.tokcls || !cfg.id2label.empty()) {
    nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
    for (int64_t i = 0; i < labels; ++i) {
      const bool named = int64_t(cfg.id2label.size()) == labels && !cfg.id2label[size_t(i)].empty();
      const std::string name = named ? cfg.id2label[size_t(i)] : "LABEL_" + std::to_string(i);
      id2label[std::to_string(i)] = name;
      label2id[name] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  j["tie_word_embeddings"] = true;
  j["position_embedding_type"] = "absolute";
  return j.dump(2) + "\n";
}

}  // namespace

void BertTrainModel::save_pretrained(const std::string& dir_in, const std::string& vocab_path,
                                     const TokenizerSettings& tokenizer) const {
  namespace fs = std::filesystem;
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  UNMASK_CHECK(!dir.empty(), "save_pretrained: empty directory name");
  if (!vocab_path.empty() && !io::file_exists(vocab_path))
    throw Error("save_pretrained: vocab file ", vocab_path, " not found", Hint("pass the vocab.txt the model was trained with"));
  const fs::path target(dir);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error("save_pretrained: cannot create ", parent.string(), ": ", ec.message());

  std::string tmpl = dir + ".tmp-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    throw Error("save_pretrained: cannot create a temporary directory beside ", dir, ": ", std::strerror(errno),
                Hint("the parent directory must be writable"));
  const std::string tmp = tmpl;
  try {
    io::write_file_atomic(tmp + "/config.json", saved_config_json(impl_->config, impl_->heads));
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const Param& p : impl_->params)
      tensors.emplace_back(p.name, p.value.device() == Device::cpu ? p.value : p.value.to(Device::cpu));
    io::write_safetensors(tmp + "/model.safetensors", tensors);
    if (!vocab_path.empty()) {
      io::write_file_atomic(tmp + "/vocab.txt", io::read_file(vocab_path));
      io::write_file_atomic(tmp + "/tokenizer_config.json",
                            text::tokenizer_config_json(tokenizer, impl_->config.max_position_embeddings));
      io::write_file_atomic(tmp + "/special_tokens_map.json", text::special_tokens_map_json());
    }
    ::chmod(tmp.c_str(), 0755);
    fsync_path(tmp);
    // Swap in: an existing directory is moved aside first, removed once the new one is in place.
    std::string old;
    if (fs::exists(target)) {
      std::string otmpl = dir + ".old-XXXXXX";
      if (!::mkdtemp(otmpl.data())) throw Error("save_pretrained: cannot create a directory beside ", dir, ": ", std::strerror(errno));
      old = otmpl;
      fs::remove(old);  // mkdtemp reserved the name; rename needs it absent (or empty)
      fs::rename(target, old);
    }
    try {
      fs::rename(tmp, target);
    } catch (...) {
      if (!old.empty()) fs::rename(old, target, ec);  // put the previous save back
      throw;
    }
    fsync_path(parent.string());
    if (!old.empty()) fs::remove_all(old, ec);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw Error("save_pretrained: ", e.what(), Hint("check free space and permissions beside " + dir));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace unmask
