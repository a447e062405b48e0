// tests/test_bert_train.cc: BertTrainModel on tiny random models: the loss against the inference
// forward, the gradient against central differences (dropout on), padding independence, dropout
// reproducibility, parameter names, save_pretrained round trips, head creation/dropping, the
// fine-tuning heads, and bad batches. PyTorch parity of every gradient is
// tests/python/train_parity.py.
#include <gtest/gtest.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "io/file.h"
#include "bert_train_test_util.h"
#include "grad_error_util.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "unmask/bert.h"
#include "unmask/train.h"
#include "temp_dir.h"

using namespace unmask;
using unmask::test::TestRng;
using unmask::test::i32;
using unmask::test::jitter;
using unmask::test::kPretraining;
using unmask::test::make_batch;
namespace fs = std::filesystem;

namespace {

BertConfig tiny(HiddenAct act = HiddenAct::gelu) {
  BertConfig c;
  c.vocab_size = 61;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 32;
  c.max_position_embeddings = 32;
  c.num_labels = 3;
  c.hidden_act = act;
  return c;
}

using unmask::test::TempDir;

TrainStepOptions no_dropout() {
  TrainStepOptions o;
  o.hidden_dropout = o.attention_dropout = 0.0f;
  return o;
}

std::vector<std::vector<float>> grads_of(BertTrainModel& m) { return test::grads_of(m.params()); }

Param& param(BertTrainModel& m, const std::string& name) {
  for (Param& p : m.params())
    if (p.name == name) return p;
  throw Error("no param ", name);
}

// -log softmax(row)[target] in double.
double xent(const float* row, int64_t V, int64_t target) {
  double mx = row[0];
  for (int64_t j = 1; j < V; ++j) mx = std::max(mx, double(row[j]));
  double s = 0;
  for (int64_t j = 0; j < V; ++j) s += std::exp(double(row[j]) - mx);
  return std::log(s) + mx - double(row[target]);
}

}  // namespace

TEST(BertTrain, ParamNamesOrderAndWeightDecay) {
  BertTrainModel m = BertTrainModel::random(tiny(), kPretraining, 1);
  std::vector<std::string> names;
  for (const Param& p : m.params()) {
    names.push_back(p.name);
    EXPECT_TRUE(p.value.is_contiguous() && p.grad.is_contiguous()) << p.name;
    EXPECT_EQ(p.value.shape(), p.grad.shape()) << p.name;
    const bool nd = p.name.find("bias") != std::string::npos || p.name.find("LayerNorm") != std::string::npos;
    EXPECT_EQ(p.weight_decay, !nd) << p.name;
  }
  ASSERT_EQ(names.size(), size_t(5 + 2 * 16 + 2 + 5 + 2));
  EXPECT_EQ(names[0], "bert.embeddings.word_embeddings.weight");
  EXPECT_EQ(names[5], "bert.encoder.layer.0.attention.self.query.weight");
  EXPECT_EQ(names[9], "bert.encoder.layer.0.attention.self.value.weight");
  EXPECT_EQ(names[37], "bert.pooler.dense.weight");
  EXPECT_EQ(names[39], "cls.predictions.bias");
  EXPECT_EQ(names.back(), "cls.seq_relationship.bias");
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  // q, k, v are consecutive row slices of one fused buffer
  const Param& q = param(m, "bert.encoder.layer.1.attention.self.query.weight");
  const Param& k = param(m, "bert.encoder.layer.1.attention.self.key.weight");
  const Param& v = param(m, "bert.encoder.layer.1.attention.self.value.weight");
  EXPECT_EQ(k.value.data<float>(), q.value.data<float>() + 16 * 16);
  EXPECT_EQ(v.grad.data<float>(), k.grad.data<float>() + 16 * 16);
}

TEST(BertTrain, LossEqualsInferenceForwardLoss) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  BertTrainModel m = BertTrainModel::random(tiny(HiddenAct::gelu_tanh), kPretraining, rng.seed());
  jitter(m, rng);
  Context ctx({.num_threads = 2});
  const std::vector<int64_t> lens = {12, 7, 10};
  PretrainBatch batch = make_batch(rng, lens, 14, m.config().vocab_size);
  TrainStepOptions o = no_dropout();
  o.backward = false;
  PretrainStats st = m.pretrain_step(ctx, batch, o);

  // The same loss from BertModel's logits on the padded batch, computed here in double.
  BertModel inf = m.to_inference_model();
  BertInput in;
  in.input_ids = batch.input_ids;
  in.token_type_ids = batch.segment_ids;
  in.attention_mask = batch.input_mask;
  BertOutputs out = inf.forward(ctx, in, {.pack_weights = false});
  const int64_t V = m.config().vocab_size, T = 14, P = 4;
  double mlm = 0, nsp = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t j = 0; j < P; ++j) {
      const int32_t p = batch.masked_lm_positions.data<int32_t>()[b * P + j];
      if (p == 0) break;
      mlm += xent(out.mlm_logits.data<float>() + (b * T + p) * V, V, batch.masked_lm_ids.data<int32_t>()[b * P + j]);
      ++count;
    }
    nsp += xent(out.nsp_logits.data<float>() + b * 2, 2, batch.next_sentence_labels.data<int32_t>()[b]);
  }
  const double want = mlm / double(count) + nsp / 3.0;
  EXPECT_EQ(st.mlm_count, count);
  EXPECT_EQ(st.nsp_count, 3);
  EXPECT_EQ(st.tokens, 29);
  EXPECT_NEAR(st.loss, want, 2e-5 * want);
  // backward = true computes the same loss
  PretrainStats st2 = m.pretrain_step(ctx, batch, no_dropout());
  EXPECT_DOUBLE_EQ(st2.loss, st.loss);
}

// Central differences on random entries of every kind of parameter, with dropout ON (the masks
// are a pure function of the options, so the loss is a deterministic function of the weights).
TEST(BertTrain, GradientMatchesCentralDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  BertTrainModel m = BertTrainModel::random(tiny(), kPretraining, rng.seed());
  jitter(m, rng);
  Context ctx({.num_threads = 2});
  PretrainBatch batch = make_batch(rng, {11, 6, 9}, 12, m.config().vocab_size);
  TrainStepOptions o;
  o.hidden_dropout = 0.1f;
  o.attention_dropout = 0.1f;
  o.seed = 7;
  o.step = 3;
  o.loss_scale = 1.0f;
  m.zero_grad();
  m.pretrain_step(ctx, batch, o);
  TrainStepOptions fwd = o;
  fwd.backward = false;
  int checked = 0, bad = 0;
  for (Param& p : m.params()) {
    // the entry with the largest gradient, and a random one when it is not tiny
    const float* g = p.grad.data<float>();
    int64_t top = 0;
    for (int64_t i = 1; i < p.grad.numel(); ++i)
      if (std::fabs(g[i]) > std::fabs(g[top])) top = i;
    const int64_t rnd = rng.integer(0, p.grad.numel() - 1);
    for (int64_t i : {top, rnd}) {
      if (i == rnd && std::fabs(g[i]) < 1e-3f) continue;
      float* w = p.value.data<float>() + i;
      const float saved = *w, h = 1e-2f;
      *w = saved + h;
      const double lp = m.pretrain_step(ctx, batch, fwd).loss;
      *w = saved - h;
      const double lm = m.pretrain_step(ctx, batch, fwd).loss;
      *w = saved;
      const double fd = (lp - lm) / (2.0 * double(h));
      const double tol = 2e-4 + 2e-2 * std::fabs(fd);
      ++checked;
      if (std::fabs(fd - double(g[i])) > tol) {
        ++bad;
        ADD_FAILURE() << p.name << "[" << i << "]: backward " << g[i] << " vs central difference " << fd;
      }
    }
  }
  EXPECT_GE(checked, 40);
  EXPECT_EQ(bad, 0);
}

TEST(BertTrain, PaddingDoesNotChangeGradients) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  BertTrainModel m = BertTrainModel::random(tiny(), kPretraining, rng.seed());
  jitter(m, rng);
  Context ctx({.num_threads = 2});
  TestRng r1 = rng, r2 = rng;  // the same real tokens
  PretrainBatch tight = make_batch(r1, {9, 5, 7}, 9, m.config().vocab_size);
  PretrainBatch wide = make_batch(r2, {9, 5, 7}, 20, m.config().vocab_size, /*pad_fill=*/13);  // garbage padding
  m.zero_grad();
  const double l1 = m.pretrain_step(ctx, tight, no_dropout()).loss;
  auto g1 = grads_of(m);
  m.zero_grad(ctx);  // the context's variant (ops::zero_many): g2 == g1 only if it zeroed every grad
  const double l2 = m.pretrain_step(ctx, wide, no_dropout()).loss;
  auto g2 = grads_of(m);
  EXPECT_EQ(l1, l2);
  ASSERT_EQ(g1.size(), g2.size());
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_EQ(g1[i], g2[i]) << m.params()[i].name;
  // gradients accumulate over calls until zero_grad
  m.pretrain_step(ctx, wide, no_dropout());
  const Param& p = m.params()[7];
  for (int64_t i = 0; i < p.grad.numel(); ++i) ASSERT_FLOAT_EQ(p.grad.data<float>()[i], 2 * g2[7][size_t(i)]);
}

TEST(BertTrain, DropoutMasksReproducibleAndDistinct) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  BertTrainModel m = BertTrainModel::random(tiny(), kPretraining, rng.seed());
  Context ctx({.num_threads = 2});
  PretrainBatch batch = make_batch(rng, {10, 8, 6}, 10, m.config().vocab_size);
  auto run = [&](uint64_t seed, int64_t step, int64_t micro) {
    TrainStepOptions o;
    o.seed = seed;
    o.step = step;
    o.micro = micro;
    m.zero_grad();
    const double loss = m.pretrain_step(ctx, batch, o).loss;
    return std::make_pair(loss, grads_of(m));
  };
  auto a = run(1, 5, 0), b = run(1, 5, 0), c = run(1, 5, 1), d = run(1, 6, 0), e = run(2, 5, 0);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
  EXPECT_NE(a.first, c.first);
  EXPECT_NE(a.first, d.first);
  EXPECT_NE(a.first, e.first);
  m.zero_grad();
  EXPECT_NE(a.first, m.pretrain_step(ctx, batch, no_dropout()).loss);
}

TEST(BertTrain, SavePretrainedRoundTrip) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  BertTrainModel m = BertTrainModel::random(tiny(), kPretraining, rng.seed());
  jitter(m, rng);
  TempDir d;
  const std::string vocab = (d.path / "v.txt").string();
  io::write_file_atomic(vocab, "[PAD]\n[UNK]\n");
  const std::string dir = (d.path / "ckpt").string();
  m.save_pretrained(dir, vocab);
  m.save_pretrained(dir, vocab);  // replaces the existing directory
  EXPECT_EQ(io::read_file(dir + "/vocab.txt"), "[PAD]\n[UNK]\n");
  EXPECT_NE(io::read_file(dir + "/config.json").find("BertForPreTraining"), std::string::npos);
  int entries = 0;
  for (auto it = fs::directory_iterator(d.path); it != fs::directory_iterator(); ++it) ++entries;
  EXPECT_EQ(entries, 2) << "temporary or old directories left behind";

  Context ctx({.num_threads = 2});
  PretrainBatch batch = make_batch(rng, {8, 5}, 8, m.config().vocab_size);
  BertInput in;
  in.input_ids = batch.input_ids;
  in.token_type_ids = batch.segment_ids;
  in.attention_mask = batch.input_mask;
  BertOutputs a = m.to_inference_model().forward(ctx, in);
  BertOutputs b = BertModel::load(dir).forward(ctx, in);
  for (auto [x, y] : {std::pair{&a.mlm_logits, &b.mlm_logits}, {&a.nsp_logits, &b.nsp_logits}, {&a.pooler_output, &b.pooler_output}}) {
    ASSERT_TRUE(x->defined() && y->defined());
    ASSERT_EQ(x->shape(), y->shape());
    EXPECT_EQ(0, std::memcmp(x->raw(), y->raw(), x->nbytes()));
  }
  BertTrainModel back = BertTrainModel::load(dir, kPretraining, 0);
  ASSERT_EQ(back.params().size(), m.params().size());
  for (size_t i = 0; i < m.params().size(); ++i) {
    EXPECT_EQ(back.params()[i].name, m.params()[i].name);
    EXPECT_EQ(0, std::memcmp(back.params()[i].value.raw(), m.params()[i].value.raw(), m.params()[i].value.nbytes()));
  }
  EXPECT_EQ(back.pretrain_step(ctx, batch, no_dropout()).loss, m.pretrain_step(ctx, batch, no_dropout()).loss);
}

TEST(BertTrain, LoadCreatesMissingHeadsAndDropsOthers) {
  BertTrainModel m = BertTrainModel::random(tiny(), kPretraining, 3);
  TempDir d;
  const std::string dir = (d.path / "pre").string();
  m.save_pretrained(dir, "");
  BertTrainModel qa = BertTrainModel::load(dir, BertHeads{.qa = true}, 9);
  std::set<std::string> names;
  for (const Param& p : qa.params()) names.insert(p.name);
  EXPECT_TRUE(names.count("qa_outputs.weight") && names.count("qa_outputs.bias"));
  EXPECT_FALSE(names.count("bert.pooler.dense.weight") || names.count("cls.predictions.bias") ||
               names.count("cls.seq_relationship.weight"));
  EXPECT_EQ(0, std::memcmp(param(qa, "bert.encoder.layer.1.output.dense.weight").value.raw(),
                           param(m, "bert.encoder.layer.1.output.dense.weight").value.raw(), 16 * 32 * 4));
  const Param& w = param(qa, "qa_outputs.weight");
  double ss = 0;
  for (int64_t i = 0; i < w.value.numel(); ++i) ss += double(w.value.data<float>()[i]) * w.value.data<float>()[i];
  EXPECT_NEAR(std::sqrt(ss / double(w.value.numel())), 0.02, 0.008);  // normal(0, 0.02)
  const std::string qdir = (d.path / "qa").string();
  qa.save_pretrained(qdir, "");
  EXPECT_NE(io::read_file(qdir + "/config.json").find("BertForQuestionAnswering"), std::string::npos);
  EXPECT_TRUE(BertModel::load(qdir).heads().qa);
  BertTrainModel seq = BertTrainModel::load(dir, BertHeads{.seqcls = true}, 9);
  EXPECT_EQ(param(seq, "classifier.weight").value.shape(), Shape({3, 16}));
  EXPECT_TRUE(seq.heads().pooler);
}

TEST(BertTrain, TaskStepsRunAndLearn) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const int64_t B = 3, T = 10;
  const std::vector<int64_t> lens = {10, 6, 8};
  std::vector<int32_t> ids(B * T, 0), mask(B * T, 0), tok_labels(B * T, -100);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lens[b]; ++t) {
      ids[b * T + t] = int32_t(rng.integer(1, 60));
      mask[b * T + t] = 1;
      tok_labels[b * T + t] = t == 0 ? -100 : int32_t(rng.integer(0, 2));
    }
  for (Task task : {Task::qa, Task::seqcls, Task::tokcls}) {
    SCOPED_TRACE(int(task));
    BertHeads h;
    h.qa = task == Task::qa;
    h.seqcls = task == Task::seqcls;
    h.tokcls = task == Task::tokcls;
    BertTrainModel m = BertTrainModel::random(tiny(), h, rng.seed());
    TaskBatch batch;
    batch.input_ids = i32({B, T}, ids);
    batch.attention_mask = i32({B, T}, mask);
    batch.start_positions = i32({B}, {3, 1, 12});  // 12: outside the sequence, ignored
    batch.end_positions = i32({B}, {5, 4, 6});
    batch.labels = task == Task::seqcls ? i32({B}, {0, 2, 1}) : i32({B, T}, tok_labels);
    TrainStepOptions o;
    o.hidden_dropout = 0.05f;
    o.attention_dropout = 0.0f;
    std::vector<double> losses;
    for (int step = 0; step < 12; ++step) {
      o.step = step;
      m.zero_grad();
      TaskResult r = m.task_step(ctx, batch, task, o);
      losses.push_back(r.loss);
      ASSERT_TRUE(std::isfinite(r.loss));
      if (step == 0) {
        const Shape want = task == Task::seqcls ? Shape({B, 3}) : task == Task::tokcls ? Shape({B, T, 3}) : Shape({B, T, 2});
        EXPECT_EQ(r.logits.shape(), want);
        EXPECT_EQ(r.count, task == Task::qa ? 2 : task == Task::seqcls ? 3 : 21);
      }
      for (Param& p : m.params())  // SGD
        for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] -= 0.2f * p.grad.data<float>()[i];
    }
    EXPECT_LT(losses.back(), 0.8 * losses.front()) << losses.front() << " -> " << losses.back();
    // evaluation without labels returns logits only
    TaskBatch eval = batch;
    eval.labels = eval.start_positions = eval.end_positions = Tensor();
    TrainStepOptions e = no_dropout();
    e.backward = false;
    TaskResult r = m.task_step(ctx, eval, task, e);
    EXPECT_EQ(r.loss, 0.0);
    EXPECT_TRUE(r.logits.defined());
  }
}

TEST(BertTrain, BadBatchesGiveClearErrors) {
  TestRng rng;
  BertTrainModel m = BertTrainModel::random(tiny(), kPretraining, 1);
  Context ctx({.num_threads = 1});
  auto expect_error = [&](PretrainBatch b, const std::string& needle) {
    try {
      m.pretrain_step(ctx, b, no_dropout());
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  PretrainBatch good = make_batch(rng, {6, 4}, 8, 61);
  PretrainBatch b = good;
  b.input_mask = good.input_mask.contiguous();
  b.input_mask.data<int32_t>()[1 * 8 + 6] = 1;  // a real token after padding
  expect_error(b, "not right-padded");
  b = good;
  b.masked_lm_positions = good.masked_lm_positions.contiguous();
  b.masked_lm_positions.data<int32_t>()[0] = 7;  // row 0 has 6 real tokens
  expect_error(b, "masked_lm_positions[0, 0] = 7");
  b = good;
  b.input_ids = good.input_ids.contiguous();
  b.input_ids.data<int32_t>()[2] = 61;
  expect_error(b, "outside the vocabulary");
  b = good;
  b.next_sentence_labels = i32({3}, {0, 1, 0});
  expect_error(b, "next_sentence_labels");
  b = good;
  b.segment_ids = i32({2, 4}, std::vector<int32_t>(8, 0));
  expect_error(b, "segment");
}

// Timing of BERT-base training at seq 128, batch 8 (not a test: run with
//   unmask_tests --gtest_also_run_disabled_tests --gtest_filter='*BertTrainTiming*'
// ). Prints the step time and a breakdown from the same ops timed alone at the step's shapes.
TEST(DISABLED_BertTrainTiming, BaseSeq128Batch8) {
  const int threads = std::getenv("UNMASK_THREADS") ? std::atoi(std::getenv("UNMASK_THREADS")) : 2;
  Context ctx({.num_threads = threads});
  const BertConfig cfg = BertConfig::base();
  BertTrainModel m = BertTrainModel::random(cfg, kPretraining, 1);
  TestRng rng;
  const int64_t B = 8, T = 128, P = 20, N = B * T, C = 768, I = 3072, V = cfg.vocab_size, L = 12;
  std::vector<int32_t> ids(B * T), seg(B * T, 0), mask(B * T, 1), pos(B * P), mid(B * P), nsp(B);
  for (auto& v : ids) v = int32_t(rng.integer(1000, V - 1));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < P; ++j) {
      pos[b * P + j] = int32_t(1 + 6 * j);
      mid[b * P + j] = int32_t(rng.integer(1000, V - 1));
    }
    nsp[b] = int32_t(b % 2);
  }
  const PretrainBatch batch = test::pretrain_batch(B, T, P, ids, seg, mask, pos, mid, nsp);
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  // Minimum over repetitions: the box is shared, and contention only ever adds time.
  const int reps = std::getenv("UNMASK_REPS") ? std::atoi(std::getenv("UNMASK_REPS")) : 5;
  // Process CPU time too: with UNMASK_THREADS=1 it is the work itself, whatever else runs.
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  double last_cpu = 0;
  auto best = [&](const std::function<void()>& fn) {
    fn();  // warm-up (workspace allocation)
    double b = 1e30;
    last_cpu = 1e30;
    for (int r = 0; r < reps; ++r) {
      auto t0 = now();
      const double c0 = cpu_now();
      fn();
      b = std::min(b, secs(t0, now()));
      last_cpu = std::min(last_cpu, cpu_now() - c0);
    }
    return b;
  };
  TrainStepOptions fwd_only;
  fwd_only.backward = false;
  TrainStepOptions fwd_only0 = no_dropout();
  fwd_only0.backward = false;
  Optimizer adamw(OptimizerConfig{.kind = OptimizerKind::adamw, .lr = 1e-4f}, m.params());
  Optimizer lamb(OptimizerConfig{.kind = OptimizerKind::lamb, .lr = 1e-4f}, m.params());
  const double zg = best([&] { m.zero_grad(); });
  const double fb = best([&] { m.pretrain_step(ctx, batch, TrainStepOptions{}); });
  const double fb_cpu = last_cpu;
  const double fw = best([&] { m.pretrain_step(ctx, batch, fwd_only); });
  const double fw_cpu = last_cpu;
  const double fb0 = best([&] { m.pretrain_step(ctx, batch, no_dropout()); });
  const double fw0 = best([&] { m.pretrain_step(ctx, batch, fwd_only0); });
  const double oa = best([&] { adamw.step(ctx, 1e-4f); });
  const double ol = best([&] { lamb.step(ctx, 1e-4f); });
  std::printf("BERT-base seq %lld batch %lld, %d threads, best of %d:\n", (long long)T, (long long)B, threads, reps);
  std::printf("  dropout 0.1: forward+backward %.3f s (forward alone %.3f s); process CPU time %.3f s (%.3f s)\n", fb, fw,
              fb_cpu, fw_cpu);
  std::printf("  dropout 0:   forward+backward %.3f s (forward alone %.3f s)\n", fb0, fw0);
  std::printf("  zero_grad %.3f s, AdamW step %.3f s, LAMB step %.3f s\n", zg, oa, ol);
  std::printf("  -> %.2f seq/s with dropout and LAMB (%.2f with AdamW)\n", double(B) / (zg + fb + ol), double(B) / (zg + fb + oa));

  // Breakdown: each op alone at the step's shapes (x 12 layers where it repeats).
  auto time = [&](const char* what, int64_t times, const std::function<void()>& fn) {
    const double s = best(fn) * double(times);
    std::printf("  %-44s %7.1f ms\n", what, s * 1e3);
    return s;
  };
  auto rnd = [&](const Shape& s) {
    Tensor t = Tensor::empty(s, DType::f32);
    rng.fill(t.data<float>(), t.numel(), test::Fill::normal);
    return t;
  };
  Tensor x = rnd({N, C}), y = rnd({N, C}), qkv = rnd({N, 3 * C}), f = rnd({N, I}), f2 = rnd({N, I}), wqkv = rnd({3 * C, C}),
         wo = rnd({C, C}), w1 = rnd({I, C}), w2 = rnd({C, I}), g3 = rnd({3 * C, C}), go = rnd({C, C}), g1 = rnd({I, C}),
         g2 = rnd({C, I}), gam = rnd({C}), bet = rnd({C}), mean = rnd({N}), rstd = rnd({N}), lse = rnd({12, N}),
         dq = rnd({N, 3 * C}), xm = rnd({B * P, C}), logits = rnd({B * P, V}), word_g = rnd({V, C});
  Tensor cu = i32({B + 1}, {0, 128, 256, 384, 512, 640, 768, 896, 1024});
  ops::AttentionArgs aa;
  aa.num_heads = 12;
  aa.scale = 0.125f;
  aa.cu_seqlens = &cu;
  ops::GemmArgs acc;
  acc.beta = 1.0f;
  double total = 0;
  total += time("GEMM forward (4 per layer)", L, [&] {
    ops::gemm(ctx, x, ops::Trans::no, wqkv, ops::Trans::yes, qkv);
    ops::gemm(ctx, x, ops::Trans::no, wo, ops::Trans::yes, y);
    ops::gemm(ctx, x, ops::Trans::no, w1, ops::Trans::yes, f);
    ops::gemm(ctx, f, ops::Trans::no, w2, ops::Trans::yes, y);
  });
  total += time("GEMM backward dX (4 per layer)", L, [&] {
    ops::gemm(ctx, qkv, ops::Trans::no, wqkv, ops::Trans::no, x);
    ops::gemm(ctx, y, ops::Trans::no, wo, ops::Trans::no, x);
    ops::gemm(ctx, f, ops::Trans::no, w1, ops::Trans::no, x);
    ops::gemm(ctx, y, ops::Trans::no, w2, ops::Trans::no, f);
  });
  total += time("GEMM backward dW += dY^T X (4 per layer)", L, [&] {
    ops::gemm(ctx, qkv, ops::Trans::yes, x, ops::Trans::no, g3, acc);
    ops::gemm(ctx, y, ops::Trans::yes, x, ops::Trans::no, go, acc);
    ops::gemm(ctx, f, ops::Trans::yes, x, ops::Trans::no, g1, acc);
    ops::gemm(ctx, y, ops::Trans::yes, f, ops::Trans::no, g2, acc);
  });
  Tensor q = qkv.slice(1, 0, C), k = qkv.slice(1, C, 2 * C), v = qkv.slice(1, 2 * C, 3 * C);
  Tensor dqs = dq.slice(1, 0, C), dks = dq.slice(1, C, 2 * C), dvs = dq.slice(1, 2 * C, 3 * C);
  total += time("attention forward (train, lse)", L, [&] { ops::attention_forward_train(ctx, q, k, v, y, lse, aa, {}); });
  total += time("attention backward", L, [&] { ops::attention_backward(ctx, q, k, v, y, lse, x, dqs, dks, dvs, aa, {}); });
  Tensor ln_out = rnd({N, C}), dgam = rnd({C}), dbet = rnd({C}), db3 = rnd({3 * C}), dbi = rnd({I});
  total += time("LayerNorm forward (2 per layer)", 2 * L, [&] {
    ops::layernorm(ctx, x, &y, gam, bet, 1e-12f, ln_out, &mean, &rstd);
  });
  total += time("LayerNorm backward (2 per layer)", 2 * L, [&] {
    ops::layernorm_backward(ctx, x, &y, gam, mean, rstd, ln_out, ln_out, dgam, dbet);
  });
  total += time("GELU forward + backward", L, [&] {
    ops::activation(ctx, f, f2, ops::Activation::gelu);
    ops::activation_backward(ctx, f, f2, f2, ops::Activation::gelu);
  });
  total += time("bias_grad (4 per layer)", L, [&] {
    ops::bias_grad(ctx, qkv, db3);
    ops::bias_grad(ctx, y, dbet);
    ops::bias_grad(ctx, f, dbi);
    ops::bias_grad(ctx, y, dbet);
  });
  total += time("MLM decoder: logits, dX, dW (160 rows)", 1, [&] {
    ops::gemm(ctx, xm, ops::Trans::no, m.params()[0].value, ops::Trans::yes, logits);
    ops::gemm(ctx, logits, ops::Trans::no, m.params()[0].value, ops::Trans::no, xm);
    ops::gemm(ctx, logits, ops::Trans::yes, xm, ops::Trans::no, word_g, acc);
  });
  Tensor ids_t = i32({N}, ids);
  total += time("embedding backward (word, pos, type)", 3, [&] { ops::embedding_backward(ctx, ids_t, x, word_g); });
  std::printf("  %-44s %7.1f ms (sum of the parts; the step without dropout measured %.1f ms)\n", "total", total * 1e3, fb0 * 1e3);
}
