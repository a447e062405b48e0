// models/bert.cc: the BERT forward pass (embeddings, post-LN encoder layers, heads).
//
// Layout: all activations are 2-D row matrices over the N tokens of the batch. In packed mode
// the N rows are the real tokens of all sequences back to back (no compute on padding); in
// padded mode N = B*T and the attention masks padded keys. Per layer (C hidden, I = 4C):
//
//   qkv[N,3C] = x @ Wqkv^T + bqkv                    one GEMM for q, k and v
//   ctx[N,C]  = attention(qkv[:, :C], qkv[:, C:2C], qkv[:, 2C:])
//   h[N,C]    = ctx @ Wo^T + bo
//   x1        = LayerNorm(h + x)                     residual fused into the LayerNorm
//   f[N,I]    = gelu(x1 @ W1^T + b1)                 GELU fused into the GEMM epilogue
//   h2[N,C]   = f @ W2^T + b2
//   x         = LayerNorm(h2 + x1)
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/bert_weights.h"
#include "ops/ops.h"
#include "unmask/bert.h"

namespace unmask {

namespace {

using ops::Activation;
using ops::Trans;

Activation hidden_activation(HiddenAct a) { return a == HiddenAct::gelu ? Activation::gelu : Activation::gelu_tanh; }

// Whether the forward packs its Linear weights (ops::pack_weight); UNMASK_PACKED_GEMM=0 keeps
// the unpacked ops::gemm path (for A/B measurements and as a fallback).
bool packed_gemm_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("UNMASK_PACKED_GEMM");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

// Reads an i32/i64 tensor's elements as int64 (for validation and position ids).
int64_t read_index(const Tensor& t, int64_t i) {
  return t.dtype() == DType::i64 ? t.data<int64_t>()[i] : int64_t(t.data<int32_t>()[i]);
}

// Validated description of a batch.
struct BatchLayout {
  bool packed = false;
  int64_t B = 0, T = 0, N = 0;          // T = longest sequence (padded: the padded length)
  Tensor cu_seqlens;                     // i32 [B+1] (packed) or undefined
  Tensor ids, type_ids, pos_ids;         // i32 [N]
  Tensor mask;                           // padded mode mask, or undefined
};

Tensor as_i32_rows(const Tensor& t, const char* what) {
  UNMASK_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, "bert: ", what, " must be i32 or i64, got ", t.describe());
  Tensor c = t.is_contiguous() ? t : t.contiguous();
  Tensor out = Tensor::empty({c.numel()}, DType::i32);
  int32_t* o = out.data<int32_t>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    int64_t v = read_index(c, i);
    if (v < INT32_MIN || v > INT32_MAX) throw Error("bert: ", what, "[", i, "] = ", v, " does not fit in 32 bits");
    o[i] = int32_t(v);
  }
  return out;
}

BatchLayout make_layout(const BertConfig& cfg, const BertInput& in, bool need_ids) {
  BatchLayout L;
  L.packed = in.cu_seqlens.defined();
  const Tensor& ids = in.input_ids;
  if (L.packed) {
    const Tensor& cu = in.cu_seqlens;
    UNMASK_CHECK(cu.dtype() == DType::i32 && cu.ndim() == 1 && cu.size(0) >= 2,
                 "bert: cu_seqlens must be i32 [B+1] with B >= 1, got ", cu.describe());
    L.cu_seqlens = cu.is_contiguous() ? cu : cu.contiguous();
    const int32_t* c = L.cu_seqlens.data<int32_t>();
    L.B = cu.size(0) - 1;
    UNMASK_CHECK(c[0] == 0, "bert: cu_seqlens[0] must be 0, got ", c[0]);
    for (int64_t b = 0; b < L.B; ++b) {
      UNMASK_CHECK(c[b + 1] > c[b], "bert: sequence ", b, " is empty or cu_seqlens decreases (", c[b], " -> ", c[b + 1], ")");
      L.T = std::max<int64_t>(L.T, c[b + 1] - c[b]);
    }
    L.N = c[L.B];
    if (need_ids)
      UNMASK_CHECK(ids.ndim() == 1 && ids.size(0) == L.N, "bert: packed input_ids must be [", L.N, "] (cu_seqlens[B]), got ", ids.describe());
  } else {
    UNMASK_CHECK(ids.ndim() == 2, "bert: padded input_ids must be [B, T], got ", ids.describe(),
                 Hint("pass cu_seqlens for a packed [N] batch"));
    L.B = ids.size(0);
    L.T = ids.size(1);
    L.N = L.B * L.T;
    UNMASK_CHECK(L.B >= 1 && L.T >= 1, "bert: empty batch ", ids.describe());
    if (in.attention_mask.defined()) {
      UNMASK_CHECK(in.attention_mask.shape() == Shape({L.B, L.T}), "bert: attention_mask must be [", L.B, ", ", L.T,
                   "] like input_ids, got ", in.attention_mask.describe());
      L.mask = in.attention_mask.is_contiguous() ? in.attention_mask : in.attention_mask.contiguous();
    }
  }
  if (L.T > cfg.max_position_embeddings)
    throw Error("bert: a sequence has ", L.T, " tokens but the model has ", cfg.max_position_embeddings, " positions",
                Hint("truncate the input to max_position_embeddings tokens"));
  if (need_ids) {
    L.ids = as_i32_rows(ids, "input_ids");
    if (in.token_type_ids.defined()) {
      UNMASK_CHECK(in.token_type_ids.shape() == ids.shape(), "bert: token_type_ids must have the shape of input_ids ",
                   ids.shape().str(), ", got ", in.token_type_ids.describe());
      L.type_ids = as_i32_rows(in.token_type_ids, "token_type_ids");
    } else {
      L.type_ids = Tensor::zeros({L.N}, DType::i32);
    }
    L.pos_ids = Tensor::empty({L.N}, DType::i32);
    int32_t* pos = L.pos_ids.data<int32_t>();
    if (L.packed) {
      const int32_t* c = L.cu_seqlens.data<int32_t>();
      for (int64_t b = 0; b < L.B; ++b)
        for (int32_t r = c[b]; r < c[b + 1]; ++r) pos[r] = r - c[b];
    } else {
      for (int64_t r = 0; r < L.N; ++r) pos[r] = int32_t(r % L.T);
    }
  }
  return L;
}

// Copies the [CLS] row (first token) of each sequence: x [N, C] -> [B, C], on x's device.
Tensor gather_first_tokens(const Tensor& x, const BatchLayout& L) {
  const int64_t C = x.size(1);
  Tensor out = Tensor::empty({L.B, C}, DType::f32, x.device());
  for (int64_t b = 0; b < L.B; ++b) {
    int64_t row = L.packed ? L.cu_seqlens.data<int32_t>()[b] : b * L.T;
    if (x.device() == Device::cpu) {
      std::memcpy(out.data<float>() + b * C, x.data<float>() + row * C, C * sizeof(float));
    } else {
      Tensor dst = out.slice(0, b, b + 1);
      dst.copy_from(x.slice(0, row, row + 1));
    }
  }
  return out;
}

// Every weight tensor of the model, for moving them between devices.
std::vector<Tensor*> weight_tensors(BertWeights& W) {
  std::vector<Tensor*> t = {&W.word_emb, &W.pos_emb,     &W.type_emb, &W.emb_ln_g, &W.emb_ln_b, &W.pooler_w,
                            &W.pooler_b, &W.mlm_dense_w, &W.mlm_dense_b, &W.mlm_ln_g, &W.mlm_ln_b, &W.mlm_decoder_w,
                            &W.mlm_bias, &W.nsp_w,       &W.nsp_b,    &W.qa_w,     &W.qa_b,     &W.cls_w,
                            &W.cls_b};
  for (BertLayerWeights& l : W.layers)
    for (Tensor* x : {&l.qkv_w, &l.qkv_b, &l.attn_out_w, &l.attn_out_b, &l.ln1_g, &l.ln1_b, &l.ffn_in_w, &l.ffn_in_b,
                      &l.ffn_out_w, &l.ffn_out_b, &l.ln2_g, &l.ln2_b})
      t.push_back(x);
  return t;
}

// Reshapes a packed-or-padded [N, D] result to the input's layout.
Tensor to_layout(const Tensor& t, const BatchLayout& L) {
  if (L.packed) return t;
  return t.view({L.B, L.T, t.size(1)});
}

// y = act(x @ W^T + b) with W packed (wp, when defined) or unpacked (w).
void linear_into(Context& ctx, const Tensor& x, const Tensor& w, const ops::PackedWeight& wp, const Tensor& b,
                 Tensor& y, Activation act = Activation::none) {
  ops::GemmArgs args;
  args.bias = b.defined() ? &b : nullptr;
  args.act = act;
  if (wp.defined())
    ops::gemm_packed(ctx, x, wp, y, args);
  else
    ops::gemm(ctx, x, Trans::no, w, Trans::yes, y, args);
}

Tensor linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, Activation act = Activation::none,
              const ops::PackedWeight& wp = {}) {
  Tensor y = Tensor::empty({x.size(0), wp.defined() ? wp.n_out() : w.size(0)}, DType::f32, x.device());
  linear_into(ctx, x, w, wp, b, y, act);
  return y;
}

// Elements of a weight that may have been dropped after packing (bert_pack_weights).
int64_t numel_of(const Tensor& t, const ops::PackedWeight& p) {
  return t.defined() ? t.numel() : p.n_out() * p.k();
}

}  // namespace

BertModel::BertModel(std::unique_ptr<BertWeights> w) : w_(std::move(w)) {}
BertModel::BertModel(BertModel&&) noexcept = default;
BertModel& BertModel::operator=(BertModel&&) noexcept = default;
BertModel::~BertModel() = default;

BertModel BertModel::load(const std::string& dir) {
  BertConfig cfg = BertConfig::from_json_file(dir + "/config.json");
  std::vector<io::SafeTensorsFile> files = io::open_model_weights(dir);
  return BertModel(bert_weights_from_files(cfg, std::move(files), dir));
}

BertModel BertModel::random(const BertConfig& config, const BertHeads& heads, uint64_t seed) {
  config.validate("random model");
  return BertModel(bert_weights_random(config, heads, seed));
}

const BertConfig& BertModel::config() const { return w_->config; }
const BertHeads& BertModel::heads() const { return w_->heads; }
void BertModel::set_hidden_act(HiddenAct act) { w_->config.hidden_act = act; }

int64_t BertModel::num_parameters() const {
  int64_t n = w_->word_emb.numel() + w_->pos_emb.numel() + w_->type_emb.numel() + 2 * w_->emb_ln_g.numel();
  for (const auto& l : w_->layers) {
    n += numel_of(l.qkv_w, l.qkv_p) + numel_of(l.attn_out_w, l.attn_out_p) + numel_of(l.ffn_in_w, l.ffn_in_p) +
         numel_of(l.ffn_out_w, l.ffn_out_p);
    for (const Tensor* t : {&l.qkv_b, &l.attn_out_b, &l.ln1_g, &l.ln1_b, &l.ffn_in_b, &l.ffn_out_b, &l.ln2_g, &l.ln2_b})
      n += t->numel();
  }
  n += numel_of(w_->pooler_w, w_->pooler_p) + numel_of(w_->mlm_dense_w, w_->mlm_dense_p);
  for (const Tensor* t : {&w_->pooler_b, &w_->mlm_dense_b, &w_->mlm_ln_g,
                          &w_->mlm_ln_b, &w_->mlm_bias, &w_->nsp_w, &w_->nsp_b, &w_->qa_w, &w_->qa_b, &w_->cls_w, &w_->cls_b})
    if (t->defined()) n += t->numel();
  return n;
}

int64_t BertModel::parameter_bytes() const { return num_parameters() * 4; }

Device BertModel::device() const { return w_->emb_ln_g.device(); }

void BertModel::to(Context& ctx) {
  const Device dev = ctx.device();
  BertWeights& W = *w_;
  if (device() == dev) return;
  for (const BertLayerWeights& l : W.layers)
    if (!l.qkv_w.defined() && l.qkv_p.defined())
      throw Error("BertModel::to(", device_name(dev), "): a CPU forward has packed the weights and dropped the "
                  "unpacked copies", Hint("move the model before its first CPU forward, or load it again"));
  const bool tied = W.mlm_decoder_w.defined() && W.mlm_decoder_w.raw() == W.word_emb.raw();
  ctx.make_current();  // new device memory is tagged with ctx's stream
  for (Tensor* t : weight_tensors(W))
    if (t->defined() && !(tied && t == &W.mlm_decoder_w)) *t = t->to(dev);
  if (tied) W.mlm_decoder_w = W.word_emb;  // still one tensor, as HF ties them
  for (BertLayerWeights& l : W.layers) l.qkv_p = l.attn_out_p = l.ffn_in_p = l.ffn_out_p = {};
  W.pooler_p = W.mlm_dense_p = {};
}

BertOutputs BertModel::forward(Context& ctx, const BertInput& input, const ForwardOptions& opt) const {
  const Device dev = ctx.device();
  if (device() != dev)
    throw Error("bert: the model's weights are on ", device_name(device()), " but the context runs on ",
                device_name(dev), Hint("call model.to(ctx) first"));
  // Packs the Linear weights on the first CPU forward (ctx's thread count sets the slices).
  if (dev == Device::cpu && opt.pack_weights && packed_gemm_enabled()) bert_pack_weights(ctx, *w_);
  const BertWeights& W = *w_;
  const BertConfig& cfg = W.config;
  const int64_t C = cfg.hidden_size, I = cfg.intermediate_size, NH = cfg.num_attention_heads;
  const float eps = float(cfg.layer_norm_eps);

  BatchLayout L;
  if (opt.embeddings) {
    UNMASK_CHECK(input.input_ids.defined(), "bert: input_ids are required");
    L = make_layout(cfg, input, true);
  } else {
    UNMASK_CHECK(opt.hidden_in && opt.hidden_in->defined(), "bert: embeddings=false needs hidden_in [N, C]");
    BertInput shape_only = input;
    L = make_layout(cfg, shape_only, false);
    UNMASK_CHECK(opt.hidden_in->shape() == Shape({L.N, C}) && opt.hidden_in->dtype() == DType::f32,
                 "bert: hidden_in must be f32 [", L.N, ", ", C, "], got ", opt.hidden_in->describe());
  }
  const int64_t N = L.N;
  if (dev != Device::cpu && opt.embeddings) {  // the ids the embedding gathers live beside the table
    L.ids = L.ids.to(dev);
    L.pos_ids = L.pos_ids.to(dev);
    L.type_ids = L.type_ids.to(dev);
  }

  // Activations, allocated once per call on ctx's device:
  Tensor x = Tensor::empty({N, C}, DType::f32, dev);       // layer input / output
  Tensor qkv = Tensor::empty({N, 3 * C}, DType::f32, dev); // fused q, k, v
  Tensor attn = Tensor::empty({N, C}, DType::f32, dev);    // attention context
  Tensor h = Tensor::empty({N, C}, DType::f32, dev);       // projection outputs
  Tensor f = Tensor::empty({N, I}, DType::f32, dev);       // feed-forward hidden

  if (opt.embeddings) {
    // x = LayerNorm(word[ids] + pos[t] + type[tt])
    ops::embedding(ctx, W.word_emb, L.ids, x);
    ops::embedding(ctx, W.pos_emb, L.pos_ids, x, /*accumulate=*/true);
    ops::embedding(ctx, W.type_emb, L.type_ids, x, /*accumulate=*/true);
    ops::layernorm(ctx, x, nullptr, W.emb_ln_g, W.emb_ln_b, eps, x);
  } else {
    x.copy_from(*opt.hidden_in);
  }

  ops::AttentionArgs aa;
  aa.num_heads = int(NH);
  aa.scale = float(1.0 / std::sqrt(double(C / NH)));
  if (L.packed) {
    aa.cu_seqlens = &L.cu_seqlens;
  } else {
    aa.padded_seq_len = L.T;
    aa.key_padding_mask = L.mask.defined() ? &L.mask : nullptr;
  }
  const Activation ffn_act = hidden_activation(cfg.hidden_act);
  for (const BertLayerWeights& lw : W.layers) {
    linear_into(ctx, x, lw.qkv_w, lw.qkv_p, lw.qkv_b, qkv);
    ops::attention(ctx, qkv.slice(1, 0, C), qkv.slice(1, C, 2 * C), qkv.slice(1, 2 * C, 3 * C), attn, aa);
    linear_into(ctx, attn, lw.attn_out_w, lw.attn_out_p, lw.attn_out_b, h);
    ops::layernorm(ctx, h, &x, lw.ln1_g, lw.ln1_b, eps, x);  // x = LN(h + x)
    linear_into(ctx, x, lw.ffn_in_w, lw.ffn_in_p, lw.ffn_in_b, f, ffn_act);
    linear_into(ctx, f, lw.ffn_out_w, lw.ffn_out_p, lw.ffn_out_b, h);
    ops::layernorm(ctx, h, &x, lw.ln2_g, lw.ln2_b, eps, x);  // x = LN(h2 + x1)
  }

  BertOutputs out;
  out.last_hidden_state = to_layout(x, L);
  const bool want_pooled = W.heads.pooler && (opt.pooler || (opt.nsp && W.heads.nsp) || (opt.classifier && W.heads.seqcls));
  Tensor pooled;
  if (want_pooled) {
    pooled = linear(ctx, gather_first_tokens(x, L), W.pooler_w, W.pooler_b, Activation::tanh, W.pooler_p);  // [B, C]
    if (opt.pooler) out.pooler_output = pooled;
  }
  if (opt.mlm && W.heads.mlm) {
    Tensor t = linear(ctx, x, W.mlm_dense_w, W.mlm_dense_b, ffn_act, W.mlm_dense_p);  // [N, C]
    ops::layernorm(ctx, t, nullptr, W.mlm_ln_g, W.mlm_ln_b, eps, t);
    out.mlm_logits = to_layout(linear(ctx, t, W.mlm_decoder_w, W.mlm_bias), L);  // [N, V]
  }
  if (opt.nsp && W.heads.nsp) out.nsp_logits = linear(ctx, pooled, W.nsp_w, W.nsp_b);  // [B, 2]
  if (opt.qa && W.heads.qa) {
    Tensor se = linear(ctx, x, W.qa_w, W.qa_b);  // [N, 2]
    if (dev != Device::cpu) se = se.to(Device::cpu);  // split on the host (2 floats per token)
    Tensor start = Tensor::empty({N}, DType::f32), end = Tensor::empty({N}, DType::f32);
    for (int64_t r = 0; r < N; ++r) {
      start.data<float>()[r] = se.data<float>()[2 * r];
      end.data<float>()[r] = se.data<float>()[2 * r + 1];
    }
    if (dev != Device::cpu) start = start.to(dev), end = end.to(dev);
    out.qa_start_logits = L.packed ? start : start.view({L.B, L.T});
    out.qa_end_logits = L.packed ? end : end.view({L.B, L.T});
  }
  if (opt.classifier && W.heads.seqcls) out.seqcls_logits = linear(ctx, pooled, W.cls_w, W.cls_b);
  if (opt.classifier && W.heads.tokcls) out.tokcls_logits = to_layout(linear(ctx, x, W.cls_w, W.cls_b), L);
  return out;
}

}  // namespace unmask
