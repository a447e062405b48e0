// app/cmd_bench_bevt.cc: `unmask bench bevt`, FAMBench's BEVT training benchmark
// (run_bevt_train.sh; reference/bevt.md 1) as defined, then the honest figures beside it.
//
// One iteration per device: batch-size / 2 clips [3, 16, 224, 224] + 4 x batch-size images, their
// 112 x 112 tokenizer copies and BEiT masks (a tube over the clip's 8 slices), the joint forward
// and backward with the loss divided by 2; AdamW (clip 3.0) every second iteration. The time of
// an iteration is wall clock from the end of the previous one, input included; the benchmark's
// figure is the mean over iterations skip .. max-steps - 1 (200 .. 1199) of each epoch, averaged
// over epochs, printed as analyze_logs.py prints it:
//   average iter time: X s/iter
//   Throughput: 1/X it/s (devices x batch-size / X samples/s)
// ("samples" counts nominal clips per optimizer step over one iteration's time, twice the real
// clip rate, and no images). Then what the hardware did: clips/s and images/s, the FLOPs of an
// iteration as BEVT defines it (every position, every frame) and as unmask ran it (the masked
// positions, the frames with a masked cell), TFLOP/s and the fraction of the measured peak.
// The input: random pixels made once (on the GPU with --device cuda: the input already on the
// device), masks drawn for every iteration (the seed's mini data is not public, bevt.md 1.6).
// --device cuda times each iteration to the end of its GPU work (a synchronise before the clock).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>

#include "bevt_common.h"
#include "cli.h"
#include "data/video/bevt_data.h"
#include "models/bevt/flops.h"
#include "models/bevt/pretrain.h"
#include "train/loss_scaler.h"
#include "train/metrics.h"
#include "unmask/error.h"
#include "unmask/train.h"

namespace unmask::cli {

int bench_bevt(int argc, char** argv) {
  std::vector<OptionSpec> specs = bevt_model_specs();
  for (OptionSpec s : bevt_tokenizer_specs()) {
    if (s.name == "tokenizer-hidden") s.fallback = "256";  // DALL-E's encoder, random weights
    if (s.name == "tokenizer-blocks") s.fallback = "2";
    specs.push_back(s);
  }
  const std::vector<OptionSpec> own = {
      {"batch-size", "BS", "the benchmark's BATCH_SIZE: BS / 2 clips + 4 BS images an iteration per device", "8"},
      {"max-steps", "N", "iterations an epoch (BEVT_MAX_STEPS; the run does N + 1)", "1200"},
      {"skip", "N", "iterations left out of the mean at the start of each epoch (analyze_logs: 200)", "200"},
      {"epochs", "N", "epochs (the mean is per epoch, then over epochs)", "1"},
      {"nodes", "N", "nodes (the samples/s figure's NODES)", "1"},
      {"frames", "T", "frames per clip", "16"},
      {"crop", "S", "side of clips and images", "224"},
      {"threads", "N", "compute threads (0 = all cores)", "0"},
      {"seed", "N", "seed of the weights, pixels and masks", "0"},
      {"peak-gflops", "G", "the MFU denominator (default: the measured FMA peak; CUDA: the measured GEMM rate)", ""},
      {"precision", "fp32|tf32|bf16|fp16", "GEMM precision (tf32, bf16, fp16: CUDA tensor cores; bf16 on a CPU with "
       "a bf16 unit), fp32 master weights; fp16 with dynamic loss scaling from 2^16 (the benchmark's apex O1)", "fp32"},
      device_option(),
  };
  specs.insert(specs.end(), own.begin(), own.end());
  for (const OptionSpec& s : bevt_data_specs("4")) specs.push_back(s);  // given: the pipeline instead of random pixels
  auto parsed = Args::parse("bench bevt", "BEVT's training benchmark (FAMBench run_bevt_train.sh)", specs, argc, argv, 3);
  if (!parsed) return 0;
  const Args& a = *parsed;
  const Device device = device_of(a);
  const std::string precision = training_precision_of(a, device);
  const bevt::SwinConfig config = bevt_swin_config(a);
  const int64_t vocab = a.get_int("vocab"), BS = a.get_int("batch-size"), max_steps = a.get_int("max-steps");
  const int64_t skip = a.get_int("skip"), epochs = a.get_int("epochs"), nodes = a.get_int("nodes");
  if (BS < 2 || BS % 2) throw Error("--batch-size must be even and at least 2 (BS / 2 clips an iteration), got ", BS);
  if (max_steps < 1 || skip < 0 || skip >= max_steps)
    throw Error("--skip must be in [0, --max-steps), got --skip ", skip, " --max-steps ", max_steps,
                Hint("a short CPU run: e.g. --max-steps 6 --skip 2"));
  if (epochs < 1 || nodes < 1) throw Error("--epochs and --nodes must be at least 1");
  video::BevtDataOptions data;
  data.frames = a.get_int("frames"), data.crop = a.get_int("crop"), data.seed = uint64_t(a.get_int("seed"));
  const int64_t clips = BS / 2, images = 4 * BS, T = data.frames, S = data.crop;

  Context ctx({.num_threads = int(a.get_int("threads")), .device = device});
  const std::string devices_name = setup_device(ctx, precision);
  const double peak = a.has("peak-gflops") ? a.get_double("peak-gflops") : training_peak_gflops(ctx, precision);
  std::string tokenizer_what;
  const bevt::DalleEncoder tokenizer = bevt_tokenizer(a, vocab, data.seed + 2, &tokenizer_what).to(device);
  bevt::BevtPretrainModel model = bevt::BevtPretrainModel::random(config, vocab, data.seed);
  model.to(ctx);  // before the Optimizer takes the parameters
  int64_t params = 0;
  for (const Param& p : model.params()) params += p.value.numel();
  Optimizer opt({.kind = OptimizerKind::adamw, .lr = 5e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                 .weight_decay = 0.05f, .max_grad_norm = 3.0f},
                model.params());

  // fp16 GEMM operands: apex O1's dynamic loss scale (2^16 at the start); an overflow skips the update.
  std::optional<train::DynamicLossScaler> scaler;
  if (precision == "fp16") scaler.emplace(train::LossScalerConfig{.init_scale = 65536.0});
  // The input: pixels once (as on-device tensors would be), masks per iteration; or, with --data /
  // --image-data, the BEVT pipeline's batches (synthetic for a stream without files), one ahead.
  std::unique_ptr<video::BevtSource> source;
  if (!a.get("data").empty() || !a.get("image-data").empty()) {
    read_bevt_data_options(a, data);
    source = std::make_unique<video::BevtSource>(data, a.get("data"), a.get("image-data"), a.get("root"));
  }
  video::BevtBatch batch;
  if (!source) {
    std::mt19937_64 gen(data.seed + 11);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::uniform_real_distribution<float> u(0.1f, 0.9f);
    auto fill = [&](Tensor& t, bool mapped) {
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = mapped ? u(gen) : n(gen);
    };
    batch.videos = Tensor::empty({clips, 3, T, S, S}, DType::f32), fill(batch.videos, false);
    batch.video_frames = Tensor::empty({clips * T, 3, S / 2, S / 2}, DType::f32), fill(batch.video_frames, true);
    batch.images = Tensor::empty({images, 3, S, S}, DType::f32), fill(batch.images, false);
    batch.image_frames = Tensor::empty({images, 3, S / 2, S / 2}, DType::f32), fill(batch.image_frames, true);
    for (Tensor* t : {&batch.videos, &batch.video_frames, &batch.images, &batch.image_frames})
      if (device != Device::cpu) *t = t->to(device);  // the input already on the device
  }
  const double defined = bevt::bevt_iteration_flops(config, vocab, tokenizer.config, clips, T, images, S);
  std::printf("# unmask bench bevt: Swin %s (C %lld, depths %lld/%lld/%lld/%lld, window %lldx%lldx%lld; %lld "
              "trainable parameters), BS %lld: %lld clips x %lld x %lld^2 + %lld images an iteration, AdamW every 2nd; "
              "%s; %s, %s, %s GEMMs, peak %.0f GFLOP/s%s\n",
              a.get("size").c_str(), (long long)config.embed_dim, (long long)config.depths[0],
              (long long)config.depths[1], (long long)config.depths[2], (long long)config.depths[3],
              (long long)config.window[0], (long long)config.window[1], (long long)config.window[2], (long long)params,
              (long long)BS, (long long)clips, (long long)T, (long long)S, (long long)images, tokenizer_what.c_str(),
              devices_name.c_str(), device == Device::cpu ? ctx.cpu_isa() : "CUDA", precision.c_str(), peak,
              a.has("peak-gflops")     ? " (given)"
              : device == Device::cuda ? " (measured GEMM rate)"
                                       : " (measured dot-product loop)");
  std::fflush(stdout);

  std::vector<double> epoch_means;
  double run_flops = 0, window_s = 0;
  int64_t window_its = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    double sum = 0;
    auto last = std::chrono::steady_clock::now();
    for (int64_t i = 0; i <= max_steps; ++i) {  // BEVT runs max_steps + 1 iterations (break after i == max_steps)
      const uint64_t it = uint64_t(e * (max_steps + 1) + i);
      if (source) {
        batch = source->batch(it * uint64_t(clips), clips, it * uint64_t(images), images);
        source->prefetch((it + 1) * uint64_t(clips), clips, (it + 1) * uint64_t(images), images);
      } else {
        video::draw_bevt_masks(data, it * uint64_t(clips), clips, it * uint64_t(images), images, batch);
      }
      if (i % 2 == 0) model.zero_grad(ctx);
      bevt::BevtStepOptions so;
      so.loss_scale = 0.5f * (scaler ? scaler->scale() : 1.0f);  // update_interval 2
      so.drop_path_rate = 0.3;
      so.seed = data.seed, so.first_clip = it * uint64_t(clips), so.first_image = it * uint64_t(images);
      const bevt::BevtStepStats st = bevt::bevt_pretrain_step(ctx, model, &tokenizer, batch, so);
      if (!std::isfinite(st.loss())) throw Error("bench bevt: iteration ", i, " gave a non-finite loss");
      if (i % 2 == 1 && (!scaler || scaler->unscale(ctx, model.params()))) opt.step(ctx, 5e-4f);
      ctx.synchronize();  // the iteration's queued GPU work is part of its time
      const auto now = std::chrono::steady_clock::now();
      const double s = std::chrono::duration<double>(now - last).count();
      last = now;
      if (i >= skip && i < max_steps) {
        sum += s;
        window_s += s, ++window_its;
        const double tokens = double(S / 16) * double(S / 16);
        run_flops += bevt::bevt_step_flops_run(config, vocab, tokenizer.config, clips, T, images, S,
                                               double(st.video.masked) / (double(clips * T) * tokens),
                                               double(st.image.masked) / (double(images) * tokens), st.tokenized_frames);
      }
      if (i == 0 || (i + 1) % 20 == 0)
        std::fprintf(stderr, "epoch %lld iteration %lld/%lld: %.3f s, loss %.4f (video %.4f, image %.4f)\n",
                     (long long)e + 1, (long long)i + 1, (long long)max_steps + 1, s, st.loss(), st.video.loss,
                     st.image.loss);
    }
    epoch_means.push_back(sum / double(max_steps - skip));
  }
  double mean = 0;
  for (double m : epoch_means) mean += m;
  mean /= double(epoch_means.size());
  double var = 0;
  for (double m : epoch_means) var += (m - mean) * (m - mean);
  const auto slow = std::max_element(epoch_means.begin(), epoch_means.end());
  const auto fast = std::min_element(epoch_means.begin(), epoch_means.end());
  const int64_t devices = nodes;  // one process (one CPU or one GPU) a node
  std::printf("-----Analyze train time of unmask bench bevt-----\n");
  std::printf("slowest epoch %lld, average time is %.4f\n", (long long)(slow - epoch_means.begin() + 1), *slow);
  std::printf("fastest epoch %lld, average time is %.4f\n", (long long)(fast - epoch_means.begin() + 1), *fast);
  std::printf("time std over epochs is %.4f\n", std::sqrt(var / double(epoch_means.size())));
  std::printf("average iter time: %.4f s/iter\n", mean);
  std::printf("Throughput: %.4f it/s (%.2f samples/s)\n", 1.0 / mean, double(devices * BS) / mean);
  const double ran = run_flops / double(window_its), per_s = window_s / double(window_its);
  std::printf("honest figures (iterations %lld..%lld): %.3f clips/s, %.2f images/s per device; %.3f TFLOP an "
              "iteration as BEVT defines it, %.3f TFLOP as run (masked positions, tokenizer on masked frames: %.1f%% "
              "less); %.1f GFLOP/s as run = %.1f%% of the %.0f GFLOP/s peak (%.1f%% counting BEVT's FLOPs); peak RSS %.0f MiB%s\n",
              (long long)skip, (long long)max_steps - 1, double(clips) / per_s, double(images) / per_s, defined / 1e12,
              ran / 1e12, 100.0 * (1.0 - ran / defined), ran / per_s / 1e9, 100.0 * ran / per_s / 1e9 / peak, peak,
              100.0 * defined / per_s / 1e9 / peak, peak_rss_mb(),
              device == Device::cuda ? (", peak GPU " + std::to_string(int64_t(peak_gpu_mb(ctx))) + " MiB").c_str() : "");
  if (scaler)
    std::printf("fp16 loss scale: %.0f at the end, %lld overflow(s) skipped an update\n", double(scaler->scale()),
                (long long)scaler->overflows());
  if (source) {  // does the input pipeline keep up with the step?
    const video::BevtLoaderStats ls = source->stats();
    const double make = ls.make_s / double(std::max<int64_t>(ls.batches, 1));
    const double waited = ls.wait_s / double(epochs * (max_steps + 1));
    std::printf("input: %s, %lld workers: the loader made %.2f clips/s + %.1f images/s (%.3f s a batch of its own "
                "time) for a step that takes %.2f clips/s + %.1f images/s (%.3f s an iteration); the step waited "
                "%.3f s an iteration for its input (%lld of %lld batches made ahead): %s\n",
                source->describe().c_str(), (long long)data.workers, double(clips) / make, double(images) / make, make,
                double(clips) / per_s, double(images) / per_s, per_s, waited, (long long)ls.prefetched,
                (long long)ls.batches, make <= per_s ? "it keeps up" : "the input is the bottleneck");
  }
  return 0;
}

}  // namespace unmask::cli
