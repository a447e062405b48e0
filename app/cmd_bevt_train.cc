// app/cmd_bevt_train.cc: `unmask pretrain-bevt` (BEVT joint pretraining) and `unmask
// finetune-swin` (the Video Swin backbone fine-tuned for action recognition, multi-view
// evaluation), both on the one training loop.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include "bevt_common.h"
#include "cli.h"
#include "io/file.h"
#include "models/bevt/checkpoint.h"
#include "models/bevt/finetune_task.h"
#include "models/bevt/pretrain_task.h"
#include "train/metrics.h"
#include "train/trainer.h"
#include "train_common.h"
#include "unmask/dist.h"
#include "unmask/error.h"
#include "video_common.h"

namespace unmask::cli {

int cmd_pretrain_bevt(int argc, char** argv) {
  std::vector<OptionSpec> specs = with(
      with({{"output", "DIR", "run directory (checkpoints/, metrics.jsonl, loss.svg; the final model in DIR/model)", ""},
            {"clips", "N", "clips per optimizer step and rank (BEVT: 8)", "8"},
            {"images", "N", "images per optimizer step and rank (BEVT: 64)", "64"},
            {"accumulation", "N", "micro-batches per optimizer step; the clips and images split over them (BEVT: 2)", "2"},
            {"steps", "N", "optimizer steps", "100"},
            {"frames", "T", "frames per clip", "16"},
            {"crop", "S", "side of the clips and images (a multiple of 32; BEVT: 224)", "224"},
            {"drop-path", "RATE", "stochastic depth rate, linear over the blocks (BEVT: 0.3)", "0.3"},
            {"init-from", "PATH", "start from BEVT weights (model dir, .safetensors or an mmcv .pth)", ""},
            {"resume", "[DIR]", "continue the run in --output (or in DIR, or from the checkpoint DIR) where it stopped", ""},
            {"stop-after", "N", "stop after N steps of this invocation with a checkpoint (continue with --resume)", "0"},
            {"checkpoint-every", "N", "write a checkpoint (model, optimizer, trainer state) every N steps (0 = at the end)", "0"},
            {"keep-checkpoints", "N", "keep the last N checkpoints (0 = all)", "3"},
            {"log-every", "N", "print a line every N steps", "10"},
            {"quiet", "", "no progress output", ""},
            {"threads", "N", "compute threads (0 = all cores)", "0"},
            {"seed", "N", "seed of the weights, samples, masks and drop path", "0"},
            {"precision", "fp32|tf32|bf16|fp16", "GEMM precision (tf32, bf16, fp16: CUDA tensor cores; bf16 on a CPU "
                                                 "with a bf16 unit), fp32 master weights; fp16 needs --loss-scaling "
                                                 "dynamic (BEVT's apex O1)", "fp32"},
            {"loss-scaling", "none|dynamic", "dynamic loss scaling: the loss times S, a step with a non-finite "
                                             "gradient skipped and S halved, S doubled after 2000 good steps", "none"},
            {"init-loss-scale", "S", "the first loss scale of --loss-scaling dynamic (apex: 65536)", "65536"},
            device_option(),
            video_force_spec()},
           with(with(bevt_model_specs(), bevt_tokenizer_specs()), bevt_data_specs("2"))),
      optimizer_specs("5e-4", "0.999", "0.05"));
  for (OptionSpec& o : specs) {
    if (o.name == "clip-grad") o.fallback = "3.0";
    if (o.name == "min-lr-ratio") o.fallback = "0";
  }
  bool resume = false;
  std::string resume_dir;
  std::vector<char*> rest = take_resume(argc, argv, &resume, &resume_dir);
  auto parsed = parse_with_config("pretrain-bevt",
                                  "BEVT joint pretraining: Video Swin on clips and images, masked DALL-E token "
                                  "prediction on both streams (lists of videos and images, or the synthetic "
                                  "moving-shapes source). Checkpoints under "
                                  "OUTPUT/checkpoints/step-N; SIGINT/SIGTERM save one and exit 130/143; --resume "
                                  "continues bit for bit",
                                  specs, int(rest.size()), rest.data(), 2, {"resume", "stop-after", "quiet", "force"});
  if (!parsed) return 0;
  const Args& a = *parsed;
  const std::string out = a.require("output");
  prepare_video_output(a, out, "pretrain-bevt", resume);
  bevt::BevtPretrainSettings bs;
  bs.config = bevt_swin_config(a);
  bs.size = a.get("size");
  bs.vocab = a.get_int("vocab");
  bs.clips = a.get_int("clips"), bs.images = a.get_int("images");
  bs.data.frames = a.get_int("frames"), bs.data.crop = a.get_int("crop");
  read_bevt_data_options(a, bs.data);
  bs.video_list = a.get("data"), bs.image_source = a.get("image-data"), bs.root = a.get("root");
  bs.drop_path_rate = a.get_double("drop-path");
  bs.seed = uint64_t(a.get_int("seed"));
  bs.data.seed = bs.seed;
  bs.init_from = a.get("init-from");
  bs.output = out;
  const int64_t steps = a.get_int("steps"), accumulation = a.get_int("accumulation");
  if (bs.clips < 0 || bs.images < 0 || steps < 1 || accumulation < 1)
    throw Error("--clips and --images must be >= 0, --steps and --accumulation >= 1");
  if (!(bs.drop_path_rate >= 0 && bs.drop_path_rate < 1)) throw Error("--drop-path must be in [0, 1)");
  const OptimizerSetup os = optimizer_setup(a, steps);
  Communicator& comm = Communicator::world();
  const bool root = comm.is_root();
  int threads = int(a.get_int("threads"));
  if (threads == 0 && comm.local_size() > 1)
    threads = std::max(1, int(std::thread::hardware_concurrency()) / comm.local_size());
  train::LoopConfig lc = loop_config(a, out, steps, accumulation, os, bs.seed);
  lc.config.erase("tokenizer");
  lc.config_hash = train::settings_hash(lc.config);
  const Device device = device_of(a);
  const std::string precision = training_precision_of(a, device);
  const std::string scaling = a.get("loss-scaling");
  if (scaling != "none" && scaling != "dynamic") throw Error("--loss-scaling must be none or dynamic, got '", scaling, "'");
  if (precision == "fp16" && scaling != "dynamic")
    throw Error("--precision fp16 needs --loss-scaling dynamic", Hint("fp16 gradients underflow without a loss scale"));
  lc.loss_scaling = scaling == "dynamic";
  lc.init_loss_scale = a.get_double("init-loss-scale");
  if (!(lc.init_loss_scale >= 1 && lc.init_loss_scale <= 16777216.0))
    throw Error("--init-loss-scale must be in [1, 2^24], got ", lc.init_loss_scale);
  auto warn = [&](const std::string& w) {
    if (root) std::fprintf(stderr, "warning: %s\n", w.c_str());
  };
  const train::LoopStart start = train::open_run(lc, resume ? (resume_dir.empty() ? out : resume_dir) : "", warn);
  Context ctx({.num_threads = threads, .device = device, .device_index = gpu_for_local_rank(device, comm.local_rank())});
  setup_device(ctx, precision);
  lc.peak_gflops = training_peak_gflops(ctx, precision);
  bevt::DalleEncoder tokenizer = bevt_tokenizer(a, bs.vocab, bs.seed + 2, &bs.tokenizer_name);
  bevt::BevtPretrainTask task(ctx, bs, tokenizer, start, accumulation);
  if (root && !a.has("quiet"))
    std::fprintf(stderr, "pretrain-bevt: Swin %s (C %lld, depths %lld/%lld/%lld/%lld), %lld clips x %lld x %lld^2 + "
                 "%lld images a step over %lld micro-batches, %lld steps; %s; %s; %.2f GFLOP a micro-batch (BEVT's count)\n",
                 bs.size.c_str(), (long long)bs.config.embed_dim, (long long)bs.config.depths[0],
                 (long long)bs.config.depths[1], (long long)bs.config.depths[2], (long long)bs.config.depths[3],
                 (long long)bs.clips, (long long)bs.data.frames, (long long)bs.data.crop, (long long)bs.images,
                 (long long)accumulation, (long long)steps, task.data_description().c_str(), bs.tokenizer_name.c_str(),
                 task.micro_batch_flops() / 1e9);
  train::RunControl control = run_control(a, "pretrain-bevt");
  const train::TrainResult r = train::run_training(task, ctx, lc, start, control);
  if (!root) return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
  if (r.end_step == r.total_steps) bevt::save_bevt(out + "/model", bs.config, bs.vocab, task.params());
  std::printf("%s\n", train::summary_line(r, "pretrained", "clips").c_str());
  if (!r.steps.empty()) {
    const train::StepMetrics& last = r.steps.back();
    std::printf("masked-token accuracy (last step): %.4f (chance %.4f)\n", last.accuracy, 1.0 / double(bs.vocab));
  }
  if (!r.checkpoint.empty()) std::printf("checkpoint: %s\nmetrics:    %s/metrics.jsonl, plot: %s/loss.svg\n",
                                         r.checkpoint.c_str(), out.c_str(), out.c_str());
  if (r.end_step == r.total_steps) std::printf("model:      %s/model\n", out.c_str());
  else if (!r.checkpoint.empty())
    std::printf("continue:   the same command with --resume\n");
  return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
}

int cmd_finetune_swin(int argc, char** argv) {
  std::vector<OptionSpec> model_specs;
  for (const OptionSpec& o : bevt_model_specs())
    if (o.name != "vocab") model_specs.push_back(o);
  const std::vector<OptionSpec> specs = with(
      with({{"data", "PATH", "training clip store or list file", ""},
            {"val", "PATH", "held-out clip store or list file, evaluated at the end (top-1/top-5)", ""},
            {"output", "DIR", "output directory (model/, metrics.jsonl, eval.json)", ""},
            {"init-from", "PATH", "pretrained weights: a pretrain-bevt model/, a BEVT or Video Swin .pth (backbone.*)", ""},
            {"num-classes", "K", "classes (default: the largest label of --data + 1)", "0"},
            {"frames", "T", "frames per clip", "16"},
            {"crop", "S", "clip side (a multiple of 32)", "224"},
            {"batch", "N", "clips per step", "8"},
            {"epochs", "N", "passes over --data", "10"},
            {"layer-decay", "D", "layer-wise lr decay", "0.75"},
            {"drop-path", "R", "stochastic depth rate, linear over blocks", "0.1"},
            {"head-dropout", "P", "dropout before fc_cls (Video Swin's I3DHead: 0.5)", "0"},
            {"mixup", "A", "mixup alpha (0 = off)", "0.8"},
            {"cutmix", "A", "cutmix alpha (0 = off)", "1.0"},
            {"smoothing", "S", "label smoothing", "0.1"},
            {"flip", "", "random horizontal flip (off by default: it breaks direction labels, like SSv2's)", ""},
            {"test-segments", "N", "evaluation: temporal views per video", "2"},
            {"test-crops", "N", "evaluation: spatial crops per view", "3"},
            {"log-every", "N", "print a line every N steps", "10"},
            {"quiet", "", "no progress output", ""},
            {"accumulation", "N", "micro-batches per optimizer step (gradient accumulation)", "1"},
            {"resume", "[DIR]", "continue the run in --output (or in DIR, or from the checkpoint DIR) where it stopped", ""},
            {"stop-after", "N", "stop after N steps of this invocation with a checkpoint (continue with --resume)", "0"},
            {"checkpoint-every", "N", "write a checkpoint (model, optimizer, trainer state) every N steps (0 = at the end)", "0"},
            {"keep-checkpoints", "N", "keep the last N checkpoints (0 = all)", "3"},
            {"threads", "N", "compute threads (0 = all cores)", "0"},
            {"seed", "N", "seed of the head, augmentation, mixing and drop path", "0"},
            {"precision", "fp32|tf32|bf16", "GEMM precision (tf32, bf16: CUDA tensor cores; bf16 on a CPU with a bf16 "
                                            "unit), fp32 master weights", "fp32"},
            device_option(),
            video_force_spec()},
           model_specs),
      with(video_data_specs(), optimizer_specs("1e-3", "0.999", "0.1")));
  bool resume = false;
  std::string resume_dir;
  std::vector<char*> rest = take_resume(argc, argv, &resume, &resume_dir);
  auto parsed = parse_with_config("finetune-swin",
                                  "Video Swin fine-tuning for action recognition (mean pooling, layer decay, "
                                  "mixup/cutmix), then multi-view top-1/top-5 on --val",
                                  specs, int(rest.size()), rest.data(), 2, {"resume", "stop-after", "quiet", "force"});
  if (!parsed) return 0;
  const Args& a = *parsed;
  const std::string data = a.require("data"), out = a.require("output");
  prepare_video_output(a, out, "finetune-swin", resume);
  bevt::SwinFinetuneSettings fs;
  fs.config = bevt_swin_config(a);
  fs.size = a.get("size");
  if (a.has("init-from")) {  // a saved model's config.json gives the sizes
    const std::filesystem::path src(a.get("init-from"));
    const std::filesystem::path cfg = std::filesystem::is_directory(src) ? src / "config.json" : src.parent_path() / "config.json";
    if (std::filesystem::exists(cfg)) fs.config = bevt::read_bevt_config(cfg.string()).first, fs.size = "from " + cfg.string();
  }
  const std::vector<int64_t> labels = video_labels(a, data);
  int64_t K = a.get_int("num-classes");
  const int64_t max_label = *std::max_element(labels.begin(), labels.end());
  if (K == 0) K = max_label + 1;
  if (max_label >= K) throw Error("--data has label ", max_label, " but --num-classes is ", K);
  fs.num_classes = K;
  fs.frames = a.get_int("frames"), fs.crop = a.get_int("crop");
  if (fs.frames < 2 || fs.frames % 2 || fs.crop < 32 || fs.crop % 32)
    throw Error("--frames must be even and --crop a multiple of 32, got ", fs.frames, " and ", fs.crop);
  fs.batch = a.get_int("batch");
  const int64_t epochs = a.get_int("epochs"), accumulation = a.get_int("accumulation");
  if (fs.batch < 1 || epochs < 1 || accumulation < 1) throw Error("--batch, --epochs and --accumulation must be >= 1");
  fs.seed = uint64_t(a.get_int("seed"));
  fs.layer_decay = float(a.get_double("layer-decay"));
  fs.drop_path = float(a.get_double("drop-path"));
  fs.head_dropout = float(a.get_double("head-dropout"));
  fs.mixup = float(a.get_double("mixup")), fs.cutmix = float(a.get_double("cutmix"));
  fs.smoothing = float(a.get_double("smoothing"));
  fs.init_from = a.get("init-from");
  fs.output = out;
  Communicator& comm = Communicator::world();
  const int world = comm.size();
  const bool root = comm.is_root();
  video::ClipLoaderOptions lo;
  lo.mode = video::ClipLoaderOptions::Mode::train;
  lo.flip = a.has("flip");
  lo.batch = int(fs.batch);
  lo.num_frames = int(fs.frames);
  lo.crop = int(fs.crop);
  lo.seed = fs.seed;
  if (world > 1) {
    lo.rank = comm.rank(), lo.ranks = world;
    lo.sharding = video::ClipLoaderOptions::Sharding::slice;
  }
  const int64_t per_epoch = open_video_loader(a, data, lo).batches_per_epoch();
  if (per_epoch < 1) throw Error("--data has fewer videos than one --batch of ", fs.batch);
  const int64_t steps = std::max<int64_t>(1, per_epoch * epochs / accumulation);
  const OptimizerSetup os = optimizer_setup(a, steps);
  train::LoopConfig lc = loop_config(a, out, steps, accumulation, os, fs.seed);
  lc.config["batch"] = std::to_string(fs.batch * world);
  lc.config_hash = train::settings_hash(lc.config);
  const train::LoopStart start =
      train::open_run(lc, resume ? (resume_dir.empty() ? out : resume_dir) : "", [&](const std::string& w) {
        if (root) std::fprintf(stderr, "warning: %s\n", w.c_str());
      });
  int threads = int(a.get_int("threads"));
  if (threads == 0 && comm.local_size() > 1)
    threads = std::max(1, int(std::thread::hardware_concurrency()) / comm.local_size());
  const Device device = device_of(a);
  const std::string precision = precision_of(a, device);
  Context ctx({.num_threads = threads, .device = device, .device_index = gpu_for_local_rank(device, comm.local_rank())});
  setup_device(ctx, precision);
  lc.peak_gflops = training_peak_gflops(ctx, precision);
  bevt::SwinFinetuneTask task(
      ctx, fs, lo, [&](const video::ClipLoaderOptions& o) { return open_video_loader(a, data, o); }, start);
  if (root && !a.has("quiet"))
    std::fprintf(stderr, "finetune-swin: Swin %s (C %lld), %lld classes, %lld videos, %lld x %lld^2 clips, batch %lld x %lld, "
                 "%lld epochs = %lld steps, layer decay %s, drop path %s, mixup %s / cutmix %s, smoothing %s\n",
                 fs.size.c_str(), (long long)fs.config.embed_dim, (long long)K, (long long)task.videos(),
                 (long long)fs.frames, (long long)fs.crop, (long long)fs.batch, (long long)accumulation,
                 (long long)epochs, (long long)steps, a.get("layer-decay").c_str(), a.get("drop-path").c_str(),
                 a.get("mixup").c_str(), a.get("cutmix").c_str(), a.get("smoothing").c_str());
  train::RunControl control = run_control(a, "finetune-swin");
  const train::TrainResult r = train::run_training(task, ctx, lc, start, control);
  if (!root) return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
  std::fprintf(stderr, "%s\n", task.closing_note().c_str());
  std::printf("%s\n", train::summary_line(r, "fine-tuned", "clips").c_str());
  if (r.end_step < r.total_steps) {
    if (!r.checkpoint.empty()) std::printf("checkpoint: %s\ncontinue:   the same command with --resume\n", r.checkpoint.c_str());
    return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
  }
  bevt::save_swin_classifier(out + "/model", fs.config, K, task.params());
  std::ostringstream summary;
  summary << "{\"steps\": " << steps << ", \"seconds\": " << r.invocation_s << ", \"model\": \"" << out << "/model\"";
  if (a.has("val")) {
    ClipClassifier m;
    m.num_frames = fs.frames, m.crop = fs.crop, m.num_classes = K;
    m.logits = [&](Context& c, const Tensor& v) { return task.model().logits(c, v); };
    const ViewEvalResult ev = evaluate_video_views(ctx, m, a, a.get("val"), int(a.get_int("test-segments")),
                                                   int(a.get_int("test-crops")), int(fs.batch));
    summary << ", \"val_videos\": " << ev.videos << ", \"views\": " << ev.views << ", \"top1\": " << ev.top1
            << ", \"top5\": " << ev.top5;
    std::fprintf(stderr, "held-out: %lld videos x %lld views: top-1 %.2f%%, top-5 %.2f%%\n", (long long)ev.videos,
                 (long long)ev.views, 100 * ev.top1, 100 * ev.top5);
  }
  summary << "}";
  io::write_file_atomic(out + "/eval.json", summary.str() + "\n");
  std::printf("%s\n", summary.str().c_str());
  return r.stopped_by_signal ? 128 + r.stopped_by_signal : 0;
}

}  // namespace unmask::cli
