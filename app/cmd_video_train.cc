// app/cmd_video_train.cc: `unmask pretrain-video` (VideoMAE masked autoencoding), `unmask
// finetune-video` (classification from a pretrained encoder, with held-out multi-view evaluation)
// and `unmask eval-video` (top-1 / top-5 of a fine-tuned checkpoint over test views).
//
// Data: --data is a clip store (`unmask prepare-video`, decode-once) or a list file decoded on the
// fly. Output (--out DIR): DIR/model (model.safetensors + config.json, original or HF names),
// DIR/metrics.jsonl (one line per step), and for fine-tuning DIR/eval.json.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "data/rng.h"
#include "io/file.h"
#include "dist/grad_sync.h"
#include "dist/shard.h"
#include "train/metrics.h"
#include "unmask/dist.h"
#include "unmask/error.h"
#include "unmask/train.h"
#include "video/masking.h"
#include "video/videomae_checkpoint.h"
#include "video/videomae_flops.h"
#include "video_common.h"

namespace unmask::cli {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<OptionSpec> with(std::vector<OptionSpec> a, const std::vector<OptionSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<OptionSpec> optimizer_specs(const char* lr, const char* beta2, const char* warmup) {
  return {
      {"lr", "LR", "peak learning rate (absolute, like V-SWIFT; VideoMAE's rule is base_lr * batch / 256)", lr},
      {"min-lr-ratio", "R", "cosine schedule floor as a fraction of --lr (VideoMAE min_lr / lr)", "0.01"},
      {"warmup", "F", "linear warmup as a fraction of the steps", warmup},
      {"weight-decay", "WD", "AdamW weight decay (biases, norms and 1-D params excluded)", "0.05"},
      {"beta2", "B", "AdamW beta2 (beta1 0.9, eps 1e-8)", beta2},
      {"clip-grad", "NORM", "clip the global gradient norm (0 = off)", "0"},
  };
}

struct OptimizerSetup {
  OptimizerConfig config;
  ScheduleConfig schedule;
};

OptimizerSetup optimizer_setup(const Args& a, int64_t total_steps) {
  OptimizerSetup s;
  s.config.kind = OptimizerKind::adamw;
  s.config.lr = float(a.get_double("lr"));
  s.config.beta1 = 0.9f;
  s.config.beta2 = float(a.get_double("beta2"));
  s.config.eps = 1e-8f;
  s.config.weight_decay = float(a.get_double("weight-decay"));
  s.config.max_grad_norm = float(a.get_double("clip-grad"));
  s.schedule.kind = ScheduleConfig::Kind::cosine;
  s.schedule.warmup = a.get_double("warmup");
  s.schedule.total_steps = total_steps;
  s.schedule.min_ratio = a.get_double("min-lr-ratio");
  if (!(s.config.lr > 0.0f)) throw Error("--lr must be > 0, got ", a.get("lr"));
  lr_multiplier(s.schedule, 0);  // validates warmup / min ratio with a clear message
  return s;
}

video::VideoMAENaming naming_of(const Args& a) {
  const std::string n = a.get("naming");
  if (n == "original") return video::VideoMAENaming::original;
  if (n == "hf") return video::VideoMAENaming::hf;
  throw Error("--naming must be original or hf, got '", n, "'");
}

std::string loader_split(const video::LoaderTimes& t) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "loader: %lld clips, read %.2fs, augment %.2fs, copy %.2fs (worker seconds), trainer waited %.2fs; "
                "skipped videos: %s",
                (long long)t.clips, t.read_s, t.augment_s, t.copy_s, t.wait_s, t.skipped.summary().c_str());
  return buf;
}

// The next batch, starting a new epoch at the end of one.
void next_batch(video::ClipLoader& loader, video::ClipBatch& b) {
  if (loader.next(b)) return;
  if (!loader.next(b))
    throw Error("the clip loader produced no batch in a whole epoch",
                Hint("the data has fewer videos than --batch (drop_last), or every video was skipped"));
}

void print_step(int64_t step, int64_t total, double loss, double lr, double gnorm, double clips_s, double gflops,
                double extra, const char* extra_name) {
  std::fprintf(stderr, "step %lld/%lld  loss %.4f  lr %.3g  |g| %.3f  %.2f clips/s  %.1f GFLOP/s", (long long)step,
               (long long)total, loss, lr, gnorm, clips_s, gflops);
  if (extra_name) std::fprintf(stderr, "  %s %.3f", extra_name, extra);
  std::fputc('\n', stderr);
}

}  // namespace

int cmd_pretrain_video(int argc, char** argv) {
  const std::vector<OptionSpec> specs = with(
      with({{"data", "PATH", "clip store directory or list file", ""},
            {"out", "DIR", "output directory (model/, metrics.jsonl)", ""},
            {"batch", "N", "clips per step", "8"},
            {"steps", "N", "optimizer steps", "100"},
            {"mask-ratio", "R", "tube mask ratio", "0.9"},
            {"decoder-mask-ratio", "R", "VideoMAE v2 running-cell decoder masking ratio (0 = off: decode the masked tokens)", "0"},
            {"naming", "KIND", "checkpoint names: original (VideoMAE) or hf (transformers)", "original"},
            {"init-from", "PATH", "start from a checkpoint (safetensors dir/file or .pth)", ""},
            {"save-every", "N", "also write DIR/model every N steps (0 = only at the end)", "0"},
            {"log-every", "N", "print a line every N steps", "10"},
            {"threads", "N", "compute threads (0 = all cores)", "0"},
            device_option(),
            {"precision", "fp32|tf32|bf16", "GEMM precision on cuda (bf16: tensor cores, fp32 master weights)", "fp32"},
            {"activations", "f32|bf16", "the ViT blocks' activations (bf16: half the memory; cuda head size 64/80/88/128, cpu emulated)", "f32"},
            {"seed", "N", "seed of the weights, masks and augmentation", "0"},
            {"no-overlap", "", "data parallel: all-reduce the gradients after the backward instead of during it", ""},
            {"data-sharding", "MODE",
             "data parallel: slice (rank r reads its videos of each global batch: one process's numbers) or local "
             "(--data is this machine's part, {rank} in it replaced; ranks resample to equal counts)",
             "slice"},
            video_force_spec()},
           video_model_specs()),
      with(video_data_specs(), optimizer_specs("1.5e-4", "0.95", "0.1")));
  auto parsed = Args::parse("pretrain-video", "VideoMAE pretraining (tube masking, normalized-pixel MSE)", specs, argc,
                            argv, 2);
  if (!parsed) return 0;
  const Args& a = *parsed;
  std::string data = a.require("data");
  const std::string out = a.require("out");
  check_video_output(a, out, "pretrain-video");
  const VideoMAEConfig config = video_model_config(a);
  const int64_t batch = a.get_int("batch"), steps = a.get_int("steps"), seed = a.get_int("seed");
  const double ratio = a.get_double("mask-ratio");
  if (batch < 1 || steps < 1) throw Error("--batch and --steps must be >= 1");
  const video::VideoMAENaming naming = naming_of(a);
  const OptimizerSetup os = optimizer_setup(a, steps);

  // Data parallel under mpirun / srun. --data-sharding slice (V-SWIFT's mode 1): each rank's
  // loader reads only its rows of every global batch (batch x ranks clips; the loader keys every
  // random draw by the clip's global position), masks are keyed by the global clip index and the
  // gradients summed over ranks with loss_scale = rows / global rows, so N ranks compute the step
  // of one process with the global batch. --data-sharding local (mode 2): each rank reads its own
  // store or list, resampled to the largest rank's count per epoch. Rank 0 writes.
  Communicator& comm = Communicator::world();
  const int world = comm.size(), rank = comm.rank();
  const bool root = comm.is_root();
  const std::string sharding = a.get("data-sharding");
  const bool overlap = !a.has("no-overlap");
  if (sharding != "slice" && sharding != "local")
    throw Error("--data-sharding must be slice or local, got '", sharding, "'");
  if (sharding == "local")
    data = dist::with_rank(data, rank);
  else if (dist::has_rank_placeholder(data))
    throw Error("--data ", data, " holds {rank}, which only --data-sharding local replaces");
  int threads = int(a.get_int("threads"));
  if (threads == 0 && comm.local_size() > 1)
    threads = std::max(1, int(std::thread::hardware_concurrency()) / comm.local_size());
  // --device cuda: rank r of a host uses GPU local_rank % GPUs; the clips are uploaded per step
  // (save_videomae copies GPU parameters to the host itself).
  const Device device = device_of(a);
  const std::string precision = precision_of(a, device);
  const std::string act_name = a.get("activations");
  if (act_name != "f32" && act_name != "bf16") throw Error("--activations must be f32 or bf16, got '", act_name, "'");
  Context ctx({.num_threads = threads, .device = device, .device_index = gpu_for_local_rank(device, comm.local_rank())});
  setup_device(ctx, precision);
  VideoMAEPretrainModel model = VideoMAEPretrainModel::random(config, uint64_t(seed));
  if (a.has("init-from")) {
    const video::LoadReport r = video::load_videomae(a.get("init-from"), config, model.params());
    if (root) std::fprintf(stderr, "%s\n", r.summary().c_str());
  }
  model.to(ctx);  // no-op on the CPU; before the gradient sync and the optimizer take the params
  std::unique_ptr<dist::GradientSync> grad_sync;
  if (world > 1) grad_sync = std::make_unique<dist::GradientSync>(comm, model.params(), dist::GradientSyncOptions{.average = false});
  video::ClipLoaderOptions lo;
  lo.mode = video::ClipLoaderOptions::Mode::pretrain;
  lo.batch = int(batch);
  lo.num_frames = int(config.num_frames);
  lo.crop = int(config.img_size);
  lo.seed = uint64_t(seed);
  if (world > 1) {
    lo.rank = rank, lo.ranks = world;
    if (sharding == "slice") {
      lo.sharding = video::ClipLoaderOptions::Sharding::slice;
    } else {
      lo.sharding = video::ClipLoaderOptions::Sharding::resample;
      lo.seed = dist::rank_seed(uint64_t(seed), rank);  // each rank's own order and augmentation
      lo.rank_counts = comm.allgather_pod<int64_t>(int64_t(video_labels(a, data).size()), "the per-rank video counts");
      if (root) {
        std::string counts;
        for (int64_t c : lo.rank_counts) counts += (counts.empty() ? "" : ", ") + std::to_string(c);
        std::fprintf(stderr, "pretrain-video: --data-sharding local: the ranks hold %s videos; each epoch visits %lld "
                     "on every rank\n", counts.c_str(),
                     (long long)*std::max_element(lo.rank_counts.begin(), lo.rank_counts.end()));
      }
    }
  }
  video::ClipLoader loader = open_video_loader(a, data, lo);
  const video::TokenGrid grid{config.grid_t(), config.grid_hw(), config.grid_hw()};
  video::tube_masked_per_frame(grid, ratio);  // validates the ratio

  video::VideoMAEFlopConfig fc;
  fc.img_size = config.img_size, fc.frames = config.num_frames, fc.tubelet = config.tubelet, fc.patch = config.patch;
  fc.enc_dim = config.dim, fc.enc_depth = config.depth, fc.enc_heads = config.heads;
  fc.enc_mlp_hidden = config.mlp_hidden(config.dim);
  fc.dec_dim = config.decoder_dim, fc.dec_depth = config.decoder_depth, fc.dec_heads = config.decoder_heads;
  fc.dec_mlp_hidden = config.mlp_hidden(config.decoder_dim);
  fc.mask_ratio = ratio;
  const double decoder_ratio = a.get_double("decoder-mask-ratio");
  if (decoder_ratio > 0) video::running_cell_masked_per_cell(decoder_ratio);  // validates it
  fc.decoder_mask_ratio = decoder_ratio;
  fc.batch = batch;
  const double step_flops = video::videomae_pretrain_step_flops(fc);

  std::optional<JsonlLog> log;
  if (root) {
    std::filesystem::create_directories(out);
    log.emplace(out + "/metrics.jsonl");
  }
  Optimizer opt(os.config, model.params());
  if (root && world > 1)
    std::fprintf(stderr, "pretrain-video: data parallel over %d ranks, batch %lld per rank, %d threads per rank\n", world,
                 (long long)batch, threads);
  if (root) std::fprintf(stderr, "pretrain-video: %s (dim %lld, depth %lld, decoder %lld x %lld), %lld x %lld^2 clips, "
               "%lld videos, batch %lld, %lld steps, tube mask %.2f, %.2f GFLOP/step\n",
               a.get("preset").c_str(), (long long)config.dim, (long long)config.depth,
               (long long)config.decoder_dim, (long long)config.decoder_depth, (long long)config.num_frames,
               (long long)config.img_size, (long long)loader.size(), (long long)batch, (long long)steps, ratio,
               step_flops / 1e9);
  const auto t0 = Clock::now();
  video::ClipBatch b;
  double first_loss = 0, window_loss = 0;
  int64_t window = 0;
  for (int64_t step = 0; step < steps; ++step) {
    next_batch(loader, b);
    const auto ts = Clock::now();
    const int64_t B = batch * world;  // the global batch; this rank holds its rows [row0, row1)
    const int64_t row0 = rank * batch, row1 = row0 + b.videos.size(0);
    const Tensor mask =
        video::tube_mask_batch(grid, ratio, uint64_t(seed), uint64_t(step * batch * world + row0), row1 - row0);
    model.zero_grad(ctx);
    VideoMAEStepOptions so;
    so.activations = act_name == "bf16" ? DType::bf16 : DType::f32;
    if (decoder_ratio > 0)
      so.decoder_mask = video::running_cell_mask_batch(grid, decoder_ratio, uint64_t(seed),
                                                       uint64_t(step * batch * world + row0), row1 - row0);
    so.loss_scale = float(double(row1 - row0) / double(B));  // the ranks' gradients add up to the batch mean's
    if (world > 1 && overlap)  // each bucket's all-reduce starts as soon as the backward has finished it
      so.grads_ready = [&](int64_t first, int64_t end) {
        for (int64_t i = end; i-- > first;) grad_sync->mark_ready(i);
      };
    VideoMAEStepStats st = model.pretrain_step(ctx, device == Device::cpu ? b.videos : b.videos.to(device), mask, so);
    if (world > 1) {
      grad_sync->finish();  // reduces what was not marked (everything without overlap)
      double weighted = st.loss * double(row1 - row0);
      comm.allreduce_sum(&weighted, 1, "the step loss");
      st.loss = weighted / double(B);
    }
    const float lr = float(double(os.config.lr) * lr_multiplier(os.schedule, opt.step_count()));
    const OptimizerStepStats ost = opt.step(ctx, lr);
    const double step_s = seconds_since(ts);
    if (!std::isfinite(st.loss))
      throw Error("pretrain-video: the loss is ", st.loss, " at step ", step + 1,
                  Hint("lower --lr or add --clip-grad 1"));
    if (step == 0) first_loss = st.loss;
    window_loss += st.loss;
    ++window;
    std::ostringstream line;
    line.precision(9);
    line << "{\"step\": " << step + 1 << ", \"loss\": " << st.loss << ", \"lr\": " << lr
         << ", \"grad_norm\": " << ost.grad_norm << ", \"clips\": " << B << ", \"step_s\": " << step_s
         << ", \"clips_per_s\": " << double(B) / step_s << ", \"gflops_per_s\": " << step_flops / step_s / 1e9
         << ", \"elapsed_s\": " << seconds_since(t0) << "}";
    if (root) log->write(line.str());
    const int64_t every = std::max<int64_t>(1, a.get_int("log-every"));
    if ((step + 1) % every == 0 || step + 1 == steps) {
      if (root)
        print_step(step + 1, steps, window_loss / double(window), lr, ost.grad_norm, double(B) / step_s,
                   step_flops / step_s / 1e9, 0, nullptr);
      window_loss = 0;
      window = 0;
    }
    const int64_t save_every = a.get_int("save-every");
    if (root && save_every > 0 && (step + 1) % save_every == 0 && step + 1 < steps)
      video::save_videomae(out + "/model", config, model.params(), naming);
  }
  if (!root) return 0;
  video::save_videomae(out + "/model", config, model.params(), naming);
  std::fprintf(stderr, "%s\n", loader_split(loader.times()).c_str());
  std::printf("{\"steps\": %lld, \"first_loss\": %.6g, \"seconds\": %.2f, \"model\": \"%s/model\"}\n",
              (long long)steps, first_loss, seconds_since(t0), out.c_str());
  return 0;
}

int cmd_finetune_video(int argc, char** argv) {
  const std::vector<OptionSpec> specs = with(
      with({{"data", "PATH", "training clip store or list file", ""},
            {"val", "PATH", "held-out clip store or list file, evaluated at the end (top-1/top-5)", ""},
            {"out", "DIR", "output directory (model/, metrics.jsonl, eval.json)", ""},
            {"init-from", "PATH", "pretrained checkpoint (pretrain or fine-tune layout; orig or HF names)", ""},
            {"num-classes", "K", "classes (default: the largest label of --data + 1)", "0"},
            {"batch", "N", "clips per step", "8"},
            {"epochs", "N", "passes over --data", "10"},
            {"layer-decay", "D", "layer-wise lr decay (VideoMAE 0.75)", "0.75"},
            {"drop-path", "R", "stochastic depth rate, linear over blocks", "0.1"},
            {"head-dropout", "P", "dropout before the head (fc_drop_rate)", "0"},
            {"mixup", "A", "mixup alpha (0 = off)", "0.8"},
            {"cutmix", "A", "cutmix alpha (0 = off)", "1.0"},
            {"smoothing", "S", "label smoothing", "0.1"},
            {"flip", "", "random horizontal flip (off by default: it breaks direction labels, like SSv2's)", ""},
            {"test-segments", "N", "evaluation: temporal views per video", "2"},
            {"test-crops", "N", "evaluation: spatial crops per view", "3"},
            {"naming", "KIND", "checkpoint names: original (VideoMAE) or hf (transformers)", "original"},
            {"log-every", "N", "print a line every N steps", "10"},
            {"threads", "N", "compute threads (0 = all cores)", "0"},
            {"seed", "N", "seed of the head, augmentation, mixing and drop path", "0"},
            {"classes", "FILE", "class names, one per line in label order, for the model's id2label (default: "
             "classes.txt beside a --data list file, as make-videos writes it)", ""},
            video_force_spec()},
           video_model_specs()),
      with(video_data_specs(), optimizer_specs("1e-3", "0.999", "0.1")));
  auto parsed = Args::parse("finetune-video", "VideoMAE fine-tuning (mean pooling, layer decay, mixup/cutmix)", specs,
                            argc, argv, 2);
  if (!parsed) return 0;
  const Args& a = *parsed;
  std::string data = a.require("data");
  const std::string out = a.require("out");
  check_video_output(a, out, "finetune-video");
  VideoMAEConfig config = video_model_config(a);
  if (a.has("init-from")) {
    // the checkpoint's config wins over the preset, except the clip size given on the command line
    const std::filesystem::path src(a.get("init-from"));
    const std::filesystem::path cfg = std::filesystem::is_directory(src) ? src / "config.json" : src.parent_path() / "config.json";
    if (std::filesystem::exists(cfg)) {
      VideoMAEConfig from = video::read_videomae_config(cfg.string());
      if (a.get_int("img") > 0) from.img_size = a.get_int("img");
      if (a.get_int("frames") > 0) from.num_frames = a.get_int("frames");
      config = from;
      config.validate();
    }
  }
  const std::vector<int64_t> labels = video_labels(a, data);
  int64_t K = a.get_int("num-classes");
  const int64_t max_label = *std::max_element(labels.begin(), labels.end());
  if (K == 0) K = max_label + 1;
  if (max_label >= K) throw Error("--data has label ", max_label, " but --num-classes is ", K);
  // Class names for id2label: --classes, else classes.txt beside a list file.
  std::vector<std::string> class_names;
  {
    std::string classes = a.get("classes");
    const std::filesystem::path beside = std::filesystem::path(data).parent_path() / "classes.txt";
    if (classes.empty() && std::filesystem::is_regular_file(data) && std::filesystem::is_regular_file(beside))
      classes = beside.string();
    if (!classes.empty()) {
      std::istringstream in(io::read_file(classes));
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) class_names.push_back(line);
      if (int64_t(class_names.size()) != K)
        throw Error(classes, " names ", class_names.size(), " classes but the model has ", K,
                    Hint("one name per line, in label order (label k on line k + 1)"));
    }
  }
  const int64_t batch = a.get_int("batch"), epochs = a.get_int("epochs"), seed = a.get_int("seed");
  if (batch < 1 || epochs < 1) throw Error("--batch and --epochs must be >= 1");
  const video::VideoMAENaming naming = naming_of(a);

  Context ctx({.num_threads = int(a.get_int("threads"))});
  VideoMAEClassifier model = VideoMAEClassifier::random(config, K, uint64_t(seed));
  if (a.has("init-from")) {
    video::VideoMAELoadOptions lo;
    lo.allow_missing_prefixes = {"head.", "fc_norm."};
    const video::LoadReport r = video::load_videomae(a.get("init-from"), config, model.params(), lo);
    std::fprintf(stderr, "%s\n", r.summary().c_str());
  }
  model.set_layer_decay(float(a.get_double("layer-decay")));

  video::ClipLoaderOptions lo;
  lo.mode = video::ClipLoaderOptions::Mode::train;
  lo.flip = a.has("flip");
  lo.batch = int(batch);
  lo.num_frames = int(config.num_frames);
  lo.crop = int(config.img_size);
  lo.seed = uint64_t(seed);
  video::ClipLoader loader = open_video_loader(a, data, lo);
  const int64_t per_epoch = loader.batches_per_epoch();
  if (per_epoch < 1) throw Error("--data has ", loader.size(), " videos, fewer than one --batch of ", batch);
  const int64_t steps = per_epoch * epochs;
  const OptimizerSetup os = optimizer_setup(a, steps);
  Optimizer opt(os.config, model.params());
  MixupOptions mo;
  mo.mixup_alpha = float(a.get_double("mixup"));
  mo.cutmix_alpha = float(a.get_double("cutmix"));
  mo.label_smoothing = float(a.get_double("smoothing"));
  VideoMAEClassifyOptions co;
  co.drop_path_rate = float(a.get_double("drop-path"));
  co.head_dropout = float(a.get_double("head-dropout"));
  co.seed = uint64_t(seed);

  video::VideoMAEFlopConfig fc;
  fc.img_size = config.img_size, fc.frames = config.num_frames, fc.tubelet = config.tubelet, fc.patch = config.patch;
  fc.enc_dim = config.dim, fc.enc_depth = config.depth, fc.enc_heads = config.heads;
  fc.enc_mlp_hidden = config.mlp_hidden(config.dim);
  fc.num_classes = K;
  fc.batch = batch;
  const double step_flops = video::videomae_finetune_step_flops(fc);

  std::filesystem::create_directories(out);
  JsonlLog log(out + "/metrics.jsonl");
  std::fprintf(stderr, "finetune-video: %s (dim %lld, depth %lld), %lld classes, %lld videos, batch %lld, %lld epochs "
               "= %lld steps, layer decay %s, drop path %s, mixup %s / cutmix %s, smoothing %s\n",
               a.get("preset").c_str(), (long long)config.dim, (long long)config.depth, (long long)K,
               (long long)loader.size(), (long long)batch, (long long)epochs, (long long)steps,
               a.get("layer-decay").c_str(), a.get("drop-path").c_str(), a.get("mixup").c_str(),
               a.get("cutmix").c_str(), a.get("smoothing").c_str());
  const auto t0 = Clock::now();
  video::ClipBatch b;
  double window_loss = 0;
  int64_t window = 0, window_hits = 0, window_rows = 0;
  for (int64_t step = 0; step < steps; ++step) {
    next_batch(loader, b);
    const auto ts = Clock::now();
    const int64_t B = b.videos.size(0);
    const MixupResult mix = mixup_cutmix(b.videos, b.labels, K, mo, data::derive_key(uint64_t(seed), {uint64_t(step)}));
    model.zero_grad(ctx);
    co.step = uint64_t(step);
    const VideoMAEClassifyStats st = model.step(ctx, b.videos, mix.targets, co);
    const float lr = float(double(os.config.lr) * lr_multiplier(os.schedule, opt.step_count()));
    const OptimizerStepStats ost = opt.step(ctx, lr);
    const double step_s = seconds_since(ts);
    if (!std::isfinite(st.loss))
      throw Error("finetune-video: the loss is ", st.loss, " at step ", step + 1, Hint("lower --lr"));
    for (int64_t r = 0; r < B; ++r) {  // training accuracy on the (mixed) batch, against the clip's own label
      const float* z = st.logits.data<float>() + r * K;
      window_hits += std::max_element(z, z + K) - z == b.labels[size_t(r)];
    }
    window_rows += B;
    window_loss += st.loss;
    ++window;
    std::ostringstream line;
    line.precision(9);
    line << "{\"step\": " << step + 1 << ", \"epoch\": " << b.epoch << ", \"loss\": " << st.loss << ", \"lr\": " << lr
         << ", \"grad_norm\": " << ost.grad_norm << ", \"lam\": " << mix.lam << ", \"clips\": " << B
         << ", \"step_s\": " << step_s << ", \"clips_per_s\": " << double(B) / step_s
         << ", \"gflops_per_s\": " << step_flops / step_s / 1e9 << ", \"elapsed_s\": " << seconds_since(t0) << "}";
    log.write(line.str());
    const int64_t every = std::max<int64_t>(1, a.get_int("log-every"));
    if ((step + 1) % every == 0 || step + 1 == steps) {
      print_step(step + 1, steps, window_loss / double(window), lr, ost.grad_norm, double(B) / step_s,
                 step_flops / step_s / 1e9, double(window_hits) / double(window_rows), "train acc");
      window_loss = 0;
      window = window_hits = window_rows = 0;
    }
  }
  video::save_videomae(out + "/model", config, model.params(), naming, K, class_names);
  std::fprintf(stderr, "%s\n", loader_split(loader.times()).c_str());
  std::ostringstream summary;
  summary << "{\"steps\": " << steps << ", \"seconds\": " << seconds_since(t0) << ", \"model\": \"" << out << "/model\"";
  if (a.has("val")) {
    const ViewEvalResult ev = evaluate_video_views(ctx, model, a, a.get("val"), int(a.get_int("test-segments")),
                                                   int(a.get_int("test-crops")), int(batch));
    summary << ", \"val_videos\": " << ev.videos << ", \"views\": " << ev.views << ", \"top1\": " << ev.top1
            << ", \"top5\": " << ev.top5;
    std::fprintf(stderr, "held-out: %lld videos x %lld views: top-1 %.2f%%, top-5 %.2f%% (%s)\n", (long long)ev.videos,
                 (long long)ev.views, 100 * ev.top1, 100 * ev.top5, ev.loader.skipped.summary().c_str());
  }
  summary << "}";
  {
    std::FILE* f = std::fopen((out + "/eval.json").c_str(), "w");
    if (!f) throw Error("cannot write ", out, "/eval.json");
    std::fprintf(f, "%s\n", summary.str().c_str());
    std::fclose(f);
  }
  std::printf("%s\n", summary.str().c_str());
  return 0;
}

int cmd_eval_video(int argc, char** argv) {
  const std::vector<OptionSpec> specs = with(
      {{"model", "PATH", "fine-tuned checkpoint directory (config.json with num_labels)", ""},
       {"data", "PATH", "clip store or list file", ""},
       {"test-segments", "N", "temporal views per video (VideoMAE K400 5, SSv2 2)", "2"},
       {"test-crops", "N", "spatial crops per view (VideoMAE 3)", "3"},
       {"batch", "N", "views per forward pass", "8"},
       {"threads", "N", "compute threads (0 = all cores)", "0"}},
      video_data_specs());
  auto parsed = Args::parse("eval-video", "multi-view top-1 / top-5 of a fine-tuned VideoMAE", specs, argc, argv, 2);
  if (!parsed) return 0;
  const Args& a = *parsed;
  const std::string path = a.require("model"), data = a.require("data");
  const video::VideoMAECheckpointConfig cc = video::read_videomae_checkpoint_config(path);
  if (cc.num_classes < 1)
    throw Error(path, " is not a classification checkpoint (its config has no num_labels)",
                Hint("evaluate the output of `unmask finetune-video`, or an HF VideoMAEForVideoClassification"));
  Context ctx({.num_threads = int(a.get_int("threads"))});
  VideoMAEClassifier model = VideoMAEClassifier::random(cc.config, cc.num_classes, 0);
  video::VideoMAELoadOptions lo;
  const video::LoadReport r = video::load_videomae(path, cc.config, model.params(), lo);
  std::fprintf(stderr, "%s\n", r.summary().c_str());
  const ViewEvalResult ev = evaluate_video_views(ctx, model, a, data, int(a.get_int("test-segments")),
                                                 int(a.get_int("test-crops")), int(a.get_int("batch")));
  std::fprintf(stderr, "%s\n", loader_split(ev.loader).c_str());
  std::printf("{\"videos\": %lld, \"views\": %lld, \"top1\": %.6f, \"top5\": %.6f, \"seconds\": %.2f, "
              "\"clips_per_s\": %.2f, \"skipped\": %lld}\n",
              (long long)ev.videos, (long long)ev.views, ev.top1, ev.top5, ev.seconds, ev.clips_per_s,
              (long long)ev.loader.skipped.total());
  return 0;
}

}  // namespace unmask::cli
