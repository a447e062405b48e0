// app/cmd_bench_videomae.cc: `unmask bench videomae`, VideoMAE pretraining throughput (V-SWIFT's table).
//
// Random weights (VideoMAE's init) and, with --synthetic, one fixed random clip batch reused for
// every step: the figures measure compute alone (no decode, no augmentation). With --store DIR the
// clips come from a clip store (unmask prepare-video) through the prefetching ClipLoader
// (pretrain mode: dense sampling, multi-scale crop, normalisation on --loader-threads workers
// sharing the CPU with the step), and the timed step includes waiting for the next batch: the
// end-to-end rate, with the wait reported separately. A timed step is
// what a pretraining loop does per optimizer step: zero_grad, pretrain_step (tube-masked encoder
// on the visible tokens, decoder on all tokens, norm + head on the masked ones, normalised-pixel
// MSE, backward) and an AdamW update (VideoMAE's: betas 0.9 / 0.95, weight decay 0.05 except 1-D
// params, no clipping). The tube masks (one per clip per step, VideoMAE's TubeMaskingGenerator
// counts) are drawn before timing, as VideoMAE's data loader does.
//
// Columns follow V-SWIFT's README table (devices, batch per device, dtype, model FLOPs, memory,
// videos/s per device, MFU) plus the median / min / max step time and the device-hours that
// 1200 epochs of SSv2 (168,913 training videos) would take at that rate (V-SWIFT's "GPU x hour").
//   model FLOPs   forward FLOPs per clip of the model as configured (video/videomae_flops.h:
//                 matmuls, multiply-add = 2, patch embedding over all tokens as VideoMAE's Conv3d,
//                 encoder on the visible tokens, decoder of --decoder-depth layers on all tokens,
//                 head on the masked ones). V-SWIFT prints the same quantity ("G(x2)" = 2 x fvcore
//                 MACs) but for a decoder of depth 8 (video.md section 0).
//   MFU           V-SWIFT's formula: 3 x model FLOPs x videos/s / peak, the peak being the
//                 measured fp32 FMA peak of the threads used (train::measure_peak_gflops).
//   executed      the same count with the patch embedding on the visible tokens only, which is
//                 what unmask's step computes (the masked tubelets are never embedded); its MFU
//                 is the lower, stricter figure.
//   memory est.   the step's bytes counted from the shapes (video/videomae_flops.h: parameters x 4
//                 copies, every saved activation, the largest transient; GELU recomputed on a GPU
//                 unless --recompute-gelu off)
//   memory        CPU: peak resident set size of the process (getrusage): the CPU allocator keeps
//                 no high-water mark of its own. CUDA: the caching allocator's peak of allocated
//                 device memory during the row (weights, gradients, AdamW moments, activations).
//
// --device cuda (CUDA builds): the model and the synthetic clip batch are on the GPU before
// timing (a --store batch is uploaded inside the timed step), the step is bracketed by
// ctx.synchronize(), --precision tf32 or bf16 runs the GEMMs on tensor cores (bf16: an autocast
// of the f32 GEMMs with fp32 master weights, CudaState::autocast), and MFU is against the
// GPU's dense datasheet peak of that precision (gpu_peak in cli.h) unless --peak-gflops is given,
// and against the GEMM rate the GPU measurably reaches (gpu_matmul_peak, 8192^3; issue 6's
// definition): "mfu_matmul_pct" in json, a line under each table row.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>
#include <optional>

#include "bench_profile.h"
#include "cli.h"
#include "data/rng.h"
#include "train/metrics.h"
#include "unmask/error.h"
#include "unmask/videomae.h"
#include "data/video/clip_loader.h"
#include "data/video/masking.h"
#include "models/videomae/flops.h"

namespace unmask::cli {

namespace {

constexpr double kSsv2TrainVideos = 168913.0;  // video.md section 3.1
constexpr double kSsv2Epochs = 1200.0;         // V-SWIFT's table

// --model name -> the VideoMAE preset (vit-s .. vit-g, tiny).
VideoMAEConfig model_config(const std::string& name) {
  if (name == "tiny") return VideoMAEConfig::tiny();
  if (name == "vit-s") return VideoMAEConfig::small();
  if (name == "vit-b") return VideoMAEConfig::base();
  if (name == "vit-l") return VideoMAEConfig::large();
  if (name == "vit-h") return VideoMAEConfig::huge();
  if (name == "vit-g") return VideoMAEConfig::giant();
  throw Error("--model must be vit-s, vit-b, vit-l, vit-h, vit-g or tiny, got '", name, "'");
}

// The FLOP config of exactly the model the step runs (sizes, decoder depth, mask ratio, batch).
video::VideoMAEFlopConfig flop_config(const VideoMAEConfig& c, double mask_ratio, int64_t batch) {
  video::VideoMAEFlopConfig f;
  f.img_size = c.img_size, f.frames = c.num_frames, f.tubelet = c.tubelet, f.patch = c.patch;
  f.in_chans = c.channels;
  f.enc_dim = c.dim, f.enc_depth = c.depth, f.enc_heads = c.heads, f.enc_mlp_hidden = c.mlp_hidden(c.dim);
  f.dec_dim = c.decoder_dim, f.dec_depth = c.decoder_depth, f.dec_heads = c.decoder_heads;
  f.dec_mlp_hidden = c.mlp_hidden(c.decoder_dim);
  f.mask_ratio = mask_ratio;
  f.tube_count = video::TubeCount::videomae;
  f.decoder_mask_ratio = 0.0;
  f.batch = batch;
  return f;
}

// Parameters of the pretraining model, counted from the config (--dry-run builds no model; a run
// checks the count against the model's tensors).
int64_t count_params(const VideoMAEConfig& c) { return video::videomae_pretrain_parameters(flop_config(c, 0.9, 1)); }

// V-SWIFT's number style: 25.808M, 0.101G (parameters), 17.929G, 0.11T (FLOPs).
std::string v_swift_number(double v, double big_from, const char* small_unit, double small_scale,
                           const char* big_unit, double big_scale) {
  char buf[32];
  if (v < big_from) std::snprintf(buf, sizeof(buf), "%.3f%s", v / small_scale, small_unit);
  else std::snprintf(buf, sizeof(buf), "%.3f%s", v / big_scale, big_unit);
  return buf;
}

// "4.0", or "48/11" when the MLP ratio is not a one-decimal number (ViT-g).
std::string mlp_ratio_text(int64_t mlp, int64_t dim) {
  if ((mlp * 10) % dim == 0) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%.1f", double(mlp) / double(dim));
    return buf;
  }
  const int64_t g = std::gcd(mlp, dim);
  return std::to_string(mlp / g) + "/" + std::to_string(dim / g);
}

// `bench videomae --arch`: V-SWIFT's "Model Architecture Details" table (video.md section 1.2)
// from the presets, counted (video/videomae_flops.h), for the decoder depth and tube-mask count
// given: `--decoder-depth 8 --tube-count vswift` is how V-SWIFT's figures were counted.
int print_arch_table(const Args& a) {
  const int64_t depth = a.get_int("decoder-depth");
  if (depth < 0) throw Error("--decoder-depth must be >= 0, got ", depth);
  const double mask_ratio = a.get_double("mask-ratio");
  if (!(mask_ratio > 0 && mask_ratio < 1)) throw Error("--mask-ratio must be in (0, 1), got ", a.get("mask-ratio"));
  const std::string tc = a.get("tube-count");
  if (tc != "videomae" && tc != "vswift") throw Error("--tube-count must be videomae or vswift, got '", tc, "'");
  struct Row {
    const char* name;
    VideoMAEConfig config;
  };
  std::vector<Row> rows = {{"S/16", VideoMAEConfig::small()}, {"B/16", VideoMAEConfig::base()},
                           {"L/16", VideoMAEConfig::large()}, {"H/16", VideoMAEConfig::huge()},
                           {"H/16 (v2 decoder)", VideoMAEConfig::huge()}, {"g/14", VideoMAEConfig::giant()}};
  rows[4].config.decoder_dim = 512;  // VideoMAE v2's and V-SWIFT's H decoder (v1's is 640)
  const bool json = a.get("format") == "json";
  if (!json) {
    std::printf("| Name | Parameters | FLOPs | en_Width | en_Depth | en_MLP | en_mlp_ratio | en_Heads | de_Width | "
                "de_Depth | de_Heads | visible tokens | GFLOP fwd (2 x MAC) |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (Row& r : rows) {
    VideoMAEConfig& c = r.config;
    c.decoder_depth = depth;
    c.validate();
    video::VideoMAEFlopConfig f = flop_config(c, mask_ratio, 1);
    f.tube_count = tc == "vswift" ? video::TubeCount::vswift : video::TubeCount::videomae;
    const double params = double(video::videomae_pretrain_parameters(f));
    const double flops = video::videomae_pretrain_forward_flops(f);
    const double macs = flops / 2;  // fvcore's unit, V-SWIFT's "FLOPs"
    const int64_t mlp = c.mlp_hidden(c.dim);
    if (json) {
      nlohmann::ordered_json j;
      j["name"] = r.name;
      j["parameters"] = int64_t(params);
      j["fwd_macs"] = macs;
      j["fwd_flops"] = flops;
      j["en_width"] = c.dim, j["en_depth"] = c.depth, j["en_mlp"] = mlp;
      j["en_mlp_ratio"] = mlp_ratio_text(mlp, c.dim), j["en_heads"] = c.heads;
      j["de_width"] = c.decoder_dim, j["de_depth"] = c.decoder_depth, j["de_heads"] = c.decoder_heads;
      j["visible_tokens"] = f.visible_tokens();
      j["tube_count"] = tc;
      std::printf("%s\n", j.dump().c_str());
      continue;
    }
    std::printf("| %s | %s | %s | %lld | %lld | %lld | %s | %lld | %lld | %lld | %lld | %lld | %.3f |\n", r.name,
                v_swift_number(params, 1e8, "M", 1e6, "G", 1e9).c_str(),
                v_swift_number(macs, 1e11, "G", 1e9, "T", 1e12).c_str(), (long long)c.dim, (long long)c.depth,
                (long long)mlp, mlp_ratio_text(mlp, c.dim).c_str(), (long long)c.heads, (long long)c.decoder_dim,
                (long long)c.decoder_depth, (long long)c.decoder_heads, (long long)f.visible_tokens(), flops / 1e9);
  }
  if (!json)
    std::printf("# %lld x %lld^2 clips, tube mask %.2f (%s count); FLOPs: forward multiply-adds per clip (fvcore's "
                "unit, V-SWIFT's \"FLOPs\"): patch embed on all tokens, encoder on the visible, decoder of depth "
                "%lld on all, head on the masked. V-SWIFT's table was counted with decoder depth 8 and the vswift "
                "count, though its scripts train with depth 4.\n",
                (long long)rows[0].config.num_frames, (long long)rows[0].config.img_size, mask_ratio, tc.c_str(),
                (long long)depth);
  return 0;
}

}  // namespace

int bench_videomae(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "vit-s|vit-b|vit-l|vit-h|vit-g|tiny", "model size (random weights, VideoMAE init)", "vit-b"},
      {"batch", "LIST", "clips per step, e.g. 2,4", "4"},
      {"frames", "N", "frames per clip (default: 16; tiny: 4)", ""},
      {"img", "N", "frame size in pixels (default: 224; tiny: 32)", ""},
      {"mask-ratio", "R", "tube mask ratio (VideoMAE: int(R x H'W') masked per time slot)", "0.9"},
      {"decoder-depth", "N", "decoder layers actually run (VideoMAE's scripts: 4)", "4"},
      {"steps", "N", "timed steps per row (the median is reported)", "3"},
      {"warmup", "N", "untimed steps per row", "1"},
      {"synthetic", "", "one fixed random clip batch reused (compute alone)", ""},
      {"store", "DIR", "clips from a clip store (unmask prepare-video) through the prefetching loader", ""},
      {"rate", "N", "--store: dense sampling rate in source frames (VideoMAE SSv2: 2, K400: 4)", "2"},
      {"loader-threads", "N", "--store: loader worker threads", "2"},
      {"dry-run", "", "print the configuration and FLOP counts without running steps", ""},
      {"arch", "", "print V-SWIFT's architecture table (parameters, FLOPs, widths) of every size instead", ""},
      {"tube-count", "videomae|vswift", "--arch: masked tokens per slot, int(R x H'W') or H'W' - int((1-R) H'W')",
       "videomae"},
      {"threads", "N", "CPU threads (0 = all cores)", "0"},
      device_option(),
      {"precision", "fp32|tf32|bf16", "GEMM precision (tf32, bf16: CUDA tensor cores, fp32 master weights)", "fp32"},
      {"activations", "f32|bf16", "the ViT blocks' activations (bf16: CUDA, head size 64/80/88/128; emulated on the CPU)", "f32"},
      {"recompute-gelu", "auto|on|off", "recompute each block's GELU output in the backward instead of keeping it "
                                        "(auto: on a GPU only, where memory bounds the batch)", "auto"},
      {"seed", "N", "seed of the weights, the clips and the masks", "1234"},
      {"peak-gflops", "X", "peak for MFU (default: CPU the fp32 FMA peak measured with an FMA loop; CUDA the "
                          "GPU's dense datasheet peak of --precision)", ""},
      {"format", "table|json", "output format (json: one object per row)", "table"},
      {"profile", "N", "after each row, N more steps (on the first timed steps' masks) with every op timed: the time "
                       "per op and step (table: after the row; json: the row's \"profile\")", "0"},
      {"profile-shapes", "", "with --profile: one row per GEMM shape and epilogue instead of one \"gemm\" row", ""},
      {"deterministic", "", "CUDA: bitwise reproducible attention gradients (the recompute dQ kernel; a little slower)", ""},
  };
  auto args =
      Args::parse("bench videomae",
                  "VideoMAE pretraining throughput: full steps (tube-masked forward, backward, AdamW) on random "
                  "weights, V-SWIFT's columns.",
                  specs, argc, argv, 3);
  if (!args) return 0;
  const std::string format = args->get("format");
  if (format != "table" && format != "json") throw Error("--format must be table or json, got '", format, "'");
  if (args->has("arch")) return print_arch_table(*args);
  const bool dry_run = args->has("dry-run");
  const bool from_store = args->has("store");
  if (from_store && args->has("synthetic")) throw Error("bench videomae: --synthetic and --store exclude each other");
  if (!from_store && !args->has("synthetic") && !dry_run)
    throw Error("bench videomae: say where the clips come from: --synthetic or --store DIR",
                Hint("--synthetic: one fixed random clip batch (compute alone); --store DIR: a clip store written by "
                     "`unmask prepare-video`, read through the prefetching loader"));
  const std::string dataset = from_store ? args->get("store") : "synthetic";
  const std::string model_name = args->get("model");
  VideoMAEConfig cfg = model_config(model_name);
  if (args->has("frames")) cfg.num_frames = args->get_int("frames");
  if (args->has("img")) cfg.img_size = args->get_int("img");
  cfg.decoder_depth = args->get_int("decoder-depth");
  cfg.validate();
  const double mask_ratio = args->get_double("mask-ratio");
  if (!(mask_ratio > 0 && mask_ratio < 1)) throw Error("--mask-ratio must be in (0, 1), got ", args->get("mask-ratio"));
  const int64_t steps = args->get_int("steps"), warmup = args->get_int("warmup"), profile = args->get_int("profile");
  if (profile < 0) throw Error("--profile must be >= 0, got ", profile);
  if (steps < 1) throw Error("--steps must be at least 1, got ", steps);
  if (warmup < 0) throw Error("--warmup must be >= 0, got ", warmup);
  const auto batches = args->get_int_list("batch");
  for (int64_t b : batches)
    if (b < 1) throw Error("--batch sizes must be at least 1, got ", b);
  const uint64_t seed = uint64_t(args->get_int("seed"));
  const video::TokenGrid grid{cfg.grid_t(), cfg.grid_hw(), cfg.grid_hw()};
  const int64_t masked_per_slot = video::tube_masked_per_frame(grid, mask_ratio);
  const int64_t Np = grid.tokens(), Nm = masked_per_slot * grid.frames, Nv = Np - Nm;
  if (masked_per_slot < 1 || Nv < 1)
    throw Error("--mask-ratio ", mask_ratio, " masks ", masked_per_slot, " of ", grid.per_frame(),
                " positions per time slot", Hint("the step needs at least one masked and one visible token"));

  const Device device = device_of(*args);
  const bool on_cuda = device == Device::cuda;
  const std::string gemm_precision = precision_of(*args, device);
  const std::string act_name = args->get("activations");
  if (act_name != "f32" && act_name != "bf16") throw Error("--activations must be f32 or bf16, got '", act_name, "'");
  // The dtype column names bf16 activations when they are on (rows stay comparable).
  const std::string precision = act_name == "bf16" ? gemm_precision + " (act bf16)" : gemm_precision;
  Context ctx({.num_threads = int(args->get_int("threads")),
               .device = device,
               .kernels = {.deterministic = args->has("deterministic")}});
  const std::string devices_name = setup_device(ctx, gemm_precision);
  const char* devices = devices_name.c_str();
  const bool fixed_peak = args->has("peak-gflops");
  double peak = fixed_peak ? args->get_double("peak-gflops")
                : on_cuda  ? gpu_peak(ctx, act_name == "bf16" ? "bf16" : gemm_precision).gflops  // bf16 blocks: bf16 GEMMs
                : dry_run  ? 0.0
                           : train::measure_peak_gflops(ctx.num_threads());
  const bool measured_peak = !fixed_peak && !on_cuda;

  const std::string recompute_arg = args->get("recompute-gelu");
  if (recompute_arg != "auto" && recompute_arg != "on" && recompute_arg != "off")
    throw Error("--recompute-gelu must be auto, on or off, got '", recompute_arg, "'");
  const bool recompute_gelu = recompute_arg == "auto" ? on_cuda : recompute_arg == "on";  // the step's default
  const long long num_params = count_params(cfg);
  // A dry run builds no model (ViT-g's weights and moments are ~16 GB).
  std::optional<VideoMAEPretrainModel> model;
  std::optional<Optimizer> opt;
  // VideoMAE's pretraining AdamW (video.md section 2.1); lr 1.5e-4 x 2048 / 256 is the scaled base.
  const OptimizerConfig oc{.kind = OptimizerKind::adamw,
                           .lr = 1.2e-3f,
                           .beta1 = 0.9f,
                           .beta2 = 0.95f,
                           .eps = 1e-8f,
                           .weight_decay = 0.05f,
                           .max_grad_norm = 0.0f};
  if (!dry_run) {
    model.emplace(VideoMAEPretrainModel::random(cfg, seed));
    model->to(ctx);  // no-op on the CPU
    long long counted = 0;
    for (const Param& p : model->params()) counted += p.value.numel();
    if (counted != num_params)
      throw Error("bench videomae: the model has ", counted, " parameters, the count from the config says ",
                  num_params);
    opt.emplace(oc, model->params());
  }

  if (format == "table") {
    std::printf(
        "# unmask bench videomae: %s (%lld parameters; encoder %lld/%lld/%lld, decoder %lld/%lld/%lld), "
        "%lld x %lld^2, tube mask %.2f (%lld visible, %lld masked tokens of %lld), AdamW, %s kernels, %s GEMMs, "
        "attention %s, peak %.0f GFLOP/s%s\n",
        model_name.c_str(), num_params, (long long)cfg.dim, (long long)cfg.depth, (long long)cfg.heads,
        (long long)cfg.decoder_dim, (long long)cfg.decoder_depth, (long long)cfg.decoder_heads,
        (long long)cfg.num_frames, (long long)cfg.img_size, mask_ratio, (long long)Nv, (long long)Nm, (long long)Np,
        on_cuda ? "cuda" : ctx.cpu_isa(), precision.c_str(), attention_mode(ctx).c_str(), peak,
        fixed_peak ? " (given)"
        : on_cuda  ? gpu_peak(ctx, "bf16").label.c_str()
        : dry_run  ? " (not measured)"
                   : " (FMA loop; measured again after each row)");
    std::printf(
        "| devices | dataset | dtype | batch/device | model FLOPs (G/clip) | videos/s/device | step (ms) "
        "| data wait (ms) | memory est. | memory (%s) | MFU | MFU executed | device-h SSv2 1200 ep |\n",
        on_cuda ? "peak GPU" : "peak RSS");
    std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  std::fflush(stdout);

  data::Rng rng(seed * 0x9E3779B97F4A7C15ull + 7);
  for (int64_t B : batches) {
    const video::VideoMAEFlopConfig fc = flop_config(cfg, mask_ratio, B);
    const double fwd_per_clip = video::videomae_pretrain_forward_flops(flop_config(cfg, mask_ratio, 1));
    const double step_flops = video::videomae_pretrain_step_flops(fc);
    // unmask embeds the visible tubelets only: 3 x 2 (N - V) P D fewer FLOPs per clip.
    const double skipped = 3.0 * 2.0 * double(B * (Np - Nv)) * double(cfg.patch_dim()) * double(cfg.dim);
    const double executed_flops = step_flops - skipped;
    const video::VideoMAEStepBytes bytes = video::videomae_pretrain_step_bytes(fc, recompute_gelu,
                                                                                 act_name == "bf16" ? DType::bf16 : DType::f32);

    std::vector<double> times, waits;
    double last_loss = 0;
    StepProfile prof;
    std::optional<video::ClipLoader> loader;
    if (from_store && !dry_run) {
      video::ClipLoaderOptions lo;
      lo.batch = int(B);
      lo.num_frames = int(cfg.num_frames);
      lo.sampling_rate = int(args->get_int("rate"));
      lo.crop = int(cfg.img_size);
      lo.mode = video::ClipLoaderOptions::Mode::pretrain;
      lo.threads = int(args->get_int("loader-threads"));
      lo.seed = seed;
      loader.emplace(video::ClipLoader::from_store(args->get("store"), lo));
      if (loader->batches_per_epoch() < 1)
        throw Error("bench videomae: the store ", args->get("store"), " holds ", loader->size(),
                    " videos, fewer than one batch of ", B);
    }
    if (!dry_run) {
      // One fixed clip batch, ImageNet-normalised from uniform pixels in [0, 1).
      Tensor videos = Tensor::empty({B, cfg.channels, cfg.num_frames, cfg.img_size, cfg.img_size}, DType::f32);
      reset_peak_gpu(ctx);
      VideoMAEStepOptions so;
      so.activations = act_name == "bf16" ? DType::bf16 : DType::f32;
      so.recompute_gelu = recompute_gelu;
      const int64_t per_channel = cfg.num_frames * cfg.img_size * cfg.img_size;
      float* v = videos.data<float>();
      for (int64_t i = 0; !loader && i < videos.numel(); ++i) {
        const size_t ch = size_t((i / per_channel) % cfg.channels);
        v[i] = float((rng.uniform() - double(so.mean[ch])) / double(so.std[ch]));
      }
      if (!loader && on_cuda) videos = videos.to(Device::cuda);  // synthetic input already on the GPU
      std::vector<Tensor> masks;
      for (int64_t i = 0; i < warmup + steps; ++i)
        masks.push_back(video::tube_mask_batch(grid, mask_ratio, seed, uint64_t(i * B), B));
      video::ClipBatch cb;
      for (int64_t i = 0; i < warmup + steps; ++i) {
        ctx.synchronize();  // no-op on the CPU; CUDA: the step's work is timed whole
        const double t0 = now_s();
        if (loader) {
          while (!loader->next(cb)) {  // false once at the end of an epoch: the next call starts another
          }
          videos = on_cuda ? cb.videos.to(Device::cuda) : cb.videos;
        }
        const double t_data = now_s() - t0;
        model->zero_grad(ctx);
        const VideoMAEStepStats st = model->pretrain_step(ctx, videos, masks[size_t(i)], so);
        opt->step(ctx, oc.lr);
        ctx.synchronize();
        const double dt = now_s() - t0;
        last_loss = st.loss;
        if (i >= warmup) {
          times.push_back(dt);
          waits.push_back(t_data);
        }
      }
      prof = profile_steps(ctx, profile, args->has("profile-shapes"), [&, k = int64_t(0)]() mutable {
        if (loader) {
          while (!loader->next(cb)) {
          }
          videos = on_cuda ? cb.videos.to(Device::cuda) : cb.videos;
        }
        model->zero_grad(ctx);
        model->pretrain_step(ctx, videos, masks[size_t(warmup + k++ % steps)], so);
        opt->step(ctx, oc.lr);
      });
      std::sort(times.begin(), times.end());
      if (measured_peak) peak = std::max(peak, train::measure_peak_gflops(ctx.num_threads()));
    }
    const double med = times.empty() ? 0.0 : times[times.size() / 2];
    const double vps = med > 0 ? double(B) / med : 0.0;
    const double gflops = med > 0 ? step_flops / med / 1e9 : 0.0;
    const double mfu = peak > 0 ? 100.0 * gflops / peak : 0.0;
    const double mfu_exec = peak > 0 && med > 0 ? 100.0 * executed_flops / med / 1e9 / peak : 0.0;
    // CUDA: MFU against the GEMM rate this GPU measurably reaches too (issue 6's definition)
    const std::string gemm_dtype = act_name == "bf16" ? "bf16" : gemm_precision;
    // The step's memory peaks are read before the GEMM measurement allocates its operands.
    const double gpu_mb = peak_gpu_mb(ctx);
    const GpuMemoryPeaks gpu_mem = gpu_memory_peaks(ctx);
    const double matmul_peak = on_cuda && !fixed_peak && !dry_run ? gpu_matmul_peak(ctx, gemm_dtype) : 0.0;
    const double mfu_matmul = matmul_peak > 0 ? 100.0 * gflops / matmul_peak : 0.0;
    const double device_hours = vps > 0 ? kSsv2TrainVideos * kSsv2Epochs / vps / 3600.0 : 0.0;
    double wait_ms = 0;  // mean time a timed step waited for its batch
    for (double w : waits) wait_ms += 1e3 * w / double(waits.size());
    if (format == "table") {
      std::printf("| %s | %s | %s | %lld | %.3f | %.3f | %.0f | %.1f | %.0f MB | %.0f MB | %.1f%% | %.1f%% | %.0f |\n",
                  devices, dataset.c_str(), precision.c_str(), (long long)B, fwd_per_clip / 1e9, vps, med * 1e3,
                  wait_ms, bytes.peak / 1048576.0, on_cuda ? gpu_mb : peak_rss_mb(), mfu, mfu_exec,
                  device_hours);
      if (matmul_peak > 0)
        std::printf("#   MFU %.1f%% against the measured GEMM peak, %.0f GFLOP/s (8192^3 %s, mean of 10)\n", mfu_matmul,
                    matmul_peak, gemm_dtype.c_str());
      print_step_profile(prof);
    } else {
      nlohmann::ordered_json j;
      j["engine"] = "unmask";
      j["model"] = model_name;
      j["devices"] = devices;
      j["dataset"] = dataset;
      j["dtype"] = precision;
      j["activations"] = act_name;
      j["recompute_gelu"] = recompute_gelu;
      j["device"] = on_cuda ? "cuda" : "cpu";
      j["attention"] = attention_mode(ctx);
      j["batch"] = B;
      j["frames"] = cfg.num_frames;
      j["img"] = cfg.img_size;
      j["mask_ratio"] = mask_ratio;
      j["decoder_depth"] = cfg.decoder_depth;
      j["tokens"] = Np;
      j["visible_tokens"] = Nv;
      j["masked_tokens"] = Nm;
      j["params"] = num_params;
      j["model_gflops_per_clip"] = fwd_per_clip / 1e9;
      j["step_gflop"] = step_flops / 1e9;
      j["executed_step_gflop"] = executed_flops / 1e9;
      j["videos_per_s"] = vps;
      j["step_ms"] = med * 1e3;
      j["step_ms_min"] = times.empty() ? 0.0 : times.front() * 1e3;
      j["step_ms_max"] = times.empty() ? 0.0 : times.back() * 1e3;
      j["data_wait_ms"] = wait_ms;
      j["gflop_per_s"] = gflops;
      j["mfu_pct"] = mfu;
      j["executed_mfu_pct"] = mfu_exec;
      j["peak_gflops"] = peak;
      j["mfu_matmul_pct"] = mfu_matmul;
      j["matmul_peak_gflops"] = matmul_peak;
      j["peak_rss_mb"] = peak_rss_mb();
      j["peak_gpu_mb"] = gpu_mb;
      j["peak_gpu_requested_mb"] = gpu_mem.requested_mb;
      j["peak_gpu_reserved_mb"] = gpu_mem.reserved_mb;
      j["estimated_peak_mb"] = bytes.peak / 1048576.0;
      j["estimated_saved_mb"] = bytes.saved / 1048576.0;
      j["estimated_state_mb"] = bytes.state / 1048576.0;
      j["device_hours_ssv2_1200ep"] = device_hours;
      j["threads"] = ctx.num_threads();
      j["steps"] = dry_run ? 0 : steps;
      j["warmup"] = dry_run ? 0 : warmup;
      j["loss"] = last_loss;
      j["optimizer"] = "adamw";
      j["dry_run"] = dry_run;
      if (prof.steps > 0) j["profile"] = nlohmann::json::parse(step_profile_json(prof));
      std::printf("%s\n", j.dump().c_str());
    }
    std::fflush(stdout);
  }
  if (format == "table")
    std::printf(
        "# model FLOPs: forward per clip (matmuls, patch embed on all tokens, decoder depth %lld); MFU = 3 x "
        "model FLOPs x videos/s / %.0f GFLOP/s (V-SWIFT's formula); MFU executed: patch embed on the "
        "visible tokens only, as unmask runs it\n",
        (long long)cfg.decoder_depth, peak);
  return 0;
}

}  // namespace unmask::cli
