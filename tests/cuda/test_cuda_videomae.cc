// tests/cuda/test_cuda_videomae.cc: VideoMAE pretraining on a CUDA context against the same
// model on the CPU (the CPU step is tied to PyTorch by tests/python/videomae_parity.py).
//
// Cases:
//   * the video-token ops on fresh random clips: tubelet_gather (a copy: bit-exact), tubelet_target
//     (both in double, rounded once: within 1 ulp-ish, 1e-6 absolute on values of order 1),
//     mse_rows with and without row weights (the loss within 1e-12 relative; the gradient within
//     1e-7 of its scale), and an out-of-range id on the CPU (an Error naming it);
//   * one pretrain_step (v1 tube mask) and one with a v2 decoder mask: the loss within 1e-5
//     relative and every gradient within 1e-4 of its norm (fp32 on both sides, different
//     summation orders; the same tolerances and reasoning as test_cuda_bert_train.cc);
//   * 4 AdamW steps: the loss of every step within 1e-4;
//   * bf16 autocast (CudaState::autocast = bf16): the loss within 2e-2 of the fp32 CPU loss;
//   * a speed smoke: ViT-B, 16 x 224^2, tube 0.9, decoder depth 4, batch 32, fp32 / tf32 / bf16 /
//     bf16 with the tensor-core attention, printing clips/s and the allocator's peak for the record
//     (bench videomae is the benchmark); the fp32 and bf16-activation peaks within [0.75, 1.35] x the
//     count from the shapes.
// The geometry of the comparisons (16 frames, 64^2, patch 16: 128 tokens per clip, 32 visible with
// a 0.75 tube mask; the decoder on 128 rows in v1, 32 + 64 = 96 with v2's 0.5 decoder mask) puts
// two 64-row attention tiles in the decoder, so the online softmax runs across key tiles (one
// full + one full in v1, one full + one partial in v2).
// Without a CUDA device every test skips.
#include <cuda_runtime.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/allocator.h"
#include "cuda/cuda_state.h"
#include "cuda/ops_cuda.h"
#include "cuda_test_common.h"
#include "grad_compare.h"
#include "ops/ops.h"
#include "test_harness.h"
#include "unmask/context.h"
#include "unmask/tensor.h"
#include "unmask/train.h"
#include "unmask/videomae.h"
#include "data/video/masking.h"
#include "models/videomae/flops.h"

using namespace unmask;

using cuda_test::base_seed;
using cuda_test::cpu;
using cuda_test::gpu;

namespace {

uint64_t test_seed(const std::string& test) {
  uint64_t h = base_seed();
  for (const char c : test) h = (h ^ uint64_t(uint8_t(c))) * 0x100000001b3ull;
  return h;
}
std::string seed_note() { return "seed " + std::to_string(base_seed()) + " (UNMASK_TEST_SEED)"; }

std::vector<double> values(const Tensor& t) { return cuda_test::host_values(t); }
double norm(const std::vector<double>& v) { return cuda_test::l2(v); }
using cuda_test::max_abs_diff;  // NaN-aware
double rel(double got, double want) { return std::fabs(got - want) / std::max(std::fabs(want), 1e-30); }

// 16 frames of 64^2, tubelet 2, patch 16: 8 x 4 x 4 = 128 tokens; encoder 64/2/2, decoder 32/2/1.
VideoMAEConfig test_config() {
  VideoMAEConfig c = VideoMAEConfig::tiny();
  c.num_frames = 16;
  c.img_size = 64;
  c.decoder_depth = 2;
  return c;
}

Tensor random_videos(std::mt19937_64& gen, const VideoMAEConfig& c, int64_t B) {
  Tensor v = Tensor::empty({B, c.channels, c.num_frames, c.img_size, c.img_size}, DType::f32);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = u(gen);
  return v;
}

video::TokenGrid grid_of(const VideoMAEConfig& c) { return {c.grid_t(), c.grid_hw(), c.grid_hw()}; }

// Biases, LayerNorm weights and the mask token moved off their init (zeros / ones) so every
// gradient path carries signal; the same perturbation on both models.
void perturb(VideoMAEPretrainModel& m, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  for (Param& p : m.params()) {
    if (p.value.ndim() == 2 || p.value.ndim() == 5) continue;
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] += u(gen);
  }
}

// Every gradient (tests/cuda/grad_compare.h).
void expect_grads_close(VideoMAEPretrainModel& want, VideoMAEPretrainModel& got, double tol, const std::string& what) {
  cuda_test::expect_grads_close(want.params(), got.params(), tol, what, seed_note());
}

// Sets the context's GEMM precision for a scope, then restores it.
struct PrecisionScope {
  cuda::CudaState& st;
  bool tf32;
  DType autocast;
  bool attn;
  PrecisionScope(Context& ctx, bool allow_tf32, bool autocast_bf16, bool attention_bf16 = false)
      : st(cuda::cuda_state(ctx)), tf32(st.allow_tf32), autocast(st.autocast), attn(st.attention_bf16) {
    st.allow_tf32 = allow_tf32;
    st.autocast = autocast_bf16 ? DType::bf16 : DType::f32;
    st.attention_bf16 = attention_bf16;
  }
  ~PrecisionScope() {
    st.allow_tf32 = tf32;
    st.autocast = autocast;
    st.attention_bf16 = attn;
  }
};

// Flat ids b * Np + j of a random selection of R tokens (repeats allowed) over B clips.
Tensor random_ids(std::mt19937_64& gen, int64_t R, int64_t total) {
  Tensor ids = Tensor::empty({R}, DType::i32);
  std::uniform_int_distribution<int32_t> u(0, int32_t(total - 1));
  for (int64_t r = 0; r < R; ++r) ids.data<int32_t>()[r] = u(gen);
  return ids;
}

TEST(CudaVideoOps, TubeletGatherAndTargetMatchTheCpu) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937_64 gen(test_seed("gather-target"));
  // 3 clips of 3 x 4 x 48 x 32. Tubelet 2 x 16: 2 x 3 x 2 = 12 tokens per clip, K = 1536 (a
  // multiple of the kernels' 256-thread block); tubelet 2 x 8: 2 x 6 x 4 = 48 tokens, K = 384 and
  // P = 128 per channel (the block-strided loops end on a partial pass); tubelet 1 x 4: 4 x 12 x 8
  // = 384 tokens, K = 48 (the block kernel's geometry).
  Tensor v = Tensor::empty({3, 3, 4, 48, 32}, DType::f32);
  std::normal_distribution<float> n(0.3f, 1.5f);
  for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = n(gen);
  const Tensor vg = v.to(Device::cuda);
  const std::vector<float> mean = {0.485f, 0.456f, 0.406f}, stdev = {0.229f, 0.224f, 0.225f};
  for (const ops::Tubelet tube : {ops::Tubelet{2, 16}, ops::Tubelet{2, 8}, ops::Tubelet{1, 4}}) {
    const int64_t tokens = 3 * (4 / tube.tubelet) * (48 / tube.patch) * (32 / tube.patch);
    const int64_t K = 3 * tube.tubelet * tube.patch * tube.patch, R = 29;
    SCOPED_TRACE("tubelet " + std::to_string(tube.tubelet) + " x " + std::to_string(tube.patch));
    const Tensor ids = random_ids(gen, R, tokens);
    Tensor cols_cpu = Tensor::empty({R, K}, DType::f32), tgt_cpu = Tensor::empty({R, K}, DType::f32);
    ops::tubelet_gather(cpu(), v, ids, tube, cols_cpu);
    ops::tubelet_target(cpu(), v, ids, tube, mean, stdev, tgt_cpu);
    const Tensor idg = ids.to(Device::cuda);
    Tensor cols = Tensor::empty({R, K}, DType::f32, Device::cuda), tgt = Tensor::empty({R, K}, DType::f32, Device::cuda);
    ops::tubelet_gather(gpu(), vg, idg, tube, cols);
    EXPECT_EQ(max_abs_diff(values(cols), values(cols_cpu)), 0.0) << "the gather is a copy; " << seed_note();
    EXPECT_GT(norm(values(tgt_cpu)), 1.0);
    // The warp-per-token kernel where it takes the geometry (2 x 16, 2 x 8), the block-per-token
    // kernel elsewhere (1 x 4: 16 pixels a channel, under a warp), each from a NaN-filled output,
    // with row 3's id out of the batch on the device (a zero row; the CPU refuses such ids, so
    // that row is compared with 0).
    const bool warp = tube.patch != 4;
    EXPECT_EQ(cuda::tubelet_target_warp_applies(ops::TubeletGeometry::of(3, 3, 4, 48, 32, tube.tubelet, tube.patch)),
              warp);
    Tensor ids_bad = ids.contiguous();
    ids_bad.data<int32_t>()[3] = -1;
    const Tensor idg_bad = ids_bad.to(Device::cuda);
    std::vector<double> want = values(tgt_cpu);
    std::fill(want.begin() + 3 * K, want.begin() + 4 * K, 0.0);
    Tensor nan_host = Tensor::empty({R, K}, DType::f32);
    std::fill(nan_host.data<float>(), nan_host.data<float>() + nan_host.numel(), std::nanf(""));
    tgt.copy_from(nan_host);
    ops::tubelet_target(gpu(), vg, idg_bad, tube, mean, stdev, tgt);
    const double d = max_abs_diff(values(tgt), want);
    EXPECT_LE(d, 1e-6) << (warp ? "warp kernel; " : "block kernel; ") << seed_note();
    std::printf("[ tubelet_target %dx%d, %s kernel ] max |cuda - cpu| %.3g\n", int(tube.tubelet), int(tube.patch),
                warp ? "warp" : "block", d);
    // An id outside [0, B Np) is an Error on the CPU (host ids are checked).
    Tensor bad = ids.contiguous();
    bad.data<int32_t>()[5] = int32_t(tokens);
    EXPECT_THROW(ops::tubelet_gather(cpu(), v, bad, tube, cols_cpu), Error);
  }
}

TEST(CudaVideoOps, MseRowsMatchesTheCpu) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937_64 gen(test_seed("mse"));
  for (const int64_t K : {int64_t(1536), int64_t(1000)}) {  // 1000: a partial last pass of the 256-thread loop
    SCOPED_TRACE("K " + std::to_string(K));
    const int64_t R = 37;
    Tensor pred = Tensor::empty({R, K}, DType::f32), target = Tensor::empty({R, K}, DType::f32);
    Tensor weight = Tensor::empty({R}, DType::u8);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int64_t i = 0; i < R * K; ++i) pred.data<float>()[i] = n(gen), target.data<float>()[i] = n(gen);
    for (int64_t r = 0; r < R; ++r) static_cast<uint8_t*>(weight.raw())[r] = uint8_t(r % 3 != 1);
    for (const bool weighted : {false, true}) {
      const double gscale = 2.0 / double(R * K);
      Tensor dp_cpu = Tensor::empty({R, K}, DType::f32);
      const double want = ops::mse_rows(cpu(), pred, target, weighted ? &weight : nullptr, gscale, dp_cpu);
      const Tensor pg = pred.to(Device::cuda), tg = target.to(Device::cuda), wg = weight.to(Device::cuda);
      Tensor dp = Tensor::empty({R, K}, DType::f32, Device::cuda);
      const double got = ops::mse_rows(gpu(), pg, tg, weighted ? &wg : nullptr, gscale, dp);
      EXPECT_LE(rel(got, want), 1e-12) << "weighted " << weighted << ": cuda " << got << " cpu " << want;
      EXPECT_LE(max_abs_diff(values(dp), values(dp_cpu)), 1e-7 * gscale * 10) << "weighted " << weighted;
      EXPECT_GT(want, 0.5 * double(R * K));  // two unit normals differ by ~2 per element squared
    }
  }
}

// ops::videomae_index on the GPU (one block per clip from the uploaded masks) against the CPU
// loop at ViT-B's geometry (1568 tokens a clip: runs of 7 positions a thread, a last thread
// with none), batch 128, v1 tube mask and v2 running-cell decoder mask: the same lists and
// loss weights, entry for entry. The device buffers start as 0xff bytes, so an entry the
// kernel misses shows.
TEST(CudaVideoOps, IndexListsMatchTheCpu) {
  REQUIRE_CUDA_DEVICE();
  const VideoMAEConfig c = VideoMAEConfig::base();
  const int64_t B = 128, Np = c.num_patches();
  const uint64_t seed = test_seed("index");
  const Tensor mask = video::tube_mask_batch(grid_of(c), 0.9, seed, 0, B);
  for (const bool v2 : {false, true}) {
    SCOPED_TRACE(v2 ? "v2 decoder mask" : "v1");
    const Tensor dmask = v2 ? video::running_cell_mask_batch(grid_of(c), 0.5, seed, 0, B) : Tensor();
    const uint8_t* mk = static_cast<const uint8_t*>(mask.raw());
    int64_t Nv = 0, Nd = 0;
    for (int64_t j = 0; j < Np; ++j) {
      Nv += mk[j] == 0;
      Nd += v2 ? static_cast<const uint8_t*>(dmask.raw())[j] == 0 : mk[j] != 0;
    }
    const int64_t n = 3 * B * Nv + 2 * B * Nd + 3 * B * (Nv + Nd);
    Tensor want = Tensor::empty({n}, DType::i32), want_w = Tensor::empty({B * Nd}, DType::u8);
    ops::videomae_index(cpu(), mask, v2 ? &dmask : nullptr, Nv, Nd, want, &want_w);
    Tensor got = Tensor::empty({n}, DType::i32, Device::cuda), got_w = Tensor::empty({B * Nd}, DType::u8, Device::cuda);
    ASSERT_EQ(cudaMemset(got.raw(), 0xff, got.nbytes()), cudaSuccess);
    ASSERT_EQ(cudaMemset(got_w.raw(), 0xff, got_w.nbytes()), cudaSuccess);
    ops::videomae_index(gpu(), mask, v2 ? &dmask : nullptr, Nv, Nd, got, &got_w);
    const Tensor g = got.to(Device::cpu), gw = got_w.to(Device::cpu);
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < n; ++i)
      if (g.data<int32_t>()[i] != want.data<int32_t>()[i] && wrong++ == 0) first = i;
    EXPECT_EQ(wrong, 0) << "first differing entry " << first << " of " << n;
    wrong = 0;
    for (int64_t i = 0; i < B * Nd; ++i)
      wrong += static_cast<const uint8_t*>(gw.raw())[i] != static_cast<const uint8_t*>(want_w.raw())[i];
    EXPECT_EQ(wrong, 0) << "loss weights";
  }
}

// One step on both devices from the same weights, clips and masks; v2 adds a decoder mask.
void compare_one_step(bool dual_masking) {
  const VideoMAEConfig c = test_config();
  const uint64_t seed = test_seed(dual_masking ? "step-v2" : "step-v1");
  std::mt19937_64 gen(seed);
  const int64_t B = 3;
  VideoMAEPretrainModel want = VideoMAEPretrainModel::random(c, seed);
  VideoMAEPretrainModel got = VideoMAEPretrainModel::random(c, seed);
  perturb(want, seed + 1);
  perturb(got, seed + 1);
  got.to(gpu());
  ASSERT_EQ(got.device(), Device::cuda);
  const Tensor v = random_videos(gen, c, B);
  const Tensor mask = video::tube_mask_batch(grid_of(c), 0.75, seed, 0, B);
  VideoMAEStepOptions o;
  o.keep_outputs = true;
  if (dual_masking) o.decoder_mask = video::running_cell_mask_batch(grid_of(c), 0.5, seed, 0, B);
  want.zero_grad();
  got.zero_grad();
  const VideoMAEStepStats sw = want.pretrain_step(cpu(), v, mask, o);
  const VideoMAEStepStats sg = got.pretrain_step(gpu(), v.to(Device::cuda), mask, o);
  const std::string what = dual_masking ? "v2 decoder mask" : "v1 tube mask";
  EXPECT_LE(rel(sg.loss, sw.loss), 1e-5) << what << ": loss cuda " << sg.loss << " cpu " << sw.loss << "; "
                                         << seed_note();
  EXPECT_EQ(sg.loss_tokens, sw.loss_tokens);
  EXPECT_EQ(sg.decoded_tokens, sw.decoded_tokens);
  EXPECT_LE(max_abs_diff(values(sg.target), values(sw.target)), 1e-6) << what;
  std::printf("[ %s ] loss cpu %.9g cuda %.9g (rel %.3g)\n", what.c_str(), sw.loss, sg.loss, rel(sg.loss, sw.loss));
  expect_grads_close(want, got, 1e-4, what);
}

TEST(CudaVideoMAE, StepMatchesTheCpu) {
  REQUIRE_CUDA_DEVICE();
  PrecisionScope fp32(gpu(), false, false);
  compare_one_step(false);
}

TEST(CudaVideoMAE, DualMaskingStepMatchesTheCpu) {
  REQUIRE_CUDA_DEVICE();
  PrecisionScope fp32(gpu(), false, false);
  compare_one_step(true);
}

TEST(CudaVideoMAE, AdamWStepsMatchTheCpu) {
  REQUIRE_CUDA_DEVICE();
  PrecisionScope fp32(gpu(), false, false);
  const VideoMAEConfig c = test_config();
  const uint64_t seed = test_seed("adamw");
  std::mt19937_64 gen(seed);
  const int64_t B = 2;
  VideoMAEPretrainModel want = VideoMAEPretrainModel::random(c, seed);
  VideoMAEPretrainModel got = VideoMAEPretrainModel::random(c, seed);
  got.to(gpu());
  const OptimizerConfig oc{.kind = OptimizerKind::adamw, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.05f, .max_grad_norm = 0.0f};
  Optimizer ow(oc, want.params()), og(oc, got.params());
  const Tensor v = random_videos(gen, c, B);
  const Tensor vg = v.to(Device::cuda);
  for (int step = 0; step < 4; ++step) {
    const Tensor mask = video::tube_mask_batch(grid_of(c), 0.75, seed, uint64_t(step * B), B);
    want.zero_grad();
    got.zero_grad();
    const double lw = want.pretrain_step(cpu(), v, mask, {}).loss;
    const double lg = got.pretrain_step(gpu(), vg, mask, {}).loss;
    ow.step(cpu(), oc.lr);
    og.step(gpu(), oc.lr);
    EXPECT_LE(rel(lg, lw), 1e-4) << "step " << step << ": cuda " << lg << " cpu " << lw << "; " << seed_note();
    std::printf("[ adamw step %d ] loss cpu %.9g cuda %.9g\n", step, lw, lg);
  }
}

// bf16 GEMMs (autocast), optionally with the tensor-core attention as well: the loss within 2e-2
// of the fp32 CPU loss, and not equal to it (the low-precision path did run).
void expect_bf16_step_near_fp32(bool attention_bf16) {
  VideoMAEConfig c = test_config();
  if (attention_bf16) {  // head size 64 (the tensor-core backward's instance) in both stacks
    c.dim = 128, c.heads = 2, c.decoder_dim = 64, c.decoder_heads = 1;
    c.validate();
  }
  const uint64_t seed = test_seed(attention_bf16 ? "bf16-attn" : "bf16");
  std::mt19937_64 gen(seed);
  VideoMAEPretrainModel want = VideoMAEPretrainModel::random(c, seed);
  VideoMAEPretrainModel got = VideoMAEPretrainModel::random(c, seed);
  got.to(gpu());
  const Tensor v = random_videos(gen, c, 2);
  const Tensor mask = video::tube_mask_batch(grid_of(c), 0.75, seed, 0, 2);
  PrecisionScope bf16(gpu(), false, true, attention_bf16);
  want.zero_grad();
  got.zero_grad();
  const double lw = want.pretrain_step(cpu(), v, mask, {}).loss;
  const double lg = got.pretrain_step(gpu(), v.to(Device::cuda), mask, {}).loss;
  EXPECT_LE(rel(lg, lw), 2e-2) << "bf16 " << lg << " fp32 cpu " << lw << "; " << seed_note();
  EXPECT_NE(lg, lw);
  std::printf("[ bf16%s ] loss fp32 cpu %.9g bf16 cuda %.9g (rel %.3g)\n", attention_bf16 ? " + tensor-core attention" : "",
              lw, lg, rel(lg, lw));
}

TEST(CudaVideoMAE, Bf16AutocastStaysNearFp32) {
  REQUIRE_CUDA_DEVICE();
  expect_bf16_step_near_fp32(false);
}

// Head size 32 in test_config() has no tensor-core backward instance, so this uses ViT-S-like
// heads (64) on the small clips: encoder 128/2 heads, decoder 64/1 head.
TEST(CudaVideoMAE, TensorCoreAttentionStepStaysNearFp32) {
  REQUIRE_CUDA_DEVICE();
  expect_bf16_step_near_fp32(true);
}

// bf16 block activations (VideoMAEStepOptions::activations): the CUDA step's error against the
// exact f32 CPU step at most twice that of the CPU's emulation of the same bf16 step (plus 1e-3),
// and not ~0 (an f32 CUDA step would pass the first check).
TEST(CudaVideoMAE, Bf16ActivationsWithinTwiceTheEmulationError) {
  REQUIRE_CUDA_DEVICE();
  PrecisionScope fp32(gpu(), false, false);
  VideoMAEConfig c = test_config();
  c.dim = 128, c.heads = 2, c.decoder_dim = 64, c.decoder_heads = 1;  // head size 64 in both stacks
  c.validate();
  const uint64_t seed = test_seed("bf16-activations");
  std::mt19937_64 gen(seed);
  VideoMAEPretrainModel exact = VideoMAEPretrainModel::random(c, seed);
  VideoMAEPretrainModel emulated = VideoMAEPretrainModel::random(c, seed);
  VideoMAEPretrainModel on_gpu = VideoMAEPretrainModel::random(c, seed);
  for (VideoMAEPretrainModel* m : {&exact, &emulated, &on_gpu}) perturb(*m, seed + 1);
  on_gpu.to(gpu());
  const Tensor v = random_videos(gen, c, 3);
  const Tensor mask = video::tube_mask_batch(grid_of(c), 0.75, seed, 0, 3);
  VideoMAEStepOptions o;
  const double l_exact = exact.pretrain_step(cpu(), v, mask, o).loss;
  o.activations = DType::bf16;
  const double l_emul = emulated.pretrain_step(cpu(), v, mask, o).loss;
  const double l_gpu = on_gpu.pretrain_step(gpu(), v.to(Device::cuda), mask, o).loss;
  std::printf("[ videomae bf16 activations ] loss f32 %.7f, emulated %.7f, cuda %.7f\n", l_exact, l_emul, l_gpu);
  EXPECT_LE(std::fabs(l_gpu - l_exact), 2 * std::fabs(l_emul - l_exact) + 1e-3 * l_exact) << seed_note();
  double global = 0, sq_emul = 0, sq_gpu = 0;
  for (Param& p : exact.params()) global += std::pow(norm(values(p.grad)), 2);
  global = std::sqrt(global);
  for (size_t i = 0; i < exact.params().size(); ++i) {
    const std::vector<double> e = values(exact.params()[i].grad), m = values(emulated.params()[i].grad),
                              g = values(on_gpu.params()[i].grad);
    const double scale = std::max(norm(e), 1e-2 * global);
    double de = 0, dg = 0;
    for (size_t j = 0; j < e.size(); ++j) de += (m[j] - e[j]) * (m[j] - e[j]), dg += (g[j] - e[j]) * (g[j] - e[j]);
    const double err_emul = std::sqrt(de) / scale, err_gpu = std::sqrt(dg) / scale;
    sq_emul += err_emul * err_emul;
    sq_gpu += err_gpu * err_gpu;
    EXPECT_LE(err_gpu, 2 * err_emul + 1e-3) << exact.params()[i].name << ": cuda " << err_gpu << ", emulation "
                                            << err_emul << "; " << seed_note();
  }
  std::printf("[ videomae bf16 activations ] rms gradient error cuda %.3g, emulation %.3g\n", std::sqrt(sq_gpu),
              std::sqrt(sq_emul));
  EXPECT_GE(std::sqrt(sq_gpu), 0.25 * std::sqrt(sq_emul)) << "the CUDA step looks f32, not bf16; " << seed_note();
}

TEST(CudaVideoMAE, SpeedSmokeVitBBatch32) {
  REQUIRE_CUDA_DEVICE();
  const VideoMAEConfig c = VideoMAEConfig::base();
  const int64_t B = 32;
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(c, 7);
  m.to(gpu());
  const OptimizerConfig oc{.kind = OptimizerKind::adamw, .lr = 1.2e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                           .weight_decay = 0.05f, .max_grad_norm = 0.0f};
  Optimizer opt(oc, m.params());
  std::mt19937_64 gen(7);
  const Tensor v = random_videos(gen, c, B).to(Device::cuda);
  for (const std::string prec : {"fp32", "tf32", "bf16", "bf16-tc", "bf16-act"}) {
    PrecisionScope p(gpu(), prec == "tf32", prec.rfind("bf16", 0) == 0, prec == "bf16-tc");
    VideoMAEStepOptions so;
    so.activations = prec == "bf16-act" ? DType::bf16 : DType::f32;
    cuda::allocator_reset_peak();
    std::vector<double> times;
    double loss = 0;
    for (int i = 0; i < 3; ++i) {
      const Tensor mask = video::tube_mask_batch(grid_of(c), 0.9, 7, uint64_t(i * B), B);
      gpu().synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      m.zero_grad();
      loss = m.pretrain_step(gpu(), v, mask, so).loss;
      opt.step(gpu(), oc.lr);
      gpu().synchronize();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    EXPECT_TRUE(std::isfinite(loss)) << prec;
    if (prec == "fp32" || prec == "bf16-act") {  // the allocator's peak against the count from the shapes
      video::VideoMAEFlopConfig fc = video::videomae_flop_preset("vit-b");
      fc.batch = B;
      const double est =
          video::videomae_pretrain_step_bytes(fc, /*recompute_gelu=*/true, so.activations).peak;
      const double got = double(cuda::allocator_stats().peak_allocated_bytes);
      EXPECT_GT(got, 0.75 * est) << "peak " << got / 1e9 << " GB, counted " << est / 1e9 << " GB";
      EXPECT_LT(got, 1.35 * est) << "peak " << got / 1e9 << " GB, counted " << est / 1e9 << " GB";
    }
    std::printf("[ ViT-B b%lld %s ] step %.1f ms (first %.1f), %.1f clips/s, peak %.0f MiB, loss %.4f\n",
                (long long)B, prec.c_str(), 1e3 * times.back(), 1e3 * times.front(), double(B) / times.back(),
                double(cuda::allocator_stats().peak_allocated_bytes) / 1048576.0, loss);
  }
}

}  // namespace
