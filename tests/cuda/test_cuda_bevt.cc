// tests/cuda/test_cuda_bevt.cc: BEVT's joint pretraining step on a CUDA context against the same
// step on the CPU (which tests/python/bevt_parity.py ties to a float64 PyTorch BEVT): a tiny BEVT
// (embed 32, depths 2/2/2/2, heads 1/2/4/8, window 2 x 4 x 4: the video's stage 4 clips the
// window, the image stream rolls and masks in every block) on two 64 x 64 clips of 4 frames and
// four 64 x 64 images with BEVT's block masks and drop path 0.3, from the same weights.
//   * the tokenizer (a small DALL-E encoder through cuDNN) gives the CPU's ids wherever the CPU's
//     top two logits are apart (every id, in practice);
//   * with the CPU's ids as both steps' targets: each stream's loss within 1e-5, the masked and
//     correct counts equal, every gradient within 1e-4 of its largest magnitude;
//   * three AdamW steps on both: every parameter within 1e-4.
//   * bf16 and fp16 GEMMs (apex O1's split): gradients within twice the CPU bf16 step's error.
//   * the fine-tuning classifier: logits, loss and every gradient.
// Without a CUDA device every test skips.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "cuda_test_common.h"
#include "data/video/bevt_data.h"
#include "models/bevt/classify.h"
#include "models/bevt/pretrain.h"
#include "ops/device_info.h"
#include "test_harness.h"
#include "unmask/train.h"

using namespace unmask;
using cuda_test::cpu;
using cuda_test::gpu;
using cuda_test::max_relative_error;

namespace {

bevt::SwinConfig tiny_config() {
  bevt::SwinConfig c;
  c.embed_dim = 32, c.depths = {2, 2, 2, 2}, c.heads = {1, 2, 4, 8}, c.window = {2, 4, 4};
  return c;
}

bevt::DalleEncoderConfig tiny_tokenizer() {
  bevt::DalleEncoderConfig t;
  t.hidden = 16, t.blocks_per_group = 1, t.vocab = 64;
  return t;
}

video::BevtBatch test_batch(uint64_t seed) {
  video::BevtDataOptions o;
  o.frames = 4, o.crop = 64, o.seed = seed;
  return video::synthetic_bevt_batch(o, 0, 2, 0, 4);
}

// Every parameter of a (device) model against the CPU model's: values or gradients.
void expect_params_close(bevt::BevtPretrainModel& want, bevt::BevtPretrainModel& got, bool grads, double tol,
                         const std::string& what) {
  std::vector<Param>& w = want.params();
  std::vector<Param>& g = got.params();
  ASSERT_EQ(w.size(), g.size());
  int64_t bad = 0;
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < w.size(); ++i) {
    const double e = max_relative_error(grads ? g[i].grad : g[i].value, grads ? w[i].grad : w[i].value);
    if (e > worst) worst = e, worst_name = w[i].name;
    if (e > tol && bad++ < 5) ADD_FAILURE() << what << ": " << w[i].name << " differs by " << e;
  }
  std::printf("[ %s ] %zu tensors, worst %s %.2e\n", what.c_str(), w.size(), worst_name.c_str(), worst);
  EXPECT_EQ(bad, 0) << what;
}

}  // namespace

TEST(CudaBevt, StepMatchesTheCpu) {
  REQUIRE_CUDA_DEVICE();
  ops::set_training_precision(gpu(), "fp32");
  const uint64_t seed = 7;
  bevt::BevtPretrainModel want = bevt::BevtPretrainModel::random(tiny_config(), 64, seed);
  bevt::BevtPretrainModel got = bevt::BevtPretrainModel::random(tiny_config(), 64, seed);
  got.to(gpu());
  ASSERT_EQ(got.device(), Device::cuda);
  const bevt::DalleEncoder tok = bevt::DalleEncoder::random(tiny_tokenizer(), seed + 1);
  const bevt::DalleEncoder tok_gpu = tok.to(Device::cuda);
  const video::BevtBatch batch = test_batch(seed);

  // The tokenizer alone: ids on both devices for the clips' frames.
  const Tensor frames = batch.video_frames;
  const Tensor l = tok.logits(cpu(), frames);
  const Tensor ids_cpu = tok.tokens(cpu(), frames), ids_gpu = tok_gpu.tokens(gpu(), frames.to(Device::cuda)).to(Device::cpu);
  const int64_t V = l.size(1), P = l.size(2) * l.size(3);
  int64_t compared = 0, differ = 0;
  for (int64_t b = 0; b < l.size(0); ++b)
    for (int64_t p = 0; p < P; ++p) {
      float top = -INFINITY, second = -INFINITY;
      for (int64_t v = 0; v < V; ++v) {
        const float x = l.data<float>()[(b * V + v) * P + p];
        if (x > top) second = top, top = x;
        else if (x > second) second = x;
      }
      if (top - second < 1e-4f * std::max(1.0f, std::fabs(top))) continue;
      ++compared;
      differ += ids_cpu.data<int32_t>()[b * P + p] != ids_gpu.data<int32_t>()[b * P + p];
    }
  EXPECT_GT(compared, l.size(0) * P / 2);
  EXPECT_EQ(differ, 0) << "of " << compared << " clear cells";

  // The step, with the CPU's targets on both.
  bevt::BevtStepOptions o;
  o.drop_path_rate = 0.3, o.seed = seed;
  want.zero_grad(cpu());
  const bevt::BevtStepStats sw = bevt::bevt_pretrain_step(cpu(), want, &tok, batch, o);
  o.video_ids = &sw.video_ids, o.image_ids = &sw.image_ids;
  got.zero_grad(gpu());
  const bevt::BevtStepStats sg = bevt::bevt_pretrain_step(gpu(), got, nullptr, batch, o);
  std::printf("[ bevt step ] loss video cpu %.9g cuda %.9g, image cpu %.9g cuda %.9g\n", sw.video.loss, sg.video.loss,
              sw.image.loss, sg.image.loss);
  EXPECT_NEAR(sg.video.loss, sw.video.loss, 1e-5 * std::fabs(sw.video.loss));
  EXPECT_NEAR(sg.image.loss, sw.image.loss, 1e-5 * std::fabs(sw.image.loss));
  EXPECT_EQ(sg.video.masked, sw.video.masked);
  EXPECT_EQ(sg.image.masked, sw.image.masked);
  EXPECT_GT(sw.video.masked, 0);
  EXPECT_GT(sw.image.masked, 0);
  expect_params_close(want, got, true, 1e-4, "gradients");

  // Three AdamW steps from those gradients and two more batches.
  const OptimizerConfig oc{.kind = OptimizerKind::adamw, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                           .weight_decay = 0.05f, .max_grad_norm = 3.0f};
  Optimizer ow(oc, want.params()), og(oc, got.params());
  for (int step = 0; step < 3; ++step) {
    if (step > 0) {
      const video::BevtBatch b = test_batch(seed + uint64_t(step));
      bevt::BevtStepOptions so;
      so.seed = seed + uint64_t(step);
      want.zero_grad(cpu());
      const bevt::BevtStepStats s = bevt::bevt_pretrain_step(cpu(), want, &tok, b, so);
      so.video_ids = &s.video_ids, so.image_ids = &s.image_ids;
      got.zero_grad(gpu());
      bevt::bevt_pretrain_step(gpu(), got, nullptr, b, so);
    }
    ow.step(cpu(), 1e-3f);
    og.step(gpu(), 1e-3f);
  }
  expect_params_close(want, got, false, 1e-4, "after 3 AdamW steps");
}

TEST(CudaBevt, HostBatchesFollowTheModelAndAWrongContextIsAnError) {
  REQUIRE_CUDA_DEVICE();
  bevt::BevtPretrainModel m = bevt::BevtPretrainModel::random(tiny_config(), 64, 3);
  m.to(gpu());
  const bevt::DalleEncoder tok = bevt::DalleEncoder::random(tiny_tokenizer(), 4).to(Device::cuda);
  const video::BevtBatch batch = test_batch(3);
  bevt::BevtStepOptions o;
  m.zero_grad(gpu());
  const bevt::BevtStepStats s = bevt::bevt_pretrain_step(gpu(), m, &tok, batch, o);  // host batch, device model
  EXPECT_TRUE(std::isfinite(s.loss()));
  EXPECT_GT(s.tokenized_frames, 0);
  try {
    bevt::bevt_pretrain_step(cpu(), m, &tok, batch, o);
    ADD_FAILURE() << "a CPU context with a CUDA model must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("call model.to(ctx) first"), std::string::npos) << e.what();
  }
}

namespace {

// Per parameter, |grad - exact| / max(|exact|, 1e-2 of the global norm) in the 2-norm.
std::vector<double> grad_errors(bevt::BevtPretrainModel& exact, bevt::BevtPretrainModel& other) {
  auto values = [](const Tensor& t) {
    const Tensor h = (t.device() == Device::cpu ? t : t.to(Device::cpu)).contiguous();
    return std::vector<double>(h.data<float>(), h.data<float>() + h.numel());
  };
  double global = 0;
  for (Param& p : exact.params())
    for (double v : values(p.grad)) global += v * v;
  global = std::sqrt(global);
  std::vector<double> errs;
  for (size_t i = 0; i < exact.params().size(); ++i) {
    const std::vector<double> e = values(exact.params()[i].grad), o = values(other.params()[i].grad);
    double ne = 0, d = 0;
    for (size_t j = 0; j < e.size(); ++j) ne += e[j] * e[j], d += (o[j] - e[j]) * (o[j] - e[j]);
    errs.push_back(std::sqrt(d) / std::max(std::sqrt(ne), 1e-2 * global));
  }
  return errs;
}

double rms(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s / double(std::max<size_t>(v.size(), 1)));
}

// One step of `got` on the GPU in `precision` (loss scaled by `scale`, gradients unscaled after)
// and its per-parameter gradient errors against the exact f32 CPU step of `exact`.
std::vector<double> gpu_step_errors(const std::string& precision, float scale, bevt::BevtPretrainModel& exact,
                                    const bevt::BevtStepStats& exact_stats, const video::BevtBatch& batch,
                                    double& loss) {
  bevt::BevtPretrainModel got = bevt::BevtPretrainModel::random(tiny_config(), 64, 11);
  got.to(gpu());
  ops::set_training_precision(gpu(), precision);
  bevt::BevtStepOptions o;
  o.loss_scale = scale;
  o.video_ids = &exact_stats.video_ids, o.image_ids = &exact_stats.image_ids;
  got.zero_grad(gpu());
  loss = bevt::bevt_pretrain_step(gpu(), got, nullptr, batch, o).loss();
  ops::set_training_precision(gpu(), "fp32");
  for (Param& p : got.params()) ops::scale_inplace(gpu(), p.grad, 1.0f / scale);
  return grad_errors(exact, got);
}

}  // namespace

// bf16 and fp16 GEMM operands (fp32 accumulation, fp32 master weights and activations: apex O1's
// split) against the exact f32 CPU step: bf16's gradients within twice the error of the CPU's own
// bf16 GEMMs on the same step (rounded operands, fp32 accumulation: where the CPU has a bf16 unit)
// plus 1e-3, and not ~0 (an f32 step would pass that); fp16 (loss scaled by 1024) within the same
// bound, its 10-bit mantissa being finer than bf16's 7.
TEST(CudaBevt, HalfPrecisionGemmsWithinTwiceTheCpuBf16Error) {
  REQUIRE_CUDA_DEVICE();
  const video::BevtBatch batch = test_batch(11);
  const bevt::DalleEncoder tok = bevt::DalleEncoder::random(tiny_tokenizer(), 12);
  bevt::BevtPretrainModel exact = bevt::BevtPretrainModel::random(tiny_config(), 64, 11);
  bevt::BevtStepOptions o;
  exact.zero_grad(cpu());
  const bevt::BevtStepStats se = bevt::bevt_pretrain_step(cpu(), exact, &tok, batch, o);
  std::vector<double> cpu_bf16;
  double l_cpu_bf16 = 0;
  if (*ops::cpu_bf16_unit()) {
    Context c16({.num_threads = 2});
    ops::set_training_precision(c16, "bf16");
    bevt::BevtPretrainModel m = bevt::BevtPretrainModel::random(tiny_config(), 64, 11);
    o.video_ids = &se.video_ids, o.image_ids = &se.image_ids;
    m.zero_grad(c16);
    l_cpu_bf16 = bevt::bevt_pretrain_step(c16, m, nullptr, batch, o).loss();
    cpu_bf16 = grad_errors(exact, m);
  }
  double l_bf16 = 0, l_fp16 = 0;
  const std::vector<double> bf16 = gpu_step_errors("bf16", 1.0f, exact, se, batch, l_bf16);
  const std::vector<double> fp16 = gpu_step_errors("fp16", 1024.0f, exact, se, batch, l_fp16);
  std::printf("[ bevt half GEMMs ] loss f32 %.7f, cpu bf16 %.7f, cuda bf16 %.7f, cuda fp16 %.7f; rms gradient error "
              "cpu bf16 %.3g, cuda bf16 %.3g, cuda fp16 %.3g\n",
              se.loss(), l_cpu_bf16, l_bf16, l_fp16, rms(cpu_bf16), rms(bf16), rms(fp16));
  EXPECT_GE(rms(bf16), 1e-5) << "the bf16 step looks f32";
  EXPECT_LE(std::fabs(l_bf16 - se.loss()), 2e-2 * se.loss());
  EXPECT_LE(std::fabs(l_fp16 - se.loss()), 2e-2 * se.loss());
  if (cpu_bf16.empty()) GTEST_SKIP() << "this host's CPU has no bf16 unit: the bf16 bound is not checked";
  for (size_t i = 0; i < bf16.size(); ++i) {
    EXPECT_LE(bf16[i], 2 * cpu_bf16[i] + 1e-3) << exact.params()[i].name << " (bf16)";
    EXPECT_LE(fp16[i], 2 * cpu_bf16[i] + 1e-3) << exact.params()[i].name << " (fp16)";
  }
}

// The fine-tuning model (finetune-swin) on CUDA against the CPU: logits, the soft-target loss and
// every gradient with drop path and head dropout, from host clips and targets; layer decay
// survives the move to the device.
TEST(CudaBevt, ClassifierStepMatchesTheCpu) {
  REQUIRE_CUDA_DEVICE();
  ops::set_training_precision(gpu(), "fp32");
  const int64_t B = 2, K = 5;
  bevt::SwinClassifier want = bevt::SwinClassifier::random(tiny_config(), K, 21);
  bevt::SwinClassifier got = bevt::SwinClassifier::random(tiny_config(), K, 21);
  want.set_layer_decay(0.75f), got.set_layer_decay(0.75f);
  got.to(gpu());
  ASSERT_EQ(got.device(), Device::cuda);
  std::mt19937_64 gen(22);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Tensor videos = Tensor::empty({B, 3, 4, 64, 64}, DType::f32), targets = Tensor::empty({B, K}, DType::f32);
  for (int64_t i = 0; i < videos.numel(); ++i) videos.data<float>()[i] = n(gen);
  for (int64_t i = 0; i < targets.numel(); ++i) targets.data<float>()[i] = i % K == (i / K) % K ? 0.92f : 0.02f;
  VideoMAEClassifyOptions o;
  o.drop_path_rate = 0.2f, o.head_dropout = 0.1f, o.seed = 23;
  want.zero_grad(cpu());
  got.zero_grad(gpu());
  const VideoMAEClassifyStats sw = want.step(cpu(), videos, targets, o);
  const VideoMAEClassifyStats sg = got.step(gpu(), videos, targets, o);
  EXPECT_NEAR(sg.loss, sw.loss, 1e-5 * std::fabs(sw.loss));
  EXPECT_LE(max_relative_error(sg.logits, sw.logits), 1e-5);
  int64_t bad = 0;
  for (size_t i = 0; i < want.params().size(); ++i) {
    const double e = max_relative_error(got.params()[i].grad, want.params()[i].grad);
    EXPECT_EQ(got.params()[i].lr_scale, want.params()[i].lr_scale) << want.params()[i].name;
    if (e > 1e-4 && bad++ < 5) ADD_FAILURE() << want.params()[i].name << " differs by " << e;
  }
  EXPECT_EQ(bad, 0);
}
