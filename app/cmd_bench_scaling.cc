// app/cmd_bench_scaling.cc: `unmask bench scaling`, the BEVT seed's table (Device, # devices,
// mini-batch, global batch, average iteration time s/it, throughput samples/s) plus the scaling
// efficiency against one device, for data-parallel training on MPI.
//
// Weak scaling as in the seed: every device keeps its mini-batch, the global batch grows with the
// device count. A "device" here is one rank (a CPU process with --threads-per-rank threads, or a
// GPU once the CUDA trainer runs under MPI). For each count in --ranks the command starts
//   mpirun -np N <this binary> bench scaling --worker ...
// whose ranks train the model on synthetic data on the host (the same clips / sequences every
// step: input decoding is not measured) with gradients summed over ranks after each backward
// (dist::GradientSync), and rank 0 prints one JSON row; the parent prints the table. Efficiency
// = throughput(N) / (N x throughput(1)).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli.h"
#include "core/signals.h"
#include "data/rng.h"
#include "dist/grad_sync.h"
#include "train/config.h"
#include "unmask/dist.h"
#include "unmask/error.h"
#include "unmask/train.h"
#include "unmask/videomae.h"
#include "data/video/bevt_data.h"
#include "data/video/masking.h"
#include "models/bevt/pretrain.h"

namespace unmask::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  int devices = 0;
  int64_t mini_batch = 0, global_batch = 0;
  double s_per_it = 0, samples_per_s = 0, allreduce_wait_s = 0;
  int threads = 0;
};

// One row: this process is a rank of `mpirun -np N`.
Row run_worker(const Args& a) {
  Communicator& comm = Communicator::world();
  const int world = comm.size();
  const int threads = int(a.get_int("threads-per-rank"));
  Context ctx({.num_threads = threads});
  const int64_t batch = a.get_int("batch"), steps = a.get_int("steps"), warmup = a.get_int("warmup");
  const std::string model_name = a.get("model");
  data::Rng rng(data::derive_key(7, {uint64_t(comm.rank())}));
  std::function<void()> step;
  std::vector<Param>* params = nullptr;
  std::unique_ptr<VideoMAEPretrainModel> vmodel;
  std::unique_ptr<BertTrainModel> bmodel;
  std::unique_ptr<bevt::BevtPretrainModel> bmodel_bevt;
  std::unique_ptr<bevt::DalleEncoder> tokenizer;
  video::BevtBatch bevt_batch;
  Tensor videos, mask;
  PretrainBatch pb;
  if (model_name.rfind("videomae-", 0) == 0) {
    const VideoMAEConfig c = VideoMAEConfig::preset(model_name.substr(9));
    vmodel = std::make_unique<VideoMAEPretrainModel>(VideoMAEPretrainModel::random(c, 1));
    params = &vmodel->params();
    videos = Tensor::empty({batch, c.channels, c.num_frames, c.img_size, c.img_size}, DType::f32);
    for (int64_t i = 0; i < videos.numel(); ++i) videos.data<float>()[i] = float(2 * rng.uniform() - 1);
    mask = video::tube_mask_batch({c.grid_t(), c.grid_hw(), c.grid_hw()}, 0.9, 1, uint64_t(comm.rank()) * batch, batch);
    step = [&] { vmodel->pretrain_step(ctx, videos, mask, {}); };
  } else if (model_name.rfind("bert-", 0) == 0) {
    const BertConfig c = train::random_model_config(model_name.substr(5), 30522);
    bmodel = std::make_unique<BertTrainModel>(
        BertTrainModel::random(c, BertHeads{.pooler = true, .mlm = true, .nsp = true}, 1));
    params = &bmodel->params();
    const int64_t T = a.get_int("seq"), P = std::max<int64_t>(1, T * 15 / 100);
    auto i32 = [&](int64_t rows, int64_t cols) { return Tensor::zeros({rows, cols}, DType::i32); };
    pb.input_ids = i32(batch, T), pb.segment_ids = i32(batch, T), pb.input_mask = i32(batch, T);
    pb.masked_lm_positions = i32(batch, P), pb.masked_lm_ids = i32(batch, P);
    pb.next_sentence_labels = Tensor::zeros({batch}, DType::i32);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        pb.input_ids.data<int32_t>()[b * T + t] = int32_t(1 + rng.below(uint64_t(c.vocab_size - 1)));
        pb.input_mask.data<int32_t>()[b * T + t] = 1;
      }
      for (int64_t j = 0; j < P; ++j) {
        pb.masked_lm_positions.data<int32_t>()[b * P + j] = int32_t(1 + j * (T - 1) / P);
        pb.masked_lm_ids.data<int32_t>()[b * P + j] = int32_t(rng.below(uint64_t(c.vocab_size)));
      }
    }
    TrainStepOptions so;
    so.hidden_dropout = so.attention_dropout = 0.0f;
    step = [&, so] { bmodel->pretrain_step(ctx, pb, so); };
  } else if (model_name.rfind("bevt-", 0) == 0) {
    // BEVT's iteration (bench bevt): batch / 2 clips + 4 batch images, DALL-E-sized random tokenizer.
    const bevt::SwinConfig c = bevt::SwinConfig::preset(model_name.substr(5));
    bmodel_bevt = std::make_unique<bevt::BevtPretrainModel>(bevt::BevtPretrainModel::random(c, 8192, 1));
    tokenizer = std::make_unique<bevt::DalleEncoder>(bevt::DalleEncoder::random({}, 3));
    params = &bmodel_bevt->params();
    video::BevtDataOptions d;
    d.frames = a.get_int("frames"), d.crop = a.get_int("crop"), d.seed = 5;
    const int64_t clips = std::max<int64_t>(1, batch / 2), images = 4 * batch, T = d.frames, S = d.crop;
    auto fill = [&](const Shape& shape, bool mapped) {
      Tensor t = Tensor::empty(shape, DType::f32);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(mapped ? 0.1 + 0.8 * rng.uniform() : 2 * rng.uniform() - 1);
      return t;
    };
    bevt_batch.videos = fill({clips, 3, T, S, S}, false), bevt_batch.video_frames = fill({clips * T, 3, S / 2, S / 2}, true);
    bevt_batch.images = fill({images, 3, S, S}, false), bevt_batch.image_frames = fill({images, 3, S / 2, S / 2}, true);
    const uint64_t r = uint64_t(comm.rank());
    video::draw_bevt_masks(d, r * uint64_t(clips), clips, r * uint64_t(images), images, bevt_batch);
    step = [&] { bevt::bevt_pretrain_step(ctx, *bmodel_bevt, tokenizer.get(), bevt_batch, {}); };
  } else {
    throw Error("--model must be videomae-tiny|small|base|..., bert-tiny|mini|small|base|large or bevt-tiny|small|base, "
                "got '", model_name, "'");
  }
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adamw;
  Optimizer opt(oc, *params);
  dist::GradientSync sync(comm, *params, dist::GradientSyncOptions{.average = true});
  double timed = 0;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    comm.barrier("the iteration start");
    const auto t0 = Clock::now();
    if (vmodel) vmodel->zero_grad(ctx);
    else if (bmodel) bmodel->zero_grad(ctx);
    else bmodel_bevt->zero_grad(ctx);
    step();
    sync.reduce_all();
    opt.step(ctx, 1e-4f);
    double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    comm.allreduce_sum(&dt, 1, "the iteration time");  // the slowest rank sets the pace: use the mean
    if (i >= warmup) timed += dt / world;
  }
  Row r;
  r.devices = world;
  r.mini_batch = batch;
  r.global_batch = batch * world;
  r.s_per_it = timed / double(steps);
  r.samples_per_s = double(r.global_batch) / r.s_per_it;
  r.allreduce_wait_s = sync.stats().wait_seconds / double(warmup + steps);
  r.threads = threads;
  return r;
}

std::string row_json(const Row& r) {
  nlohmann::json j = {{"devices", r.devices},         {"mini_batch", r.mini_batch},
                      {"global_batch", r.global_batch}, {"s_per_it", r.s_per_it},
                      {"samples_per_s", r.samples_per_s}, {"allreduce_wait_s", r.allreduce_wait_s},
                      {"threads_per_rank", r.threads}};
  return j.dump();
}

// Runs `mpirun -np N self bench scaling --worker ...` and parses rank 0's JSON row.
Row launch(int ranks, const std::vector<std::string>& worker_args) {
  std::vector<std::string> argv_s = {"mpirun", "--oversubscribe", "--bind-to", "none"};
  if (::geteuid() == 0) argv_s.push_back("--allow-run-as-root");
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw Error("bench scaling: cannot find this binary's path (/proc/self/exe)");
  self[n] = 0;
  for (const std::string& s : {std::string("-np"), std::to_string(ranks), std::string(self), std::string("bench"),
                               std::string("scaling"), std::string("--worker")})
    argv_s.push_back(s);
  argv_s.insert(argv_s.end(), worker_args.begin(), worker_args.end());
  int pipefd[2];
  if (::pipe(pipefd) != 0) throw Error("bench scaling: pipe() failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw Error("bench scaling: fork() failed");
  if (pid == 0) {
    unblock_async_signals();  // mpirun gets the default signal mask, not main()'s
    ::dup2(pipefd[1], 1);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    std::vector<char*> argv;
    for (std::string& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execvp("mpirun", argv.data());
    std::fprintf(stderr, "bench scaling: cannot run mpirun (install openmpi-bin)\n");
    ::_exit(127);
  }
  ::close(pipefd[1]);
  std::string out;
  char buf[4096];
  for (ssize_t k; (k = ::read(pipefd[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(k));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("bench scaling: `mpirun -np ", ranks, " ...` failed (exit ", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                ")", Hint("see the messages above; `unmask dist-check` checks an MPI launch"));
  const size_t at = out.rfind("{\"");
  if (at == std::string::npos) throw Error("bench scaling: no result row from mpirun -np ", ranks, ": ", out);
  const nlohmann::json j = nlohmann::json::parse(out.substr(at, out.find('\n', at) - at));
  Row r;
  r.devices = j.at("devices"), r.mini_batch = j.at("mini_batch"), r.global_batch = j.at("global_batch");
  r.s_per_it = j.at("s_per_it"), r.samples_per_s = j.at("samples_per_s");
  r.allreduce_wait_s = j.at("allreduce_wait_s"), r.threads = j.at("threads_per_rank");
  return r;
}

}  // namespace

int bench_scaling(int argc, char** argv) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<OptionSpec> specs = {
      {"model", "NAME", "videomae-tiny|small|base|..., bert-tiny|mini|small|base|large or bevt-tiny|small|base",
       "videomae-tiny"},
      {"ranks", "LIST", "device (rank) counts to measure, e.g. 1,2,4", "1,2"},
      {"batch", "N", "mini-batch per device (the seed's Mini-bsz)", "8"},
      {"seq", "N", "bert: sequence length", "128"},
      {"frames", "T", "bevt: frames per clip (an iteration: batch / 2 clips + 4 batch images)", "16"},
      {"crop", "S", "bevt: side of clips and images", "224"},
      {"steps", "N", "timed iterations", "10"},
      {"warmup", "N", "untimed iterations first", "2"},
      {"threads-per-rank", "N", "CPU threads of each rank (default: cores / the largest rank count)", "0"},
      {"device-name", "TEXT", "the Device column", "CPU"},
      {"format", "KIND", "table, json or csv", "table"},
      {"worker", "", "(internal) run as one rank of mpirun and print a JSON row", ""},
  };
  auto parsed = Args::parse("bench scaling",
                            "data-parallel weak scaling: BEVT's table (s/it, samples/s) + efficiency vs one device",
                            specs, argc, argv, 3);
  if (!parsed) return 0;
  const Args& a = *parsed;
  if (a.has("worker")) {
    const Row r = run_worker(a);
    if (Communicator::world().is_root()) std::printf("%s\n", row_json(r).c_str());
    return 0;
  }
  const std::vector<int64_t> ranks = a.get_int_list("ranks");
  int64_t max_ranks = 1;
  for (int64_t k : ranks) {
    if (k < 1) throw Error("--ranks must be positive counts, got ", k);
    max_ranks = std::max(max_ranks, k);
  }
  int64_t tpr = a.get_int("threads-per-rank");
  if (tpr == 0) tpr = std::max<int64_t>(1, cores / max_ranks);
  const std::vector<std::string> worker_args = {
      "--model", a.get("model"), "--batch", a.get("batch"), "--seq", a.get("seq"), "--frames", a.get("frames"),
      "--crop", a.get("crop"), "--steps", a.get("steps"),
      "--warmup", a.get("warmup"), "--threads-per-rank", std::to_string(tpr)};
  std::vector<Row> rows;
  for (int64_t k : ranks) rows.push_back(launch(int(k), worker_args));
  double base = 0;  // throughput of one device
  for (const Row& r : rows)
    if (r.devices == 1) base = r.samples_per_s;
  const std::string fmt = a.get("format");
  if (fmt == "json") {
    for (const Row& r : rows) {
      nlohmann::json j = nlohmann::json::parse(row_json(r));
      j["device"] = a.get("device-name");
      j["model"] = a.get("model");
      if (base > 0) j["efficiency"] = r.samples_per_s / (base * r.devices);
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  }
  const bool csv = fmt == "csv";
  if (!csv && fmt != "table") throw Error("--format must be table, json or csv, got '", fmt, "'");
  std::printf(csv ? "device,devices,mini_batch,global_batch,s_per_it,samples_per_s,efficiency\n"
                  : "# unmask bench scaling: %s, %lld thread(s) per rank, synthetic data, gradients summed by MPI\n"
                    "| Device | # devices | Mini-bsz | Global bsz | Avg iter time (s/it) | Throughput (samples/s) | "
                    "Efficiency |\n| :----: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
              a.get("model").c_str(), (long long)tpr);
  for (const Row& r : rows) {
    const double eff = base > 0 ? r.samples_per_s / (base * r.devices) : NAN;
    std::printf(csv ? "%s,%d,%lld,%lld,%.4f,%.2f,%.3f\n" : "| %s | %d | %lld | %lld | %.4f | %.2f | %.1f%% |\n",
                a.get("device-name").c_str(), r.devices, (long long)r.mini_batch, (long long)r.global_batch,
                r.s_per_it, r.samples_per_s, csv ? eff : 100 * eff);
  }
  return 0;
}

}  // namespace unmask::cli
