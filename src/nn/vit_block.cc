// nn/vit_block.cc: the pre-LN transformer block as an explicit forward/backward pair (shapes and
// saved tensors in nn/vit_block.h); VideoMAE's pretraining and classification models use it.
#include <cmath>
#include <cstring>

#include "unmask/error.h"
#include "nn/vit_block.h"

namespace unmask::nn {

using train::PV;

using ops::Activation;
using ops::Trans;

namespace {

Tensor f32(const Shape& s, Device device) { return Tensor::empty(s, DType::f32, device); }

ops::WindowAttentionArgs window_args(const BlockShape& s) {
  ops::WindowAttentionArgs a;
  a.num_heads = int(s.NH);
  a.window = s.window;
  a.scale = float(1.0 / std::sqrt(double(s.C / s.NH)));
  a.bias = s.window_bias;
  a.mask = s.window_mask;
  return a;
}

ops::AttentionArgs attention_args(const BlockShape& s) {
  ops::AttentionArgs a;
  a.num_heads = int(s.NH);
  a.scale = float(1.0 / std::sqrt(double(s.C / s.NH)));
  a.padded_seq_len = s.tokens;
  return a;
}

// The qkv bias VideoMAE passes to F.linear: cat(q_bias, zeros, v_bias), in the activations'
// dtype (a bf16 GEMM output takes its bias in bf16: the fused epilogue). Written in place by
// stream-ordered ops (a GPU runs q and v's conversion as one launch), none on the legacy stream.
Tensor qkv_bias(Context& ctx, const BlockParams& p, int64_t C, DType dtype) {
  if (p.qkv_b.defined()) return train::value_for(p.qkv_b, dtype);
  Tensor b = Tensor::empty({3 * C}, dtype, p.q_bias.value.device());
  Tensor q = b.slice(0, 0, C), k = b.slice(0, C, 2 * C), v = b.slice(0, 2 * C, 3 * C);
  ops::copy_many(ctx, {{&p.q_bias.value, &q}, {&p.v_bias.value, &v}});
  ops::zero_many(ctx, {&k});
  return b;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  c.copy_from(t);
  return c;
}

// Drop path's per-sample scales (host floats, one per sample of `tokens` rows) on x's device.
Tensor drop_scales(const float* drop, const Tensor& x, int64_t tokens) {
  const int64_t samples = x.size(0) / tokens;
  Tensor host = Tensor::empty({samples}, DType::f32);
  std::copy_n(drop, samples, host.data<float>());
  return x.device() == Device::cpu ? host : host.to(x.device());
}

void residual_linear(Context& ctx, const Tensor& a, const PV& w, const PV& b, const Tensor& residual,
                     const float* drop, int64_t tokens, Tensor& out) {
  if (!drop) {
    ops::GemmArgs res;
    res.beta = 1.0f;
    res.bias = &train::value_for(b, a.dtype());
    if (residual.is_contiguous()) {
      out = Tensor::empty(residual.shape(), residual.dtype(), residual.device());
      res.addend = &residual;
    } else {
      out = copy_of(residual);
    }
    ops::gemm(ctx, a, Trans::no, train::value_for(w, a.dtype()), Trans::yes, out, res);
    return;
  }
  out = copy_of(residual);
  UNMASK_CHECK(a.dtype() == DType::f32, "ViT block: drop path needs f32 activations, got ", a.describe());
  Tensor branch = f32({a.size(0), w.value.size(0)}, a.device());
  train::linear_forward(ctx, a, w, b, branch);
  ops::scale_rows(ctx, branch, drop_scales(drop, branch, tokens), tokens, branch);
  ops::axpy(ctx, 1.0f, branch, out);
}

// The gradient reaching a drop-path branch: g scaled per clip (g itself when drop path is off).
Tensor branch_grad(Context& ctx, const Tensor& g, const float* drop, int64_t tokens) {
  if (!drop) return g;
  Tensor gb = Tensor::empty(g.shape(), g.dtype(), g.device());
  ops::scale_rows(ctx, g, drop_scales(drop, g, tokens), tokens, gb);
  return gb;
}

}  // namespace

void refresh_block_halves(Context& ctx, std::vector<BlockParams>& blocks, DType dtype) {
  std::vector<PV*> pvs;
  for (BlockParams& b : blocks)
    for (PV* pv : {&b.qkv_w, &b.qkv_b, &b.proj_w, &b.proj_b, &b.fc1_w, &b.fc1_b, &b.fc2_w, &b.fc2_b})
      if (pv->defined()) pvs.push_back(pv);
  train::refresh_halves(ctx, pvs, dtype);
}

void block_forward(Context& ctx, const BlockParams& p, const Tensor& x, const BlockShape& s, BlockSaved& sv) {
  const int64_t N = x.size(0), C = s.C;
  const DType adt = x.dtype();  // f32, or bf16 (BlockShape::activations)
  UNMASK_CHECK(adt == s.activations, "ViT block: x is ", x.describe(), " but the block's activations are ",
               dtype_name(s.activations));
  auto f32 = [&](const Shape& shape) { return nn::f32(shape, x.device()); };
  auto act = [&](const Shape& shape) { return Tensor::empty(shape, adt, x.device()); };
  sv.ln1 = act({N, C}); sv.mean1 = f32({N}); sv.rstd1 = f32({N});
  ops::layernorm(ctx, x, nullptr, p.norm1_g.value, p.norm1_b.value, s.eps, sv.ln1, &sv.mean1, &sv.rstd1);
  const Tensor bias = qkv_bias(ctx, p, C, adt);
  sv.qkv = act({N, 3 * C});
  ops::GemmArgs qa;
  qa.bias = &bias;
  ops::gemm(ctx, sv.ln1, Trans::no, train::value_for(p.qkv_w, adt), Trans::yes, sv.qkv, qa);
  sv.ctx = act({N, C}); sv.lse = f32({s.NH, N});
  if (s.window > 0)
    ops::window_attention(ctx, sv.qkv.slice(1, 0, C), sv.qkv.slice(1, C, 2 * C), sv.qkv.slice(1, 2 * C, 3 * C), sv.ctx,
                          window_args(s), &sv.lse);
  else
    ops::attention_forward_train(ctx, sv.qkv.slice(1, 0, C), sv.qkv.slice(1, C, 2 * C), sv.qkv.slice(1, 2 * C, 3 * C),
                                 sv.ctx, sv.lse, attention_args(s), ops::AttentionTrainArgs{});
  // x1 = x + proj(ctx)
  residual_linear(ctx, sv.ctx, p.proj_w, p.proj_b, x, s.drop_attn, s.tokens, sv.x1);
  sv.ln2 = act({N, C}); sv.mean2 = f32({N}); sv.rstd2 = f32({N});
  ops::layernorm(ctx, sv.x1, nullptr, p.norm2_g.value, p.norm2_b.value, s.eps, sv.ln2, &sv.mean2, &sv.rstd2);
  sv.fp = act({N, s.I});
  Tensor f = act({N, s.I});
  train::linear_forward(ctx, sv.ln2, p.fc1_w, p.fc1_b, sv.fp);
  ops::activation(ctx, sv.fp, f, Activation::gelu);
  residual_linear(ctx, f, p.fc2_w, p.fc2_b, sv.x1, s.drop_mlp, s.tokens, sv.out);
  if (!s.recompute_gelu) sv.f = f;
}

void block_backward(Context& ctx, BlockParams& p, const Tensor& x, const BlockSaved& sv, const BlockShape& s,
                    Tensor& g) {
  const int64_t N = x.size(0), C = s.C;
  auto act = [&](const Shape& shape) { return Tensor::empty(shape, x.dtype(), x.device()); };
  UNMASK_CHECK(g.dtype() == x.dtype(), "ViT block backward: g is ", g.describe(), " but x is ", x.describe());
  // out = x1 + fc2(gelu(fc1(LN2(x1))))
  Tensor df = act({N, s.I});
  const Tensor dout = branch_grad(ctx, g, s.drop_mlp, s.tokens);
  // fc1's bias gradient (the column sums of df) comes from the GELU backward's pass
  Tensor* dfc1_b = p.fc1_b.defined() ? &p.fc1_b.grad : nullptr;
  if (sv.f.defined()) {
    train::linear_backward(ctx, sv.f, p.fc2_w, p.fc2_b, dout, &df);
    ops::activation_backward(ctx, sv.fp, df, df, Activation::gelu, nullptr, dfc1_b);
  } else {
    // recompute_gelu: df = dout W2 first (it needs no f); then one pass over fp makes both
    // f = gelu(fp), the forward's bits (the same formula on the same input), and df *= gelu'(fp);
    // then fc2's parameter gradients from f. The same ops as linear_backward + activation_backward,
    // in another order: the same bits, one read of fp fewer.
    train::linear_input_grad(ctx, p.fc2_w, dout, df);
    Tensor f = act({N, s.I});
    ops::activation_backward(ctx, sv.fp, df, df, Activation::gelu, &f, dfc1_b);
    ops::linear_param_grads(ctx, dout, f, p.fc2_w.grad, p.fc2_b.defined() ? &p.fc2_b.grad : nullptr);
  }
  Tensor dln = act({N, C});
  PV fc1_bias_done;  // (its gradient is in)
  train::linear_backward(ctx, sv.ln2, p.fc1_w, fc1_bias_done, df, &dln);
  // g = d x1 = g + LN2'(dln): the LayerNorm backward adds into g (one pass, no axpy)
  ops::layernorm_backward(ctx, sv.x1, nullptr, p.norm2_g.value, sv.mean2, sv.rstd2, dln, g, p.norm2_g.grad,
                          p.norm2_b.grad, /*accumulate_dx=*/true);
  // x1 = x + proj(attention(qkv(LN1(x))))
  Tensor dctx = act({N, C});
  train::linear_backward(ctx, sv.ctx, p.proj_w, p.proj_b, branch_grad(ctx, g, s.drop_attn, s.tokens), &dctx);
  Tensor dqkv = act({N, 3 * C});
  Tensor dq = dqkv.slice(1, 0, C), dk = dqkv.slice(1, C, 2 * C), dv = dqkv.slice(1, 2 * C, 3 * C);
  if (s.window > 0)
    ops::window_attention_backward(ctx, sv.qkv.slice(1, 0, C), sv.qkv.slice(1, C, 2 * C), sv.qkv.slice(1, 2 * C, 3 * C),
                                   sv.ctx, sv.lse, dctx, dq, dk, dv, s.window_dbias, window_args(s));
  else
    ops::attention_backward(ctx, sv.qkv.slice(1, 0, C), sv.qkv.slice(1, C, 2 * C), sv.qkv.slice(1, 2 * C, 3 * C),
                            sv.ctx, sv.lse, dctx, dq, dk, dv, attention_args(s), ops::AttentionTrainArgs{});
  if (p.qkv_b.defined()) {
    ops::bias_grad(ctx, dqkv, p.qkv_b.grad);
  } else {
    // The q and v thirds' column sums straight into their (accumulated) bias gradients; k has no
    // bias, so its third is not read.
    ops::bias_grad(ctx, dq, p.q_bias.grad);
    ops::bias_grad(ctx, dv, p.v_bias.grad);
  }
  PV no_bias;
  train::linear_backward(ctx, sv.ln1, p.qkv_w, no_bias, dqkv, &dln);
  // g = d x = g + LN1'(dln)
  ops::layernorm_backward(ctx, x, nullptr, p.norm1_g.value, sv.mean1, sv.rstd1, dln, g, p.norm1_g.grad,
                          p.norm1_b.grad, /*accumulate_dx=*/true);
}

void add_block_params(std::vector<Param>& out, const std::string& prefix, BlockParams& b) {
  auto add = [&](const std::string& n, PV& p, bool wd) { out.push_back(Param{prefix + n, p.value, p.grad, wd}); };
  add("norm1.weight", b.norm1_g, false); add("norm1.bias", b.norm1_b, false);
  if (b.qkv_b.defined()) {
    add("attn.qkv.weight", b.qkv_w, true); add("attn.qkv.bias", b.qkv_b, false);
  } else {
    add("attn.q_bias", b.q_bias, false); add("attn.v_bias", b.v_bias, false);
    add("attn.qkv.weight", b.qkv_w, true);
  }
  add("attn.proj.weight", b.proj_w, true); add("attn.proj.bias", b.proj_b, false);
  add("norm2.weight", b.norm2_g, false); add("norm2.bias", b.norm2_b, false);
  add("mlp.fc1.weight", b.fc1_w, true); add("mlp.fc1.bias", b.fc1_b, false);
  add("mlp.fc2.weight", b.fc2_w, true); add("mlp.fc2.bias", b.fc2_b, false);
}

std::vector<PV*> block_storages(BlockParams& b) {
  std::vector<PV*> out;
  for (PV* pv : {&b.norm1_g, &b.norm1_b, &b.q_bias, &b.v_bias, &b.qkv_b, &b.qkv_w, &b.proj_w, &b.proj_b, &b.norm2_g,
                 &b.norm2_b, &b.fc1_w, &b.fc1_b, &b.fc2_w, &b.fc2_b})
    if (pv->defined()) out.push_back(pv);
  return out;
}

}  // namespace unmask::nn
