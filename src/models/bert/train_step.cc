// models/bert/train_step.cc: BertTrainModel::pretrain_step and task_step (forward + backward).
//
// Devices: the batch arrives on the host; the packing, the masked / [CLS] row numbers and the
// labels are computed there, and the small index tensors are copied to the model's device (a
// CUDA model: BertTrainModel::to). cu_seqlens stays on the host (see PackedTokens). Every
// activation lives in the workspace on the model's device; the loss totals come back from
// ops::cross_entropy as host scalars. The fine-tuning heads copy their small outputs ([N, 2]
// QA logits, [B, L] / [N, L] class logits) to the host for TaskResult.
//
// A padded batch [B, T] is first PACKED: the real tokens (input_mask 1, which come first in
// every row) of all sequences back to back, N rows, cu_seqlens [B+1]. Every layer then works on
// the N real rows only. The heads gather the rows they need with ops::embedding (the activation
// matrix as the table, row numbers as ids) and scatter their gradients back with
// ops::embedding_backward:
//   MLM: only the masked rows (DLE's "dense sequence output"): transform dense + act + LN ->
//        decoder (the word embeddings, tied) + cls.predictions.bias -> cross-entropy
//   NSP: the [CLS] rows -> pooler (tanh) -> cls.seq_relationship -> cross-entropy
//
// Dropout (counter-based, ops::dropout): site s of micro-batch `micro` of optimizer step `step`
// draws philox_uniform(key, offset + i) with
//   key    = seed + step * 0x9E3779B97F4A7C15  (mod 2^64; injective in step for a given seed)
//   offset = micro * 2^40 + s * 2^32
//   s      = 0 embeddings; 1 + 3l attention probabilities of layer l, 2 + 3l attention output,
//            3 + 3l feed-forward output; 255 the classifier head (seqcls / tokcls)
// so sites never share counters (each has 2^32 counters: checked against its element count; the
// attention site uses NH * N * T of them), micro-batches of a step never share them (micro <
// 2^24), and steps use different Philox keys.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "models/bert/train_model_impl.h"

namespace unmask {

using ops::Activation;
using train::PackedTokens;
using train::PV;

namespace {

constexpr uint64_t kStepKeyStride = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kHeadSite = 255;
constexpr int64_t kMaxMicro = int64_t(1) << 24;

// ---- batch validation and packing ------------------------------------------------------------

// A contiguous i32/i64 tensor's elements as int64.
struct IntView {
  Tensor t;
  int64_t operator[](int64_t i) const {
    return t.dtype() == DType::i64 ? t.data<int64_t>()[i] : int64_t(t.data<int32_t>()[i]);
  }
};

IntView ints(const Tensor& t, const char* what) {
  UNMASK_CHECK(t.defined(), "train: batch tensor ", what, " is missing");
  UNMASK_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, "train: ", what, " must be i32 or i64, got ",
               t.describe());
  UNMASK_CHECK(t.device() == Device::cpu, "train: ", what, " must be on the CPU, got ", t.describe());
  return IntView{t.is_contiguous() ? t : t.contiguous()};
}

Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::i32);
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

// A host tensor on `device`: itself on the CPU, else a copy (the small index tensors of a step).
Tensor on_device(const Tensor& t, Device device) { return device == Device::cpu ? t : t.to(device); }
// An i32 index vector as a tensor on `device`.
Tensor i32_tensor(const std::vector<int32_t>& v, Device device) { return on_device(i32_tensor(v), device); }
// A tensor on the host: itself on the CPU, else a copy (small head outputs the host reads).
Tensor on_host(const Tensor& t) { return t.device() == Device::cpu ? t : t.to(Device::cpu); }

// Packs the real tokens of a right-padded [B, T] batch (host tensors). mask / types may be
// undefined (all real, all type 0). The ids land on `device`; cu_seqlens stays on the host.
PackedTokens pack_tokens(const BertConfig& cfg, const Tensor& ids_t, const Tensor* types_t, const Tensor* mask_t,
                         std::vector<int64_t>& lens, Device device) {
  UNMASK_CHECK(ids_t.defined() && ids_t.ndim() == 2 && ids_t.size(0) >= 1 && ids_t.size(1) >= 1,
               "train: input_ids must be [B, T] with B, T >= 1, got ",
               ids_t.defined() ? ids_t.describe() : std::string("undefined"));
  const int64_t B = ids_t.size(0), T = ids_t.size(1);
  IntView ids = ints(ids_t, "input_ids");
  IntView types, mask;
  if (types_t && types_t->defined()) {
    UNMASK_CHECK(types_t->shape() == ids_t.shape(), "train: segment / token type ids must be ", ids_t.shape().str(),
                 " like input_ids, got ", types_t->describe());
    types = ints(*types_t, "segment_ids");
  }
  if (mask_t && mask_t->defined()) {
    UNMASK_CHECK(mask_t->shape() == ids_t.shape(), "train: input / attention mask must be ", ids_t.shape().str(),
                 " like input_ids, got ", mask_t->describe());
    mask = ints(*mask_t, "input_mask");
  }
  lens.assign(size_t(B), T);
  std::vector<int32_t> cu(size_t(B) + 1, 0), id, ty, pos;
  for (int64_t b = 0; b < B; ++b) {
    if (mask.t.defined()) {
      int64_t len = 0;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t m = mask[b * T + t];
        if (m != 0 && m != 1) throw Error("train: input_mask[", b, ", ", t, "] = ", m, "; expected 0 or 1");
        if (m == 1 && len != t)
          throw Error("train: row ", b, " of input_mask is not right-padded (a real token at position ", t,
                      " after padding at ", len, ")",
                      Hint("real tokens must come first in every row (1...1 0...0), as in DLE's shards and HF's "
                           "right padding"));
        if (m == 1) ++len;
      }
      lens[size_t(b)] = len;
    }
    const int64_t len = lens[size_t(b)];
    if (len < 1) throw Error("train: row ", b, " of the batch has no real token", Hint("every sequence starts with [CLS]"));
    if (len > cfg.max_position_embeddings)
      throw Error("train: row ", b, " has ", len, " tokens but the model has ", cfg.max_position_embeddings, " positions",
                  Hint("truncate the sequences to max_position_embeddings"));
    for (int64_t t = 0; t < len; ++t) {
      const int64_t v = ids[b * T + t];
      if (v < 0 || v >= cfg.vocab_size)
        throw Error("train: input_ids[", b, ", ", t, "] = ", v, " is outside the vocabulary [0, ", cfg.vocab_size, ")");
      const int64_t y = types.t.defined() ? types[b * T + t] : 0;
      if (y < 0 || y >= cfg.type_vocab_size)
        throw Error("train: segment id [", b, ", ", t, "] = ", y, " is outside [0, ", cfg.type_vocab_size, ")");
      id.push_back(int32_t(v));
      ty.push_back(int32_t(y));
      pos.push_back(int32_t(t));
    }
    cu[size_t(b) + 1] = cu[size_t(b)] + int32_t(len);
  }
  PackedTokens tok;
  tok.B = B;
  tok.N = cu.back();
  tok.T = *std::max_element(lens.begin(), lens.end());
  tok.host_ids = i32_tensor(id);
  tok.ids = on_device(tok.host_ids, device);
  tok.type_ids = i32_tensor(ty, device);
  tok.pos_ids = i32_tensor(pos, device);
  tok.cu_seqlens = i32_tensor(cu);
  return tok;
}

// ---- dropout plan -----------------------------------------------------------------------------

struct DropoutPlan {
  uint64_t key = 0, micro = 0;
  float hidden = 0, attention = 0;

  DropoutPlan(const TrainStepOptions& o) {
    UNMASK_CHECK(o.hidden_dropout >= 0.0f && o.hidden_dropout < 1.0f && o.attention_dropout >= 0.0f &&
                     o.attention_dropout < 1.0f,
                 "train: dropout probabilities must be in [0, 1), got hidden ", o.hidden_dropout, ", attention ",
                 o.attention_dropout);
    UNMASK_CHECK(o.micro >= 0 && o.micro < kMaxMicro && o.step >= 0, "train: step ", o.step, " / micro ", o.micro,
                 " out of range (micro must be in [0, 2^24))");
    key = o.seed + uint64_t(o.step) * kStepKeyStride;
    micro = uint64_t(o.micro);
    hidden = o.hidden_dropout;
    attention = o.attention_dropout;
  }
  train::DropoutSite site(float p, uint64_t index, int64_t elements) const {
    train::DropoutSite s;
    if (p <= 0.0f) return s;
    UNMASK_CHECK(uint64_t(elements) < (uint64_t(1) << 32), "train: dropout site ", index, " has ", elements,
                 " elements, more than its 2^32 counters", Hint("use smaller micro-batches"));
    s.p = p;
    s.seed = key;
    s.offset = (micro << 40) | (index << 32);
    return s;
  }
};

// ---- the encoder over a packed batch --------------------------------------------------------

struct Encoder {
  BertTrainModel::Impl& I;
  const PackedTokens& tok;
  const DropoutPlan& plan;
  train::EncoderShape s;
  ops::AttentionArgs aa;

  bool reuse_weight_copies = false;  // TrainStepOptions::reuse_weight_copies

  Encoder(BertTrainModel::Impl& impl, const PackedTokens& t, const DropoutPlan& p, const TrainStepOptions& o)
      : I(impl), tok(t), plan(p), reuse_weight_copies(o.reuse_weight_copies) {
    const DType activations = o.activations;
    UNMASK_CHECK(activations == DType::f32 || activations == DType::bf16,
                 "train: activations must be f32 or bf16, got ", dtype_name(activations));
    s.activations = activations;
    const BertConfig& c = I.config;
    s.C = c.hidden_size;
    s.I = c.intermediate_size;
    s.NH = c.num_attention_heads;
    s.eps = float(c.layer_norm_eps);
    s.act = c.hidden_act == HiddenAct::gelu ? Activation::gelu : Activation::gelu_tanh;
    aa.num_heads = int(s.NH);
    aa.scale = float(1.0 / std::sqrt(double(s.C / s.NH)));
    aa.cu_seqlens = &tok.cu_seqlens;
  }

  train::DropoutSite embedding_site() const { return plan.site(plan.hidden, 0, tok.N * s.C); }
  train::LayerDropout layer_sites(size_t l) const {
    train::LayerDropout d;
    d.attn_probs = plan.site(plan.attention, 1 + 3 * l, s.NH * tok.N * tok.T);
    d.attn_out = plan.site(plan.hidden, 2 + 3 * l, tok.N * s.C);
    d.ffn_out = plan.site(plan.hidden, 3 + 3 * l, tok.N * s.C);
    return d;
  }

  bool low_precision() const { return s.activations != DType::f32; }

  // Runs the embeddings and every layer; returns the last hidden state [N, C] (f32: the heads
  // run in f32 whatever the layers' activation dtype).
  Tensor forward(Context& ctx) {
    const int64_t N = tok.N, C = s.C;
    const DType adt = s.activations;
    if (low_precision()) {  // the layers' bf16 weights, from this step's fp32 master weights
      std::vector<train::PV*> pvs;
      for (train::EncoderLayerParams& p : I.layers)
        for (train::PV* pv : {&p.qkv_w, &p.qkv_b, &p.attn_out_w, &p.attn_out_b, &p.ffn_in_w, &p.ffn_in_b,
                              &p.ffn_out_w, &p.ffn_out_b})
          pvs.push_back(pv);
      // Micro-batches 2..N of a step may keep the copies rounded for the step's first: same step
      // key, copies of this dtype and device present. Anything else rounds them again.
      bool reuse = reuse_weight_copies && plan.micro > 0 && I.weight_copies_made && I.weight_copies_key == plan.key;
      for (const train::PV* pv : pvs)
        reuse = reuse && pv->half.defined() && pv->half.dtype() == adt && pv->half.device() == pv->value.device() &&
                pv->half.shape() == pv->value.shape();
      if (!reuse) {
        I.weight_copies_made = false;  // until the rounding below has been queued
        train::refresh_halves(ctx, pvs, adt);
        I.weight_copies_key = plan.key;
        I.weight_copies_made = true;
      }
    }
    train::EmbeddingSaved& es = I.emb_saved;
    es.e = I.take({N, C});
    es.mean = I.take({N});
    es.rstd = I.take({N});
    es.out = I.take({N, C});
    train::embedding_forward(ctx, I.emb, tok, s, embedding_site(), es);
    if (low_precision()) {  // the first layer's input, rounded once
      emb_out = I.take({N, C}, adt);
      ops::copy(ctx, es.out, emb_out);
    }
    const Tensor* x = low_precision() ? &emb_out : &es.out;
    for (size_t l = 0; l < I.layers.size(); ++l) {
      train::LayerSaved& sv = I.saved[l];
      sv.qkv = I.take({N, 3 * C}, adt);
      sv.ctx = I.take({N, C}, adt);
      sv.lse = I.take({s.NH, N});
      sv.h = I.take({N, C}, adt);
      sv.x1 = I.take({N, C}, adt);
      sv.mean1 = I.take({N});
      sv.rstd1 = I.take({N});
      sv.fp = I.take({N, s.I}, adt);
      sv.f = I.take({N, s.I}, adt);
      sv.h2 = I.take({N, C}, adt);
      sv.out = I.take({N, C}, adt);
      sv.mean2 = I.take({N});
      sv.rstd2 = I.take({N});
      train::layer_forward(ctx, I.layers[l], *x, aa, s, layer_sites(l), sv);
      x = &sv.out;
    }
    if (!low_precision()) return *x;
    Tensor last = I.take({N, C});
    ops::copy(ctx, *x, last);
    return last;
  }

  // g: gradient of the last hidden state [N, C], f32 (clobbered).
  void backward(Context& ctx, Tensor& g) {
    const int64_t N = tok.N, C = s.C;
    const DType adt = s.activations;
    train::LayerScratch& sc = I.scratch;
    sc.t1 = I.take({N, C}, adt);
    sc.t2 = I.take({N, C}, adt);
    sc.df = I.take({N, s.I}, adt);
    sc.dqkv = I.take({N, 3 * C}, adt);
    Tensor gl = g;  // the layers' gradient, in their dtype
    if (low_precision()) {
      gl = I.take({N, C}, adt);
      ops::copy(ctx, g, gl);
    }
    for (size_t l = I.layers.size(); l-- > 0;) {
      const Tensor& x = l > 0 ? I.saved[l - 1].out : low_precision() ? emb_out : I.emb_saved.out;
      train::layer_backward(ctx, I.layers[l], x, I.saved[l], aa, s, layer_sites(l), gl, sc);
      if (ready) ready(I.layer_first[l], I.layer_first[l + 1]);
    }
    if (low_precision()) ops::copy(ctx, gl, g);
    train::embedding_backward(ctx, I.emb, tok, s, embedding_site(), I.emb_saved, g, I.config.pad_token_id);
    if (ready) ready(0, I.layer_first[0]);
  }
  Tensor emb_out;  // bf16 activations: the embeddings' output rounded to bf16 (the first layer's x)
  std::function<void(int64_t, int64_t)> ready;  // TrainStepOptions::grads_ready
};

// Gathers rows of x [N, C] into out [R, C] (rows: i32 [R]).
void gather_rows(Context& ctx, const Tensor& x, const Tensor& rows, Tensor& out) { ops::embedding(ctx, x, rows, out); }

// The pooler: pre = cls W^T + b, pooled = tanh(pre). [B, C] each.
void pooler_forward(Context& ctx, BertTrainModel::Impl& I, const Tensor& cls, Tensor& pre, Tensor& pooled) {
  train::linear_forward(ctx, cls, I.pooler_w, I.pooler_b, pre);
  ops::activation(ctx, pre, pooled, Activation::tanh);
}

// dpooled (clobbered) -> pooler gradients, and dcls [B, C].
void pooler_backward(Context& ctx, BertTrainModel::Impl& I, const Tensor& cls, const Tensor& pre, Tensor& dpooled,
                     Tensor& dcls) {
  ops::activation_backward(ctx, pre, dpooled, dpooled, Activation::tanh);
  train::linear_backward(ctx, cls, I.pooler_w, I.pooler_b, dpooled, &dcls);
}

// The context must run where the parameters live (BertTrainModel::to moves them).
Device check_step_device(const char* op, const Context& ctx, const BertTrainModel::Impl& I) {
  const Device model = I.emb.word.value.device();
  UNMASK_CHECK(ctx.device() == model, op, ": the context runs on ", device_name(ctx.device()),
               " but the model's parameters are on ", device_name(model),
               Hint("call model.to(ctx) with a context on the device to train on"));
  ctx.make_current();  // CUDA: the step's new device memory is tagged with ctx's stream
  return model;
}

}  // namespace

// ---- pretraining ------------------------------------------------------------------------------

PretrainStats BertTrainModel::pretrain_step(Context& ctx, const PretrainBatch& batch, const TrainStepOptions& options) {
  Impl& I = *impl_;
  const BertConfig& cfg = I.config;
  UNMASK_CHECK(I.heads.mlm, "pretrain_step: the model has no MLM head",
               Hint("load it with BertHeads{.pooler = true, .mlm = true, .nsp = true}"));
  const Device dev = check_step_device("pretrain_step", ctx, I);
  I.next_slot = 0;
  std::vector<int64_t> lens;
  const PackedTokens tok = pack_tokens(cfg, batch.input_ids, &batch.segment_ids, &batch.input_mask, lens, dev);
  const int64_t B = tok.B, C = cfg.hidden_size, V = cfg.vocab_size;

  // Masked positions (DLE: the number of predictions is the index of the first position 0).
  std::vector<int32_t> mlm_rows, mlm_targets;
  {
    const Tensor& pt = batch.masked_lm_positions;
    UNMASK_CHECK(pt.defined() && pt.ndim() == 2 && pt.size(0) == B, "pretrain_step: masked_lm_positions must be [",
                 B, ", P], got ", pt.defined() ? pt.describe() : std::string("undefined"));
    UNMASK_CHECK(batch.masked_lm_ids.defined() && batch.masked_lm_ids.shape() == pt.shape(),
                 "pretrain_step: masked_lm_ids must be ", pt.shape().str(), " like masked_lm_positions, got ",
                 batch.masked_lm_ids.defined() ? batch.masked_lm_ids.describe() : std::string("undefined"));
    IntView pos = ints(pt, "masked_lm_positions"), lbl = ints(batch.masked_lm_ids, "masked_lm_ids");
    const int64_t P = pt.size(1);
    const int32_t* cu = tok.cu_seqlens.data<int32_t>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < P; ++j) {
        const int64_t p = pos[b * P + j];
        if (p == 0) break;
        if (p < 0 || p >= lens[size_t(b)])
          throw Error("pretrain_step: masked_lm_positions[", b, ", ", j, "] = ", p, " is outside the ", lens[size_t(b)],
                      " real tokens of the row");
        const int64_t y = lbl[b * P + j];
        if (y < 0 || y >= V)
          throw Error("pretrain_step: masked_lm_ids[", b, ", ", j, "] = ", y, " is outside the vocabulary [0, ", V, ")");
        mlm_rows.push_back(cu[b] + int32_t(p));
        mlm_targets.push_back(int32_t(y));
      }
  }
  std::vector<int32_t> cls_rows(tok.cu_seqlens.data<int32_t>(), tok.cu_seqlens.data<int32_t>() + B), nsp_targets;
  int64_t nsp_count = 0;
  const bool nsp = I.heads.nsp;
  if (nsp) {
    UNMASK_CHECK(batch.next_sentence_labels.defined() && batch.next_sentence_labels.numel() == B,
                 "pretrain_step: next_sentence_labels must have ", B, " elements, got ",
                 batch.next_sentence_labels.defined() ? batch.next_sentence_labels.describe() : std::string("undefined"));
    IntView ns = ints(batch.next_sentence_labels, "next_sentence_labels");
    for (int64_t b = 0; b < B; ++b) {
      const int64_t y = ns[b];
      if (y > 1) throw Error("pretrain_step: next_sentence_labels[", b, "] = ", y, "; expected 0, 1 (or negative: ignored)");
      nsp_targets.push_back(y < 0 ? -1 : int32_t(y));
      nsp_count += y >= 0;
    }
  }

  const DropoutPlan plan(options);
  Encoder enc(I, tok, plan, options);
  Tensor x = enc.forward(ctx);  // [N, C]
  const Activation act = enc.s.act;
  const float eps = enc.s.eps;
  const bool bwd = options.backward;
  PretrainStats st;
  st.sequences = B;
  st.tokens = tok.N;

  // MLM head on the masked rows: xm -> tp = xm Wd^T + bd -> t = act(tp) -> tn = LN(t) -> logits.
  const int64_t M = int64_t(mlm_rows.size());
  Tensor rows, targets, xm, tp, t, tn, mean, rstd, logits;
  double mlm_mean = 0;
  if (M > 0) {
    rows = i32_tensor(mlm_rows, dev);
    targets = i32_tensor(mlm_targets, dev);
    xm = I.take({M, C});
    tp = I.take({M, C});
    t = I.take({M, C});
    tn = I.take({M, C});
    mean = I.take({M});
    rstd = I.take({M});
    logits = I.take({M, V});
    gather_rows(ctx, x, rows, xm);
    train::linear_forward(ctx, xm, I.mlm_dense_w, I.mlm_dense_b, tp);
    ops::activation(ctx, tp, t, act);
    ops::layernorm(ctx, t, nullptr, I.mlm_ln_g.value, I.mlm_ln_b.value, eps, tn, &mean, &rstd);
    train::linear_forward(ctx, tn, I.emb.word, I.mlm_bias, logits);  // decoder tied to the word embeddings
    ops::CrossEntropyStats ce =
        ops::cross_entropy(ctx, logits, targets, nullptr, bwd ? &logits : nullptr,
                           options.loss_scale / float(options.mlm_normalizer > 0 ? options.mlm_normalizer : M));
    st.mlm_loss_sum = ce.loss_sum;
    st.mlm_count = ce.count;
    st.mlm_correct = ce.correct;
    mlm_mean = ce.loss_sum / double(M);
  }
  // NSP head on the [CLS] rows: cls -> pooler (tanh) -> logits [B, 2].
  Tensor crows, cls, pre, pooled, nlogits, ntargets;
  double nsp_mean = 0;
  if (nsp) {
    crows = i32_tensor(cls_rows, dev);
    ntargets = i32_tensor(nsp_targets, dev);
    cls = I.take({B, C});
    pre = I.take({B, C});
    pooled = I.take({B, C});
    nlogits = I.take({B, 2});
    gather_rows(ctx, x, crows, cls);
    pooler_forward(ctx, I, cls, pre, pooled);
    train::linear_forward(ctx, pooled, I.nsp_w, I.nsp_b, nlogits);
    const int64_t nsp_norm = options.nsp_normalizer > 0 ? options.nsp_normalizer : nsp_count;
    const float scale = nsp_count > 0 ? options.loss_scale / float(nsp_norm) : 0.0f;
    ops::CrossEntropyStats ce = ops::cross_entropy(ctx, nlogits, ntargets, nullptr, bwd ? &nlogits : nullptr, scale);
    st.nsp_loss_sum = ce.loss_sum;
    st.nsp_count = ce.count;
    st.nsp_correct = ce.correct;
    nsp_mean = nsp_count > 0 ? ce.loss_sum / double(nsp_count) : 0.0;
  }
  st.loss = mlm_mean + nsp_mean;
  if (!bwd) return st;

  // Backward: the heads scatter their row gradients into g [N, C], then the encoder.
  Tensor g = I.take({tok.N, C});
  ops::zero_many(ctx, {&g});
  if (M > 0) {
    Tensor dtn = I.take({M, C}), dxm = I.take({M, C});
    train::linear_backward(ctx, tn, I.emb.word, I.mlm_bias, logits, &dtn);  // word grad += dlogits^T tn
    ops::layernorm_backward(ctx, t, nullptr, I.mlm_ln_g.value, mean, rstd, dtn, dtn, I.mlm_ln_g.grad, I.mlm_ln_b.grad);
    ops::activation_backward(ctx, tp, dtn, dtn, act);
    train::linear_backward(ctx, xm, I.mlm_dense_w, I.mlm_dense_b, dtn, &dxm);
    ops::embedding_backward(ctx, rows, dxm, g);
  }
  if (nsp) {
    Tensor dpooled = I.take({B, C}), dcls = I.take({B, C});
    train::linear_backward(ctx, pooled, I.nsp_w, I.nsp_b, nlogits, &dpooled);
    pooler_backward(ctx, I, cls, pre, dpooled, dcls);
    ops::embedding_backward(ctx, crows, dcls, g);
  }
  if (options.grads_ready) options.grads_ready(I.layer_first.back(), int64_t(I.params.size()));  // the heads
  enc.ready = options.grads_ready;
  enc.backward(ctx, g);
  return st;
}

// ---- fine-tuning heads --------------------------------------------------------------------------

namespace {

// Labels as i32 with negative = ignored (-1); `limit`: valid labels are < limit.
std::vector<int32_t> read_labels(const IntView& v, int64_t n, int64_t limit, const char* what) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y = v[i];
    if (y >= limit) throw Error("task_step: ", what, "[", i, "] = ", y, " is not below ", limit, Hint("negative labels are ignored"));
    out[size_t(i)] = y < 0 ? -1 : int32_t(y);
  }
  return out;
}

// Index of the first maximum of row r of a [R, W] matrix, over its first `n` columns.
int64_t argmax_row(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (row[j] > row[best]) best = j;
  return best;
}

}  // namespace

TaskResult BertTrainModel::task_step(Context& ctx, const TaskBatch& batch, Task task, const TrainStepOptions& options) {
  Impl& I = *impl_;
  const BertConfig& cfg = I.config;
  const char* names[] = {"qa", "seqcls", "tokcls"};
  const bool has_head = task == Task::qa ? I.heads.qa : task == Task::seqcls ? I.heads.seqcls : I.heads.tokcls;
  UNMASK_CHECK(has_head, "task_step: the model has no ", names[int(task)], " head",
               Hint("load the model with that head in BertHeads (it is created when the checkpoint lacks it)"));
  const Device dev = check_step_device("task_step", ctx, I);
  I.next_slot = 0;
  std::vector<int64_t> lens;
  const PackedTokens tok = pack_tokens(cfg, batch.input_ids, &batch.token_type_ids, &batch.attention_mask, lens, dev);
  const int64_t B = tok.B, T = batch.input_ids.size(1), N = tok.N, C = cfg.hidden_size, L = cfg.num_labels;
  const int32_t* cu = tok.cu_seqlens.data<int32_t>();
  const DropoutPlan plan(options);
  Encoder enc(I, tok, plan, options);
  Tensor x = enc.forward(ctx);
  const bool bwd = options.backward;
  TaskResult res;
  Tensor g;  // gradient of x, filled by the head's backward

  if (task == Task::qa) {
    Tensor se = I.take({N, 2});
    train::linear_forward(ctx, x, I.qa_w, I.qa_b, se);
    res.logits = Tensor::zeros({B, T, 2}, DType::f32);  // padding positions stay 0
    float* out = res.logits.data<float>();
    const Tensor se_host = on_host(se);  // [N, 2]: the span logits are arranged on the host
    const float* s = se_host.data<float>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = cu[b]; r < cu[b + 1]; ++r)
        for (int k = 0; k < 2; ++k) out[(b * T + (r - cu[b])) * 2 + k] = s[r * 2 + k];
    if (!batch.start_positions.defined()) {
      UNMASK_CHECK(!bwd, "task_step: qa training needs start_positions and end_positions");
      return res;
    }
    // Start and end: a cross-entropy over each sequence's real tokens (padding columns hold
    // -1e30: probability 0, gradient 0). Positions outside the sequence are ignored (HF clamps
    // them to an ignored index).
    UNMASK_CHECK(batch.start_positions.numel() == B && batch.end_positions.defined() && batch.end_positions.numel() == B,
                 "task_step: start_positions and end_positions must have ", B, " elements");
    const int64_t Tm = tok.T;
    // Host [B, Tm] buffers (workspace views on the CPU), uploaded for the loss on a device.
    auto host_take = [&](const Shape& shape) {
      return dev == Device::cpu ? I.take(shape) : Tensor::empty(shape, DType::f32);
    };
    Tensor span[2] = {host_take({B, Tm}), host_take({B, Tm})};
    std::vector<int32_t> target[2];
    int64_t counts[2] = {0, 0};
    IntView pos[2] = {ints(batch.start_positions, "start_positions"), ints(batch.end_positions, "end_positions")};
    std::vector<int64_t> hit(size_t(B), 0);
    for (int k = 0; k < 2; ++k) {
      float* m = span[k].data<float>();
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t j = 0; j < Tm; ++j) m[b * Tm + j] = j < lens[size_t(b)] ? s[(cu[b] + j) * 2 + k] : -1e30f;
        const int64_t p = pos[k][b];
        const bool valid = p >= 0 && p < lens[size_t(b)];
        target[k].push_back(valid ? int32_t(p) : -1);
        counts[k] += valid;
        if (valid && argmax_row(m + b * Tm, lens[size_t(b)]) == p) ++hit[size_t(b)];
      }
    }
    double loss = 0;
    Tensor span_dev[2];
    for (int k = 0; k < 2; ++k) {
      const int64_t d = options.task_normalizer[k] > 0 ? options.task_normalizer[k] : counts[k];
      const float scale = d > 0 ? options.loss_scale / float(2 * d) : 0.0f;
      span_dev[k] = on_device(span[k], dev);
      ops::CrossEntropyStats ce = ops::cross_entropy(ctx, span_dev[k], i32_tensor(target[k], dev), nullptr,
                                                     bwd ? &span_dev[k] : nullptr, scale);
      if (d > 0) loss += 0.5 * ce.loss_sum / double(d);
    }
    res.loss = loss;
    res.count = counts[0];
    res.correct = std::count(hit.begin(), hit.end(), 2);
    if (!bwd) return res;
    Tensor dse = host_take({N, 2});
    float* d = dse.data<float>();
    for (int k = 0; k < 2; ++k) {
      const Tensor dspan = on_host(span_dev[k]);  // the loss gradient, [B, Tm]
      const float* m = dspan.data<float>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < lens[size_t(b)]; ++j) d[(cu[b] + j) * 2 + k] = m[b * Tm + j];
    }
    dse = on_device(dse, dev);
    g = I.take({N, C});
    train::linear_backward(ctx, x, I.qa_w, I.qa_b, dse, &g);
  } else if (task == Task::seqcls) {
    UNMASK_CHECK(L >= 2, "task_step: seqcls with num_labels = ", L, " (regression) is not supported",
                 Hint("use num_labels >= 2 classes"));
    std::vector<int32_t> cls_rows(cu, cu + B);
    Tensor crows = i32_tensor(cls_rows, dev);
    Tensor cls = I.take({B, C}), pre = I.take({B, C}), pooled = I.take({B, C}), logits = I.take({B, L});
    gather_rows(ctx, x, crows, cls);
    pooler_forward(ctx, I, cls, pre, pooled);
    const train::DropoutSite site = plan.site(plan.hidden, kHeadSite, B * C);
    Tensor pooled_d = pooled;  // HF: classifier(dropout(pooled))
    if (site.p > 0.0f) {
      pooled_d = I.take({B, C});
      ops::dropout(ctx, pooled, pooled_d, site.p, site.seed, site.offset);
    }
    train::linear_forward(ctx, pooled_d, I.cls_w, I.cls_b, logits);
    res.logits = dev == Device::cpu ? logits.contiguous() : logits.to(Device::cpu);  // before the loss overwrites it
    if (!batch.labels.defined()) {
      UNMASK_CHECK(!bwd, "task_step: seqcls training needs labels");
      return res;
    }
    UNMASK_CHECK(batch.labels.numel() == B, "task_step: seqcls labels must have ", B, " elements, got ",
                 batch.labels.describe());
    std::vector<int32_t> y = read_labels(ints(batch.labels, "labels"), B, L, "labels");
    const int64_t own = std::count_if(y.begin(), y.end(), [](int32_t v) { return v >= 0; });
    const int64_t count = options.task_normalizer[0] > 0 ? options.task_normalizer[0] : own;
    const float scale = count > 0 ? options.loss_scale / float(count) : 0.0f;
    ops::CrossEntropyStats ce = ops::cross_entropy(ctx, logits, i32_tensor(y, dev), nullptr, bwd ? &logits : nullptr, scale);
    res.loss = count > 0 ? ce.loss_sum / double(count) : 0.0;
    res.count = ce.count;
    res.correct = ce.correct;
    if (!bwd) return res;
    Tensor dpooled = I.take({B, C}), dcls = I.take({B, C});
    train::linear_backward(ctx, pooled_d, I.cls_w, I.cls_b, logits, &dpooled);
    if (site.p > 0.0f) ops::dropout_backward(ctx, dpooled, dpooled, site.p, site.seed, site.offset);
    pooler_backward(ctx, I, cls, pre, dpooled, dcls);
    g = I.take({N, C});
    ops::zero_many(ctx, {&g});
    ops::embedding_backward(ctx, crows, dcls, g);
  } else {  // tokcls: classifier(dropout(x)) on every real token
    const train::DropoutSite site = plan.site(plan.hidden, kHeadSite, N * C);
    Tensor xd = x;
    if (site.p > 0.0f) {
      xd = I.take({N, C});
      ops::dropout(ctx, x, xd, site.p, site.seed, site.offset);
    }
    Tensor logits = I.take({N, L});
    train::linear_forward(ctx, xd, I.cls_w, I.cls_b, logits);
    res.logits = Tensor::zeros({B, T, L}, DType::f32);  // padding positions stay 0
    const Tensor logits_host = on_host(logits);
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(res.logits.data<float>() + b * T * L, logits_host.data<float>() + int64_t(cu[b]) * L,
                  size_t(lens[size_t(b)] * L) * sizeof(float));
    if (!batch.labels.defined()) {
      UNMASK_CHECK(!bwd, "task_step: tokcls training needs labels");
      return res;
    }
    UNMASK_CHECK(batch.labels.shape() == batch.input_ids.shape(), "task_step: tokcls labels must be ",
                 batch.input_ids.shape().str(), ", got ", batch.labels.describe());
    IntView lv = ints(batch.labels, "labels");
    std::vector<int32_t> y;
    y.reserve(size_t(N));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < lens[size_t(b)]; ++j) {
        const int64_t v = lv[b * T + j];
        if (v >= L) throw Error("task_step: labels[", b, ", ", j, "] = ", v, " is not below ", L, Hint("negative labels are ignored"));
        y.push_back(v < 0 ? -1 : int32_t(v));
      }
    const int64_t own = std::count_if(y.begin(), y.end(), [](int32_t v) { return v >= 0; });
    const int64_t count = options.task_normalizer[0] > 0 ? options.task_normalizer[0] : own;
    const float scale = count > 0 ? options.loss_scale / float(count) : 0.0f;
    ops::CrossEntropyStats ce = ops::cross_entropy(ctx, logits, i32_tensor(y, dev), nullptr, bwd ? &logits : nullptr, scale);
    res.loss = count > 0 ? ce.loss_sum / double(count) : 0.0;
    res.count = ce.count;
    res.correct = ce.correct;
    if (!bwd) return res;
    g = I.take({N, C});
    train::linear_backward(ctx, xd, I.cls_w, I.cls_b, logits, &g);
    if (site.p > 0.0f) ops::dropout_backward(ctx, g, g, site.p, site.seed, site.offset);
  }
  enc.backward(ctx, g);
  return res;
}

TaskCounts task_counts(const TaskBatch& batch, Task task) {
  const Tensor& ids = batch.input_ids;
  UNMASK_CHECK(ids.defined() && ids.ndim() == 2, "task_counts: input_ids must be [B, T]");
  const int64_t B = ids.size(0), T = ids.size(1);
  // Each sequence's length as pack_tokens reads it: its attention mask's ones (all T without one).
  std::vector<int64_t> lens(size_t(B), T);
  if (batch.attention_mask.defined()) {
    const IntView m = ints(batch.attention_mask, "attention_mask");
    for (int64_t b = 0; b < B; ++b) {
      int64_t n = 0;
      for (int64_t j = 0; j < T; ++j) n += m[b * T + j] != 0;
      lens[size_t(b)] = n;
    }
  }
  TaskCounts c;
  if (task == Task::qa) {
    UNMASK_CHECK(batch.start_positions.defined() && batch.end_positions.defined(),
                 "task_counts: qa needs start_positions and end_positions");
    const IntView pos[2] = {ints(batch.start_positions, "start_positions"), ints(batch.end_positions, "end_positions")};
    for (int k = 0; k < 2; ++k)
      for (int64_t b = 0; b < B; ++b) c.counts[k] += pos[k][b] >= 0 && pos[k][b] < lens[size_t(b)];
    return c;
  }
  UNMASK_CHECK(batch.labels.defined(), "task_counts: the batch has no labels");
  const IntView y = ints(batch.labels, "labels");
  if (task == Task::seqcls) {
    for (int64_t b = 0; b < B; ++b) c.counts[0] += y[b] >= 0;
  } else {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < lens[size_t(b)]; ++j) c.counts[0] += y[b * T + j] >= 0;
  }
  return c;
}

PretrainCounts pretrain_counts(const PretrainBatch& batch) {
  PretrainCounts c;
  const Tensor& pos = batch.masked_lm_positions;
  UNMASK_CHECK(pos.defined() && pos.ndim() == 2 && pos.dtype() == DType::i32 && pos.is_contiguous(),
               "pretrain_counts: masked_lm_positions must be contiguous i32 [B, P], got ",
               pos.defined() ? pos.describe() : std::string("undefined"));
  const int32_t* p = pos.data<int32_t>();
  for (int64_t b = 0; b < pos.size(0); ++b)
    for (int64_t j = 0; j < pos.size(1) && p[b * pos.size(1) + j] != 0; ++j) ++c.masked;
  if (batch.next_sentence_labels.defined()) {
    UNMASK_CHECK(batch.next_sentence_labels.dtype() == DType::i32 && batch.next_sentence_labels.is_contiguous(),
                 "pretrain_counts: next_sentence_labels must be contiguous i32");
    const int32_t* y = batch.next_sentence_labels.data<int32_t>();
    for (int64_t b = 0; b < batch.next_sentence_labels.numel(); ++b) c.nsp += y[b] >= 0;
  }
  return c;
}

}  // namespace unmask
