// nn/layers.cc: forward/backward pairs of BERT's embeddings, encoder layers and
// linear heads (see the header for the saved activations).
#include "nn/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#ifdef UNMASK_WITH_CUDA
#include "cuda/copy.h"
#endif

namespace unmask::train {

using ops::Activation;
using ops::Trans;

PV filled_pv(const Shape& shape, const std::function<float()>& draw) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = draw();
  return make_pv(t);
}

PV make_pv(const Tensor& src) {
  UNMASK_CHECK(src.defined() && src.dtype() == DType::f32, "train: parameter source must be f32, got ",
               src.defined() ? src.describe() : std::string("undefined"));
  PV p;
  p.value = Tensor::empty(src.shape(), DType::f32);
  p.value.copy_from(src);
  p.grad = Tensor::zeros(src.shape(), DType::f32);
  return p;
}

PV pv_to(const PV& p, Device device) {
  if (!p.defined() || p.value.device() == device) return p;
  return PV{p.value.to(device), p.grad.to(device), Tensor()};  // the bf16 copy is refreshed before use
}

void pvs_to(Context& ctx, const std::vector<PV*>& pvs) {
  ctx.make_current();
  for (PV* p : pvs) *p = pv_to(*p, ctx.device());
}

void zero_tensor(Tensor& t) {
  UNMASK_CHECK(t.is_contiguous(), "train: zero_tensor needs a contiguous tensor, got ", t.describe());
  if (t.device() == Device::cpu) {
    std::memset(t.raw(), 0, t.nbytes());
    return;
  }
#ifdef UNMASK_WITH_CUDA
  cuda::memset_zero(t.raw(), t.nbytes());
#else
  throw Unsupported("train: zeroing a ", device_name(t.device()), " tensor needs the CUDA backend");
#endif
}

void zero_grads(Context& ctx, const std::vector<PV*>& pvs) {
  std::vector<Tensor*> grads;
  grads.reserve(pvs.size());
  for (PV* p : pvs) grads.push_back(&p->grad);
  ops::zero_many(ctx, grads);
}

void refresh_halves(Context& ctx, const std::vector<PV*>& pvs, DType dtype) {
  std::vector<ops::CopyItem> items;
  items.reserve(pvs.size());
  for (PV* p : pvs) {
    if (!p->half.defined() || p->half.dtype() != dtype || p->half.device() != p->value.device() ||
        p->half.shape() != p->value.shape())
      p->half = Tensor::empty(p->value.shape(), dtype, p->value.device());
    items.push_back({&p->value, &p->half});
  }
  ops::copy_many(ctx, items);
}

const Tensor& value_for(const PV& p, DType dtype) {
  if (dtype == DType::f32) return p.value;
  UNMASK_CHECK(p.half.defined() && p.half.dtype() == dtype && p.half.device() == p.value.device(),
               "train: the ", dtype_name(dtype), " copy of a parameter ", p.value.describe(),
               " is missing or stale (refresh_halves runs before the forward)");
  return p.half;
}

Tensor Workspace::get(int slot, const Shape& shape, DType dtype) {
  if (slot >= int(buffers_.size())) buffers_.resize(size_t(slot) + 1);
  Tensor& buf = buffers_[size_t(slot)];
  const int64_t n = shape.numel();
  if (!buf.defined() || buf.dtype() != dtype || buf.numel() < n) {
    buf = Tensor();  // free the old buffer first (device memory is the scarce kind)
    buf = Tensor::empty({std::max<int64_t>(n + n / 4, 1)}, dtype, device_);
  }
  return buf.slice(0, 0, n).view(shape);
}

void Workspace::set_device(Device device) {
  buffers_.clear();
  device_ = device;
}

int64_t Workspace::bytes() const {
  int64_t b = 0;
  for (const Tensor& t : buffers_)
    if (t.defined()) b += int64_t(t.nbytes());
  return b;
}

namespace {

// y = dropout(x) in place (no call at p = 0: the forward value is used as is).
void dropout_inplace(Context& ctx, Tensor& x, const DropoutSite& d) {
  if (d.p > 0.0f) ops::dropout(ctx, x, x, d.p, d.seed, d.offset);
}

// The gradient through a dropout site: `dst` = dy * mask / (1 - p), or dy itself at p = 0.
const Tensor& dropout_grad(Context& ctx, const Tensor& dy, Tensor& dst, const DropoutSite& d) {
  if (d.p <= 0.0f) return dy;
  ops::dropout_backward(ctx, dy, dst, d.p, d.seed, d.offset);
  return dst;
}

ops::AttentionTrainArgs attention_train_args(const DropoutSite& d) {
  ops::AttentionTrainArgs t;
  t.dropout_p = d.p;
  t.dropout_seed = d.seed;
  t.dropout_offset = d.offset;
  return t;
}

}  // namespace

// ---- linear -----------------------------------------------------------------------------------

void linear_forward(Context& ctx, const Tensor& x, const PV& w, const PV& b, Tensor& y, Activation act) {
  ops::GemmArgs args;
  // A bf16 y takes the bias in bf16 too: cuBLASLt's epilogue wants the bias in the output's dtype
  // (an f32 bias would cost an unfused pass over y).
  args.bias = b.defined() ? &value_for(b, y.dtype()) : nullptr;
  args.act = act;
  ops::gemm(ctx, x, Trans::no, value_for(w, x.dtype()), Trans::yes, y, args);
}

void linear_backward(Context& ctx, const Tensor& x, PV& w, PV& b, const Tensor& dy, Tensor* dx,
                     bool accumulate_dx) {
  ops::linear_param_grads(ctx, dy, x, w.grad, b.defined() ? &b.grad : nullptr);
  if (dx) linear_input_grad(ctx, w, dy, *dx, accumulate_dx);
}

void linear_input_grad(Context& ctx, const PV& w, const Tensor& dy, Tensor& dx, bool accumulate_dx) {
  ops::GemmArgs args;
  args.beta = accumulate_dx ? 1.0f : 0.0f;
  ops::gemm(ctx, dy, Trans::no, value_for(w, dy.dtype()), Trans::no, dx, args);  // [M, N_out] @ [N_out, K]
}

// ---- embeddings -------------------------------------------------------------------------------

void embedding_forward(Context& ctx, const EmbeddingParams& p, const PackedTokens& tok,
                       const EncoderShape& s, const DropoutSite& drop, EmbeddingSaved& saved) {
  // e = word[ids] + pos[t] + type[tt]; out = dropout(LN(e))
  ops::embedding(ctx, p.word.value, tok.ids, saved.e);
  ops::embedding(ctx, p.pos.value, tok.pos_ids, saved.e, /*accumulate=*/true);
  ops::embedding(ctx, p.type.value, tok.type_ids, saved.e, /*accumulate=*/true);
  ops::layernorm(ctx, saved.e, nullptr, p.ln_g.value, p.ln_b.value, s.eps, saved.out, &saved.mean, &saved.rstd);
  dropout_inplace(ctx, saved.out, drop);
}

void embedding_backward(Context& ctx, EmbeddingParams& p, const PackedTokens& tok,
                        const EncoderShape& s, const DropoutSite& drop, const EmbeddingSaved& saved,
                        Tensor& dy, int64_t pad_id) {
  if (drop.p > 0.0f) ops::dropout_backward(ctx, dy, dy, drop.p, drop.seed, drop.offset);
  ops::layernorm_backward(ctx, saved.e, nullptr, p.ln_g.value, saved.mean, saved.rstd, dy, dy, p.ln_g.grad,
                          p.ln_b.grad);
  ops::embedding_backward(ctx, tok.pos_ids, dy, p.pos.grad);
  ops::embedding_backward(ctx, tok.type_ids, dy, p.type.grad);
  // nn.Embedding(padding_idx): the padding row gets no gradient from the lookup. Real tokens
  // are rarely [PAD], so zeroing those rows of dy (no longer needed) is cheaper than a gather.
  // The scan reads the host copy of the ids; a row is zeroed on dy's device.
  const int32_t* ids = tok.host_ids.data<int32_t>();
  const int64_t C = dy.size(1);
  std::vector<Tensor> pad_rows;
  for (int64_t r = 0; r < tok.N; ++r)
    if (ids[r] == pad_id) pad_rows.push_back(dy.slice(0, r, r + 1).view({C}));
  if (!pad_rows.empty()) {
    std::vector<Tensor*> rows;
    for (Tensor& row : pad_rows) rows.push_back(&row);
    ops::zero_many(ctx, rows);
  }
  ops::embedding_backward(ctx, tok.ids, dy, p.word.grad);
}

// ---- encoder layer ----------------------------------------------------------------------------

void layer_forward(Context& ctx, const EncoderLayerParams& p, const Tensor& x, const ops::AttentionArgs& aa,
                   const EncoderShape& s, const LayerDropout& drop, LayerSaved& sv) {
  const int64_t C = s.C;
  linear_forward(ctx, x, p.qkv_w, p.qkv_b, sv.qkv);
  ops::attention_forward_train(ctx, sv.qkv.slice(1, 0, C), sv.qkv.slice(1, C, 2 * C), sv.qkv.slice(1, 2 * C, 3 * C),
                               sv.ctx, sv.lse, aa, attention_train_args(drop.attn_probs));
  linear_forward(ctx, sv.ctx, p.attn_out_w, p.attn_out_b, sv.h);
  // x1 = LN1(dropout(h) + x): the dropout op in place, then the LayerNorm (faster on an H200 than
  // the mask drawn inside the LayerNorm kernels: BENCHMARKS.md)
  dropout_inplace(ctx, sv.h, drop.attn_out);
  ops::layernorm(ctx, sv.h, &x, p.ln1_g.value, p.ln1_b.value, s.eps, sv.x1, &sv.mean1, &sv.rstd1);
  linear_forward(ctx, sv.x1, p.ffn_in_w, p.ffn_in_b, sv.fp);  // pre-activation kept for the backward
  ops::activation(ctx, sv.fp, sv.f, s.act);
  linear_forward(ctx, sv.f, p.ffn_out_w, p.ffn_out_b, sv.h2);
  dropout_inplace(ctx, sv.h2, drop.ffn_out);
  ops::layernorm(ctx, sv.h2, &sv.x1, p.ln2_g.value, p.ln2_b.value, s.eps, sv.out, &sv.mean2, &sv.rstd2);
}

void layer_backward(Context& ctx, EncoderLayerParams& p, const Tensor& x, const LayerSaved& sv,
                    const ops::AttentionArgs& aa, const EncoderShape& s, const LayerDropout& drop, Tensor& g,
                    LayerScratch& sc) {
  const int64_t C = s.C;
  // out = LN2(dropout(h2) + x1): g becomes the gradient of the LayerNorm's input, which is the
  // residual x1's; dh2 (t1 with dropout, else g) that of the undropped h2 = f W2^T + b2.
  ops::layernorm_backward(ctx, sv.h2, &sv.x1, p.ln2_g.value, sv.mean2, sv.rstd2, g, g, p.ln2_g.grad, p.ln2_b.grad);
  const Tensor& dh2 = dropout_grad(ctx, g, sc.t1, drop.ffn_out);
  linear_backward(ctx, sv.f, p.ffn_out_w, p.ffn_out_b, dh2, &sc.df);  // df = dh2 W2 [N, I]
  // f = act(fp), fp = x1 W1^T + b1: b1's gradient, the column sums of df, from the same pass
  ops::activation_backward(ctx, sv.fp, sc.df, sc.df, s.act, nullptr, p.ffn_in_b.defined() ? &p.ffn_in_b.grad : nullptr);
  // dW1, and dx1 = g (residual) + df W1. dh2 may alias g: its last read was above.
  PV bias_done;  // (b1's gradient is in)
  linear_backward(ctx, sv.x1, p.ffn_in_w, bias_done, sc.df, &g, /*accumulate_dx=*/true);
  // x1 = LN1(dropout(h) + x); h = ctx Wo^T + bo; dctx -> t2
  ops::layernorm_backward(ctx, sv.h, &x, p.ln1_g.value, sv.mean1, sv.rstd1, g, g, p.ln1_g.grad, p.ln1_b.grad);
  const Tensor& dh = dropout_grad(ctx, g, sc.t1, drop.attn_out);
  linear_backward(ctx, sv.ctx, p.attn_out_w, p.attn_out_b, dh, &sc.t2);
  // ctx = attention(q, k, v): dq, dk, dv land in the column slices of dqkv [N, 3C]
  Tensor dq = sc.dqkv.slice(1, 0, C), dk = sc.dqkv.slice(1, C, 2 * C), dv = sc.dqkv.slice(1, 2 * C, 3 * C);
  ops::attention_backward(ctx, sv.qkv.slice(1, 0, C), sv.qkv.slice(1, C, 2 * C), sv.qkv.slice(1, 2 * C, 3 * C),
                          sv.ctx, sv.lse, sc.t2, dq, dk, dv, aa, attention_train_args(drop.attn_probs));
  // qkv = x Wqkv^T + bqkv; dx = g (residual of LN1) + dqkv Wqkv
  linear_backward(ctx, x, p.qkv_w, p.qkv_b, sc.dqkv, &g, /*accumulate_dx=*/true);
}

double soft_target_cross_entropy(const Tensor& logits, const Tensor& targets, float loss_scale, Tensor& dlogits) {
  const int64_t B = logits.size(0), K = logits.size(1);
  dlogits = Tensor::empty({B, K}, DType::f32);
  double loss = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    const float* z = logits.data<float>() + b * K;
    const float* t = targets.data<float>() + b * K;
    double zmax = z[0];
    for (int64_t k = 1; k < K; ++k) zmax = std::max(zmax, double(z[k]));
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) sum += std::exp(double(z[k]) - zmax);
    const double lse = zmax + std::log(sum);
    double tsum = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      loss -= double(t[k]) * (double(z[k]) - lse);
      tsum += t[k];
    }
    // d/dz of -sum_k t_k log_softmax_k = softmax * sum(t) - t
    for (int64_t k = 0; k < K; ++k)
      dlogits.data<float>()[b * K + k] =
          float(double(loss_scale) * (std::exp(double(z[k]) - lse) * tsum - double(t[k])) / double(B));
  }
  return loss / double(B);
}

}  // namespace unmask::train
