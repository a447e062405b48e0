// train/trainer.cc: the pretraining loop (see trainer.h).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "data/pretrain_data.h"
#include "dist/grad_sync.h"
#include "ops/ops.h"
#include "dist/shard.h"
#include "train/loss_scaler.h"
#include "train/rank_data.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/cuda_state.h"
#endif
#include "unmask/dist.h"
#include "data/shard_io.h"
#include "io/file.h"
#include "text/tokenizer_config.h"
#include "train/checkpoint.h"
#include "unmask/error.h"

namespace unmask::train {

namespace {

namespace fs = std::filesystem;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// What the trainer needs from vocab.txt: its size and the ids of the special tokens.
struct VocabInfo {
  int64_t size = 0;
  int32_t mask_id = 103, cls_id = 101, sep_id = 102, pad_id = 0;
};

VocabInfo read_vocab(const std::string& path) {
  VocabInfo v;
  std::istringstream in(io::read_file(path));
  std::string line;
  bool mask = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    int32_t id = int32_t(v.size++);
    if (line == "[MASK]") v.mask_id = id, mask = true;
    else if (line == "[CLS]") v.cls_id = id;
    else if (line == "[SEP]") v.sep_id = id;
    else if (line == "[PAD]") v.pad_id = id;
  }
  if (v.size == 0) throw Error("vocab file ", path, " is empty", Hint("vocab.txt lists one WordPiece token per line"));
  if (!mask) throw Error("vocab file ", path, " has no [MASK] line", Hint("BERT pretraining needs the [MASK] token"));
  return v;
}

bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// The vocab the run uses: the `vocab` key, else the directory the weights come from.
std::string choose_vocab(const PretrainConfig& c, const std::string& weights_dir) {
  if (!c.vocab.empty()) {
    if (!io::file_exists(c.vocab)) throw Error(c.origin.count("vocab") ? c.origin.at("vocab") : "config", ": vocab file ", c.vocab, " not found");
    return c.vocab;
  }
  if (!weights_dir.empty() && io::file_exists(weights_dir + "/vocab.txt")) return weights_dir + "/vocab.txt";
  return "";
}

// Describes the keys that differ between a checkpoint's config and this run's.
std::string config_diff(const std::map<std::string, std::string>& saved, const std::map<std::string, std::string>& now) {
  std::string out;
  for (const auto& [k, v] : now) {
    auto it = saved.find(k);
    if (it != saved.end() && it->second != v) out += (out.empty() ? "" : ", ") + k + " " + it->second + " -> " + v;
  }
  return out;
}

// Non-finite elements: scans a contiguous f32 tensor; -1 when all are finite.
int64_t first_bad(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::f32) return -1;
  Tensor c = t.device() != Device::cpu ? t.to(Device::cpu) : t.is_contiguous() ? t : t.contiguous();
  const float* p = c.data<float>();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}

std::string value_text(const Tensor& t, int64_t i) {
  Tensor c = t.device() != Device::cpu ? t.to(Device::cpu) : t.is_contiguous() ? t : t.contiguous();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", double(c.data<float>()[i]));
  return buf;
}

}  // namespace

std::string first_non_finite(BertTrainModel& model) {
  for (const Param& p : model.params())
    if (int64_t i = first_bad(p.value); i >= 0)
      return "parameter " + p.name + " element " + std::to_string(i) + " of " + p.value.shape().str() + " = " +
             value_text(p.value, i);
  for (const Param& p : model.params())
    if (int64_t i = first_bad(p.grad); i >= 0)
      return "gradient of " + p.name + " element " + std::to_string(i) + " of " + p.grad.shape().str() + " = " +
             value_text(p.grad, i);
  return "";
}

TrainResult pretrain(const TrainerOptions& options) {
  PretrainConfig cfg = options.config;
  cfg.validate();
  TrainResult result;
  result.total_steps = cfg.steps;
  // Data parallelism (mpirun / srun). Who reads what is data_sharding (train/rank_data.h): with
  // "batch" every rank reads the same global batches of batch x ranks rows (same seed, same loader
  // position) and trains on its contiguous slice of rows, so N ranks x batch B/N compute the step
  // of 1 rank x batch B; with "files" / "local" each rank reads only its own shards with its own
  // seed. Either way the losses are normalised by the global counts (masked tokens, NSP rows) and
  // the gradients summed over ranks. Rank 0 alone writes checkpoints (with every rank's loader
  // position), metrics and progress. One process: none of this runs.
  Communicator& comm = Communicator::world();
  const int world = comm.size(), rank = comm.rank();
  const bool root = comm.is_root();
  // What a checkpoint records: the run as one process would compute it (batch = batch x ranks), so
  // a run resumes on any number of ranks that gives the same global batch.
  PretrainConfig global_config = cfg;
  global_config.batch = cfg.batch * world;
  auto warn = [&](const std::string& w) {
    result.warnings.push_back(w);
    if (options.progress && root) std::fprintf(stderr, "warning: %s\n", w.c_str());
  };
  auto note = [&](const std::string& w) {
    if (options.progress && root) std::fprintf(stderr, "%s\n", w.c_str());
  };

  // ---- data
  const RankData rank_data = plan_rank_data(cfg, {rank, world, comm.local_rank(), comm.local_size()});
  const std::vector<std::string>& shards = rank_data.files;
  if (shards.empty())
    throw Error("no shards (*.hdf5, *.h5) in ", rank_data.data,
                Hint("make them with `unmask prepare-text`, or set data to DLE's hdf5_* directory"));
  data::ShardInfo info = data::inspect_shard(shards.front());
  const std::string data_where = cfg.origin.count("max_seq") ? cfg.origin.at("max_seq") : (cfg.path.empty() ? "config" : cfg.path);
  if (info.seq_length != cfg.max_seq)
    throw Error(data_where, ": max_seq = ", cfg.max_seq, " but the shards in ", rank_data.data, " hold sequences of ", info.seq_length,
                Hint("set max_seq = " + std::to_string(info.seq_length) + " or point data at shards of length " +
                     std::to_string(cfg.max_seq)));
  if (!cfg.dynamic_masking && info.max_predictions != cfg.max_pred)
    throw Error(cfg.origin.count("max_pred") ? cfg.origin.at("max_pred") : data_where, ": max_pred = ", cfg.max_pred,
                " but the shards in ", rank_data.data, " hold ", info.max_predictions, " masked positions per sequence",
                Hint("set max_pred = " + std::to_string(info.max_predictions)));

  // ---- where the weights come from
  const std::string run_dir = cfg.output;
  std::string resume_dir;
  TrainerState resumed;
  if (!options.resume.empty()) {
    resume_dir = resolve_checkpoint(options.resume);
    resumed = read_trainer_state(resume_dir);
    if (resumed.step >= cfg.steps)
      throw Error("the run in ", resume_dir, " has already done ", resumed.step, " of steps = ", cfg.steps, " steps",
                  Hint("raise steps (--set steps=N) to train further"));
    if (resumed.phase != cfg.phase)
      warn("resuming a phase-" + std::to_string(resumed.phase) + " checkpoint as phase " + std::to_string(cfg.phase));
    if (resumed.config_hash != global_config.numeric_hash()) {
      std::string diff = config_diff(resumed.config, global_config.to_map());
      warn("the config differs from the checkpoint's (" + (diff.empty() ? std::string("?") : diff) +
           "): the resumed run is not the same computation as an uninterrupted one");
    }
  } else {
    if (std::string last = latest_checkpoint(run_dir); !last.empty())
      throw Error("the output directory ", run_dir, " already holds checkpoints (latest ", last, ")",
                  Hint("pass --resume to continue that run, or choose another output directory"));
  }
  if (root) remove_stale_checkpoint_temporaries(run_dir);

  // init_checkpoint may name a checkpoint (an HF directory) or a run directory (its latest one).
  if (!cfg.init_checkpoint.empty() && resume_dir.empty() && !io::file_exists(cfg.init_checkpoint + "/config.json")) {
    std::string last = is_dir(cfg.init_checkpoint) ? latest_checkpoint(cfg.init_checkpoint) : "";
    if (last.empty())
      throw Error(cfg.origin.count("init_checkpoint") ? cfg.origin.at("init_checkpoint") : "config", ": init_checkpoint ",
                  cfg.init_checkpoint, " is neither a model directory (config.json) nor a run directory with checkpoints",
                  Hint("run phase 1 first, or point init_checkpoint at one of its checkpoints/step-* directories"));
    cfg.init_checkpoint = last;
  }
  const BertHeads heads{.pooler = true, .mlm = true, .nsp = true};
  const bool random_model = cfg.model.rfind("random:", 0) == 0;
  std::string weights_dir = !resume_dir.empty() ? resume_dir : !cfg.init_checkpoint.empty() ? cfg.init_checkpoint
                            : random_model ? "" : cfg.model;
  if (!weights_dir.empty() && !is_dir(weights_dir))
    throw Error("model directory ", weights_dir, " not found",
                Hint("model is an HF directory (config.json, model.safetensors) or random:tiny|mini|small|medium|base|large"));
  const std::string vocab_path = choose_vocab(cfg, weights_dir.empty() ? "" : weights_dir);
  VocabInfo vocab;
  if (!vocab_path.empty()) vocab = read_vocab(vocab_path);
  else warn("no vocab.txt (set vocab = \"...\"): checkpoints will lack vocab.txt and dynamic masking uses BERT's ids");
  // The casing the checkpoints carry (tokenizer_config.json): how prepare-text tokenized the
  // shards (it writes the file beside them), else the starting model's, else the one beside the
  // vocab, else uncased. A model trained on cased shards then stays cased when it is used.
  TokenizerSettings tokenizer;
  for (const std::filesystem::path& p :
       {std::filesystem::path(shards.front()).parent_path() / "tokenizer_config.json",
        weights_dir.empty() ? std::filesystem::path() : std::filesystem::path(weights_dir) / "tokenizer_config.json",
        vocab_path.empty() ? std::filesystem::path() : std::filesystem::path(vocab_path).parent_path() / "tokenizer_config.json"})
    if (!p.empty() && io::file_exists(p.string())) {
      tokenizer = text::read_tokenizer_config(p.string());
      break;
    }

  int threads = cfg.threads;
  if (threads == 0 && comm.local_size() > 1)  // share the host's cores between its ranks
    threads = std::max(1, int(std::thread::hardware_concurrency()) / comm.local_size());
  // device = "cuda": rank r of a host takes GPU local_rank % GPUs (ranks may share one; their
  // gradients are then reduced over MPI through host buffers, dist/grad_sync.h).
  int device_index = 0;
#ifdef UNMASK_WITH_CUDA
  if (cfg.device == Device::cuda && cuda::device_count() > 0) device_index = comm.local_rank() % cuda::device_count();
#endif
  Context ctx({.num_threads = threads, .device = cfg.device, .device_index = device_index});
#ifdef UNMASK_WITH_CUDA
  if (cfg.device == Device::cuda) {  // before the first GEMM (plans are cached per precision)
    cuda::cuda_state(ctx).set_training_precision(cfg.precision == GemmPrecision::tf32,
                                                 cfg.precision == GemmPrecision::bf16   ? DType::bf16
                                                 : cfg.precision == GemmPrecision::fp16 ? DType::f16
                                                                                        : DType::f32);
  }
#endif
  BertTrainModel model = weights_dir.empty()
                             ? BertTrainModel::random(random_model_config(cfg.model.substr(7), vocab.size), heads, cfg.seed)
                             : BertTrainModel::load(weights_dir, heads, cfg.seed);
  model.to(ctx);  // no-op on the CPU; the optimizer's moments follow the parameters' device
  const BertConfig& mc = model.config();
  if (vocab.size > mc.vocab_size)
    throw Error("the vocab ", vocab_path, " has ", vocab.size, " tokens but the model's vocab_size is ", mc.vocab_size,
                Hint("use the model's own vocab.txt"));
  if (cfg.max_seq > mc.max_position_embeddings)
    throw Error("max_seq = ", cfg.max_seq, " exceeds the model's max_position_embeddings ", mc.max_position_embeddings);

  OptimizerConfig oc;
  oc.kind = cfg.optimizer;
  oc.lr = float(cfg.lr), oc.beta1 = float(cfg.beta1), oc.beta2 = float(cfg.beta2), oc.eps = float(cfg.eps);
  oc.weight_decay = float(cfg.weight_decay), oc.max_grad_norm = float(cfg.max_grad_norm);
  Optimizer opt(oc, model.params());
  std::unique_ptr<dist::GradientSync> grad_sync;
  if (world > 1) {
    // Same weights everywhere (same seed or the same checkpoint): compare per-tensor sums of squares.
    std::vector<const Tensor*> values;
    for (const Param& p : model.params()) values.push_back(&p.value);
    const std::vector<double> mine = ops::sum_squares_many(ctx, values);
    const std::vector<double> all = comm.allgather(mine, "the initial-weights check");
    for (int r = 1; r < world; ++r)
      for (size_t i = 0; i < mine.size(); ++i)
        if (all[size_t(r) * mine.size() + i] != all[i])
          throw Error("rank ", r, " starts from different weights than rank 0 (", model.params()[i].name, ")",
                      Hint("every rank must load the same checkpoint or use the same seed"));
    grad_sync = std::make_unique<dist::GradientSync>(comm, model.params(), dist::GradientSyncOptions{.average = false});
    if (root)
      note("data parallel: " + std::to_string(world) + " ranks (" + comm.backend_name() + "), batch " +
           std::to_string(cfg.batch) + " per rank = " + std::to_string(cfg.batch * world) + " per micro-batch, " +
           std::to_string(threads) + " threads per rank");
  }
  std::optional<DynamicLossScaler> scaler;
  if (cfg.loss_scaling)
    scaler.emplace(LossScalerConfig{.init_scale = cfg.init_loss_scale, .window = cfg.loss_scale_window});
  data::LoaderPosition start_pos;
  int64_t step = 0;
  CheckpointMetrics carried;
  if (!resume_dir.empty()) {
    std::string kind;
    OptimizerState os = read_optimizer_state(resume_dir, &kind);
    if (kind != optimizer_name(cfg.optimizer))
      throw Error("the checkpoint ", resume_dir, " was trained with ", kind, " but optimizer = ", optimizer_name(cfg.optimizer),
                  Hint("resume with the same optimizer"));
    opt.load_state(os);
    std::string why;
    start_pos = rank_start_position(cfg.data_sharding, resumed, rank, world, &why);
    if (!why.empty()) warn(why);
    step = resumed.step;
    carried = resumed.metrics;
    if (scaler && resumed.loss_scale > 0) scaler->restore(resumed.loss_scale, resumed.loss_scale_good_steps);
    result.resumed_from = resume_dir;
    note("resuming from " + resume_dir + " (step " + std::to_string(step) + ")");
  } else if (!cfg.init_checkpoint.empty()) {
    // DLE phase 2: the phase-1 weights and optimizer moments, the step counter back to 0.
    if (io::file_exists(cfg.init_checkpoint + "/optimizer.safetensors")) {
      std::string kind;
      OptimizerState os = read_optimizer_state(cfg.init_checkpoint, &kind);
      if (kind == optimizer_name(cfg.optimizer)) {
        os.step = 0;
        opt.load_state(os);
      } else {
        warn("init_checkpoint's optimizer is " + kind + ", not " + optimizer_name(cfg.optimizer) + ": its moments are not used");
      }
    }
    note("starting from the weights of " + cfg.init_checkpoint + " (optimizer step reset to 0)");
  }
  result.start_step = result.end_step = step;

  data::LoaderOptions lo;
  lo.files = shards;
  lo.batch_size = rank_data.loader_batch;  // batch sharding: the global batch, of which this rank trains on its rows
  lo.seed = rank_data.loader_seed;
  lo.keep_begin = rank_data.keep_begin, lo.keep_end = rank_data.keep_end;
  lo.file_rank = rank_data.file_rank, lo.file_ranks = rank_data.file_ranks;
  lo.dynamic_masking = cfg.dynamic_masking;
  lo.masked_lm_prob = cfg.masked_lm_prob;
  lo.max_predictions_per_seq = cfg.max_pred;
  lo.vocab_size = vocab.size > 0 ? vocab.size : mc.vocab_size;
  lo.mask_id = vocab.mask_id, lo.cls_id = vocab.cls_id, lo.sep_id = vocab.sep_id, lo.pad_id = vocab.pad_id;
  lo.prefetch = cfg.prefetch;
  data::PretrainLoader loader(lo, start_pos);
  if (world > 1 && cfg.data_sharding == DataSharding::local) {
    const std::vector<int64_t> counts =
        comm.allgather_pod<int64_t>(loader.num_instances(), "the per-rank instance counts");
    std::string list;
    for (int64_t c : counts) list += (list.empty() ? "" : ", ") + std::to_string(c);
    note(std::string("data_sharding = local: the ranks hold ") + list +
         " instances; each draws " + std::to_string(cfg.batch) + " per micro-batch from its own (a rank with fewer "
         "revisits them more often)");
  }

  ScheduleConfig sched;
  sched.kind = cfg.schedule;
  sched.warmup = cfg.warmup;
  sched.total_steps = cfg.steps;
  sched.degree = cfg.poly_degree;

  // MFU: against peak_gflops, else the CPU's FMA peak measured here (CUDA: none unless given).
  const double peak = cfg.peak_gflops > 0 ? cfg.peak_gflops : cfg.device == Device::cuda ? 0.0 : measure_peak_gflops(ctx.num_threads());
  result.peak_gflops = peak;
  std::optional<MetricsLog> log;  // rank 0 writes the run's files
  if (root) log.emplace(run_dir, step);
  char title_buf[256];
  std::snprintf(title_buf, sizeof title_buf, "%s: %s, %lld layers x %lld, %s lr %g, batch %lld x %lld, seq %lld",
                run_dir.c_str(), cfg.model.c_str(), (long long)mc.num_hidden_layers, (long long)mc.hidden_size,
                optimizer_name(cfg.optimizer), cfg.lr, (long long)cfg.batch, (long long)cfg.accumulation, (long long)cfg.max_seq);
  const std::string title = title_buf;
  Progress progress(step, cfg.steps, cfg.log_every, options.tty);

  std::vector<data::LoaderPosition> rank_positions;  // files / local: every rank's, gathered for the checkpoint
  auto make_state = [&](const StepMetrics* last) {
    TrainerState st;
    st.step = step;
    st.optimizer_step = opt.step_count();
    st.phase = cfg.phase;
    st.seed = cfg.seed;
    st.loader = loader.position();
    st.data_sharding = data_sharding_name(cfg.data_sharding);
    st.rank_loaders = rank_positions;
    if (scaler) st.loss_scale = scaler->scale(), st.loss_scale_good_steps = scaler->good_steps();
    st.config_hash = global_config.numeric_hash();
    st.config = global_config.to_map();  // batch = the global batch; any rank count may resume it
    st.metrics = carried;
    if (last) {
      st.metrics.loss = last->loss, st.metrics.mlm_loss = last->mlm_loss, st.metrics.nsp_loss = last->nsp_loss;
      st.metrics.mlm_acc = last->mlm_acc, st.metrics.nsp_acc = last->nsp_acc, st.metrics.lr = last->lr;
      st.metrics.grad_norm = last->grad_norm, st.metrics.elapsed_s = last->elapsed;
    }
    return st;
  };
  int64_t saved_step = -1;
  auto save = [&](const StepMetrics* last) {
    if (saved_step == step) return;
    if (cfg.data_sharding != DataSharding::batch)
      rank_positions = comm.allgather_pod<data::LoaderPosition>(loader.position(), "the loader positions");
    if (options.progress && root) progress.message("saving checkpoint " + checkpoint_name(step) + " ...");
    if (root) {
      result.checkpoint = write_checkpoint(run_dir, model, opt, make_state(last),
                                           {.vocab_path = vocab_path, .tokenizer = tokenizer, .keep_last = cfg.keep_checkpoints});
      log->write_plot(title);
    }
    saved_step = step;
  };

  const double seg_start = now_s();
  double time_in_steps = 0;
  int64_t seqs_this_run = 0;
  const StepMetrics* last = nullptr;
  int stop_seen = 0;  // the signal that stopped the run (agreed over ranks)
  int64_t skipped_since_step = 0;  // loss-scale overflows since the last update
  auto stop_requested = [&] {
    int local = options.stop_signal ? options.stop_signal->load() : 0;
    if (world > 1) {  // every rank must stop at the same step: the first signal anywhere stops all
      double any[2] = {double(local != 0), double(local)};
      comm.allreduce_sum(any, 2, "the stop-signal check");
      local = any[0] > 0 ? (local ? local : int(any[1] / any[0])) : 0;
    }
    if (local) stop_seen = local;
    return local != 0;
  };
  while (step < cfg.steps) {
    if (stop_requested()) break;
    if (options.max_steps_this_run > 0 && step - result.start_step >= options.max_steps_this_run) break;
    if (options.before_step) options.before_step(model, step);

    const double t0 = now_s();
    model.zero_grad(ctx);
    PretrainStats sum;
    double loss_sum = 0;
    std::vector<int64_t> lens;
    std::vector<double> micro_sums;  // per micro-batch: MLM loss sum, NSP loss sum, and their global counts
    for (int64_t micro = 0; micro < cfg.accumulation; ++micro) {
      PretrainBatch b = loader.next();
      if (b.input_ids.size(1) != cfg.max_seq)
        throw Error("a batch of ", cfg.data, " has sequence length ", b.input_ids.size(1), ", not max_seq = ", cfg.max_seq,
                    Hint("every shard of a run must have the same sequence length"));
      TrainStepOptions so;
      if (world > 1) {
        // Every rank holds its own rows (of the global batch, or of its own data): add the counts up.
        PretrainCounts global = pretrain_counts(b);
        double c[2] = {double(global.masked), double(global.nsp)};
        comm.allreduce_sum(c, 2, "the batch counts");
        global.masked = int64_t(c[0]), global.nsp = int64_t(c[1]);
        so.mlm_normalizer = std::max<int64_t>(global.masked, 1);
        so.nsp_normalizer = std::max<int64_t>(global.nsp, 1);
        micro_sums.insert(micro_sums.end(), {0.0, 0.0, double(global.masked), double(global.nsp)});
        // On the last micro-batch each bucket's all-reduce starts as soon as the backward has
        // finished its gradients (with accumulation nothing is reduced before that).
        if (cfg.overlap_allreduce && micro + 1 == cfg.accumulation)
          so.grads_ready = [&](int64_t first, int64_t end) {
            for (int64_t i = end; i-- > first;) grad_sync->mark_ready(i);
          };
      }
      so.loss_scale = float(1.0 / double(cfg.accumulation)) * (scaler ? scaler->scale() : 1.0f);
      so.activations = cfg.activations;
      so.hidden_dropout = float(cfg.hidden_dropout);
      so.attention_dropout = float(cfg.attention_dropout);
      so.seed = cfg.seed;
      so.step = step;
      so.micro = micro;
      so.reuse_weight_copies = true;  // micro > 0: the bf16 weight copies of micro-batch 0 (no update since)
      PretrainStats s = model.pretrain_step(ctx, b, so);
      loss_sum += s.loss;
      if (world > 1) {
        micro_sums[size_t(4 * micro)] = s.mlm_loss_sum;
        micro_sums[size_t(4 * micro + 1)] = s.nsp_loss_sum;
      }
      sum.mlm_loss_sum += s.mlm_loss_sum, sum.mlm_count += s.mlm_count, sum.mlm_correct += s.mlm_correct;
      sum.nsp_loss_sum += s.nsp_loss_sum, sum.nsp_count += s.nsp_count, sum.nsp_correct += s.nsp_correct;
      sum.sequences += s.sequences, sum.tokens += s.tokens;
      const int32_t* mask = b.input_mask.data<int32_t>();
      for (int64_t r = 0; r < b.input_mask.size(0); ++r) {
        int64_t n = 0;
        for (int64_t t = 0; t < b.input_mask.size(1); ++t) n += mask[r * b.input_mask.size(1) + t] != 0;
        lens.push_back(n);
      }
    }
    const int64_t local_masked = sum.mlm_count;  // this rank's work, for its FLOP count
    if (world > 1) {
      // Gradients: the sum over ranks (each normalised by the global counts). Statistics: global.
      grad_sync->finish();  // reduces whatever was not marked ready (everything without overlap)
      std::vector<double> totals = micro_sums;
      const size_t lens_at = totals.size();
      totals.resize(lens_at + 8, 0.0);
      double* t = totals.data() + lens_at;
      t[0] = sum.mlm_correct, t[1] = sum.nsp_correct, t[2] = sum.sequences, t[3] = sum.tokens;
      t[4] = sum.mlm_count, t[5] = sum.nsp_count, t[6] = sum.mlm_loss_sum, t[7] = sum.nsp_loss_sum;
      comm.allreduce_sum(totals.data(), int64_t(totals.size()), "the step statistics");
      // the loss of each micro-batch is the global mean, then the mean over micro-batches, as on one rank
      loss_sum = 0;
      for (int64_t micro = 0; micro < cfg.accumulation; ++micro) {
        const double* m = totals.data() + 4 * micro;  // the counts were global already: divide by world
        const double masked = m[2] / world, nsp_n = m[3] / world;
        loss_sum += (masked > 0 ? m[0] / masked : 0.0) + (nsp_n > 0 ? m[1] / nsp_n : 0.0);
      }
      sum.mlm_correct = int64_t(t[0]), sum.nsp_correct = int64_t(t[1]);
      sum.sequences = int64_t(t[2]), sum.tokens = int64_t(t[3]);
      sum.mlm_count = int64_t(t[4]), sum.nsp_count = int64_t(t[5]);
      sum.mlm_loss_sum = t[6], sum.nsp_loss_sum = t[7];
    }
    const double loss = loss_sum / double(cfg.accumulation);
    auto non_finite = [&](const std::string& what) {
      progress.finish();
      const std::string last_good = latest_checkpoint(run_dir);
      std::string culprit = first_non_finite(model);
      throw Error("step ", step + 1, ": ", what, "; first non-finite tensor: ",
                  culprit.empty() ? std::string("none found among the parameters and gradients") : culprit,
                  Hint(last_good.empty() ? std::string("no checkpoint was written; lower lr or check the data")
                                         : "nothing was saved; the last good checkpoint is " + last_good +
                                               " (resume from it with a lower lr, or check the data)"));
    };
    if (!std::isfinite(loss)) non_finite("the loss is " + std::to_string(loss));
    if (options.after_backward) options.after_backward(model, step);
    const float step_loss_scale = scaler ? scaler->scale() : 0.0f;
    if (scaler && !scaler->unscale(ctx, model.params())) {
      // The gradients of (scale x loss) overflowed: no update, the scale halves, the batch is spent.
      // The same decision on every rank (the gradients were reduced first).
      ++result.skipped_steps, ++skipped_since_step;
      if (step_loss_scale <= 1.0f) non_finite("the gradients are not finite even at loss scale 1");
      if (options.progress && root)
        progress.message("step " + std::to_string(step + 1) + ": gradients overflowed at loss scale " +
                         std::to_string(step_loss_scale) + "; skipped, scale now " + std::to_string(scaler->scale()));
      continue;
    }
    const double lr = cfg.lr * lr_multiplier(sched, opt.step_count());
    OptimizerStepStats os;
    try {
      os = opt.step(ctx, float(lr));
    } catch (const Error& e) {
      // The optimizer refuses a non-finite gradient norm (and leaves the parameters as they were).
      if (!first_non_finite(model).empty()) non_finite(std::string("the optimizer refused the step (") + e.what() + ")");
      throw;
    }
    if (!std::isfinite(os.grad_norm)) non_finite("the gradient norm is " + std::to_string(os.grad_norm));
    const double step_s = now_s() - t0;
    ++step;

    StepMetrics m;
    m.step = step;
    m.loss = loss;
    m.mlm_loss = sum.mlm_count ? sum.mlm_loss_sum / double(sum.mlm_count) : 0;
    m.nsp_loss = sum.nsp_count ? sum.nsp_loss_sum / double(sum.nsp_count) : 0;
    m.mlm_acc = sum.mlm_count ? double(sum.mlm_correct) / double(sum.mlm_count) : 0;
    m.nsp_acc = sum.nsp_count ? double(sum.nsp_correct) / double(sum.nsp_count) : 0;
    m.lr = lr;
    m.grad_norm = os.grad_norm;
    m.step_s = step_s;
    m.sequences = sum.sequences, m.tokens = sum.tokens;
    m.loss_scale = step_loss_scale;
    m.skipped = std::exchange(skipped_since_step, 0);
    m.seq_per_s = double(sum.sequences) / step_s;
    m.tokens_per_s = double(sum.tokens) / step_s;
    m.flops_per_s = bert_train_flops(mc, lens, local_masked) / step_s;  // this rank's (MFU per device)
    m.mfu = peak > 0 ? m.flops_per_s / (peak * 1e9) : 0;
    m.elapsed = carried.elapsed_s + (now_s() - seg_start);
    if (std::isnan(carried.first_loss)) carried.first_loss = loss;
    carried.sequences += sum.sequences, carried.tokens += sum.tokens;
    time_in_steps += step_s;
    seqs_this_run += sum.sequences;
    if (root) log->append(m);
    result.steps.push_back(m);
    last = &result.steps.back();
    if (options.progress && root) progress.update(m);

    if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0 && step < cfg.steps) save(last);
  }
  if (stop_seen) result.stopped_by_signal = stop_seen;
  // The final checkpoint (also after a signal or max_steps_this_run), unless nothing changed.
  if (step > result.start_step) save(last);
  progress.finish();

  result.end_step = step;
  result.first_loss = carried.first_loss;
  result.last_loss = last ? last->loss : carried.loss;
  result.seq_per_s = time_in_steps > 0 ? double(seqs_this_run) / time_in_steps : 0;
  result.elapsed_s = last ? last->elapsed : carried.elapsed_s;
  if (result.checkpoint.empty()) result.checkpoint = latest_checkpoint(run_dir);
  return result;
}

}  // namespace unmask::train
