// app/cmd_train_step.cc: `unmask train-step`, a few pretraining steps on one batch from .npy
// files: the loss of every step (JSON lines) and, on request, every parameter's gradient of the
// first step as HF-named .npy files. Used by the PyTorch parity test
// (tests/python/train_parity.py) and handy when debugging a gradient.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "cli.h"
#include "io/file.h"
#include "io/npy.h"
#include "unmask/error.h"
#include "unmask/train.h"

namespace unmask::cli {

namespace {

// Any integer .npy as i32 (DLE's shards mix i1 and i4; NumPy writes int64 by default).
Tensor read_ints(const std::string& dir, const char* name) {
  const std::string path = dir + "/" + name + ".npy";
  if (!io::file_exists(path)) throw Error("batch file ", path, " not found", Hint("--batch DIR holds input_ids.npy, segment_ids.npy, input_mask.npy, masked_lm_positions.npy, masked_lm_ids.npy, next_sentence_labels.npy"));
  Tensor t = io::read_npy(path);
  Tensor o = Tensor::empty(t.shape(), DType::i32);
  int32_t* d = o.data<int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = 0;
    switch (t.dtype()) {
      case DType::i64: v = t.data<int64_t>()[i]; break;
      case DType::i32: v = t.data<int32_t>()[i]; break;
      case DType::u8: case DType::boolean: v = static_cast<const uint8_t*>(t.raw())[i]; break;
      default: throw Error(path, " must hold integers, got ", t.describe());
    }
    if (v < INT32_MIN || v > INT32_MAX) throw Error(path, "[", i, "] = ", v, " does not fit in 32 bits");
    d[i] = int32_t(v);
  }
  return o;
}

double parse_double(const Args& a, const std::string& name) {
  const std::string v = a.get(name);
  try {
    size_t used = 0;
    double d = std::stod(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return d;
  } catch (const std::exception&) {
    throw Error("--", name, " must be a number, got '", v, "'");
  }
}

}  // namespace

int cmd_train_step(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "Hugging Face model directory (heads missing from it are created: pooler, MLM, NSP)", ""},
      {"batch", "DIR", "input_ids, segment_ids, input_mask, masked_lm_positions, masked_lm_ids, next_sentence_labels (.npy, DLE layout)", ""},
      {"steps", "N", "optimizer steps on the batch", "1"},
      {"optimizer", "adamw|lamb|none", "update rule (none: gradients only)", "adamw"},
      {"lr", "X", "learning rate (constant)", "1e-3"},
      {"weight-decay", "X", "decoupled weight decay (not for biases and LayerNorm)", "0.01"},
      {"eps", "X", "Adam epsilon", "1e-6"},
      {"max-grad-norm", "X", "global-norm gradient clipping (0 = off)", "0"},
      {"dropout", "P", "hidden and attention dropout probability", "0"},
      {"seed", "S", "dropout seed (also the seed of heads the checkpoint lacks)", "0"},
      {"dump-grads", "DIR", "write every parameter's gradient of the first step as DIR/<HF name>.npy", ""},
      {"losses", "FILE", "write one JSON line per step: step, loss, mlm_loss, nsp_loss, accuracies, seconds", ""},
      {"save", "DIR", "save the trained model (HF directory) after the last step", ""},
      {"threads", "N", "CPU threads (0 = all cores)", "0"},
  };
  auto args = Args::parse("train-step", "Runs pretraining steps (forward, backward, optimizer) on one batch; dumps losses and gradients.",
                          specs, argc, argv, 2);
  if (!args) return 0;
  const std::string model_dir = args->require("model");
  const std::string batch_dir = args->require("batch");
  const int64_t steps = args->get_int("steps");
  if (steps < 1) throw Error("--steps must be at least 1, got ", steps);
  const std::string opt_name = args->get("optimizer");
  if (opt_name != "adamw" && opt_name != "lamb" && opt_name != "none")
    throw Error("--optimizer must be adamw, lamb or none, got '", opt_name, "'");
  const float dropout = float(parse_double(*args, "dropout"));
  if (!(dropout >= 0.0f && dropout < 1.0f)) throw Error("--dropout must be in [0, 1), got ", dropout);

  PretrainBatch batch;
  batch.input_ids = read_ints(batch_dir, "input_ids");
  batch.segment_ids = read_ints(batch_dir, "segment_ids");
  batch.input_mask = read_ints(batch_dir, "input_mask");
  batch.masked_lm_positions = read_ints(batch_dir, "masked_lm_positions");
  batch.masked_lm_ids = read_ints(batch_dir, "masked_lm_ids");
  batch.next_sentence_labels = read_ints(batch_dir, "next_sentence_labels");

  Context ctx({.num_threads = int(args->get_int("threads"))});
  const uint64_t seed = uint64_t(args->get_int("seed"));
  BertTrainModel model = BertTrainModel::load(model_dir, BertHeads{.pooler = true, .mlm = true, .nsp = true}, seed);

  std::optional<Optimizer> opt;
  OptimizerConfig oc;
  if (opt_name != "none") {
    oc.kind = opt_name == "adamw" ? OptimizerKind::adamw : OptimizerKind::lamb;
    oc.lr = float(parse_double(*args, "lr"));
    oc.weight_decay = float(parse_double(*args, "weight-decay"));
    oc.eps = float(parse_double(*args, "eps"));
    oc.max_grad_norm = float(parse_double(*args, "max-grad-norm"));
    opt.emplace(oc, model.params());
  }
  std::ofstream losses;
  if (args->has("losses")) {
    losses.open(args->get("losses"));
    if (!losses) throw Error("cannot write --losses file ", args->get("losses"));
  }
  for (int64_t step = 0; step < steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grad(ctx);
    TrainStepOptions o;
    o.hidden_dropout = o.attention_dropout = dropout;
    o.seed = seed;
    o.step = step;
    PretrainStats s = model.pretrain_step(ctx, batch, o);
    const auto t1 = std::chrono::steady_clock::now();
    if (step == 0 && args->has("dump-grads")) {
      const std::string gd = args->get("dump-grads");
      std::error_code ec;
      std::filesystem::create_directories(gd, ec);
      if (ec) throw Error("cannot create --dump-grads directory ", gd, ": ", ec.message());
      for (const Param& p : model.params()) io::write_npy(gd + "/" + p.name + ".npy", p.grad.contiguous());
    }
    if (opt) opt->step(ctx, oc.lr);
    const auto t2 = std::chrono::steady_clock::now();
    const double fb = std::chrono::duration<double>(t1 - t0).count(), total = std::chrono::duration<double>(t2 - t0).count();
    const double mlm = s.mlm_count ? s.mlm_loss_sum / double(s.mlm_count) : 0.0;
    const double nsp = s.nsp_count ? s.nsp_loss_sum / double(s.nsp_count) : 0.0;
    std::printf("step %lld  loss %.6f  mlm %.6f  nsp %.6f  %.3f s (forward+backward %.3f s)\n", (long long)step, s.loss,
                mlm, nsp, total, fb);
    if (losses) {
      std::ostringstream os;
      os << std::setprecision(10) << "{\"step\": " << step << ", \"loss\": " << s.loss << ", \"mlm_loss\": " << mlm
         << ", \"nsp_loss\": " << nsp << ", \"mlm_accuracy\": " << (s.mlm_count ? double(s.mlm_correct) / double(s.mlm_count) : 0.0)
         << ", \"nsp_accuracy\": " << (s.nsp_count ? double(s.nsp_correct) / double(s.nsp_count) : 0.0)
         << ", \"tokens\": " << s.tokens << ", \"seconds\": " << total << ", \"forward_backward_seconds\": " << fb << "}\n";
      losses << os.str() << std::flush;
    }
  }
  if (args->has("save")) {
    const std::string vocab = model_dir + "/vocab.txt";
    model.save_pretrained(args->get("save"), io::file_exists(vocab) ? vocab : "");
  }
  return 0;
}

}  // namespace unmask::cli
