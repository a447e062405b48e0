// models/bert/weights.cc: HF names -> BertWeights, with one error listing every problem.
#include "models/bert/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "core/half.h"

namespace unmask {

namespace {

// Widens a stored tensor to f32. F32 tensors are returned as-is (a view into the mapping).
Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::f32);
  float* o = out.data<float>();
  const int64_t n = t.numel();
  const uint16_t* h = static_cast<const uint16_t*>(t.raw());
  switch (t.dtype()) {
    case DType::f16: for (int64_t i = 0; i < n; ++i) o[i] = f16_to_f32(h[i]); break;
    case DType::bf16: for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(h[i]); break;
    case DType::f64: { const double* d = static_cast<const double*>(t.raw()); for (int64_t i = 0; i < n; ++i) o[i] = float(d[i]); break; }
    default: throw Error("tensor of dtype ", dtype_name(t.dtype()), " cannot be a floating-point parameter");
  }
  return out;
}

// Tells the kernel it may drop the pages of a mapped tensor we copied elsewhere (the fused
// QKV matrix), so resident memory stays near the checkpoint size. Private read-only file
// mappings are re-read from the file if touched again.
void release_pages(const Tensor& t) {
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  uintptr_t b = (reinterpret_cast<uintptr_t>(t.raw()) + page - 1) / page * page;
  uintptr_t e = (reinterpret_cast<uintptr_t>(t.raw()) + t.nbytes()) / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

// Collects tensors by normalised name and records problems instead of throwing at the first.
class NameTable {
 public:
  NameTable(const std::vector<io::SafeTensorsFile>& files) {
    for (const auto& f : files)
      for (const auto& info : f.tensors()) {
        std::string name = normalise(info.name);
        entries_[name] = Entry{&f, info.name, info.dtype, info.shape};
      }
    for (const auto& [name, e] : entries_)
      if (name.rfind("bert.", 0) == 0) prefix_ = "bert.";
  }

  // HF's legacy names: LayerNorm.gamma/beta -> weight/bias. NVIDIA DLE's LinearActivation
  // modules (intermediate, pooler, MLM transform) are `dense_act` where HF has `dense`.
  static std::string normalise(std::string name) {
    if (const size_t at = name.find(".dense_act."); at != std::string::npos) name.replace(at, 11, ".dense.");
    auto ends = [&](const char* s) { size_t n = std::strlen(s); return name.size() >= n && name.compare(name.size() - n, n, s) == 0; };
    if (ends("LayerNorm.gamma")) return name.substr(0, name.size() - 5) + "weight";
    if (ends("LayerNorm.beta")) return name.substr(0, name.size() - 4) + "bias";
    return name;
  }

  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  const std::string& prefix() const { return prefix_; }

  // Fetches `name` with the expected shape; records missing / mis-shaped tensors.
  Tensor take(const std::string& name, const Shape& shape) {
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      missing_.push_back(name + " " + shape.str());
      return {};
    }
    used_.insert(name);
    if (it->second.shape != shape) {
      misshaped_.push_back(it->second.stored_name + ": expected " + shape.str() + ", found " + it->second.shape.str());
      return {};
    }
    if (it->second.dtype != DType::f32 && it->second.dtype != DType::f16 &&
        it->second.dtype != DType::bf16 && it->second.dtype != DType::f64) {
      misshaped_.push_back(it->second.stored_name + ": dtype " + std::string(dtype_name(it->second.dtype)) + " is not a float type");
      return {};
    }
    return to_f32(it->second.file->tensor(it->second.stored_name));
  }
  void mark_used(const std::string& name) { used_.insert(name); }

  // Throws one Error listing every problem, if there were any.
  void finish(const std::string& origin) {
    std::vector<std::string> unexpected;
    for (const auto& [name, e] : entries_)
      if (!used_.count(name)) unexpected.push_back(e.stored_name + " " + e.shape.str());
    if (missing_.empty() && unexpected.empty() && misshaped_.empty()) return;
    std::ostringstream os;
    os << "checkpoint " << origin << " does not match its config.json:";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      os << "\n  " << v.size() << " " << what << ":";
      size_t shown = 0;
      for (const auto& s : v) {
        if (++shown > 40) { os << "\n    ... and " << v.size() - 40 << " more"; break; }
        os << "\n    " << s;
      }
    };
    list("missing", missing_);
    list("unexpected", unexpected);
    list("mis-shaped", misshaped_);
    throw Error(os.str(), Hint("check that config.json belongs to these weights (sizes, layers, heads) "
                               "and that the checkpoint is a BERT model in Hugging Face naming"));
  }

 private:
  struct Entry {
    const io::SafeTensorsFile* file;
    std::string stored_name;
    DType dtype;
    Shape shape;
  };
  std::map<std::string, Entry> entries_;
  std::set<std::string> used_;
  std::vector<std::string> missing_, misshaped_;
  std::string prefix_;
};

// Concatenates q, k, v ([C, C] each, or [C] biases) into one owned [3C, ...] tensor.
Tensor fuse3(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined()) return {};
  std::vector<int64_t> shape = q.shape().to_vector();
  shape[0] *= 3;
  Tensor out = Tensor::empty(Shape(shape), DType::f32);
  char* o = static_cast<char*>(out.raw());
  for (const Tensor* t : {&q, &k, &v}) {
    std::memcpy(o, t->raw(), t->nbytes());
    o += t->nbytes();
    release_pages(*t);
  }
  return out;
}

}  // namespace

std::unique_ptr<BertWeights> bert_weights_from_files(const BertConfig& cfg, std::vector<io::SafeTensorsFile> files,
                                                     const std::string& origin) {
  auto w = std::make_unique<BertWeights>();
  w->config = cfg;
  NameTable names(files);
  const int64_t C = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
  const std::string p = names.prefix();  // "bert." or "" (bare BertModel)
  w->word_emb = names.take(p + "embeddings.word_embeddings.weight", {V, C});
  w->pos_emb = names.take(p + "embeddings.position_embeddings.weight", {cfg.max_position_embeddings, C});
  w->type_emb = names.take(p + "embeddings.token_type_embeddings.weight", {cfg.type_vocab_size, C});
  w->emb_ln_g = names.take(p + "embeddings.LayerNorm.weight", {C});
  w->emb_ln_b = names.take(p + "embeddings.LayerNorm.bias", {C});
  names.mark_used(p + "embeddings.position_ids");  // a buffer some transformers versions save
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string L = p + "encoder.layer." + std::to_string(l) + ".";
    BertLayerWeights lw;
    Tensor q = names.take(L + "attention.self.query.weight", {C, C});
    Tensor k = names.take(L + "attention.self.key.weight", {C, C});
    Tensor v = names.take(L + "attention.self.value.weight", {C, C});
    Tensor qb = names.take(L + "attention.self.query.bias", {C});
    Tensor kb = names.take(L + "attention.self.key.bias", {C});
    Tensor vb = names.take(L + "attention.self.value.bias", {C});
    lw.qkv_w = fuse3(q, k, v);
    lw.qkv_b = fuse3(qb, kb, vb);
    lw.attn_out_w = names.take(L + "attention.output.dense.weight", {C, C});
    lw.attn_out_b = names.take(L + "attention.output.dense.bias", {C});
    lw.ln1_g = names.take(L + "attention.output.LayerNorm.weight", {C});
    lw.ln1_b = names.take(L + "attention.output.LayerNorm.bias", {C});
    lw.ffn_in_w = names.take(L + "intermediate.dense.weight", {I, C});
    lw.ffn_in_b = names.take(L + "intermediate.dense.bias", {I});
    lw.ffn_out_w = names.take(L + "output.dense.weight", {C, I});
    lw.ffn_out_b = names.take(L + "output.dense.bias", {C});
    lw.ln2_g = names.take(L + "output.LayerNorm.weight", {C});
    lw.ln2_b = names.take(L + "output.LayerNorm.bias", {C});
    w->layers.push_back(std::move(lw));
  }
  BertHeads& h = w->heads;
  h.pooler = names.has(p + "pooler.dense.weight");
  h.mlm = names.has("cls.predictions.bias") || names.has("cls.predictions.transform.dense.weight");
  h.nsp = names.has("cls.seq_relationship.weight");
  h.qa = names.has("qa_outputs.weight");
  bool has_classifier = names.has("classifier.weight");
  bool token_level = std::any_of(cfg.architectures.begin(), cfg.architectures.end(),
                                 [](const std::string& a) { return a.find("TokenClassification") != std::string::npos; });
  h.tokcls = has_classifier && token_level;
  h.seqcls = has_classifier && !token_level;
  if (h.nsp || h.seqcls) h.pooler = true;  // these heads read the pooled output: pooler must exist
  if (h.pooler) {
    w->pooler_w = names.take(p + "pooler.dense.weight", {C, C});
    w->pooler_b = names.take(p + "pooler.dense.bias", {C});
  }
  if (h.mlm) {
    w->mlm_dense_w = names.take("cls.predictions.transform.dense.weight", {C, C});
    w->mlm_dense_b = names.take("cls.predictions.transform.dense.bias", {C});
    w->mlm_ln_g = names.take("cls.predictions.transform.LayerNorm.weight", {C});
    w->mlm_ln_b = names.take("cls.predictions.transform.LayerNorm.bias", {C});
    w->mlm_bias = names.take("cls.predictions.bias", {V});
    // Tied to the word embeddings unless an untied decoder was saved.
    w->mlm_decoder_w = names.has("cls.predictions.decoder.weight")
                           ? names.take("cls.predictions.decoder.weight", {V, C})
                           : w->word_emb;
    if (names.has("cls.predictions.decoder.bias")) names.take("cls.predictions.decoder.bias", {V});
  }
  if (h.nsp) {
    w->nsp_w = names.take("cls.seq_relationship.weight", {2, C});
    w->nsp_b = names.take("cls.seq_relationship.bias", {2});
  }
  if (h.qa) {
    w->qa_w = names.take("qa_outputs.weight", {2, C});
    w->qa_b = names.take("qa_outputs.bias", {2});
  }
  if (has_classifier) {
    w->cls_w = names.take("classifier.weight", {cfg.num_labels, C});
    w->cls_b = names.take("classifier.bias", {cfg.num_labels});
  }
  names.finish(origin);
  w->files = std::move(files);
  return w;
}

std::unique_ptr<BertWeights> bert_weights_random(const BertConfig& cfg, const BertHeads& heads, uint64_t seed) {
  auto w = std::make_unique<BertWeights>();
  w->config = cfg;
  w->heads = heads;
  std::mt19937_64 rng(seed);
  // Fast approximately-normal init: sum of uniforms would be slow for 110M values; a
  // Box-Muller pair per two values is fine here (benchmarks only need realistic magnitudes).
  auto normal = [&](const Shape& s) {
    Tensor t = Tensor::empty(s, DType::f32);
    float* d = t.data<float>();
    std::uniform_real_distribution<float> u(1e-7f, 1.0f);
    for (int64_t i = 0; i < t.numel(); i += 2) {
      float r = 0.02f * std::sqrt(-2.0f * std::log(u(rng)));
      float a = 6.2831853f * u(rng);
      d[i] = r * std::cos(a);
      if (i + 1 < t.numel()) d[i + 1] = r * std::sin(a);
    }
    return t;
  };
  auto fill = [](const Shape& s, float v) {
    Tensor t = Tensor::empty(s, DType::f32);
    std::fill(t.data<float>(), t.data<float>() + t.numel(), v);
    return t;
  };
  const int64_t C = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
  w->word_emb = normal({V, C});
  w->pos_emb = normal({cfg.max_position_embeddings, C});
  w->type_emb = normal({cfg.type_vocab_size, C});
  w->emb_ln_g = fill({C}, 1.0f);
  w->emb_ln_b = fill({C}, 0.0f);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    BertLayerWeights lw;
    lw.qkv_w = normal({3 * C, C});
    lw.qkv_b = fill({3 * C}, 0.0f);
    lw.attn_out_w = normal({C, C});
    lw.attn_out_b = fill({C}, 0.0f);
    lw.ln1_g = fill({C}, 1.0f);
    lw.ln1_b = fill({C}, 0.0f);
    lw.ffn_in_w = normal({I, C});
    lw.ffn_in_b = fill({I}, 0.0f);
    lw.ffn_out_w = normal({C, I});
    lw.ffn_out_b = fill({C}, 0.0f);
    lw.ln2_g = fill({C}, 1.0f);
    lw.ln2_b = fill({C}, 0.0f);
    w->layers.push_back(std::move(lw));
  }
  if (heads.pooler || heads.nsp || heads.seqcls) {
    w->heads.pooler = true;
    w->pooler_w = normal({C, C});
    w->pooler_b = fill({C}, 0.0f);
  }
  if (heads.mlm) {
    w->mlm_dense_w = normal({C, C});
    w->mlm_dense_b = fill({C}, 0.0f);
    w->mlm_ln_g = fill({C}, 1.0f);
    w->mlm_ln_b = fill({C}, 0.0f);
    w->mlm_decoder_w = w->word_emb;
    w->mlm_bias = fill({V}, 0.0f);
  }
  if (heads.nsp) { w->nsp_w = normal({2, C}); w->nsp_b = fill({2}, 0.0f); }
  if (heads.qa) { w->qa_w = normal({2, C}); w->qa_b = fill({2}, 0.0f); }
  if (heads.seqcls || heads.tokcls) { w->cls_w = normal({cfg.num_labels, C}); w->cls_b = fill({cfg.num_labels}, 0.0f); }
  return w;
}


void bert_pack_weights(Context& ctx, BertWeights& w) {
  std::call_once(w.packed_once, [&] {
    // Packs t into p, then releases t's pages (file-mapped) or drops t (owned copy).
    auto pack = [&](Tensor& t, ops::PackedWeight& p) {
      if (!t.defined() || t.device() != Device::cpu) return;
      p = ops::pack_weight(ctx, t, w.cpu_gemm);
      const bool mapped = std::any_of(w.files.begin(), w.files.end(),
                                      [&](const io::SafeTensorsFile& f) { return f.contains(t.raw()); });
      if (mapped)
        release_pages(t);
      else
        t = Tensor();
    };
    for (BertLayerWeights& lw : w.layers) {
      pack(lw.qkv_w, lw.qkv_p);
      pack(lw.attn_out_w, lw.attn_out_p);
      pack(lw.ffn_in_w, lw.ffn_in_p);
      pack(lw.ffn_out_w, lw.ffn_out_p);
    }
    pack(w.pooler_w, w.pooler_p);
    pack(w.mlm_dense_w, w.mlm_dense_p);
  });
}

}  // namespace unmask
