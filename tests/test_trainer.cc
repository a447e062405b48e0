// tests/test_trainer.cc: the pretraining config, checkpoints, metrics and the training loop,
// above all that a resumed run computes bit-identically what an uninterrupted one does.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <functional>
#include <map>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "data/text/pretrain_data.h"
#include "io/file.h"
#include "op_test_util.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/metrics.h"
#include "train/loss_scaler.h"
#include "train/trainer.h"

namespace unmask {
namespace {

namespace fs = std::filesystem;
using test::TestRng;

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "unmask-trainer-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string expect_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

// ---- config ----------------------------------------------------------------------------------

TEST(TrainConfig, ParsesEveryValueKind) {
  const std::string text =
      "# comment line\n"
      "model = \"random:mini\"   # trailing comment\n"
      "vocab = 'v # not a comment.txt'\n"
      "data = \"d\\\"q\"\n"
      "output = \"out\"\n"
      "optimizer = \"adamw\"\n"
      "lr = 1.5e-3\n"
      "steps = 1_000\n"
      "warmup = 0\n"
      "dynamic_masking = true\n"
      "schedule = \"cosine\"\n"
      "max_grad_norm = -1\n"
      "\n"
      "[phase2]\n"
      "lr = 4e-3\n"
      "max_seq = 512\n";
  train::PretrainConfig c = train::parse_config(text, "x.toml", 1);
  EXPECT_EQ(c.model, "random:mini");
  EXPECT_EQ(c.vocab, "v # not a comment.txt");
  EXPECT_EQ(c.data, "d\"q");
  EXPECT_EQ(c.optimizer, OptimizerKind::adamw);
  EXPECT_EQ(c.lr, 1.5e-3);
  EXPECT_EQ(c.steps, 1000);
  EXPECT_EQ(c.warmup, 0.0);
  EXPECT_TRUE(c.dynamic_masking);
  EXPECT_EQ(c.schedule, ScheduleConfig::Kind::cosine);
  EXPECT_EQ(c.max_grad_norm, -1.0);
  EXPECT_EQ(c.max_seq, 128);  // [phase2] not applied in phase 1
  EXPECT_EQ(c.origin.at("lr"), "x.toml:7");

  train::PretrainConfig p2 = train::parse_config(text, "x.toml", 2);
  EXPECT_EQ(p2.lr, 4e-3);
  EXPECT_EQ(p2.max_seq, 512);
  EXPECT_EQ(p2.steps, 1000);  // inherited from the top level
  EXPECT_EQ(p2.origin.at("lr"), "x.toml:15");
  EXPECT_NE(c.numeric_hash(), p2.numeric_hash());

  // The canonical dump reads back to the same config.
  train::PretrainConfig again = train::parse_config(c.to_toml(), "dump", 1);
  EXPECT_EQ(again.to_map(), c.to_map());
  EXPECT_EQ(again.numeric_hash(), c.numeric_hash());
}

TEST(TrainConfig, UnknownKeyNamesNearest) {
  std::string e = expect_error([] { train::parse_config("lr = 1e-3\nwarmpu = 0.1\n", "run.toml", 1); });
  EXPECT_NE(e.find("run.toml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'warmpu'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'warmup'"), std::string::npos) << e;
  e = expect_error([] { train::parse_config("[phase2]\nkeep_checkpoint = 2\n", "run.toml", 1); });
  EXPECT_NE(e.find("run.toml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'keep_checkpoints'"), std::string::npos) << e;
  e = expect_error([] { train::parse_config("[phase3]\n", "run.toml", 1); });
  EXPECT_NE(e.find("unknown section [phase3]"), std::string::npos) << e;
}

TEST(TrainConfig, BadValuesNameFileAndLine) {
  struct Case {
    std::string text, want;
  } cases[] = {
      {"steps = 10\nlr = \"fast\"\n", "run.toml:2: lr must be a number > 0, got \"fast\""},
      {"lr = -1\n", "run.toml:1: lr must be a number > 0"},
      {"steps = 1.5\n", "run.toml:1: steps must be an integer >= 1, got 1.5"},
      {"\n\noptimizer = \"sgd\"\n", "run.toml:3: optimizer must be one of lamb,adamw"},
      {"dynamic_masking = 1\n", "run.toml:1: dynamic_masking must be true or false"},
      {"data = out\n", "run.toml:1: data: cannot read the value out"},
      {"warmup = 1.0\n", "run.toml:1: warmup must be a number in [0, 1)"},
      {"lr = 1\nlr = 2\n", "run.toml:2: 'lr' is set twice"},
      {"lr 1\n", "run.toml:1: expected key = value"},
      {"data = \"abc\n", "unterminated string"},
      {"[phase2]\nbatch = 0\n", "run.toml:2: batch must be an integer >= 1"},  // checked in phase 1 too
  };
  for (const auto& c : cases) {
    std::string e = expect_error([&] { train::parse_config(c.text, "run.toml", 1); });
    EXPECT_NE(e.find(c.want), std::string::npos) << "config:\n" << c.text << "error: " << e << "\nwant: " << c.want;
  }
}

TEST(TrainConfig, SetOverrides) {
  train::PretrainConfig c = train::parse_config("lr = 6e-3\ndata = \"a\"\n", "run.toml", 1);
  train::apply_override(c, "lr=1e-3", "--set");
  train::apply_override(c, "data=some/dir", "--set");  // a bare string on the command line
  train::apply_override(c, "output=\"quoted dir\"", "--set");
  train::apply_override(c, "dynamic_masking=true", "--set");
  train::apply_override(c, "steps = 7", "--set");
  EXPECT_EQ(c.lr, 1e-3);
  EXPECT_EQ(c.data, "some/dir");
  EXPECT_EQ(c.output, "quoted dir");
  EXPECT_TRUE(c.dynamic_masking);
  EXPECT_EQ(c.steps, 7);
  EXPECT_EQ(c.origin.at("lr"), "--set lr");
  std::string e = expect_error([&] { train::apply_override(c, "acumulation=4", "--set"); });
  EXPECT_NE(e.find("did you mean 'accumulation'"), std::string::npos) << e;
  e = expect_error([&] { train::apply_override(c, "steps=many", "--set"); });
  EXPECT_NE(e.find("--set steps: steps must be an integer"), std::string::npos) << e;
  e = expect_error([&] { train::apply_override(c, "steps", "--set"); });
  EXPECT_NE(e.find("expected key=value"), std::string::npos) << e;
}

TEST(TrainConfig, ValidateAndShippedConfigs) {
  train::PretrainConfig c;
  c.output = "o";
  std::string e = expect_error([&] { c.validate(); });
  EXPECT_NE(e.find("'data'"), std::string::npos) << e;
  c.data = "d";
  e = expect_error([&] { c.validate(); });
  EXPECT_NE(e.find("needs 'vocab'"), std::string::npos) << e;
  c.vocab = "v";
  c.model = "random:huge";
  e = expect_error([&] { c.validate(); });
  EXPECT_NE(e.find("unknown model size 'huge'"), std::string::npos) << e;
  // The configs in the repository parse in both phases and document every key.
  for (const char* name : {"pretrain-tiny.toml", "bert-base-phase1.toml", "bert-base-phase2.toml"}) {
    const std::string path = std::string(UNMASK_SOURCE_DIR) + "/configs/" + name;
    for (int phase : {1, 2}) EXPECT_NO_THROW(train::load_config(path, phase).validate()) << path;
  }
  train::PretrainConfig tiny = train::load_config(std::string(UNMASK_SOURCE_DIR) + "/configs/pretrain-tiny.toml", 1);
  for (const auto& k : train::config_keys()) EXPECT_TRUE(tiny.origin.count(k.name)) << "pretrain-tiny.toml lacks " << k.name;
  train::PretrainConfig p1 = train::load_config(std::string(UNMASK_SOURCE_DIR) + "/configs/bert-base-phase1.toml", 1);
  train::PretrainConfig p2 = train::load_config(std::string(UNMASK_SOURCE_DIR) + "/configs/bert-base-phase2.toml", 1);
  EXPECT_EQ(p1.max_seq, 128);
  EXPECT_EQ(p1.max_pred, 20);
  EXPECT_EQ(p1.lr, 6e-3);
  EXPECT_EQ(p1.warmup, 0.2843);
  EXPECT_EQ(p2.max_seq, 512);
  EXPECT_EQ(p2.max_pred, 80);
  EXPECT_EQ(p2.lr, 4e-3);
  EXPECT_EQ(p2.warmup, 0.128);
}

TEST(TrainConfig, EditDistance) {
  EXPECT_EQ(train::edit_distance("", "abc"), 3u);
  EXPECT_EQ(train::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(train::edit_distance("warmpu", "warmup"), 2u);
  EXPECT_EQ(train::edit_distance("lr", "lr"), 0u);
}

// ---- metrics ---------------------------------------------------------------------------------

TEST(TrainMetrics, JsonLineRoundTripAndPlot) {
  train::StepMetrics m;
  m.step = 7, m.loss = 6.25, m.lr = 1e-3, m.samples_per_s = 12.5, m.samples = 24;
  m.extras = {{"mlm_loss", 5.5}, {"nsp_loss", 0.75}};
  m.grad_norm = std::nan("");
  const std::string line = train::metrics_json_line(m);
  // The same keys for every model, in one order, then the task's extras.
  EXPECT_EQ(line.rfind("{\"step\":7,\"loss\":6.25,\"accuracy\":null,\"lr\":0.001,\"grad_norm\":null,\"samples_per_s\":12.5,", 0), 0u)
      << line;
  EXPECT_NE(line.find("\"samples\":24,\"tokens\":0,\"mlm_loss\":5.5,\"nsp_loss\":0.75}"), std::string::npos) << line;
  train::StepMetrics back = train::parse_metrics_line(line);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.loss, 6.25);
  EXPECT_EQ(back.lr, 1e-3);
  EXPECT_EQ(back.samples, 24);
  EXPECT_TRUE(std::isnan(back.grad_norm));  // written as null
  EXPECT_TRUE(std::isnan(back.accuracy));
  ASSERT_EQ(back.extras.size(), 2u);
  EXPECT_EQ(back.extra("nsp_loss"), 0.75);

  std::vector<train::StepMetrics> h;
  for (int i = 1; i <= 40; ++i) {
    train::StepMetrics s;
    s.step = i, s.loss = 10.0 / i, s.samples_per_s = i == 1 ? 1000 : 20 + i % 3, s.lr = 1e-3 * i, s.accuracy = 0.01 * i;
    s.extras = {{"mlm_loss", 9.0 / i}, {"nsp_loss", 0.7}, {"mlm_acc", 0.01 * i}, {"nsp_acc", 0.5 + 0.001 * i}};
    h.push_back(s);
  }
  std::string svg = train::render_loss_svg(h, "run <a&b>", "sequences");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("run &lt;a&amp;b&gt;"), std::string::npos);
  size_t polylines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) ++polylines;
  EXPECT_EQ(polylines, 7u);  // loss, MLM, NSP; lr; accuracy, nsp_acc (mlm_acc = accuracy: drawn once); sequences/s
  EXPECT_EQ(svg.find(">mlm_acc<"), std::string::npos) << "an extra equal to the accuracy is drawn twice";
  for (const char* title : {">loss<", ">learning rate<", ">accuracy<", ">sequences / s<"})
    EXPECT_NE(svg.find(title), std::string::npos) << title;
  EXPECT_NE(svg.find(">40<"), std::string::npos);  // an x tick label at the last step
  // The throughput axis fits the steady steps, not step 1's outlier of 1000/s.
  EXPECT_EQ(svg.find(">1000<"), std::string::npos);
  EXPECT_EQ(svg.find(">800<"), std::string::npos);
  // Legends sit above their panel's frame, clear of the curves: every legend label's baseline is
  // above the top of a frame, within the gap.
  for (size_t p = svg.find("<text x='"); p != std::string::npos; p = svg.find("<text x='", p + 1)) {
    const size_t close = svg.find("</text>", p);
    const std::string label = svg.substr(svg.find('>', p) + 1, close - svg.find('>', p) - 1);
    if (label != "nsp_loss" && label != "nsp_acc") continue;
    const double y = std::stod(svg.substr(svg.find("y='", p) + 3));
    bool above_a_frame = false;
    for (size_t r = svg.find("<rect x='90' y='"); r != std::string::npos; r = svg.find("<rect x='90' y='", r + 1)) {
      const double top = std::stod(svg.substr(r + 16));
      above_a_frame = above_a_frame || (y < top && y > top - 20);
    }
    EXPECT_TRUE(above_a_frame) << label << " at y " << y;
  }
  // A task without an accuracy says so instead of drawing an empty frame.
  for (auto& s : h) s.accuracy = std::nan(""), s.extras.clear();
  EXPECT_NE(train::render_loss_svg(h, "video", "clips").find("not measured by this task"), std::string::npos);
  EXPECT_EQ(train::format_duration(3725), "1h02m");
  EXPECT_EQ(train::format_duration(312), "5m12s");
}

TEST(TrainMetrics, LogKeepsRowsUpToTheResumedStep) {
  TempDir dir;
  {
    train::MetricsLog log(dir.path(), 0);
    for (int i = 1; i <= 5; ++i) {
      train::StepMetrics m;
      m.step = i, m.loss = i;
      log.append(m);
    }
  }
  {
    std::ofstream(dir / "metrics.jsonl", std::ios::app) << "{\"step\": 6, \"lo";  // torn last line
  }
  train::MetricsLog log(dir.path(), 3);
  ASSERT_EQ(log.history().size(), 3u);
  EXPECT_EQ(log.history().back().step, 3);
  train::StepMetrics m;
  m.step = 4;
  log.append(m);
  std::istringstream in(io::read_file(dir / "metrics.jsonl"));
  std::string line;
  std::vector<int64_t> steps;
  while (std::getline(in, line)) steps.push_back(train::parse_metrics_line(line).step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
  log.write_plot("t");
  EXPECT_TRUE(io::file_exists(dir / "loss.svg"));
}

// The measured GEMM rate (the MFU denominator on GPUs), here on the CPU's GEMM: positive, and
// not above the FMA units it runs on (a GEMM cannot beat them). At 1024^3 this machine's GEMM
// reaches 52-58% of the FMA peak, so a FLOP count 2x too high (or a timer reading half the time)
// fails. Bad dtypes and sizes are errors.
TEST(TrainMetrics, MeasuredMatmulPeakIsBelowTheFmaPeak) {
  Context ctx({.num_threads = 2});
  const double fma = train::measure_peak_gflops(2);
  const double gemm = train::measure_matmul_peak_gflops(ctx, DType::f32, 1024, 3);
  std::printf("f32 GEMM 1024^3 on 2 threads: %.1f GFLOP/s; FMA peak %.1f GFLOP/s\n", gemm, fma);
  EXPECT_GT(gemm, 0.0);
  // The FMA loop is this build's own code: under AddressSanitizer it is instrumented (CI measured
  // 6.4 GFLOP/s there against 82 for the uninstrumented BLAS GEMM), so it bounds nothing there.
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kInstrumented = true;
#else
  constexpr bool kInstrumented = false;
#endif
  if (fma > 0 && !kInstrumented) EXPECT_LE(gemm, fma);
  const double bf16 = train::measure_matmul_peak_gflops(ctx, DType::bf16, 128, 1);  // emulated on the CPU
  EXPECT_GT(bf16, 0.0);
  EXPECT_THROW(train::measure_matmul_peak_gflops(ctx, DType::i32, 128, 1), Error);
  EXPECT_THROW(train::measure_matmul_peak_gflops(ctx, DType::f32, 8, 1), Error);
  EXPECT_THROW(train::measure_matmul_peak_gflops(ctx, DType::f32, 128, 0), Error);
}

// ---- a tiny model and tiny shards ------------------------------------------------------------

constexpr int64_t kVocab = 120;
constexpr int32_t kPad = 0, kCls = 2, kSep = 3, kMask = 4;

std::string write_vocab(const TempDir& dir) {
  std::string text = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int64_t i = 5; i < kVocab; ++i) text += "w" + std::to_string(i) + "\n";
  io::write_file_atomic(dir / "vocab.txt", text);
  return dir / "vocab.txt";
}

// Instances in DLE's layout: [CLS] A [SEP] B [SEP] pad..., static masks at sorted positions.
data::PretrainShard synthetic_shard(std::mt19937_64& rng, int64_t n, int64_t S, int64_t P) {
  data::PretrainShard s;
  s.num_instances = n, s.seq_length = S, s.max_predictions = P;
  s.input_ids.assign(size_t(n * S), 0), s.input_mask.assign(size_t(n * S), 0), s.segment_ids.assign(size_t(n * S), 0);
  s.masked_lm_positions.assign(size_t(n * P), 0), s.masked_lm_ids.assign(size_t(n * P), 0);
  s.next_sentence_labels.assign(size_t(n), 0);
  for (int64_t r = 0; r < n; ++r) {
    int64_t len = 8 + int64_t(rng() % uint64_t(S - 7));  // [8, S]
    int64_t a = 2 + int64_t(rng() % uint64_t(len - 5));  // tokens of A
    for (int64_t t = 0; t < len; ++t) {
      int32_t id = t == 0 ? kCls : (t == a + 1 || t == len - 1) ? kSep : int32_t(5 + rng() % uint64_t(kVocab - 5));
      s.input_ids[size_t(r * S + t)] = id;
      s.input_mask[size_t(r * S + t)] = 1;
      s.segment_ids[size_t(r * S + t)] = t > a + 1 ? 1 : 0;
    }
    std::vector<int64_t> cand;
    for (int64_t t = 1; t < len - 1; ++t)
      if (t != a + 1) cand.push_back(t);
    std::shuffle(cand.begin(), cand.end(), rng);
    int64_t k = std::min<int64_t>(P, std::max<int64_t>(1, int64_t(cand.size()) / 6));
    std::sort(cand.begin(), cand.begin() + k);
    for (int64_t j = 0; j < k; ++j) {
      s.masked_lm_positions[size_t(r * P + j)] = int32_t(cand[size_t(j)]);
      s.masked_lm_ids[size_t(r * P + j)] = s.input_ids[size_t(r * S + cand[size_t(j)])];
      s.input_ids[size_t(r * S + cand[size_t(j)])] = kMask;
    }
    s.next_sentence_labels[size_t(r)] = int32_t(rng() % 2);
  }
  return s;
}

// A run directory layout: vocab, two shards of seq 16 / 3 predictions, and a config.
struct TinySetup {
  TempDir dir;
  train::PretrainConfig config;
  TinySetup(uint64_t seed, int64_t steps) {
    std::mt19937_64 rng(seed);
    fs::create_directories(dir / "shards");
    data::write_shard(dir / "shards/a.hdf5", synthetic_shard(rng, 10, 16, 3));
    data::write_shard(dir / "shards/b.hdf5", synthetic_shard(rng, 7, 16, 3));
    config.model = "random:tiny";
    config.vocab = write_vocab(dir);
    config.data = dir / "shards";
    config.output = dir / "run";
    config.steps = steps;
    config.batch = 3;
    config.accumulation = 2;
    config.max_seq = 16;
    config.max_pred = 3;
    config.dynamic_masking = true;
    config.hidden_dropout = 0.1;
    config.attention_dropout = 0.1;
    config.lr = 1e-3;
    config.warmup = 0.3;
    config.seed = seed;
    config.threads = 2;
    config.checkpoint_every = 2;
    config.keep_checkpoints = 2;
    config.peak_gflops = 1;  // no FMA measurement in tests
  }
};

train::TrainerOptions quiet(const train::PretrainConfig& c) {
  train::TrainerOptions o;
  o.config = c;
  o.progress = false;
  return o;
}

std::vector<double> losses(const std::vector<train::StepMetrics>& steps) {
  std::vector<double> out;
  for (const auto& s : steps) out.push_back(s.loss);
  return out;
}

// ---- checkpoints -----------------------------------------------------------------------------

TEST(TrainCheckpoint, WritesKeepsLastAndReadsBack) {
  TempDir dir;
  const std::string vocab = write_vocab(dir);
  BertTrainModel model = BertTrainModel::random(train::random_model_config("tiny", kVocab),
                                                {.pooler = true, .mlm = true, .nsp = true}, 7);
  Optimizer opt(OptimizerConfig{}, model.params());
  Context ctx({.num_threads = 1});
  // Non-zero moments: one update from a made-up gradient.
  TestRng rng;
  SCOPED_TRACE(rng.note());
  for (Param& p : model.params()) rng.fill(p.grad.data<float>(), p.grad.numel(), test::Fill::normal);
  opt.step(ctx, 1e-3f);
  train::TrainerState st;
  st.seed = 7;
  st.loader = {2, 1, 5};
  st.config = {{"lr", "0.001"}};
  st.config_hash = "abc";
  st.metrics.loss = 3.5;
  const std::string run = dir / "run";
  for (int64_t step : {10, 20, 30, 40}) {
    st.step = st.optimizer_step = step;
    std::string out = train::write_checkpoint(run, model, opt, st, {.vocab_path = vocab, .keep_last = 2});
    EXPECT_EQ(out, run + "/checkpoints/" + train::checkpoint_name(step));
  }
  auto all = train::list_checkpoints(run);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(fs::path(all[0]).filename(), "step-000030");
  EXPECT_EQ(train::latest_checkpoint(run), run + "/checkpoints/step-000040");
  EXPECT_EQ(train::resolve_checkpoint(run), run + "/checkpoints/step-000040");
  EXPECT_EQ(train::resolve_checkpoint(all[0]), all[0]);

  train::TrainerState back = train::read_trainer_state(all[1]);
  EXPECT_EQ(back.step, 40);
  EXPECT_EQ(back.loader.epoch, 2);
  EXPECT_EQ(back.loader.file_index, 1);
  EXPECT_EQ(back.loader.sample_index, 5);
  EXPECT_EQ(back.config.at("lr"), "0.001");
  EXPECT_EQ(back.metrics.loss, 3.5);
  EXPECT_TRUE(std::isnan(back.metrics.first_loss));

  // The model sits in model/ (what a user uploads: no optimizer or trainer state in it), and the
  // checkpoint directory itself loads as that model.
  EXPECT_TRUE(io::file_exists(all[1] + "/model/config.json"));
  EXPECT_TRUE(io::file_exists(all[1] + "/model/vocab.txt"));
  EXPECT_FALSE(io::file_exists(all[1] + "/model/optimizer.safetensors"));
  EXPECT_FALSE(io::file_exists(all[1] + "/model/trainer_state.json"));
  EXPECT_EQ(train::checkpoint_model_dir(all[1]), all[1] + "/model");
  // The model directory loads to the same parameters; the optimizer state round-trips exactly.
  BertTrainModel loaded = BertTrainModel::load(all[1], {.pooler = true, .mlm = true, .nsp = true}, 0);
  ASSERT_EQ(loaded.params().size(), model.params().size());
  for (size_t i = 0; i < model.params().size(); ++i) {
    const Param &a = model.params()[i], &b = loaded.params()[i];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.value.shape(), b.value.shape());
    EXPECT_EQ(0, std::memcmp(a.value.contiguous().raw(), b.value.contiguous().raw(), a.value.nbytes())) << a.name;
  }
  std::string kind;
  OptimizerState os = train::read_optimizer_state(all[1], &kind);
  OptimizerState want = opt.state();
  EXPECT_EQ(kind, "lamb");
  EXPECT_EQ(os.step, 1);
  ASSERT_EQ(os.tensors.size(), want.tensors.size());
  std::map<std::string, Tensor> by_name(os.tensors.begin(), os.tensors.end());
  for (const auto& [name, t] : want.tensors) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(0, std::memcmp(by_name[name].contiguous().raw(), t.contiguous().raw(), t.nbytes())) << name;
  }
}

TEST(TrainCheckpoint, FailureLeavesThePreviousOneIntact) {
  TempDir dir;
  const std::string vocab = write_vocab(dir);
  BertTrainModel model = BertTrainModel::random(train::random_model_config("tiny", kVocab),
                                                {.pooler = true, .mlm = true, .nsp = true}, 3);
  Optimizer opt(OptimizerConfig{}, model.params());
  const std::string run = dir / "run";
  train::TrainerState st;
  st.step = 1;
  train::write_checkpoint(run, model, opt, st, {.vocab_path = vocab, .keep_last = 1});
  const std::string before = io::read_file(run + "/checkpoints/step-000001/model/model.safetensors");
  for (const char* stage : {"model", "optimizer", "state", "publish"}) {
    SCOPED_TRACE(stage);
    train::set_checkpoint_fault(stage);
    st.step = 2;
    std::string e = expect_error([&] { train::write_checkpoint(run, model, opt, st, {.vocab_path = vocab, .keep_last = 1}); });
    train::set_checkpoint_fault("");
    EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("(") + stage + " stage failed)"), std::string::npos) << e;
    EXPECT_NE(e.find("previous checkpoint " + run + "/checkpoints/step-000001 is intact"), std::string::npos) << e;
    EXPECT_EQ(train::latest_checkpoint(run), run + "/checkpoints/step-000001");
    EXPECT_TRUE(io::read_file(run + "/checkpoints/step-000001/model/model.safetensors") == before) << "step 1 changed";
    // Nothing half-written is left behind.
    for (const auto& entry : fs::directory_iterator(run + "/checkpoints"))
      EXPECT_EQ(entry.path().filename(), "step-000001");
  }
  // And the next write works (pruning step 1 only once step 2 is complete).
  train::write_checkpoint(run, model, opt, st, {.vocab_path = vocab, .keep_last = 1});
  EXPECT_EQ(train::list_checkpoints(run), std::vector<std::string>{run + "/checkpoints/step-000002"});
}

// ---- the loop --------------------------------------------------------------------------------

// THE resume test: 6 steps straight vs 3 steps, a (simulated) SIGINT, a resume, 3 more steps,
// with dropout, accumulation 2, dynamic masking and prefetch on: every loss and the final
// weights are bit-identical.
TEST(Trainer, ResumeIsBitIdentical) {
  TinySetup straight(11, 6), split(11, 6);
  split.config.data = straight.config.data;  // the very same shards
  split.config.vocab = straight.config.vocab;

  train::TrainResult a = train::pretrain(quiet(straight.config));
  ASSERT_EQ(a.steps.size(), 6u);
  EXPECT_EQ(a.end_step, 6);
  for (const auto& s : a.steps) EXPECT_TRUE(std::isfinite(s.loss) && s.loss > 0);
  EXPECT_NE(a.steps[0].loss, a.steps[1].loss);

  std::atomic<int> stop{0};
  train::TrainerOptions first = quiet(split.config);
  first.stop_signal = &stop;
  first.before_step = [&](std::vector<Param>&, int64_t step) {
    if (step == 2) stop.store(SIGINT);  // arrives during step 3: it finishes, then the loop stops
  };
  train::TrainResult b1 = train::pretrain(first);
  EXPECT_EQ(b1.stopped_by_signal, SIGINT);
  EXPECT_EQ(b1.end_step, 3);
  EXPECT_EQ(b1.checkpoint, split.config.output + "/checkpoints/step-000003");

  train::TrainerOptions second = quiet(split.config);
  second.resume = split.config.output;
  train::TrainResult b2 = train::pretrain(second);
  EXPECT_EQ(b2.start_step, 3);
  EXPECT_EQ(b2.end_step, 6);
  EXPECT_EQ(b2.resumed_from, split.config.output + "/checkpoints/step-000003");
  EXPECT_EQ(b2.first_loss, a.steps[0].loss);

  std::vector<double> resumed = losses(b1.steps), tail = losses(b2.steps);
  resumed.insert(resumed.end(), tail.begin(), tail.end());
  std::vector<double> want = losses(a.steps);
  ASSERT_EQ(resumed.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(resumed[i], want[i]) << "step " << i + 1;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(b2.steps[i].grad_norm, a.steps[i + 3].grad_norm) << "step " << i + 4;

  // The final weights and optimizer state are the same bytes.
  const std::string wa = straight.config.output + "/checkpoints/step-000006", wb = split.config.output + "/checkpoints/step-000006";
  for (const char* file : {"/model/model.safetensors", "/optimizer.safetensors"})
    EXPECT_TRUE(io::read_file(wa + file) == io::read_file(wb + file)) << file << " differs";
  EXPECT_EQ(train::read_trainer_state(wa).loader.sample_index, train::read_trainer_state(wb).loader.sample_index);

  // metrics.jsonl of the split run lists steps 1..6 once each; keep_checkpoints = 2 kept 4 and 6.
  std::istringstream in(io::read_file(split.config.output + "/metrics.jsonl"));
  std::vector<double> logged;
  for (std::string line; std::getline(in, line);) logged.push_back(train::parse_metrics_line(line).loss);
  EXPECT_EQ(logged, want);
  EXPECT_EQ(train::list_checkpoints(split.config.output).size(), 2u);
  EXPECT_TRUE(io::file_exists(split.config.output + "/loss.svg"));
}

TEST(Trainer, ScheduleWiringAndConfigChecks) {
  TinySetup s(5, 4);
  s.config.lr = 2e-3;
  s.config.warmup = 0.5;
  s.config.checkpoint_every = 0;
  s.config.dynamic_masking = false;
  train::TrainResult r = train::pretrain(quiet(s.config));
  ASSERT_EQ(r.steps.size(), 4u);
  // DLE's PolyWarmUpScheduler, written out: p = (k+1)/total; p < warmup: p/warmup; else (1-p)^0.5.
  for (int64_t k = 0; k < 4; ++k) {
    double p = double(k + 1) / 4.0, mult = p < 0.5 ? p / 0.5 : std::pow(1.0 - p, 0.5);
    EXPECT_NEAR(r.steps[size_t(k)].lr, 2e-3 * mult, 1e-15) << "step " << k + 1;
    EXPECT_EQ(r.steps[size_t(k)].samples, 6);  // batch 3 x accumulation 2
  }
  EXPECT_EQ(train::list_checkpoints(s.config.output).size(), 1u);  // only at the end
  // Starting again in the same run directory without --resume is refused.
  std::string e = expect_error([&] { train::pretrain(quiet(s.config)); });
  EXPECT_NE(e.find("already holds checkpoints"), std::string::npos) << e;
  // max_seq / max_pred must match the shards.
  s.config.output = s.dir / "run2";
  s.config.max_seq = 32;
  e = expect_error([&] { train::pretrain(quiet(s.config)); });
  EXPECT_NE(e.find("max_seq = 32 but the shards"), std::string::npos) << e;
  s.config.max_seq = 16;
  s.config.max_pred = 5;
  e = expect_error([&] { train::pretrain(quiet(s.config)); });
  EXPECT_NE(e.find("max_pred = 5 but the shards"), std::string::npos) << e;
}

// DLE's phase 2: the weights and optimizer moments of phase 1's last checkpoint, the optimizer
// step (and so the schedule) starting again at 0.
TEST(Trainer, InitCheckpointStartsPhaseTwoAtStepZero) {
  TinySetup s(13, 3);
  s.config.checkpoint_every = 0;
  train::pretrain(quiet(s.config));
  const std::string phase1 = s.config.output + "/checkpoints/step-000003";
  BertTrainModel want = BertTrainModel::load(phase1 + "/model", {.pooler = true, .mlm = true, .nsp = true}, 0);

  train::PretrainConfig p2 = s.config;
  p2.phase = 2;
  p2.output = s.dir / "phase2";
  p2.init_checkpoint = s.config.output;  // the run directory: its latest checkpoint
  p2.steps = 2;
  p2.lr = 4e-3;
  p2.warmup = 0.5;
  train::TrainerOptions o = quiet(p2);
  bool checked = false;
  o.before_step = [&](std::vector<Param>& ps, int64_t step) {
    if (step != 0) return;
    checked = true;
    for (size_t i = 0; i < ps.size(); ++i)
      ASSERT_EQ(0, std::memcmp(ps[i].value.contiguous().raw(), want.params()[i].value.contiguous().raw(),
                               want.params()[i].value.nbytes()))
          << ps[i].name;
  };
  train::TrainResult r = train::pretrain(o);
  EXPECT_TRUE(checked);
  ASSERT_EQ(r.steps.size(), 2u);
  // Optimizer step 0: p = 1/2 (not warmup any more), (1 - p)^0.5; a step count carried over from
  // phase 1 (3) would give p > 1 and lr 0.
  EXPECT_NEAR(r.steps[0].lr, 4e-3 * std::sqrt(0.5), 1e-15);
  train::TrainerState st = train::read_trainer_state(p2.output + "/checkpoints/step-000002");
  EXPECT_EQ(st.optimizer_step, 2);
  EXPECT_EQ(st.phase, 2);
  std::string kind;
  EXPECT_EQ(train::read_optimizer_state(p2.output + "/checkpoints/step-000002", &kind).step, 2);
}

// A NaN in a parameter stops the run at that step, naming the parameter (parameters are scanned
// before gradients), and nothing is written over the last good checkpoint.
void expect_nan_stop(const std::string& victim, const std::string& shape, const std::vector<std::string>& one_of) {
  SCOPED_TRACE(victim);
  TinySetup s(9, 5);
  s.config.checkpoint_every = 1;
  train::TrainerOptions o = quiet(s.config);
  o.before_step = [&](std::vector<Param>& ps, int64_t step) {
    if (step != 2) return;
    for (Param& p : ps)
      if (p.name == victim) p.value.data<float>()[5] = std::nanf("");
  };
  std::string e = expect_error([&] { train::pretrain(o); });
  bool said = false;
  for (const auto& w : one_of) said = said || e.find(w) != std::string::npos;
  EXPECT_TRUE(said) << e;
  EXPECT_NE(e.find("first non-finite tensor: parameter " + victim + " element 5 of " + shape + " = nan"), std::string::npos) << e;
  EXPECT_NE(e.find("the last good checkpoint is " + s.config.output + "/checkpoints/step-000002"), std::string::npos) << e;
  EXPECT_EQ(train::latest_checkpoint(s.config.output), s.config.output + "/checkpoints/step-000002");
  std::istringstream in(io::read_file(s.config.output + "/metrics.jsonl"));
  int rows = 0;
  for (std::string line; std::getline(in, line);) ++rows;
  EXPECT_EQ(rows, 2);  // the failed step is not logged
}

TEST(Trainer, NonFiniteLossNamesTheParameterAndSavesNothing) {
  // A NaN in the FFN output weight reaches the loss.
  expect_nan_stop("bert.encoder.layer.1.output.dense.weight", "[128,512]", {"step 3: the loss is nan"});
  // One in a query weight: the CPU attention forward's clamped exp turns NaN scores into ~0
  // probabilities, so the loss can stay finite while the gradients are NaN; the step is stopped
  // either way.
  expect_nan_stop("bert.encoder.layer.1.attention.self.query.weight", "[128,128]",
                  {"step 3: the loss is nan", "step 3: the optimizer refused the step"});
}

// ---- dynamic loss scaling -----------------------------------------------------------------------

TEST(LossScaler, UnscalesExactlyBacksOffAndGrows) {
  Context ctx({.num_threads = 1});
  std::vector<Param> params(2);
  params[0].name = "a", params[1].name = "b";
  for (Param& p : params) {
    p.value = Tensor::zeros({3}, DType::f32);
    p.grad = Tensor::empty({3}, DType::f32);
  }
  auto set = [&](float x) {
    for (Param& p : params)
      for (int i = 0; i < 3; ++i) p.grad.data<float>()[i] = x * float(i + 1);
  };
  train::DynamicLossScaler s({.init_scale = 8, .window = 2, .min_scale = 1, .max_scale = 16});
  set(0.375f * 8);  // the gradients of 8 x loss
  EXPECT_TRUE(s.unscale(ctx, params));
  for (const Param& p : params)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(p.grad.data<float>()[i], 0.375f * float(i + 1)) << "exactly 1/8 of it";
  EXPECT_EQ(s.scale(), 8.0f) << "one finite step of a window of 2";
  set(1);
  EXPECT_TRUE(s.unscale(ctx, params));
  EXPECT_EQ(s.scale(), 16.0f) << "two finite steps in a row: doubled";
  set(1);
  EXPECT_TRUE(s.unscale(ctx, params));
  EXPECT_TRUE(s.unscale(ctx, params));
  EXPECT_EQ(s.scale(), 16.0f) << "not above max_scale";
  set(1);
  params[1].grad.data<float>()[2] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(s.unscale(ctx, params));
  EXPECT_EQ(s.scale(), 8.0f) << "overflow: halved";
  EXPECT_EQ(params[0].grad.data<float>()[1], 2.0f) << "an overflowed step's gradients are left alone";
  params[0].grad.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(s.unscale(ctx, params));
  EXPECT_EQ(s.scale(), 4.0f);
  EXPECT_EQ(s.overflows(), 2);
  EXPECT_EQ(s.good_steps(), 0) << "the run of finite steps restarts";
  for (int k = 0; k < 5; ++k) s.unscale(ctx, params);
  EXPECT_EQ(s.scale(), 1.0f) << "not below min_scale";
  s.restore(8, 1);
  EXPECT_EQ(s.scale(), 8.0f);
  EXPECT_THROW(s.restore(32, 0), Error);
  EXPECT_THROW(train::DynamicLossScaler({.init_scale = 0.5}), Error);
  EXPECT_THROW(train::DynamicLossScaler({.init_scale = 8, .backoff = 1.5}), Error);
}

// In fp32 a power-of-two loss scale changes no bit of the run; an overflow skips the update (the
// weights stay as they were, the scale halves) and the run still makes `steps` updates.
TEST(Trainer, DynamicLossScalingIsExactAndSkipsOverflows) {
  TinySetup plain(21, 5), scaled(21, 5), overflow(21, 5);
  plain.config.hidden_dropout = plain.config.attention_dropout = 0;
  for (TinySetup* t : {&scaled, &overflow}) {
    t->config = plain.config;
    t->config.output = t->dir / "run";
    t->config.loss_scaling = true;
    t->config.init_loss_scale = 1024;
    t->config.loss_scale_window = 3;
  }
  const train::TrainResult a = train::pretrain(quiet(plain.config));
  const train::TrainResult b = train::pretrain(quiet(scaled.config));
  ASSERT_EQ(a.steps.size(), 5u);
  ASSERT_EQ(b.steps.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm) << "step " << i + 1 << ": the gradients were unscaled";
  }
  EXPECT_EQ(b.steps[0].loss_scale, 1024.0);
  EXPECT_EQ(b.steps[3].loss_scale, 2048.0) << "doubled after a window of 3 finite steps";
  EXPECT_EQ(b.skipped_steps, 0);

  // Overflows planted in the 2nd and 3rd iterations' gradients.
  std::vector<Tensor> before, after;
  int64_t iteration = 0;
  train::TrainerOptions o = quiet(overflow.config);
  o.after_backward = [&](std::vector<Param>& ps, int64_t step) {
    ++iteration;
    if (iteration == 2) before.push_back(ps[5].value.contiguous());
    if (iteration == 2 || iteration == 3) ps[7].grad.data<float>()[0] = std::numeric_limits<float>::infinity();
    if (iteration == 4) after.push_back(ps[5].value.contiguous());
    EXPECT_EQ(step, iteration <= 1 ? 0 : iteration <= 4 ? 1 : iteration - 3) << "skips do not count as steps";
  };
  const train::TrainResult c = train::pretrain(o);
  EXPECT_EQ(c.end_step, 5) << "5 updates, in 7 iterations";
  EXPECT_EQ(iteration, 7);
  EXPECT_EQ(c.skipped_steps, 2);
  ASSERT_EQ(c.steps.size(), 5u);
  EXPECT_EQ(c.steps[1].skipped, 2) << "the step after the overflows reports them";
  EXPECT_EQ(c.steps[1].loss_scale, 256.0) << "1024 halved twice";
  ASSERT_EQ(before.size(), 1u);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(0, std::memcmp(before[0].raw(), after[0].raw(), before[0].nbytes())) << "skipped iterations changed the weights";
  const train::TrainerState st = train::read_trainer_state(c.checkpoint);
  EXPECT_EQ(st.loss_scale, 512.0) << "256 doubled after 3 finite steps, kept in the checkpoint";
  EXPECT_EQ(st.loss_scale_good_steps, 1) << "iteration 7 began a new run";
}

}  // namespace
}  // namespace unmask
