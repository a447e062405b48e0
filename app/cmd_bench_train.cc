// app/cmd_bench_train.cc: `unmask bench train`, BERT pretraining throughput (DLE's table).
//
// Random weights and a synthetic batch in DLE's layout: every token real, 20 masked positions
// per sequence at seq 128 and 80 at seq 512 (max_predictions_per_seq of DLE's two phases;
// round(0.15 seq) otherwise), random NSP labels. A timed step is what the trainer does per
// optimizer step: zero_grad, forward + backward (MLM + NSP, dropout on), optimizer update.
// Columns as DLE's training-performance table (devices, seq, batch, precision, sequences/s),
// plus the median step time, achieved GFLOP/s (bert_train_flops: matmuls, MLM head on the masked
// rows) and MFU against the measured fp32 FMA peak.
//
// --device cuda (CUDA builds): the model is moved to a CUDA context (BertTrainModel::to), the
// batch stays on the host as in training, and each timed step is bracketed by
// ctx.synchronize(). Devices column "1x <GPU name>"; precision fp32 (exact fp32 GEMMs) or tf32
// (--precision tf32: CudaState::allow_tf32, cuBLASLt's TF32 tensor cores). MFU is against the
// GPU's dense datasheet peak of the precision (gpu_peak in cli.h; H100 SXM / H200: fp32 CUDA cores
// 67 TFLOP/s, tf32 494.7, bf16 989.4) unless --peak-gflops is given, and also against the GEMM
// rate the GPU measurably reaches (gpu_matmul_peak: 8192^3 in the GEMM operands' precision), which
// is issue 6's definition: "mfu_matmul_pct" in json, a line under each table row.

#include <algorithm>
#include <cstdio>
#include <random>

#include "bench_profile.h"
#include "cli.h"
#include "train/config.h"
#include "train/metrics.h"
#include "unmask/error.h"
#include "unmask/train.h"

namespace unmask::cli {

namespace {

// DLE's layout, all tokens real: [CLS] A [SEP] B [SEP] with A and B halves, P sorted distinct
// masked positions (never [CLS]/[SEP]) holding [MASK] (id 103) and their original ids.
PretrainBatch synthetic_batch(int64_t B, int64_t T, int64_t P, int64_t vocab, std::mt19937_64& rng) {
  PretrainBatch b;
  b.input_ids = Tensor::empty({B, T}, DType::i32);
  b.segment_ids = Tensor::empty({B, T}, DType::i32);
  b.input_mask = Tensor::empty({B, T}, DType::i32);
  b.masked_lm_positions = Tensor::empty({B, P}, DType::i32);
  b.masked_lm_ids = Tensor::empty({B, P}, DType::i32);
  b.next_sentence_labels = Tensor::empty({B}, DType::i32);
  const int64_t sep_a = T / 2;
  std::uniform_int_distribution<int32_t> tok(1000, int32_t(vocab - 1));
  for (int64_t r = 0; r < B; ++r) {
    int32_t* ids = b.input_ids.data<int32_t>() + r * T;
    for (int64_t t = 0; t < T; ++t) {
      ids[t] = t == 0 ? 101 : (t == sep_a || t == T - 1) ? 102 : tok(rng);
      b.segment_ids.data<int32_t>()[r * T + t] = t > sep_a ? 1 : 0;
      b.input_mask.data<int32_t>()[r * T + t] = 1;
    }
    std::vector<int32_t> cand;
    for (int64_t t = 1; t < T - 1; ++t)
      if (t != sep_a) cand.push_back(int32_t(t));
    std::shuffle(cand.begin(), cand.end(), rng);
    std::sort(cand.begin(), cand.begin() + P);
    for (int64_t j = 0; j < P; ++j) {
      int32_t pos = cand[size_t(j)];
      b.masked_lm_positions.data<int32_t>()[r * P + j] = pos;
      b.masked_lm_ids.data<int32_t>()[r * P + j] = ids[pos];
      ids[pos] = 103;
    }
    b.next_sentence_labels.data<int32_t>()[r] = int32_t(rng() & 1);
  }
  return b;
}

}  // namespace

int bench_train(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "bert-base|bert-large|random:SIZE", "random weights of that size (random:tiny|mini|small|medium too)", "bert-base"},
      {"seq", "LIST", "sequence lengths, e.g. 128,512", "128"},
      {"batch", "LIST", "micro-batch sizes, e.g. 8,16", "8"},
      {"accumulate", "N", "micro-batches per timed optimizer step (gradient accumulation; DLE's phase 1: 128 of 64)", "1"},
      {"masked", "N", "masked positions per sequence (default: 20 at seq 128, 80 at 512, else round(0.15 seq))", ""},
      {"steps", "N", "timed steps per row (the median is reported)", "5"},
      {"warmup", "N", "untimed steps per row", "1"},
      {"threads", "N", "CPU threads (0 = all cores)", "0"},
      device_option(),
      {"precision", "fp32|tf32|bf16", "GEMM precision (tf32, bf16: CUDA tensor cores, fp32 master weights; the CPU is fp32)", "fp32"},
      {"activations", "f32|bf16", "the encoder layers' activations (bf16: CUDA, head size 64/80/88/128; emulated on the CPU)", "f32"},
      {"optimizer", "adamw|lamb", "the optimizer of the timed update", "lamb"},
      {"dropout", "P", "hidden and attention dropout (as in training)", "0.1"},
      {"forward-only", "", "time the training layers' forward alone (loss, no backward or update; as evaluation runs "
       "them): set beside `bench infer`, what BERT's separate inference path saves", ""},
      {"seed", "N", "seed of the weights and the batch", "1234"},
      {"peak-gflops", "X", "peak for MFU (default: CPU measured with an FMA loop; CUDA the GPU's dense datasheet peak)", ""},
      {"format", "table|json|csv", "output format (json: one object per row)", "table"},
      {"profile", "N", "after each row, N more steps with every op timed: the time per op and step (table: after the "
                       "row; json: the row's \"profile\")", "0"},
      {"profile-shapes", "", "with --profile: one row per GEMM shape and epilogue instead of one \"gemm\" row", ""},
      {"deterministic", "", "CUDA: bitwise reproducible attention gradients (the recompute dQ kernel; a little slower)", ""},
  };
  auto args = Args::parse("bench train",
                          "BERT pretraining throughput: full steps (forward, backward, optimizer) on random weights and a "
                          "synthetic DLE-layout batch.",
                          specs, argc, argv, 3);
  if (!args) return 0;
  const std::string format = args->get("format");
  if (format != "table" && format != "json" && format != "csv") throw Error("--format must be table, json or csv, got '", format, "'");
  const std::string opt_name = args->get("optimizer");
  if (opt_name != "adamw" && opt_name != "lamb") throw Error("--optimizer must be adamw or lamb, got '", opt_name, "'");
  const auto seqs = args->get_int_list("seq");
  const auto batches = args->get_int_list("batch");
  const int64_t steps = args->get_int("steps"), warmup = args->get_int("warmup"), profile = args->get_int("profile");
  const bool forward_only = args->has("forward-only");
  const int64_t accumulate = args->get_int("accumulate");
  if (accumulate < 1 || accumulate > 65536)
    throw Error("--accumulate must be in [1, 65536] (micro-batches per optimizer step), got ", args->get("accumulate"));
  if (profile < 0) throw Error("--profile must be >= 0, got ", profile);
  if (steps < 1) throw Error("--steps must be at least 1, got ", steps);
  if (warmup < 0) throw Error("--warmup must be >= 0, got ", warmup);
  const double dropout = args->get_double("dropout");
  if (!(dropout >= 0 && dropout < 1)) throw Error("--dropout must be in [0, 1), got ", args->get("dropout"));
  const uint64_t seed = uint64_t(args->get_int("seed"));

  const std::string model_arg = args->get("model");
  BertConfig cfg;
  if (model_arg == "bert-base") cfg = BertConfig::base();
  else if (model_arg == "bert-large") cfg = BertConfig::large();
  else if (model_arg.rfind("random:", 0) == 0) cfg = train::random_model_config(model_arg.substr(7), 30522);
  else throw Error("--model must be bert-base, bert-large or random:SIZE, got '", model_arg, "'");

  for (int64_t seq : seqs) {  // before anything is built, measured or printed
    if (seq > cfg.max_position_embeddings)
      throw Error("--seq ", seq, " exceeds the model's max_position_embeddings ", cfg.max_position_embeddings);
    if (seq < 8) throw Error("--seq must be at least 8, got ", seq);
  }
  const bool on_cuda = device_of(*args) == Device::cuda;
  const std::string precision = precision_of(*args, on_cuda ? Device::cuda : Device::cpu);
  Context ctx({.num_threads = int(args->get_int("threads")),
               .device = on_cuda ? Device::cuda : Device::cpu,
               .kernels = {.deterministic = args->has("deterministic")}});
  const std::string devices_name = setup_device(ctx, precision);
  const char* devices = devices_name.c_str();
  const std::string act_name = args->get("activations");
  if (act_name != "f32" && act_name != "bf16") throw Error("--activations must be f32 or bf16, got '", act_name, "'");
  const DType activations = act_name == "bf16" ? DType::bf16 : DType::f32;
  // The precision column names the activations when they are not f32 (rows stay comparable).
  const std::string prec_label = activations == DType::f32 ? precision : precision + " (act bf16)";
  const char* prec = prec_label.c_str();
  // CPU: the FMA peak is measured before the first row and again after each one, and the best so
  // far is used: a measurement taken while another process shares the cores reads low.
  const bool fixed_peak = args->has("peak-gflops");
  double peak = fixed_peak ? args->get_double("peak-gflops")
                : on_cuda  ? gpu_peak(ctx, activations == DType::bf16 ? "bf16" : precision).gflops  // bf16 layers: bf16 GEMMs
                           : train::measure_peak_gflops(ctx.num_threads());
  const bool measured_peak = !fixed_peak && !on_cuda;
  const std::string gemm_precision = activations == DType::bf16 ? "bf16" : precision;  // of the GEMM operands
  BertTrainModel model = BertTrainModel::random(cfg, {.pooler = true, .mlm = true, .nsp = true}, seed);
  model.to(ctx);  // no-op on the CPU
  OptimizerConfig oc = opt_name == "adamw" ? OptimizerConfig{.kind = OptimizerKind::adamw, .lr = 1e-4f}
                                           : OptimizerConfig{.kind = OptimizerKind::lamb, .lr = 6e-3f};
  Optimizer opt(oc, model.params());
  
  long long num_params = 0;
  for (const Param& p : model.params()) num_params += p.value.numel();
  if (format == "table") {
    std::printf("# unmask bench train: %s (%lld layers, hidden %lld, %lld parameters), %s, dropout %.2g, %s kernels, "
                "%s peak %.0f GFLOP/s%s\n",
                model_arg.c_str(), (long long)cfg.num_hidden_layers, (long long)cfg.hidden_size, num_params,
                opt_name.c_str(), dropout, on_cuda ? "cuda" : ctx.cpu_isa(), prec, peak,
                fixed_peak ? " (given)"
                : on_cuda  ? gpu_peak(ctx, "bf16").label.c_str()
                           : " (FMA loop; measured again after each row, the best is used)");
    std::printf("| devices | seq | batch | accumulation | masked | precision | sequences/s | step (ms) | GFLOP/s | MFU |\n");
    std::printf("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|\n");
  } else if (format == "csv") {
    std::printf("devices,seq,batch,masked,precision,seq_per_s,step_ms,gflop_per_s,mfu_pct,threads,optimizer,accumulation\n");
  }
  std::fflush(stdout);

  std::mt19937_64 rng(seed);
  for (int64_t seq : seqs) {
    int64_t P = seq == 128 ? 20 : seq == 512 ? 80 : std::max<int64_t>(1, (seq * 15 + 50) / 100);
    if (args->has("masked")) P = args->get_int("masked");
    if (P < 1 || P > seq - 3) throw Error("--masked must be in [1, ", seq - 3, "], got ", P);
    for (int64_t batch : batches) {
      PretrainBatch b = synthetic_batch(batch, seq, P, cfg.vocab_size, rng);
      std::vector<double> times;
      double last_loss = 0;
      int64_t step_no = 0;
      auto one_step = [&]() -> double {  // the step's loss, the mean over its micro-batches
        model.zero_grad(ctx);
        double loss = 0;
        for (int64_t micro = 0; micro < accumulate; ++micro) {
          TrainStepOptions so;
          so.hidden_dropout = so.attention_dropout = float(dropout);
          so.seed = seed, so.step = step_no, so.micro = micro;  // the dropout masks' counters, as the trainer's
          so.reuse_weight_copies = true;  // micro > 0: micro-batch 0's bf16 weight copies (no update since)
          so.activations = activations;
          so.loss_scale = float(1.0 / double(accumulate));  // the trainer's scaling of accumulated gradients
          so.backward = !forward_only;
          loss += model.pretrain_step(ctx, b, so).loss;
        }
        if (!forward_only) opt.step(ctx, oc.lr);
        ++step_no;
        return loss / double(accumulate);
      };
      for (int64_t i = 0; i < warmup + steps; ++i) {
        ctx.synchronize();  // no-op on the CPU; CUDA: the step's work is timed whole
        const double t0 = now_s();
        last_loss = one_step();
        ctx.synchronize();
        const double dt = now_s() - t0;
        if (i >= warmup) times.push_back(dt);
      }
      const StepProfile prof = profile_steps(ctx, profile, args->has("profile-shapes"), [&] { one_step(); });
      std::sort(times.begin(), times.end());
      if (measured_peak) peak = std::max(peak, train::measure_peak_gflops(ctx.num_threads()));
      const double med = times[times.size() / 2];
      // a step is forward + backward = 3x the forward's matrix FLOPs (bert_train_flops)
      const double flops = double(accumulate) * bert_train_flops(cfg, std::vector<int64_t>(size_t(batch), seq), batch * P) /
                           (forward_only ? 3.0 : 1.0);
      const double gflops = flops / med / 1e9, sps = double(batch * accumulate) / med;
      const double mfu = peak > 0 ? 100.0 * gflops / peak : 0;
      // CUDA: MFU against the GEMM rate this GPU measurably reaches too (issue 6's definition)
      // The step's memory peaks are read before the GEMM measurement allocates its operands.
      const double gpu_mb = peak_gpu_mb(ctx);
      const GpuMemoryPeaks gpu_mem = gpu_memory_peaks(ctx);
      const double matmul_peak = on_cuda && !fixed_peak ? gpu_matmul_peak(ctx, gemm_precision) : 0.0;
      const double mfu_matmul = matmul_peak > 0 ? 100.0 * gflops / matmul_peak : 0.0;
      if (format == "table") {
        std::printf("| %s | %lld | %lld | %lld | %lld | %s | %.2f | %.1f | %.1f | %.1f%% |\n", devices, (long long)seq,
                    (long long)batch, (long long)accumulate, (long long)P, prec, sps, med * 1e3, gflops, mfu);
        if (matmul_peak > 0)
          std::printf("#   MFU %.1f%% against the measured GEMM peak, %.0f GFLOP/s (8192^3 %s, mean of 10)\n",
                      mfu_matmul, matmul_peak, gemm_precision.c_str());
        print_step_profile(prof);
      } else if (format == "csv")
        std::printf("%s,%lld,%lld,%lld,%s,%.4f,%.3f,%.2f,%.2f,%d,%s,%lld\n", devices, (long long)seq, (long long)batch,
                    (long long)P, prec, sps, med * 1e3, gflops, mfu, ctx.num_threads(), opt_name.c_str(),
                    (long long)accumulate);
      else {
        std::printf("{\"engine\": \"unmask\", \"model\": \"%s\", \"seq\": %lld, \"batch\": %lld, \"accumulation\": %lld, \"masked\": %lld, "
                    "\"precision\": \"%s\", \"seq_per_s\": %.4f, \"step_ms\": %.3f, \"gflop_per_s\": %.2f, "
                    "\"mfu_pct\": %.2f, \"peak_gflops\": %.1f, \"mfu_matmul_pct\": %.2f, \"matmul_peak_gflops\": %.1f, "
                    "\"threads\": %d, \"optimizer\": \"%s\", \"steps\": %lld, "
                    "\"loss\": %.4f, \"peak_rss_mb\": %.1f, \"peak_gpu_mb\": %.1f, \"peak_gpu_requested_mb\": %.1f, "
                    "\"peak_gpu_reserved_mb\": %.1f, \"devices\": \"%s\", "
                    "\"attention\": \"%s\", \"activations\": \"%s\", \"mlm_head\": \"masked\"%s}\n",
                    model_arg.c_str(), (long long)seq, (long long)batch, (long long)accumulate, (long long)P, prec, sps,
                    med * 1e3, gflops, mfu,
                    peak, mfu_matmul, matmul_peak, ctx.num_threads(), opt_name.c_str(), (long long)steps, last_loss, peak_rss_mb(),
                    gpu_mb, gpu_mem.requested_mb, gpu_mem.reserved_mb, devices, attention_mode(ctx).c_str(),
                    act_name.c_str(), prof.steps > 0 ? (", \"profile\": " + step_profile_json(prof)).c_str() : "");
      }
      std::fflush(stdout);
    }
  }
  if (format == "table") std::printf("# MFU against a peak of %.0f GFLOP/s\n", peak);
  return 0;
}

}  // namespace unmask::cli
