// app/cmd_video_train.cc: `unmask pretrain-video` (VideoMAE masked autoencoding), `unmask
// finetune-video` (classification from a pretrained encoder, with held-out multi-view evaluation)
// and `unmask eval-video` (top-1 / top-5 of a fine-tuned checkpoint over test views).
//
// Data: --data is a clip store (`unmask prepare-video`, decode-once) or a list file decoded on the
// fly. Output (--output DIR): DIR/model (model.safetensors + config.json, original or HF names),
// DIR/metrics.jsonl (one line per step), and for fine-tuning DIR/eval.json.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <unistd.h>
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
#include "data/video/masking.h"
#include "models/videomae/checkpoint.h"
#include "models/videomae/flops.h"
#include "models/videomae/finetune_task.h"
#include "models/videomae/pretrain_task.h"
#include "core/signals.h"
#include "train/trainer.h"
#include "train_common.h"
#include "video_common.h"

namespace unmask::cli {

namespace {
video::VideoMAENaming naming_of(const Args& a) {
  const std::string n = a.get("naming");
  if (n == "original") return video::VideoMAENaming::original;
  if (n == "hf") return video::VideoMAENaming::hf;
  throw Error("--naming must be original or hf, got '", n, "'");
}

}  // namespace

int cmd_pretrain_video(int argc, char** argv) {
  const std::vector<OptionSpec> specs = with(
      with({{"data", "PATH", "clip store directory or list file", ""},
            {"output", "DIR", "run directory (checkpoints/, metrics.jsonl, loss.svg; the final model in DIR/model)", ""},
            {"batch", "N", "clips per micro-batch (per rank)", "8"},
            {"accumulation", "N", "micro-batches per optimizer step (gradient accumulation)", "1"},
            {"steps", "N", "optimizer steps", "100"},
            {"mask-ratio", "R", "tube mask ratio", "0.9"},
            {"decoder-mask-ratio", "R", "VideoMAE v2 running-cell decoder masking ratio (0 = off: decode the masked tokens)", "0"},
            {"naming", "KIND", "checkpoint names: original (VideoMAE) or hf (transformers)", "original"},
            {"init-from", "PATH", "start from a checkpoint (safetensors dir/file or .pth)", ""},
            {"resume", "[DIR]", "continue the run in --output (or in DIR, or from the checkpoint DIR) where it stopped", ""},
            {"stop-after", "N", "stop after N steps of this invocation with a checkpoint (continue with --resume)", "0"},
            {"checkpoint-every", "N", "write a checkpoint (model, optimizer, trainer state) every N steps (0 = at the end)", "0"},
            {"keep-checkpoints", "N", "keep the last N checkpoints (0 = all)", "3"},
            {"log-every", "N", "print a line every N steps", "10"},
            {"quiet", "", "no progress output", ""},
            {"threads", "N", "compute threads (0 = all cores)", "0"},
            device_option(),
            {"precision", "fp32|tf32|bf16", "GEMM precision on cuda (bf16: tensor cores, fp32 master weights)", "fp32"},
            {"activations", "f32|bf16", "the ViT blocks' activations (bf16: half the memory; cuda head size 64/80/88/128, cpu emulated)", "f32"},
            {"deterministic", "", "CUDA: bitwise reproducible attention gradients (the recompute dQ kernel; a little slower)", ""},
            {"seed", "N", "seed of the weights, masks and augmentation", "0"},
            {"no-overlap", "", "data parallel: all-reduce the gradients after the backward instead of during it", ""},
            {"data-sharding", "MODE",
             "data parallel: slice (rank r reads its videos of each global batch: one process's numbers) or local "
             "(--data is this machine's part, {rank} in it replaced; ranks resample to equal counts)",
             "slice"},
            video_force_spec()},
           video_model_specs()),
      with(video_data_specs(), optimizer_specs("1.5e-4", "0.95", "0.1")));
  bool resume = false;
  std::string resume_dir;
  std::vector<char*> rest = take_resume(argc, argv, &resume, &resume_dir);
  auto parsed = parse_with_config("pretrain-video",
                                  "VideoMAE pretraining (tube masking, normalized-pixel MSE). Checkpoints under "
                                  "OUTPUT/checkpoints/step-N (model, optimizer, trainer state); SIGINT/SIGTERM finish "
                                  "the step, save one and exit 130/143; --resume continues bit for bit",
                                  specs, int(rest.size()), rest.data(), 2, {"resume", "stop-after", "quiet", "force"});
  if (!parsed) return 0;
  const Args& a = *parsed;
  std::string data = a.require("data");
  const std::string out = a.require("output");
  prepare_video_output(a, out, "pretrain-video", resume);
  video::VideoMAEPretrainSettings vs;
  vs.config = video_model_config(a);
  vs.preset = a.get("preset");
  vs.batch = a.get_int("batch");
  const int64_t steps = a.get_int("steps"), accumulation = a.get_int("accumulation");
  vs.seed = uint64_t(a.get_int("seed"));
  vs.mask_ratio = a.get_double("mask-ratio");
  vs.decoder_mask_ratio = a.get_double("decoder-mask-ratio");
  vs.naming = naming_of(a);
  vs.init_from = a.get("init-from");
  vs.output = out;
  if (vs.batch < 1 || steps < 1 || accumulation < 1) throw Error("--batch, --steps and --accumulation must be >= 1");
  const OptimizerSetup os = optimizer_setup(a, steps);
  const std::string act_name = a.get("activations");
  if (act_name != "f32" && act_name != "bf16") throw Error("--activations must be f32 or bf16, got '", act_name, "'");
  vs.activations = act_name == "bf16" ? DType::bf16 : DType::f32;

  Communicator& comm = Communicator::world();
  const int world = comm.size(), rank = comm.rank();
  const bool root = comm.is_root();
  const std::string sharding = a.get("data-sharding");
  if (sharding != "slice" && sharding != "local")
    throw Error("--data-sharding must be slice or local, got '", sharding, "'");
  if (sharding == "local")
    data = dist::with_rank(data, rank);
  else if (dist::has_rank_placeholder(data))
    throw Error("--data ", data, " holds {rank}, which only --data-sharding local replaces");
  int threads = int(a.get_int("threads"));
  if (threads == 0 && comm.local_size() > 1)
    threads = std::max(1, int(std::thread::hardware_concurrency()) / comm.local_size());
  const Device device = device_of(a);
  const std::string precision = precision_of(a, device);

  train::LoopConfig lc = loop_config(a, out, steps, accumulation, os, vs.seed);
  lc.overlap_allreduce = !a.has("no-overlap");
  lc.config["batch"] = std::to_string(vs.batch * world);  // the global batch: any rank count giving it may resume
  lc.config_hash = train::settings_hash(lc.config);
  auto warn = [&](const std::string& w) {
    if (root) std::fprintf(stderr, "warning: %s\n", w.c_str());
  };
  const train::LoopStart start = train::open_run(lc, resume ? (resume_dir.empty() ? out : resume_dir) : "", warn);

  Context ctx({.num_threads = threads,
               .device = device,
               .device_index = gpu_for_local_rank(device, comm.local_rank()),
               .kernels = {.deterministic = a.has("deterministic")}});
  setup_device(ctx, precision);
  lc.peak_gflops = training_peak_gflops(ctx, precision);
  video::ClipLoaderOptions lo;
  lo.mode = video::ClipLoaderOptions::Mode::pretrain;
  lo.batch = int(vs.batch);
  lo.num_frames = int(vs.config.num_frames);
  lo.crop = int(vs.config.img_size);
  lo.seed = vs.seed;
  if (world > 1) {
    lo.rank = rank, lo.ranks = world;
    if (sharding == "slice") {
      lo.sharding = video::ClipLoaderOptions::Sharding::slice;
    } else {
      lo.sharding = video::ClipLoaderOptions::Sharding::resample;
      lo.seed = dist::rank_seed(vs.seed, rank);  // each rank's own order and augmentation
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
  video::VideoMAEPretrainTask task(
      vs, ctx, lo, [&](const video::ClipLoaderOptions& o) { return open_video_loader(a, data, o); }, start, accumulation);
  if (root && world > 1)
    std::fprintf(stderr, "pretrain-video: data parallel over %d ranks, batch %lld per rank, %d threads per rank\n", world,
                 (long long)vs.batch, threads);
  if (root && !a.has("quiet"))
    std::fprintf(stderr, "pretrain-video: %s (dim %lld, depth %lld, decoder %lld x %lld), %lld x %lld^2 clips, "
                 "%lld videos, batch %lld x %lld, %lld steps, tube mask %.2f, %.2f GFLOP per micro-batch\n",
                 vs.preset.c_str(), (long long)vs.config.dim, (long long)vs.config.depth,
                 (long long)vs.config.decoder_dim, (long long)vs.config.decoder_depth, (long long)vs.config.num_frames,
                 (long long)vs.config.img_size, (long long)task.videos(), (long long)vs.batch, (long long)accumulation,
                 (long long)steps, vs.mask_ratio, task.micro_batch_flops() / 1e9);
  train::RunControl control = run_control(a, "pretrain-video");
  const train::TrainResult r = train::run_training(task, ctx, lc, start, control);
  if (!root) return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
  // The final model, where users and finetune-video --init-from expect it (the checkpoints keep
  // the optimizer and trainer state beside their own copy).
  if (r.end_step == r.total_steps) video::save_videomae(out + "/model", vs.config, task.params(), vs.naming);
  std::fprintf(stderr, "%s\n", task.closing_note().c_str());
  std::printf("%s\n", train::summary_line(r, "pretrained", "clips").c_str());
  if (!r.checkpoint.empty()) std::printf("checkpoint: %s\nmetrics:    %s/metrics.jsonl, plot: %s/loss.svg\n",
                                         r.checkpoint.c_str(), out.c_str(), out.c_str());
  if (r.end_step == r.total_steps) std::printf("model:      %s/model\n", out.c_str());
  else if (!r.checkpoint.empty())
    std::printf("continue:   the same command with --resume\n");
  if (r.stopped_by_signal && r.checkpoint.empty())
    std::printf("no step finished, so no checkpoint was written; start again with the same command (without --resume)\n");
  return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
}

int cmd_finetune_video(int argc, char** argv) {
  const std::vector<OptionSpec> specs = with(
      with({{"data", "PATH", "training clip store or list file", ""},
            {"val", "PATH", "held-out clip store or list file, evaluated at the end (top-1/top-5)", ""},
            {"output", "DIR", "output directory (model/, metrics.jsonl, eval.json)", ""},
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
            {"quiet", "", "no progress output", ""},
            {"accumulation", "N", "micro-batches per optimizer step (gradient accumulation)", "1"},
            {"resume", "[DIR]", "continue the run in --output (or in DIR, or from the checkpoint DIR) where it stopped", ""},
            {"stop-after", "N", "stop after N steps of this invocation with a checkpoint (continue with --resume)", "0"},
            {"checkpoint-every", "N", "write a checkpoint (model, optimizer, trainer state) every N steps (0 = at the end)", "0"},
            {"keep-checkpoints", "N", "keep the last N checkpoints (0 = all)", "3"},
            {"threads", "N", "compute threads (0 = all cores)", "0"},
            {"seed", "N", "seed of the head, augmentation, mixing and drop path", "0"},
            {"classes", "FILE", "class names, one per line in label order, for the model's id2label (default: "
             "classes.txt beside a --data list file, as make-videos writes it)", ""},
            video_force_spec()},
           video_model_specs()),
      with(video_data_specs(), optimizer_specs("1e-3", "0.999", "0.1")));
  bool resume = false;
  std::string resume_dir;
  std::vector<char*> rest = take_resume(argc, argv, &resume, &resume_dir);
  auto parsed = parse_with_config("finetune-video",
                                  "VideoMAE fine-tuning (mean pooling, layer decay, mixup/cutmix). Checkpoints under "
                                  "OUTPUT/checkpoints/step-N; SIGINT/SIGTERM save one and exit 130/143; --resume continues",
                                  specs, int(rest.size()), rest.data(), 2, {"resume", "stop-after", "quiet", "force"});
  if (!parsed) return 0;
  const Args& a = *parsed;
  std::string data = a.require("data");
  const std::string out = a.require("output");
  prepare_video_output(a, out, "finetune-video", resume);
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
  const int64_t batch = a.get_int("batch"), epochs = a.get_int("epochs"), accumulation = a.get_int("accumulation");
  if (batch < 1 || epochs < 1 || accumulation < 1) throw Error("--batch, --epochs and --accumulation must be >= 1");
  video::VideoMAEFinetuneSettings fs;
  fs.config = config;
  fs.preset = a.get("preset");
  fs.output = out;
  fs.num_classes = K;
  fs.class_names = class_names;
  fs.batch = batch;
  fs.seed = uint64_t(a.get_int("seed"));
  fs.layer_decay = float(a.get_double("layer-decay"));
  fs.drop_path = float(a.get_double("drop-path"));
  fs.head_dropout = float(a.get_double("head-dropout"));
  fs.mixup = float(a.get_double("mixup"));
  fs.cutmix = float(a.get_double("cutmix"));
  fs.smoothing = float(a.get_double("smoothing"));
  fs.naming = naming_of(a);
  fs.init_from = a.get("init-from");
  Communicator& comm = Communicator::world();
  const int world = comm.size();
  const bool root = comm.is_root();
  if (dist::has_rank_placeholder(data))
    throw Error("--data ", data, " holds {rank}: finetune-video's ranks read slices of one dataset",
                Hint("give every rank the same --data"));

  video::ClipLoaderOptions lo;
  lo.mode = video::ClipLoaderOptions::Mode::train;
  lo.flip = a.has("flip");
  lo.batch = int(batch);
  lo.num_frames = int(config.num_frames);
  lo.crop = int(config.img_size);
  lo.seed = fs.seed;
  if (world > 1) {  // rank r reads its slice of every global batch
    lo.rank = comm.rank(), lo.ranks = world;
    lo.sharding = video::ClipLoaderOptions::Sharding::slice;
  }
  // The number of steps needs the loader's epoch length before the run (and its resume point) is opened.
  const int64_t per_epoch = open_video_loader(a, data, lo).batches_per_epoch();
  if (per_epoch < 1) throw Error("--data has fewer videos than one --batch of ", batch);
  const int64_t steps = std::max<int64_t>(1, per_epoch * epochs / accumulation);
  const OptimizerSetup os = optimizer_setup(a, steps);
  train::LoopConfig lc = loop_config(a, out, steps, accumulation, os, fs.seed);
  lc.config["batch"] = std::to_string(batch * world);  // the global batch: any rank count giving it may resume
  lc.config_hash = train::settings_hash(lc.config);
  const train::LoopStart start =
      train::open_run(lc, resume ? (resume_dir.empty() ? out : resume_dir) : "", [&](const std::string& w) {
        if (root) std::fprintf(stderr, "warning: %s\n", w.c_str());
      });
  int threads = int(a.get_int("threads"));
  if (threads == 0 && comm.local_size() > 1)
    threads = std::max(1, int(std::thread::hardware_concurrency()) / comm.local_size());
  Context ctx({.num_threads = threads});
  lc.peak_gflops = train::measure_peak_gflops(ctx.num_threads());
  video::VideoMAEFinetuneTask task(
      fs, ctx, lo, [&](const video::ClipLoaderOptions& o) { return open_video_loader(a, data, o); }, start);
  if (root && world > 1)
    std::fprintf(stderr, "finetune-video: data parallel over %d ranks, batch %lld per rank, %d threads per rank\n", world,
                 (long long)batch, ctx.num_threads());
  if (root && !a.has("quiet"))
    std::fprintf(stderr, "finetune-video: %s (dim %lld, depth %lld), %lld classes, %lld videos, batch %lld x %lld, "
                 "%lld epochs = %lld steps, layer decay %s, drop path %s, mixup %s / cutmix %s, smoothing %s\n",
                 fs.preset.c_str(), (long long)config.dim, (long long)config.depth, (long long)K,
                 (long long)task.videos(), (long long)batch, (long long)accumulation, (long long)epochs, (long long)steps,
                 a.get("layer-decay").c_str(), a.get("drop-path").c_str(), a.get("mixup").c_str(),
                 a.get("cutmix").c_str(), a.get("smoothing").c_str());
  train::RunControl control = run_control(a, "finetune-video");
  const train::TrainResult r = train::run_training(task, ctx, lc, start, control);
  if (!root) return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;  // rank 0 writes and evaluates
  std::fprintf(stderr, "%s\n", task.closing_note().c_str());
  std::printf("%s\n", train::summary_line(r, "fine-tuned", "clips").c_str());
  if (r.end_step < r.total_steps) {  // stopped: no final model, no evaluation
    if (!r.checkpoint.empty()) std::printf("checkpoint: %s\ncontinue:   the same command with --resume\n", r.checkpoint.c_str());
    return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
  }
  video::save_videomae(out + "/model", config, task.params(), fs.naming, K, class_names);
  std::ostringstream summary;
  summary << "{\"steps\": " << steps << ", \"seconds\": " << r.invocation_s << ", \"model\": \"" << out << "/model\"";
  if (a.has("val")) {
    const ViewEvalResult ev = evaluate_video_views(ctx, task.model(), a, a.get("val"), int(a.get_int("test-segments")),
                                                   int(a.get_int("test-crops")), int(batch));
    summary << ", \"val_videos\": " << ev.videos << ", \"views\": " << ev.views << ", \"top1\": " << ev.top1
            << ", \"top5\": " << ev.top5;
    std::fprintf(stderr, "held-out: %lld videos x %lld views: top-1 %.2f%%, top-5 %.2f%% (%s)\n", (long long)ev.videos,
                 (long long)ev.views, 100 * ev.top1, 100 * ev.top5, ev.loader.skipped.summary().c_str());
  }
  summary << "}";
  io::write_file_atomic(out + "/eval.json", summary.str() + "\n");
  std::printf("%s\n", summary.str().c_str());
  return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
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
  std::fprintf(stderr, "%s\n", video::loader_summary(ev.loader).c_str());
  std::printf("{\"videos\": %lld, \"views\": %lld, \"top1\": %.6f, \"top5\": %.6f, \"seconds\": %.2f, "
              "\"clips_per_s\": %.2f, \"skipped\": %lld}\n",
              (long long)ev.videos, (long long)ev.views, ev.top1, ev.top5, ev.seconds, ev.clips_per_s,
              (long long)ev.loader.skipped.total());
  return 0;
}

}  // namespace unmask::cli
