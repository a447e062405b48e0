// tests/test_train_bf16.cc: BERT training with bf16 encoder activations (TrainStepOptions::
// activations), run on the CPU by emulation (every op computes in f32 and rounds its bf16
// outputs once, the CUDA kernels' contract), so the bf16 path is checked on every machine:
//   - the emulated training ops equal "widen, f32 op, round" bit for bit (the dispatch is right);
//   - a bf16 step is close to the f32 step (loss and every gradient) but not identical to it
//     (the layers really ran in bf16);
//   - the bf16 weight copies follow the fp32 master weights between steps (no stale copy), and
//     micro-batches after a step's first may keep its copies (reuse_weight_copies);
//   - the fine-tuning heads (qa, seqcls, tokcls) over bf16 layers;
//   - an activation dtype other than f32 / bf16 is refused with a clear error.
// tests/cuda/test_cuda_bert_train.cc runs the same bf16 step on a GPU against this emulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bert_train_test_util.h"
#include "grad_error_util.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "unmask/train.h"

using namespace unmask;
using unmask::test::TestRng;
using unmask::test::i32;
using unmask::test::jitter;
using unmask::test::kPretraining;
using unmask::test::make_batch;

namespace {

BertConfig small_config() {
  BertConfig c;
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 128;
  c.max_position_embeddings = 40;
  return c;
}

struct StepResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

StepResult run_step(BertTrainModel& m, Context& ctx, const PretrainBatch& batch, DType activations) {
  TrainStepOptions o;
  o.seed = 11;
  o.step = 3;
  o.activations = activations;
  m.zero_grad();
  StepResult r;
  r.loss = m.pretrain_step(ctx, batch, o).loss;
  r.grads = test::grads_of(m.params());
  return r;
}

// ||a - b|| / ||b|| in double.
double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

Tensor random_tensor(TestRng& rng, const Shape& s, DType dtype) {
  Tensor f = Tensor::empty(s, DType::f32);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = float(rng.normal());
  return dtype == DType::f32 ? f : f.cast(dtype);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

// Each emulated op equals its f32 form on the widened inputs, rounded once to bf16.
TEST(TrainBf16, EmulatedOpsAreF32RoundedOnce) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const int64_t N = 37, C = 48;
  const DType bf = DType::bf16, f32 = DType::f32;
  const Tensor x = random_tensor(rng, {N, C}, bf), r = random_tensor(rng, {N, C}, bf),
               dy = random_tensor(rng, {N, C}, bf);
  const Tensor xw = x.cast(f32), rw = r.cast(f32), dyw = dy.cast(f32);
  const Tensor gamma = random_tensor(rng, {C}, f32), beta = random_tensor(rng, {C}, f32);

  // layernorm with statistics and its backward
  Tensor y = Tensor::empty({N, C}, bf), yf = Tensor::empty({N, C}, f32);
  Tensor mean = Tensor::empty({N}, f32), rstd = Tensor::empty({N}, f32), mean_f = Tensor::empty({N}, f32),
         rstd_f = Tensor::empty({N}, f32);
  ops::layernorm(ctx, x, &r, gamma, beta, 1e-5f, y, &mean, &rstd);
  ops::layernorm(ctx, xw, &rw, gamma, beta, 1e-5f, yf, &mean_f, &rstd_f);
  EXPECT_TRUE(same_bits(y, yf.cast(bf)));
  EXPECT_TRUE(same_bits(mean, mean_f));
  EXPECT_TRUE(same_bits(rstd, rstd_f));
  Tensor dx = Tensor::empty({N, C}, bf), dxf = Tensor::empty({N, C}, f32);
  Tensor dg = Tensor::zeros({C}, f32), db = Tensor::zeros({C}, f32), dg_f = Tensor::zeros({C}, f32),
         db_f = Tensor::zeros({C}, f32);
  ops::layernorm_backward(ctx, x, &r, gamma, mean, rstd, dy, dx, dg, db);
  ops::layernorm_backward(ctx, xw, &rw, gamma, mean_f, rstd_f, dyw, dxf, dg_f, db_f);
  EXPECT_TRUE(same_bits(dx, dxf.cast(bf)));
  EXPECT_TRUE(same_bits(dg, dg_f));
  EXPECT_TRUE(same_bits(db, db_f));
  // in place (dx = dy, as the layers call it), accumulating into the same gradients again
  Tensor g = dy.cast(bf);
  ops::layernorm_backward(ctx, x, &r, gamma, mean, rstd, g, g, dg, db);
  EXPECT_TRUE(same_bits(g, dx));
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dg.data<float>()[c], dg_f.data<float>()[c] + dg_f.data<float>()[c]);

  // activation and its backward, in place as the layers call them
  Tensor a = x.cast(bf), af = xw.cast(f32);
  ops::activation(ctx, a, a, ops::Activation::gelu);
  ops::activation(ctx, af, af, ops::Activation::gelu);
  EXPECT_TRUE(same_bits(a, af.cast(bf)));
  Tensor da = dy.cast(bf), daf = dyw.cast(f32);
  ops::activation_backward(ctx, x, da, da, ops::Activation::gelu);
  ops::activation_backward(ctx, xw, daf, daf, ops::Activation::gelu);
  EXPECT_TRUE(same_bits(da, daf.cast(bf)));

  // dropout (the same Philox mask) and the bias gradient
  Tensor d = x.cast(bf), df = xw.cast(f32);
  ops::dropout(ctx, d, d, 0.25f, 7, 1000);
  ops::dropout(ctx, df, df, 0.25f, 7, 1000);
  EXPECT_TRUE(same_bits(d, df.cast(bf)));
  Tensor bg = Tensor::zeros({C}, f32), bg_f = Tensor::zeros({C}, f32);
  ops::bias_grad(ctx, dy, bg);
  ops::bias_grad(ctx, dyw, bg_f);
  EXPECT_TRUE(same_bits(bg, bg_f));

  // gemm: bf16 a, b into a bf16 c with a bf16 bias, and into an f32 c accumulated (beta = 1)
  const Tensor w = random_tensor(rng, {C, C}, bf), bias = random_tensor(rng, {C}, bf);
  Tensor c = Tensor::empty({N, C}, bf), cf = Tensor::empty({N, C}, f32);
  ops::GemmArgs with_bias;
  with_bias.bias = &bias;
  ops::gemm(ctx, x, ops::Trans::no, w, ops::Trans::yes, c, with_bias);
  const Tensor bias_w = bias.cast(f32);
  ops::GemmArgs with_bias_f;
  with_bias_f.bias = &bias_w;
  ops::gemm(ctx, xw, ops::Trans::no, w.cast(f32), ops::Trans::yes, cf, with_bias_f);
  EXPECT_TRUE(same_bits(c, cf.cast(bf)));
  Tensor acc = random_tensor(rng, {C, C}, f32), acc_f = acc.cast(f32);
  ops::GemmArgs accumulate;
  accumulate.beta = 1.0f;
  ops::gemm(ctx, dy, ops::Trans::yes, x, ops::Trans::no, acc, accumulate);
  ops::gemm(ctx, dyw, ops::Trans::yes, xw, ops::Trans::no, acc_f, accumulate);
  EXPECT_TRUE(same_bits(acc, acc_f));

  // ops::copy converts on one device: narrowing rounds to nearest even, widening is exact
  Tensor narrowed = Tensor::empty({N, C}, bf), widened = Tensor::empty({N, C}, f32);
  ops::copy(ctx, yf, narrowed);
  EXPECT_TRUE(same_bits(narrowed, yf.cast(bf)));
  ops::copy(ctx, narrowed, widened);
  EXPECT_TRUE(same_bits(widened, narrowed.cast(f32)));
}

// The attention training pair on bf16 rows (column slices of one [N, 3C] buffer, as the layers
// pass them) equals the f32 pair on the widened rows, each output rounded once.
TEST(TrainBf16, EmulatedAttentionIsF32RoundedOnce) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const int64_t C = 32, NH = 2;
  Tensor cu = i32({4}, {0, 7, 19, 24});
  const int64_t N = 24;
  const Tensor qkv = random_tensor(rng, {N, 3 * C}, DType::bf16), qkv_w = qkv.cast(DType::f32);
  ops::AttentionArgs aa;
  aa.num_heads = int(NH);
  aa.scale = 0.25f;
  aa.cu_seqlens = &cu;
  ops::AttentionTrainArgs ta;
  ta.dropout_p = 0.2f;
  ta.dropout_seed = 5;
  auto q = [&](const Tensor& t, int i) { return t.slice(1, i * C, (i + 1) * C); };
  Tensor out = Tensor::empty({N, C}, DType::bf16), out_f = Tensor::empty({N, C}, DType::f32);
  Tensor lse = Tensor::empty({NH, N}, DType::f32), lse_f = Tensor::empty({NH, N}, DType::f32);
  ops::attention_forward_train(ctx, q(qkv, 0), q(qkv, 1), q(qkv, 2), out, lse, aa, ta);
  ops::attention_forward_train(ctx, q(qkv_w, 0), q(qkv_w, 1), q(qkv_w, 2), out_f, lse_f, aa, ta);
  EXPECT_TRUE(same_bits(out, out_f.cast(DType::bf16)));
  EXPECT_TRUE(same_bits(lse, lse_f));
  const Tensor dout = random_tensor(rng, {N, C}, DType::bf16);
  Tensor dqkv = Tensor::empty({N, 3 * C}, DType::bf16), dqkv_f = Tensor::empty({N, 3 * C}, DType::f32);
  Tensor dq = q(dqkv, 0), dk = q(dqkv, 1), dv = q(dqkv, 2), dq_f = q(dqkv_f, 0), dk_f = q(dqkv_f, 1),
         dv_f = q(dqkv_f, 2);
  ops::attention_backward(ctx, q(qkv, 0), q(qkv, 1), q(qkv, 2), out, lse, dout, dq, dk, dv, aa, ta);
  // the f32 reference reads the bf16 forward output widened (what the bf16 backward reads)
  ops::attention_backward(ctx, q(qkv_w, 0), q(qkv_w, 1), q(qkv_w, 2), out.cast(DType::f32), lse, dout.cast(DType::f32),
                          dq_f, dk_f, dv_f, aa, ta);
  EXPECT_TRUE(same_bits(dqkv, dqkv_f.cast(DType::bf16)));
}

// A bf16-activation step is within bf16 rounding of the f32 step, and not the f32 step itself.
TEST(TrainBf16, StepCloseToF32Step) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  BertTrainModel m = BertTrainModel::random(small_config(), kPretraining, rng.seed());
  jitter(m, rng);
  Context ctx({.num_threads = 2});
  const PretrainBatch batch = make_batch(rng, {30, 17, 24}, 30, m.config().vocab_size);
  const StepResult f = run_step(m, ctx, batch, DType::f32);
  const StepResult h = run_step(m, ctx, batch, DType::bf16);
  const StepResult h2 = run_step(m, ctx, batch, DType::bf16);
  EXPECT_EQ(h.loss, h2.loss);  // deterministic
  EXPECT_EQ(h.grads, h2.grads);
  EXPECT_NEAR(h.loss, f.loss, 1e-2 * std::abs(f.loss)) << "f32 " << f.loss << " bf16 " << h.loss;
  bool any_differs = h.loss != f.loss;
  double worst = 0;
  std::string worst_name;
  auto norm = [](const std::vector<float>& v) { return relative_l2(v, std::vector<float>(v.size(), 0.0f)); };
  for (size_t i = 0; i < f.grads.size(); ++i) {
    const std::string& name = m.params()[i].name;
    any_differs = any_differs || h.grads[i] != f.grads[i];
    if (name.find("attention.self.key.bias") != std::string::npos) {
      // Exactly zero in exact arithmetic (softmax ignores a shift shared by a row's scores): only
      // rounding noise is left, so compare its size with the query bias's gradient instead.
      EXPECT_NE(m.params()[i - 2].name.find("query.bias"), std::string::npos) << m.params()[i - 2].name;
      const double query_bias = norm(f.grads[i - 2]);  // HF order: query.weight, query.bias, key.weight, key.bias
      EXPECT_LT(norm(h.grads[i]), 1e-2 * query_bias) << name;
      continue;
    }
    const double e = relative_l2(h.grads[i], f.grads[i]);
    if (e > worst) worst = e, worst_name = name;
    // bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2%); a few percent after two
    // layers of rounded activations and gradients. A wrong saved tensor or a missing residual
    // gradient gives errors of order 1.
    EXPECT_LT(e, 5e-2) << name;
  }
  EXPECT_TRUE(any_differs) << "the bf16 step equals the f32 step bit for bit: the layers did not run in bf16";
  std::printf("[bf16 step] loss f32 %.6f bf16 %.6f; worst gradient relative L2 error %.4f (%s)\n", f.loss, h.loss,
              worst, worst_name.c_str());
}

// The bf16 copies of the layer weights are rounded from the current fp32 values at every step:
// after the master weights change (an optimizer update), the bf16 step equals that of a model
// built with the new weights.
TEST(TrainBf16, WeightCopiesFollowMasterWeights) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const uint64_t seed = rng.seed();
  BertTrainModel a = BertTrainModel::random(small_config(), kPretraining, seed);
  BertTrainModel b = BertTrainModel::random(small_config(), kPretraining, seed);
  Context ctx({.num_threads = 2});
  const PretrainBatch batch = make_batch(rng, {20, 13}, 20, a.config().vocab_size);
  run_step(a, ctx, batch, DType::bf16);  // creates a's bf16 copies from the initial weights
  for (BertTrainModel* m : {&a, &b})     // the same "update" on both: scale every layer weight
    for (Param& p : m->params())
      if (p.name.find("encoder.layer.") != std::string::npos)
        for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] *= 1.5f;
  const StepResult ra = run_step(a, ctx, batch, DType::bf16), rb = run_step(b, ctx, batch, DType::bf16);
  EXPECT_EQ(ra.loss, rb.loss);
  EXPECT_EQ(ra.grads, rb.grads);
}

// TrainStepOptions::reuse_weight_copies: micro-batches after the first of a step keep the bf16
// weight copies of micro-batch 0 (one rounding pass a step, not one a micro-batch), with the same
// gradients bit for bit; a new step (another `step`) or micro-batch 0 rounds them again, so an
// update between steps is never missed.
TEST(TrainBf16, ReusedWeightCopiesOnlyWithinAStep) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const uint64_t seed = rng.seed();
  BertTrainModel a = BertTrainModel::random(small_config(), kPretraining, seed);  // reuse requested
  BertTrainModel b = BertTrainModel::random(small_config(), kPretraining, seed);  // never
  Context ctx_a({.num_threads = 2}), ctx_b({.num_threads = 2});
  ctx_a.set_op_profiling(true);
  ctx_b.set_op_profiling(true);
  const PretrainBatch batches[2] = {make_batch(rng, {20, 13}, 20, a.config().vocab_size),
                                    make_batch(rng, {17, 20}, 20, a.config().vocab_size)};
  const auto copies = [](Context& ctx) {  // copy_many calls since the last look (refresh_halves)
    int64_t n = 0;
    for (const OpTime& t : ctx.take_op_profile()) n += t.op == "copy_many" ? t.calls : 0;
    return n;
  };
  // One optimizer step of two micro-batches (no update: the gradients are compared).
  const auto step = [&](BertTrainModel& m, Context& ctx, int64_t step_no, bool reuse) {
    m.zero_grad();
    double loss = 0;
    for (int64_t micro = 0; micro < 2; ++micro) {
      TrainStepOptions o;
      o.seed = 11, o.step = step_no, o.micro = micro;
      o.activations = DType::bf16;
      o.loss_scale = 0.5f;
      o.reuse_weight_copies = reuse;
      loss += m.pretrain_step(ctx, batches[micro], o).loss;
    }
    return std::make_pair(loss, test::grads_of(m.params()));
  };
  const auto ra = step(a, ctx_a, 4, true), rb = step(b, ctx_b, 4, false);
  EXPECT_EQ(ra.first, rb.first);
  EXPECT_EQ(ra.second, rb.second);
  EXPECT_EQ(copies(ctx_a), 1) << "the second micro-batch should keep the first one's bf16 copies";
  EXPECT_EQ(copies(ctx_b), 2);
  // An "update" on both models, then the next step: a's micro-batch 0 rounds the new weights.
  for (BertTrainModel* m : {&a, &b})
    for (Param& p : m->params())
      if (p.name.find("encoder.layer.") != std::string::npos)
        for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] *= 1.5f;
  const auto ra2 = step(a, ctx_a, 5, true), rb2 = step(b, ctx_b, 5, false);
  EXPECT_EQ(ra2.first, rb2.first);
  EXPECT_EQ(ra2.second, rb2.second);
  EXPECT_NE(ra2.second, ra.second) << "the update changed nothing: the test cannot tell stale copies";
  EXPECT_EQ(copies(ctx_a), 1);
  // A micro-batch > 0 of another step than the copies' (no micro-batch 0, no zero_grad in
  // between) rounds too.
  for (Param& p : a.params())
    if (p.name.find("encoder.layer.") != std::string::npos)
      for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] *= 0.5f;
  TrainStepOptions o;
  o.seed = 11, o.step = 6, o.micro = 1;
  o.activations = DType::bf16;
  o.reuse_weight_copies = true;
  a.pretrain_step(ctx_a, batches[1], o);
  EXPECT_EQ(copies(ctx_a), 1) << "copies made for step 5 were reused at step 6";
  // zero_grad starts a new accumulation: the same step key after it rounds again (a loop that
  // keeps `step` fixed and updates the weights between accumulations).
  a.zero_grad();
  o.micro = 2;
  a.pretrain_step(ctx_a, batches[1], o);
  EXPECT_EQ(copies(ctx_a), 1) << "copies were reused across zero_grad";
}

// The fine-tuning heads over bf16 encoder layers: every task's loss and gradients near the f32
// step's (the heads themselves run in f32 on the f32 copy of the last hidden state).
TEST(TrainBf16, TaskStepsCloseToF32) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const int64_t B = 3, T = 24;
  const std::vector<int64_t> lens = {24, 11, 17};
  std::vector<int32_t> ids(B * T, 0), mask(B * T, 0), tok_labels(B * T, -100);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lens[b]; ++t) {
      ids[b * T + t] = int32_t(rng.integer(1, 90));
      mask[b * T + t] = 1;
      tok_labels[b * T + t] = t == 0 ? -100 : int32_t(rng.integer(0, 1));
    }
  for (Task task : {Task::qa, Task::seqcls, Task::tokcls}) {
    SCOPED_TRACE(int(task));
    BertHeads h;
    h.qa = task == Task::qa;
    h.seqcls = task == Task::seqcls;
    h.tokcls = task == Task::tokcls;
    BertTrainModel m = BertTrainModel::random(small_config(), h, rng.seed());
    jitter(m, rng);
    TaskBatch batch;
    batch.input_ids = i32({B, T}, ids);
    batch.attention_mask = i32({B, T}, mask);
    batch.start_positions = i32({B}, {3, 1, 5});
    batch.end_positions = i32({B}, {5, 4, 9});
    batch.labels = task == Task::seqcls ? i32({B}, {0, 1, 1}) : i32({B, T}, tok_labels);
    auto run = [&](DType activations) {
      TrainStepOptions o;
      o.seed = 3;
      o.activations = activations;
      m.zero_grad();
      StepResult r;
      r.loss = m.task_step(ctx, batch, task, o).loss;
      r.grads = test::grads_of(m.params());
      return r;
    };
    const StepResult f = run(DType::f32), bf = run(DType::bf16);
    EXPECT_NEAR(bf.loss, f.loss, 1e-2 * std::abs(f.loss));
    // Some gradients are exactly 0 in exact arithmetic and only rounding noise remains: the key
    // biases, and for qa the qa_outputs bias and the last LayerNorm bias (a shift shared by all
    // positions leaves the softmax over positions unchanged). Errors are therefore measured
    // against the larger of the gradient's norm and 1e-2 of the global gradient norm (the noise of
    // the qa head's last LayerNorm bias is ~1e-4 of it; a real fault is far above 5e-4).
    const std::vector<double> errors = test::grad_errors(bf.grads, f.grads, 1e-2);
    bool any_differs = false;
    for (size_t i = 0; i < f.grads.size(); ++i) {
      any_differs = any_differs || bf.grads[i] != f.grads[i];
      EXPECT_LT(errors[i], 5e-2) << m.params()[i].name;
    }
    EXPECT_TRUE(any_differs);
  }
}

TEST(TrainBf16, OtherActivationDtypesAreRefused) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  BertTrainModel m = BertTrainModel::random(small_config(), kPretraining, rng.seed());
  Context ctx({.num_threads = 2});
  const PretrainBatch batch = make_batch(rng, {10}, 10, m.config().vocab_size);
  TrainStepOptions o;
  o.activations = DType::f16;
  try {
    m.pretrain_step(ctx, batch, o);
    ADD_FAILURE() << "expected an error for f16 activations";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activations must be f32 or bf16"), std::string::npos) << e.what();
  }
}
