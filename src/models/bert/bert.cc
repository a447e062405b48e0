// models/bert/bert.cc: the BERT forward pass (embeddings, post-LN encoder layers, heads).
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
//
// Why inference keeps this forward instead of running the training layers (nn/layers.h) without
// the backward: measured 2026-11-28 on 2 vCPUs of an Intel Xeon (AVX-512), BERT-base batch 8 x
// seq 128, fp32, three alternating rounds: this path 1,349-1,476 ms (121-133 GFLOP/s), the
// training layers' forward 1,618-1,856 ms (100-115 GFLOP/s; `unmask bench train --forward-only
// --dropout 0` against `unmask bench infer`), 15% more per FLOP here: pre-packed GEMM weights,
// the embedding LayerNorm fused, nothing saved for a backward; on a GPU also bf16/f16 weights
// and CUDA graphs. The two share the op front-ends and are held to the same outputs
// (BertTrain.LossEqualsInferenceForwardLoss in tests/test_bert_train.cc).
#include <array>
#include <cmath>
#include <compare>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/bert/checkpoint.h"
#include "models/bert/weights.h"
#include "ops/device_info.h"
#include "ops/ops.h"
#include "unmask/bert.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/cuda_state.h"
#include "cuda/graph.h"
#endif

namespace unmask {

namespace {

using ops::Activation;
using ops::Trans;

Activation hidden_activation(HiddenAct a) { return a == HiddenAct::gelu ? Activation::gelu : Activation::gelu_tanh; }

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
  Tensor first_rows;                     // i32 [B]: the row of each sequence's first token
};

// The ids as contiguous i32, each checked to lie in [0, limit) (`range` names that range in
// the error): the CUDA embedding kernels trust their ids, so they are checked here, once.
Tensor as_i32_rows(const Tensor& t, const char* what, int64_t limit, const char* range) {
  UNMASK_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, "bert: ", what, " must be i32 or i64, got ", t.describe());
  Tensor c = t.is_contiguous() ? t : t.contiguous();
  Tensor out = Tensor::empty({c.numel()}, DType::i32);
  int32_t* o = out.data<int32_t>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    int64_t v = read_index(c, i);
    if (v < 0 || v >= limit)
      throw Error("bert: ", what, "[", i, "] = ", v, " is outside ", range, "[0, ", limit, ")",
                  Hint("ids come from the model's vocab.txt and config.json"));
    o[i] = int32_t(v);
  }
  return out;
}

BatchLayout make_layout(const BertConfig& cfg, const BertInput& in, bool need_ids) {
  // The layout reads the ids, lengths and mask on the host (checks, position ids, the packed
  // rows); a device tensor's pointer would be dereferenced here.
  const std::pair<const Tensor*, const char*> inputs[] = {{&in.input_ids, "input_ids"},
                                                          {&in.token_type_ids, "token_type_ids"},
                                                          {&in.cu_seqlens, "cu_seqlens"},
                                                          {&in.attention_mask, "attention_mask"}};
  for (const auto& [t, name] : inputs)
    UNMASK_CHECK(!t->defined() || t->device() == Device::cpu, "bert: ", name, " must be a host tensor, got ",
                 t->describe(), Hint("pass the inputs on the CPU: the forward uploads them to the model's device"));
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
  L.first_rows = Tensor::empty({L.B}, DType::i32);
  for (int64_t b = 0; b < L.B; ++b)
    L.first_rows.data<int32_t>()[b] = L.packed ? L.cu_seqlens.data<int32_t>()[b] : int32_t(b * L.T);
  if (L.T > cfg.max_position_embeddings)
    throw Error("bert: a sequence has ", L.T, " tokens but the model has ", cfg.max_position_embeddings, " positions",
                Hint("truncate the input to max_position_embeddings tokens"));
  if (need_ids) {
    L.ids = as_i32_rows(ids, "input_ids", cfg.vocab_size, "the vocabulary ");
    if (in.token_type_ids.defined()) {
      UNMASK_CHECK(in.token_type_ids.shape() == ids.shape(), "bert: token_type_ids must have the shape of input_ids ",
                   ids.shape().str(), ", got ", in.token_type_ids.describe());
      L.type_ids = as_i32_rows(in.token_type_ids, "token_type_ids", cfg.type_vocab_size, "");
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
  Tensor y = Tensor::empty({x.size(0), wp.defined() ? wp.n_out() : w.size(0)}, x.dtype(), x.device());
  linear_into(ctx, x, w, wp, b, y, act);
  return y;
}

// Elements of a weight that may have been dropped after packing (bert_pack_weights).
int64_t numel_of(const Tensor& t, const ops::PackedWeight& p) {
  return t.defined() ? t.numel() : p.n_out() * p.k();
}

// What the encoder reads besides the weights, on the context's device: index vectors from the
// layout (CPU) or their uploads, and the encoder input when the embeddings are skipped.
struct EncoderInputs {
  Tensor ids, pos_ids, type_ids;  // i32 [N]
  Tensor cu_seqlens;              // i32 [B+1] (packed)
  Tensor mask;                    // [B, T] (padded, optional)
  Tensor first_rows;              // i32 [B] (pooler)
  Tensor hidden_in;               // [N, C] of the model's dtype (embeddings = false)
};

// Every tensor of an EncoderInputs, in order (uploads and graph buffers treat them alike).
std::array<Tensor*, 7> tensors_of(EncoderInputs& in) {
  return {&in.ids, &in.pos_ids, &in.type_ids, &in.cu_seqlens, &in.mask, &in.first_rows, &in.hidden_in};
}

EncoderInputs stage_inputs(const BatchLayout& L, const ForwardOptions& opt) {
  EncoderInputs in;
  if (opt.embeddings) {
    in.ids = L.ids;
    in.pos_ids = L.pos_ids;
    in.type_ids = L.type_ids;
  } else {
    in.hidden_in = *opt.hidden_in;
  }
  in.cu_seqlens = L.cu_seqlens;
  in.mask = L.mask;
  in.first_rows = L.first_rows;
  return in;
}

// The forward proper: only ops on ctx's device, no host work and no host<->device traffic, so
// a CUDA graph can capture it (bert_graph below). `L` gives the sizes only.
BertOutputs run_encoder(Context& ctx, const BertWeights& W, const BatchLayout& L, const EncoderInputs& in,
                        const ForwardOptions& opt) {
  const Device dev = ctx.device();
  const BertConfig& cfg = W.config;
  const DType dt = W.dtype;  // activations have the weights' dtype (CUDA: fp32 math inside)
  const int64_t C = cfg.hidden_size, I = cfg.intermediate_size, NH = cfg.num_attention_heads, N = L.N;
  const float eps = float(cfg.layer_norm_eps);

  // Activations, allocated once per call on ctx's device:
  Tensor x = Tensor::empty({N, C}, dt, dev);        // layer input / output
  Tensor qkv = Tensor::empty({N, 3 * C}, dt, dev);  // fused q, k, v
  Tensor attn = Tensor::empty({N, C}, dt, dev);     // attention context
  Tensor h = Tensor::empty({N, C}, dt, dev);        // projection outputs
  Tensor f = Tensor::empty({N, I}, dt, dev);        // feed-forward hidden

  if (opt.embeddings)  // x = LayerNorm(word[ids] + pos[t] + type[tt])
    ops::embedding_layernorm(ctx, in.ids, in.pos_ids, &in.type_ids, W.word_emb, W.pos_emb, W.type_emb, W.emb_ln_g,
                             W.emb_ln_b, eps, x);
  else
    ops::copy(ctx, in.hidden_in, x);

  ops::AttentionArgs aa;
  aa.num_heads = int(NH);
  aa.scale = float(1.0 / std::sqrt(double(C / NH)));
  if (L.packed) {
    aa.cu_seqlens = &in.cu_seqlens;
    aa.max_seqlen = L.T;  // the lengths may live on the device: no read-back
  } else {
    aa.padded_seq_len = L.T;
    aa.key_padding_mask = in.mask.defined() ? &in.mask : nullptr;
  }
  const Activation ffn_act = hidden_activation(cfg.hidden_act);
  // The residual is added by the LayerNorm (it reads h and x). The residual as the projection
  // GEMM's C operand, one tensor for the LayerNorm to read, was slower on an H200 (BENCHMARKS.md).
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
    Tensor first = Tensor::empty({L.B, C}, dt, dev);  // each sequence's [CLS] row
    ops::embedding(ctx, x, in.first_rows, first);
    pooled = linear(ctx, first, W.pooler_w, W.pooler_b, Activation::tanh, W.pooler_p);  // [B, C]
    if (opt.pooler) out.pooler_output = pooled;
  }
  if (opt.mlm && W.heads.mlm) {
    Tensor t = linear(ctx, x, W.mlm_dense_w, W.mlm_dense_b, ffn_act, W.mlm_dense_p);  // [N, C]
    ops::layernorm(ctx, t, nullptr, W.mlm_ln_g, W.mlm_ln_b, eps, t);
    out.mlm_logits = to_layout(linear(ctx, t, W.mlm_decoder_w, W.mlm_bias), L);  // [N, V]
  }
  if (opt.nsp && W.heads.nsp) out.nsp_logits = linear(ctx, pooled, W.nsp_w, W.nsp_b);  // [B, 2]
  if (opt.qa && W.heads.qa) {
    // One [N, 1] product per logit row of qa_outputs, so that each result is contiguous.
    Tensor start = linear(ctx, x, W.qa_w.slice(0, 0, 1), W.qa_b.slice(0, 0, 1));
    Tensor end = linear(ctx, x, W.qa_w.slice(0, 1, 2), W.qa_b.slice(0, 1, 2));
    out.qa_start_logits = L.packed ? start.view({N}) : start.view({L.B, L.T});
    out.qa_end_logits = L.packed ? end.view({N}) : end.view({L.B, L.T});
  }
  if (opt.classifier && W.heads.seqcls) out.seqcls_logits = linear(ctx, pooled, W.cls_w, W.cls_b);
  if (opt.classifier && W.heads.tokcls) out.tokcls_logits = to_layout(linear(ctx, x, W.cls_w, W.cls_b), L);
  return out;
}

#ifdef UNMASK_WITH_CUDA
// ---- CUDA graphs of the forward (ForwardOptions::cuda_graph) ------------------------------
//
// One graph per batch shape: what sizes the kernels' grids and the buffers. The lengths inside
// a packed batch (cu_seqlens, positions) are data, so packed batches with the same B, N and
// longest sequence share a graph. Each entry owns the device buffers its graph reads (inputs,
// written before every replay) and writes (outputs, copied out after it), so results never
// alias the next call's.

struct GraphKey {
  uint64_t context;  // CudaState::id: a graph holds its context's stream and cuBLASLt workspace
  bool tf32;         // CudaState settings the captured GEMMs were planned with
  DType autocast;
  HiddenAct act;     // baked into the captured epilogues (set_hidden_act also clears the cache)
  bool packed, has_mask, embeddings;
  DType mask_dtype;
  int64_t B, T, N;
  uint8_t heads;  // pooler | mlm << 1 | nsp << 2 | qa << 3 | classifier << 4
  auto operator<=>(const GraphKey&) const = default;
};

struct GraphEntry {
  EncoderInputs in;    // device buffers the graph reads
  BertOutputs out;     // device buffers the graph writes (in its private pool)
  std::unique_ptr<cuda::Graph> graph;  // destroyed first: releases the pool, then out is freed
};

}  // namespace

struct BertGraphCache {
  std::mutex mutex;
  std::map<GraphKey, std::unique_ptr<GraphEntry>> entries;
};

namespace {

// Writes host (or device) tensor src into the graph's buffer dst on ctx's stream.
void write_input(Context& ctx, const Tensor& src, Tensor& dst) {
  if (src.defined()) ops::copy(ctx, src.is_contiguous() ? src : src.contiguous(), dst);
}

// A fresh copy of a graph output (undefined stays undefined).
Tensor copy_out(Context& ctx, const Tensor& t) {
  if (!t.defined()) return t;
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  ops::copy(ctx, t, c);
  return c;
}

BertOutputs forward_graphed(Context& ctx, BertWeights& W, const BatchLayout& L, const ForwardOptions& opt) {
  const Device dev = ctx.device();
  EncoderInputs host = stage_inputs(L, opt);
  const cuda::CudaState& cs = cuda::cuda_state(ctx);
  GraphKey key{cs.id, cs.allow_tf32, cs.autocast, W.config.hidden_act,
               L.packed, host.mask.defined(), opt.embeddings,
               host.mask.defined() ? host.mask.dtype() : DType::u8, L.B, L.T, L.N,
               uint8_t(opt.pooler | opt.mlm << 1 | opt.nsp << 2 | opt.qa << 3 | opt.classifier << 4)};
  std::shared_ptr<BertGraphCache> keep;  // alive for this call even if another thread clears the cache
  {
    std::lock_guard<std::mutex> guard(W.graphs_mutex);
    if (!W.graphs) W.graphs = std::make_shared<BertGraphCache>();
    keep = W.graphs;
  }
  BertGraphCache& cache = *keep;
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.entries.find(key);
  GraphEntry* e = it == cache.entries.end() ? nullptr : it->second.get();
  const std::array<Tensor*, 7> src = tensors_of(host);
  if (!e) {
    auto fresh = std::make_unique<GraphEntry>();
    ctx.make_current();
    const std::array<Tensor*, 7> dst = tensors_of(fresh->in);
    for (size_t i = 0; i < src.size(); ++i)
      if (src[i]->defined()) *dst[i] = Tensor::empty(src[i]->shape(), src[i]->dtype(), dev);
    e = fresh.get();
    cache.entries.emplace(key, std::move(fresh));
  }
  const std::array<Tensor*, 7> buffers = tensors_of(e->in);
  for (size_t i = 0; i < src.size(); ++i) write_input(ctx, *src[i], *buffers[i]);
  if (!e->graph) {
    try {
      // The warm-up's outputs are dropped before the captured run allocates, so the capture
      // takes the same pool blocks as the warm-up (no cudaMalloc, no dead second copy).
      e->graph = cuda::Graph::capture(ctx, [&] {
        e->out = {};
        e->out = run_encoder(ctx, W, L, e->in, opt);
      });
    } catch (...) {
      cache.entries.erase(key);  // nothing half-built stays behind
      throw;
    }
  }
  e->graph->replay(ctx);
  BertOutputs out;
  const std::array<Tensor*, 8> got = e->out.tensors(), copies = out.tensors();
  for (size_t i = 0; i < got.size(); ++i) *copies[i] = copy_out(ctx, *got[i]);
  return out;
}
#endif  // UNMASK_WITH_CUDA

}  // namespace

BertModel::BertModel(std::unique_ptr<BertWeights> w) : w_(std::move(w)) {}
BertModel::BertModel(BertModel&&) noexcept = default;
BertModel& BertModel::operator=(BertModel&&) noexcept = default;
BertModel::~BertModel() = default;

BertModel BertModel::load(const std::string& path) {
  BertCheckpoint c = open_bert_checkpoint(path);
  return BertModel(bert_weights_from_files(c.config, std::move(c.files), c.origin));
}

BertModel BertModel::random(const BertConfig& config, const BertHeads& heads, uint64_t seed) {
  config.validate("random model");
  return BertModel(bert_weights_random(config, heads, seed));
}

const BertConfig& BertModel::config() const { return w_->config; }
const BertHeads& BertModel::heads() const { return w_->heads; }
void BertModel::set_hidden_act(HiddenAct act) {
  if (act != w_->config.hidden_act) clear_cuda_graphs();  // captured with the old activation
  w_->config.hidden_act = act;
}

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

DType BertModel::dtype() const { return w_->dtype; }

void BertModel::to(Context& ctx) { to(ctx, w_->dtype); }

void BertModel::to(Context& ctx, DType dtype) {
  const Device dev = ctx.device();
  BertWeights& W = *w_;
  UNMASK_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
               "BertModel::to: dtype must be f32, bf16 or f16, got ", dtype_name(dtype));
  if (dev == Device::cpu && dtype == DType::bf16) {
    // The CPU keeps f32 activations and weights until packing: bf16 is the packed GEMMs' math.
    ops::require_cpu_bf16_unit("BertModel::to(cpu, bf16)");
    for (const BertLayerWeights& l : W.layers)
      if (l.qkv_p.defined() && l.qkv_p.compute() != DType::bf16)
        throw Error("BertModel::to(cpu, bf16): a CPU forward has already packed the weights as f32",
                    Hint("choose bf16 before the first forward, or load the model again"));
    to(ctx, DType::f32);
    W.cpu_gemm = DType::bf16;
    return;
  }
  if (device() == dev && dtype == W.dtype) return;
  if (dtype != DType::f32 && dev != Device::cuda)
    throw Unsupported("BertModel::to(", device_name(dev), ", ", dtype_name(dtype), "): the CPU kernels are f32",
                      Hint("run f16 inference on cuda, bf16 on cuda or a CPU with a bf16 matrix unit"));
  if (dtype != W.dtype && W.dtype != DType::f32)
    throw Error("BertModel::to: the weights are already ", dtype_name(W.dtype), "; converting them to ",
                dtype_name(dtype), " would round twice", Hint("load the model again"));
  clear_cuda_graphs();  // graphs hold the old weights' addresses
  for (const BertLayerWeights& l : W.layers)
    if (!l.qkv_w.defined() && l.qkv_p.defined())
      throw Error("BertModel::to(", device_name(dev), "): a CPU forward has packed the weights and dropped the "
                  "unpacked copies", Hint("move the model before its first CPU forward, or load it again"));
  const bool tied = W.mlm_decoder_w.defined() && W.mlm_decoder_w.raw() == W.word_emb.raw();
  ctx.make_current();  // new device memory is tagged with ctx's stream
  for (Tensor* t : weight_tensors(W)) {
    if (!t->defined() || (tied && t == &W.mlm_decoder_w)) continue;
    if (dtype == t->dtype()) {
      *t = t->to(dev);
    } else {  // converted on the host (round to nearest even), then uploaded
      const Tensor host = t->device() == Device::cpu ? *t : t->to(Device::cpu);
      *t = host.cast(dtype).to(dev);
    }
  }
  W.dtype = dtype;
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
  if (dev == Device::cpu && opt.pack_weights) bert_pack_weights(ctx, *w_);
  const BertWeights& W = *w_;
  const BertConfig& cfg = W.config;

  BatchLayout L;
  if (opt.embeddings) {
    UNMASK_CHECK(input.input_ids.defined(), "bert: input_ids are required");
    L = make_layout(cfg, input, true);
  } else {
    UNMASK_CHECK(opt.hidden_in && opt.hidden_in->defined(), "bert: embeddings=false needs hidden_in [N, C]");
    L = make_layout(cfg, input, false);
    UNMASK_CHECK(opt.hidden_in->shape() == Shape({L.N, cfg.hidden_size}) && opt.hidden_in->dtype() == W.dtype,
                 "bert: hidden_in must be ", dtype_name(W.dtype), " [", L.N, ", ", cfg.hidden_size,
                 "] (the model's dtype), got ", opt.hidden_in->describe());
  }
#ifdef UNMASK_WITH_CUDA
  if (dev == Device::cuda && opt.cuda_graph) return forward_graphed(ctx, *w_, L, opt);
#endif
  EncoderInputs in = stage_inputs(L, opt);
  for (Tensor* t : tensors_of(in))  // what the kernels read lives beside the weights
    if (t->defined() && t->device() != dev) *t = t->to(dev);
  return run_encoder(ctx, W, L, in, opt);
}

size_t BertModel::num_cuda_graphs() const {
#ifdef UNMASK_WITH_CUDA
  std::shared_ptr<BertGraphCache> cache;
  {
    std::lock_guard<std::mutex> guard(w_->graphs_mutex);
    cache = w_->graphs;
  }
  if (!cache) return 0;
  std::lock_guard<std::mutex> lock(cache->mutex);
  return cache->entries.size();
#else
  return 0;
#endif
}

void BertModel::clear_cuda_graphs() {
  std::shared_ptr<BertGraphCache> old;  // destroyed outside the guard (graph teardown synchronises)
  std::lock_guard<std::mutex> guard(w_->graphs_mutex);
  old.swap(w_->graphs);
}

}  // namespace unmask
