// tests/cuda/test_cuda_bert_train.cc: BertTrainModel on a CUDA context (BertTrainModel::to)
// against the same model on the CPU: same weights, same host batch, the same steps.
//
// The CPU training path is itself tied to PyTorch (tests/python/train_parity.py) and to float64
// references (tests/test_bert_train.cc), so agreement here ties the CUDA path to them. Cases:
//   * one pretrain_step (MLM + NSP, dropout 0): a padded batch of unequal lengths (24, 17, 9, 20,
//     2 real tokens), a different number of masked positions per row (one row with none), an
//     ignored NSP label, a [PAD] id among the real tokens (nn.Embedding padding_idx: that row
//     adds nothing to the word-embedding gradient, checked on its own row);
//   * the same with dropout 0.1 (hidden and attention): the counter-based masks are the same
//     on both devices, so the results must agree as closely;
//   * 5 AdamW and 5 LAMB steps: the loss of every step;
//   * task_step for qa, seqcls and tokcls: loss, logits, gradients;
//   * a speed smoke: BERT-base, seq 128, batch 32, 2 timed steps (fp32 and TF32), printing
//     sequences/s for the record.
// TF32 is off in every comparison (CudaState::allow_tf32 = false: exact fp32 GEMMs).
//
// Tolerances: both sides are fp32 with different summation orders (OpenBLAS/oneDNN vs cuBLASLt,
// different reduction trees), ~1e-6 relative per op; through 2 layers and back the loss agrees
// to ~1e-6 (we allow 1e-5 relative) and each gradient to ~1e-5 of its norm (we allow 1e-4).
// A gradient whose exact value is 0 (the attention key biases: softmax ignores a constant per
// row) is rounding noise on both sides, so its error is measured against 1e-3 of the global
// gradient norm instead of its own. After 5 optimizer steps the losses may drift by the
// accumulated rounding (Adam divides tiny gradients by their own RMS): 1e-4 relative.
// Without a CUDA device every test skips.
//
// Seed: UNMASK_TEST_SEED (decimal or 0x hex), else a fixed default; each test mixes in its name.
#include <cuda_runtime.h>
#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_state.h"
#include "cuda_test_common.h"
#include "grad_compare.h"
#include "test_harness.h"
#include "unmask/context.h"
#include "unmask/tensor.h"
#include "unmask/train.h"

using namespace unmask;

using cuda_test::base_seed;
using cuda_test::cpu;
using cuda_test::gpu;

namespace {

// Sets CudaState::allow_tf32 for a scope (the GEMM plan cache keys on it), then restores it.
struct Tf32Scope {
  cuda::CudaState& st;
  bool saved;
  Tf32Scope(Context& ctx, bool on) : st(cuda::cuda_state(ctx)), saved(st.allow_tf32) { st.allow_tf32 = on; }
  ~Tf32Scope() { st.allow_tf32 = saved; }
};

uint64_t test_seed(const std::string& test) {
  uint64_t h = base_seed();
  for (const char c : test) h = (h ^ uint64_t(uint8_t(c))) * 0x100000001b3ull;
  return h;
}
std::string seed_note() { return "seed " + std::to_string(base_seed()) + " (UNMASK_TEST_SEED)"; }

BertConfig tiny_config() {
  BertConfig c;
  c.vocab_size = 1000;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 256;
  c.max_position_embeddings = 64;
  c.type_vocab_size = 2;
  c.num_labels = 3;
  return c;
}

Tensor i32(const Shape& shape) { return Tensor::zeros(shape, DType::i32); }

// A DLE-layout batch, right-padded to T: row b has lens[b] real tokens ([CLS] ... [SEP], segment
// 1 in the second half), masked[b] sorted masked positions (padded with 0) holding [MASK] (103)
// and their original ids, NSP labels 0, 1, -1 (ignored), ... With `pad_token`, row 1 holds the
// [PAD] id 0 at position 3 as a real token.
PretrainBatch make_pretrain_batch(std::mt19937_64& gen, const std::vector<int64_t>& lens, int64_t T,
                                  const std::vector<int64_t>& masked, int64_t P, int64_t vocab, bool pad_token) {
  const int64_t B = int64_t(lens.size());
  PretrainBatch b;
  b.input_ids = i32({B, T});
  b.segment_ids = i32({B, T});
  b.input_mask = i32({B, T});
  b.masked_lm_positions = i32({B, P});
  b.masked_lm_ids = i32({B, P});
  b.next_sentence_labels = i32({B});
  std::uniform_int_distribution<int32_t> tok(104, int32_t(vocab - 1));
  for (int64_t r = 0; r < B; ++r) {
    const int64_t len = lens[size_t(r)];
    int32_t* ids = b.input_ids.data<int32_t>() + r * T;
    for (int64_t t = 0; t < len; ++t) {
      ids[t] = t == 0 ? 101 : t == len - 1 ? 102 : tok(gen);
      b.segment_ids.data<int32_t>()[r * T + t] = t > len / 2 ? 1 : 0;
      b.input_mask.data<int32_t>()[r * T + t] = 1;
    }
    if (pad_token && r == 1 && len > 4) ids[3] = 0;
    std::vector<int32_t> cand;
    for (int64_t t = 1; t < len - 1; ++t)
      if (!(pad_token && r == 1 && t == 3)) cand.push_back(int32_t(t));
    std::shuffle(cand.begin(), cand.end(), gen);
    const int64_t m = std::min<int64_t>({masked[size_t(r)], P, int64_t(cand.size())});
    std::sort(cand.begin(), cand.begin() + m);
    for (int64_t j = 0; j < m; ++j) {
      const int32_t pos = cand[size_t(j)];
      b.masked_lm_positions.data<int32_t>()[r * P + j] = pos;
      b.masked_lm_ids.data<int32_t>()[r * P + j] = ids[pos];
      ids[pos] = 103;
    }
    b.next_sentence_labels.data<int32_t>()[r] = r % 3 == 2 ? -1 : int32_t(r % 2);
  }
  return b;
}

// The batch of the comparisons: unequal lengths, a row without masked positions, a [PAD] token.
PretrainBatch comparison_batch(std::mt19937_64& gen, int64_t vocab) {
  return make_pretrain_batch(gen, {24, 17, 9, 20, 2}, 24, {5, 3, 2, 0, 1}, 5, vocab, /*pad_token=*/true);
}

std::vector<double> values(const Tensor& t) { return cuda_test::host_values(t); }
double norm(const std::vector<double>& v) { return cuda_test::l2(v); }
double diff_norm(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}
double rel(double got, double want) { return std::fabs(got - want) / std::max(std::fabs(want), 1e-30); }

// Every gradient (tests/cuda/grad_compare.h), and the word-embedding row of the [PAD] id on its own.
void expect_grads_close(BertTrainModel& want, BertTrainModel& got, double tol, const std::string& what) {
  cuda_test::expect_grads_close(
      want.params(), got.params(), tol, what, seed_note(),
      [&](size_t i, const std::vector<double>& w, const std::vector<double>& g) {
        if (want.params()[i].name != "bert.embeddings.word_embeddings.weight") return;
        const int64_t C = want.params()[i].grad.size(1);
        const std::vector<double> w0(w.begin(), w.begin() + C), g0(g.begin(), g.begin() + C);
        EXPECT_LE(diff_norm(g0, w0), tol * std::max(norm(w0), 1e-30)) << what << ": word-embedding row 0 ([PAD])";
      });
}

void expect_stats_equal(const PretrainStats& want, const PretrainStats& got, const std::string& what) {
  EXPECT_LE(rel(got.loss, want.loss), 1e-5) << what << ": loss cuda " << got.loss << " cpu " << want.loss << "; "
                                            << seed_note();
  EXPECT_LE(rel(got.mlm_loss_sum, want.mlm_loss_sum), 1e-5) << what;
  EXPECT_LE(rel(got.nsp_loss_sum, want.nsp_loss_sum), 1e-5) << what;
  EXPECT_EQ(got.mlm_count, want.mlm_count) << what;
  EXPECT_EQ(got.nsp_count, want.nsp_count) << what;
  EXPECT_EQ(got.sequences, want.sequences) << what;
  EXPECT_EQ(got.tokens, want.tokens) << what;
  std::printf("[ %s ] loss cpu %.9g cuda %.9g (rel %.3g)\n", what.c_str(), want.loss, got.loss,
              rel(got.loss, want.loss));
}

const BertHeads kPretrainHeads{.pooler = true, .mlm = true, .nsp = true};

// One pretrain_step on both devices from the same weights and batch; compares stats and grads.
void compare_one_step(const char* test, const TrainStepOptions& so) {
  Tf32Scope exact(gpu(), false);
  const uint64_t seed = test_seed(test);
  std::mt19937_64 gen(seed);
  const BertConfig cfg = tiny_config();
  BertTrainModel want = BertTrainModel::random(cfg, kPretrainHeads, seed);
  BertTrainModel got = BertTrainModel::random(cfg, kPretrainHeads, seed);
  got.to(gpu());
  ASSERT_EQ(got.device(), Device::cuda);
  const PretrainBatch batch = comparison_batch(gen, cfg.vocab_size);
  // Gradients accumulate: a second micro-batch on top of the first (micro 1) checks the += too.
  PretrainStats sw = want.pretrain_step(cpu(), batch, so), sg = got.pretrain_step(gpu(), batch, so);
  expect_stats_equal(sw, sg, test);
  TrainStepOptions so2 = so;
  so2.micro = so.micro + 1;
  sw = want.pretrain_step(cpu(), batch, so2);
  sg = got.pretrain_step(gpu(), batch, so2);
  expect_stats_equal(sw, sg, std::string(test) + " (2nd micro-batch)");
  expect_grads_close(want, got, 1e-4, test);
}

}  // namespace

TEST(CudaBertTrain, PretrainStepMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  TrainStepOptions so;
  so.hidden_dropout = so.attention_dropout = 0.0f;
  so.loss_scale = 0.5f;
  compare_one_step("PretrainStepMatchesCpu", so);
}

TEST(CudaBertTrain, PretrainStepWithDropoutMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  TrainStepOptions so;
  so.hidden_dropout = so.attention_dropout = 0.1f;
  so.seed = 99, so.step = 3, so.micro = 2;
  compare_one_step("PretrainStepWithDropoutMatchesCpu", so);
}

TEST(CudaBertTrain, OptimizerStepsMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  Tf32Scope exact(gpu(), false);
  const BertConfig cfg = tiny_config();
  for (const OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::lamb}) {
    const std::string what = kind == OptimizerKind::adamw ? "adamw" : "lamb";
    const uint64_t seed = test_seed("OptimizerStepsMatchCpu" + what);
    std::mt19937_64 gen(seed);
    BertTrainModel want = BertTrainModel::random(cfg, kPretrainHeads, seed);
    BertTrainModel got = BertTrainModel::random(cfg, kPretrainHeads, seed);
    got.to(gpu());
    const OptimizerConfig oc{.kind = kind, .lr = kind == OptimizerKind::adamw ? 2e-3f : 1e-2f};
    Optimizer ow(oc, want.params()), og(oc, got.params());
    for (int64_t step = 0; step < 5; ++step) {
      const PretrainBatch batch = comparison_batch(gen, cfg.vocab_size);
      TrainStepOptions so;
      so.hidden_dropout = so.attention_dropout = 0.1f;
      so.seed = seed, so.step = step;
      want.zero_grad();
      got.zero_grad();
      const PretrainStats sw = want.pretrain_step(cpu(), batch, so), sg = got.pretrain_step(gpu(), batch, so);
      EXPECT_LE(rel(sg.loss, sw.loss), 1e-4) << what << " step " << step << ": loss cuda " << sg.loss << " cpu "
                                             << sw.loss << "; " << seed_note();
      const OptimizerStepStats nw = ow.step(cpu(), oc.lr), ng = og.step(gpu(), oc.lr);
      EXPECT_LE(rel(ng.grad_norm, nw.grad_norm), 1e-4) << what << " step " << step << ": grad norm";
      std::printf("[ %s step %lld ] loss cpu %.7f cuda %.7f, grad norm cpu %.6g cuda %.6g\n", what.c_str(),
                  (long long)step, sw.loss, sg.loss, nw.grad_norm, ng.grad_norm);
    }
    EXPECT_EQ(og.step_count(), 5);
    // The optimizer state comes back to the host (checkpoints).
    const OptimizerState st = og.state();
    ASSERT_FALSE(st.tensors.empty());
    EXPECT_EQ(st.tensors[0].second.device(), Device::cpu);
  }
}

TEST(CudaBertTrain, TaskStepsMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  Tf32Scope exact(gpu(), false);
  const BertConfig cfg = tiny_config();
  const std::vector<int64_t> lens = {24, 17, 9, 20, 2};
  const int64_t B = int64_t(lens.size()), T = 24, L = cfg.num_labels;
  for (const Task task : {Task::qa, Task::seqcls, Task::tokcls}) {
    const char* names[] = {"qa", "seqcls", "tokcls"};
    const std::string what = std::string("task_step ") + names[int(task)];
    const uint64_t seed = test_seed("TaskStepsMatchCpu" + what);
    std::mt19937_64 gen(seed);
    const BertHeads heads{.pooler = task == Task::seqcls, .qa = task == Task::qa, .seqcls = task == Task::seqcls,
                          .tokcls = task == Task::tokcls};
    BertTrainModel want = BertTrainModel::random(cfg, heads, seed);
    BertTrainModel got = BertTrainModel::random(cfg, heads, seed);
    got.to(gpu());
    // A padded batch with its labels (some ignored / outside the sequence).
    const PretrainBatch pb = make_pretrain_batch(gen, lens, T, {0, 0, 0, 0, 0}, 1, cfg.vocab_size, true);
    TaskBatch tb;
    tb.input_ids = pb.input_ids;
    tb.token_type_ids = pb.segment_ids;
    tb.attention_mask = pb.input_mask;
    if (task == Task::qa) {
      tb.start_positions = i32({B});
      tb.end_positions = i32({B});
      for (int64_t b = 0; b < B; ++b) {
        const int64_t len = lens[size_t(b)];
        tb.start_positions.data<int32_t>()[b] = int32_t(b == 3 ? len + 2 : std::uniform_int_distribution<int64_t>(0, len - 1)(gen));
        tb.end_positions.data<int32_t>()[b] = int32_t(std::uniform_int_distribution<int64_t>(0, len - 1)(gen));
      }
    } else if (task == Task::seqcls) {
      tb.labels = i32({B});
      for (int64_t b = 0; b < B; ++b) tb.labels.data<int32_t>()[b] = b == 2 ? -100 : int32_t(b % L);
    } else {
      tb.labels = i32({B, T});
      for (int64_t i = 0; i < B * T; ++i) tb.labels.data<int32_t>()[i] = i % 7 == 3 ? -100 : int32_t(gen() % uint64_t(L));
    }
    TrainStepOptions so;
    so.hidden_dropout = so.attention_dropout = 0.0f;
    const TaskResult rw = want.task_step(cpu(), tb, task, so), rg = got.task_step(gpu(), tb, task, so);
    EXPECT_LE(rel(rg.loss, rw.loss), 1e-5) << what << ": loss cuda " << rg.loss << " cpu " << rw.loss << "; " << seed_note();
    EXPECT_EQ(rg.count, rw.count) << what;
    EXPECT_EQ(rg.correct, rw.correct) << what;
    ASSERT_EQ(rg.logits.device(), Device::cpu) << what;
    ASSERT_EQ(rg.logits.shape(), rw.logits.shape()) << what;
    const std::vector<double> lw = values(rw.logits), lg = values(rg.logits);
    double lmax = 0, ldiff = 0;
    for (size_t i = 0; i < lw.size(); ++i) lmax = std::max(lmax, std::fabs(lw[i])), ldiff = std::max(ldiff, std::fabs(lg[i] - lw[i]));
    EXPECT_LE(ldiff, 1e-4 * lmax + 1e-7) << what << ": logits max |diff| " << ldiff << " (max |logit| " << lmax << ")";
    std::printf("[ %s ] loss cpu %.9g cuda %.9g, logits max |diff| %.3g of %.3g\n", what.c_str(), rw.loss, rg.loss,
                ldiff, lmax);
    expect_grads_close(want, got, 1e-4, what);
  }
}

TEST(CudaBertTrain, ModelMovesAndSavesExactly) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = tiny_config();
  BertTrainModel want = BertTrainModel::random(cfg, kPretrainHeads, 5);
  BertTrainModel got = BertTrainModel::random(cfg, kPretrainHeads, 5);
  got.to(gpu());
  // A context on the other device is an error naming both, not a crash.
  std::mt19937_64 gen(1);
  const PretrainBatch pb = comparison_batch(gen, cfg.vocab_size);
  EXPECT_THROW(got.pretrain_step(cpu(), pb, TrainStepOptions{}), Error);
  // The copy to the device and back is exact, and save_pretrained writes the same bytes.
  const std::vector<Param>& pw = want.params();
  const std::vector<Param>& pg = got.params();
  for (size_t i = 0; i < pw.size(); ++i)
    EXPECT_TRUE(values(pw[i].value) == values(pg[i].value)) << pw[i].name << ": moving to the device changed it";
  char tmpl[] = "/tmp/unmask-cuda-bert-train-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  want.save_pretrained(dir + "/cpu", "");
  got.save_pretrained(dir + "/cuda", "");
  auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string a = slurp(dir + "/cpu/model.safetensors"), b = slurp(dir + "/cuda/model.safetensors");
  EXPECT_GT(a.size(), size_t(100000));
  EXPECT_TRUE(a == b) << "the safetensors saved from the CUDA model differ (" << a.size() << " vs " << b.size()
                      << " bytes)";
  std::filesystem::remove_all(dir);
}

// bf16 activations (TrainStepOptions::activations): the CUDA step (bf16 rows through the
// tensor-core attention, cuBLASLt bf16 GEMMs, the bf16 row kernels) against the exact f32 CPU
// step. The yardstick is the CPU's emulation of the same bf16 step (tests/test_train_bf16.cc:
// f32 arithmetic, each stored activation rounded once): the CUDA error may be at most twice the
// emulation's (the rule for low-precision kernels), plus 1e-3 for rounding-boundary luck.
TEST(CudaBertTrain, Bf16ActivationsWithinTwiceTheEmulationError) {
  REQUIRE_CUDA_DEVICE();
  Tf32Scope exact(gpu(), false);
  const uint64_t seed = test_seed("Bf16Activations");
  std::mt19937_64 gen(seed);
  BertConfig cfg = tiny_config();
  cfg.hidden_size = 128;  // head size 64: the tensor-core attention's
  cfg.num_attention_heads = 2;
  cfg.max_position_embeddings = 160;
  BertTrainModel exact_model = BertTrainModel::random(cfg, kPretrainHeads, seed);
  BertTrainModel emulated = BertTrainModel::random(cfg, kPretrainHeads, seed);
  BertTrainModel on_gpu = BertTrainModel::random(cfg, kPretrainHeads, seed);
  on_gpu.to(gpu());
  // A 150-token row: three 64-row tiles of queries and keys at the [N, 3C] row stride (the
  // online-softmax rescale, the backward's loops over tiles), beside short rows.
  const PretrainBatch batch =
      make_pretrain_batch(gen, {150, 37, 64, 9}, 150, {5, 3, 4, 1}, 5, cfg.vocab_size, /*pad_token=*/true);
  TrainStepOptions so;
  so.seed = 7;
  so.step = 2;
  // Two micro-batches: the second accumulates (+=) into the f32 gradients through the bf16 GEMMs.
  auto step_pair = [&](BertTrainModel& m, Context& ctx, DType activations) {
    TrainStepOptions o = so;
    o.activations = activations;
    const double first = m.pretrain_step(ctx, batch, o).loss;
    o.micro = 1;
    return first + m.pretrain_step(ctx, batch, o).loss;
  };
  const double l_exact = step_pair(exact_model, cpu(), DType::f32);
  const double l_emul = step_pair(emulated, cpu(), DType::bf16);
  const double l_gpu = step_pair(on_gpu, gpu(), DType::bf16);
  const double loss_emul = std::fabs(l_emul - l_exact), loss_gpu = std::fabs(l_gpu - l_exact);
  std::printf("[ bf16 activations ] loss (2 micro-batches) f32 %.7f, emulated bf16 %.7f, cuda bf16 %.7f\n", l_exact,
              l_emul, l_gpu);
  EXPECT_LE(loss_gpu, 2 * loss_emul + 1e-3 * std::fabs(l_exact)) << seed_note();
  double worst_ratio = 0, sq_emul = 0, sq_gpu = 0;
  std::string worst;
  for (size_t i = 0; i < exact_model.params().size(); ++i) {
    const std::string& name = exact_model.params()[i].name;
    const std::vector<double> e = values(exact_model.params()[i].grad), m = values(emulated.params()[i].grad),
                              g = values(on_gpu.params()[i].grad);
    if (name.find("attention.self.key.bias") != std::string::npos) {  // exactly 0: rounding noise only
      EXPECT_LE(norm(g), 1e-2 * norm(values(exact_model.params()[i - 2].grad))) << name << "; " << seed_note();
      continue;
    }
    const double scale = std::max(norm(e), 1e-30);
    const double err_emul = diff_norm(m, e) / scale, err_gpu = diff_norm(g, e) / scale;
    sq_emul += err_emul * err_emul;
    sq_gpu += err_gpu * err_gpu;
    EXPECT_LE(err_gpu, 2 * err_emul + 1e-3) << name << ": cuda " << err_gpu << ", emulation " << err_emul << "; "
                                            << seed_note();
    const double ratio = err_gpu / std::max(err_emul, 1e-6);
    if (ratio > worst_ratio) worst_ratio = ratio, worst = name;
  }
  std::printf("[ bf16 activations ] worst gradient error ratio cuda / emulation %.2f (%s); rms error cuda %.3g, "
              "emulation %.3g\n", worst_ratio, worst.c_str(), std::sqrt(sq_gpu), std::sqrt(sq_emul));
  // The CUDA step must carry bf16 rounding error of its own: an f32 step would be ~1e-6 off.
  EXPECT_GE(std::sqrt(sq_gpu), 0.25 * std::sqrt(sq_emul)) << "the CUDA step looks f32, not bf16; " << seed_note();
}

TEST(CudaBertTrain, BenchBertBaseSeq128Batch32) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = BertConfig::base();
  const int64_t B = 32, T = 128, P = 20;
  BertTrainModel model = BertTrainModel::random(cfg, kPretrainHeads, 1234);
  model.to(gpu());
  const OptimizerConfig oc{.kind = OptimizerKind::lamb, .lr = 6e-3f};
  Optimizer opt(oc, model.params());
  std::mt19937_64 gen(1234);
  const PretrainBatch batch =
      make_pretrain_batch(gen, std::vector<int64_t>(size_t(B), T), T, std::vector<int64_t>(size_t(B), P), P,
                          cfg.vocab_size, false);
  const double flops = bert_train_flops(cfg, std::vector<int64_t>(size_t(B), T), B * P);
  const cuda::CudaState& cs = cuda::cuda_state(gpu());
  cuda::CudaState& st = cuda::cuda_state(gpu());
  // fp32, tf32, bf16 GEMM operands (autocast) with f32 activations, and bf16 activations.
  for (const char* mode : {"fp32", "tf32", "bf16", "bf16-act"}) {
    const bool tf32 = std::string(mode) == "tf32", bf16 = std::string(mode).rfind("bf16", 0) == 0;
    Tf32Scope scope(gpu(), tf32);
    const DType saved_autocast = st.autocast;
    st.autocast = bf16 ? DType::bf16 : DType::f32;
    double best = 1e30, loss = 0;
    for (int i = 0; i < 3; ++i) {  // 1 warmup + 2 timed, the faster one reported
      TrainStepOptions so;
      so.seed = 1, so.step = opt.step_count();
      so.activations = std::string(mode) == "bf16-act" ? DType::bf16 : DType::f32;
      gpu().synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      model.zero_grad();
      const PretrainStats s = model.pretrain_step(gpu(), batch, so);
      opt.step(gpu(), oc.lr);
      gpu().synchronize();
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) best = std::min(best, dt);
      loss = s.loss;
    }
    st.autocast = saved_autocast;
    EXPECT_TRUE(std::isfinite(loss)) << mode << ": loss " << loss;
    const double peak = bf16 ? 989.4e12 : tf32 ? 494.7e12 : 67e12;  // H100 SXM dense (app/cli.cc)
    std::printf("[ bench ] 1x %s BERT-base seq %lld batch %lld %s (LAMB, dropout 0.1): %.1f sequences/s, %.1f ms/step, "
                "%.1f TFLOP/s, MFU %.1f%% of %.1f TFLOP/s; loss %.4f\n",
                cs.props.name, (long long)T, (long long)B, mode, double(B) / best, best * 1e3,
                flops / best / 1e12, 100.0 * flops / best / peak, peak / 1e12, loss);
  }
}
