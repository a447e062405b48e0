// BERT pretraining (MLM + NSP) as a TrainTask, and train::pretrain: the PretrainConfig (TOML)
// read into the loop's settings and this task (trainer.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include "data/text/pretrain_data.h"
#include "data/text/shard_io.h"
#include "io/file.h"
#include "data/text/tokenizer_config.h"
#include "ops/device_info.h"
#include "train/checkpoint.h"
#include "train/rank_data.h"
#include "train/trainer.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/cuda_state.h"
#endif
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::train {

namespace {

namespace fs = std::filesystem;

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

class BertPretrainTask final : public TrainTask {
 public:
  BertPretrainTask(const PretrainConfig& cfg, const PretrainConfig& global_config, Context& ctx, const RankData& rank_data,
                   const std::string& weights_dir, const LoopStart& start, const std::function<void(const std::string&)>& warn)
      : cfg_(cfg), comm_(Communicator::world()), world_(comm_.size()) {
    const std::vector<std::string>& shards = rank_data.files;
    vocab_path_ = choose_vocab(cfg, weights_dir);
    VocabInfo vocab;
    if (!vocab_path_.empty()) vocab = read_vocab(vocab_path_);
    else warn("no vocab.txt (set vocab = \"...\"): checkpoints will lack vocab.txt and dynamic masking uses BERT's ids");
    // The casing the checkpoints carry (tokenizer_config.json): how prepare-text tokenized the
    // shards (it writes the file beside them), else the starting model's, else the one beside the
    // vocab, else uncased. A model trained on cased shards then stays cased when it is used.
    for (const fs::path& p : {fs::path(shards.front()).parent_path() / "tokenizer_config.json",
                              weights_dir.empty() ? fs::path() : fs::path(weights_dir) / "tokenizer_config.json",
                              vocab_path_.empty() ? fs::path() : fs::path(vocab_path_).parent_path() / "tokenizer_config.json"})
      if (!p.empty() && io::file_exists(p.string())) {
        tokenizer_ = text::read_tokenizer_config(p.string());
        break;
      }
    const BertHeads heads{.pooler = true, .mlm = true, .nsp = true};
    model_.emplace(weights_dir.empty()
                       ? BertTrainModel::random(random_model_config(cfg.model.substr(7), vocab.size), heads, cfg.seed)
                       : BertTrainModel::load(weights_dir, heads, cfg.seed));
    model_->to(ctx);  // no-op on the CPU; the optimizer's moments follow the parameters' device
    const BertConfig& mc = model_->config();
    if (vocab.size > mc.vocab_size)
      throw Error("the vocab ", vocab_path_, " has ", vocab.size, " tokens but the model's vocab_size is ", mc.vocab_size,
                  Hint("use the model's own vocab.txt"));
    if (cfg.max_seq > mc.max_position_embeddings)
      throw Error("max_seq = ", cfg.max_seq, " exceeds the model's max_position_embeddings ", mc.max_position_embeddings);

    data::LoaderPosition start_pos;
    if (!start.resume_dir.empty()) {
      std::string why;
      start_pos = rank_start_position(cfg.data_sharding, start.resumed, comm_.rank(), world_, &why);
      if (!why.empty()) warn(why);
    }
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
    loader_.emplace(lo, start_pos);
    if (world_ > 1 && cfg.data_sharding == DataSharding::local) {
      const std::vector<int64_t> counts = comm_.allgather_pod<int64_t>(loader_->num_instances(), "the per-rank instance counts");
      std::string list;
      for (int64_t c : counts) list += (list.empty() ? "" : ", ") + std::to_string(c);
      if (comm_.is_root())
        std::fprintf(stderr, "data_sharding = local: the ranks hold %s instances; each draws %lld per micro-batch from its "
                     "own (a rank with fewer revisits them more often)\n", list.c_str(), (long long)cfg.batch);
    }
    char title[256];
    std::snprintf(title, sizeof title, "%s: %s, %lld layers x %lld, %s lr %g, batch %lld x %lld, seq %lld",
                  cfg.output.c_str(), cfg.model.c_str(), (long long)mc.num_hidden_layers, (long long)mc.hidden_size,
                  optimizer_name(cfg.optimizer), cfg.lr, (long long)global_config.batch, (long long)cfg.accumulation,
                  (long long)cfg.max_seq);
    title_ = title;
  }

  BertTrainModel& model() { return *model_; }
  std::string title() const override { return title_; }
  std::string sample_name() const override { return "sequences"; }
  std::vector<Param>& params() override { return model_->params(); }
  void zero_grad(Context& ctx) override {
    model_->zero_grad(ctx);
    sum_ = {};
    micro_sums_.clear();
    micro_losses_ = 0;
  }

  double micro_batch(Context& ctx, const MicroBatchOptions& mo) override {
    PretrainBatch b = loader_->next();
    if (b.input_ids.size(1) != cfg_.max_seq)
      throw Error("a batch of ", cfg_.data, " has sequence length ", b.input_ids.size(1), ", not max_seq = ", cfg_.max_seq,
                  Hint("every shard of a run must have the same sequence length"));
    TrainStepOptions so;
    if (world_ > 1) {
      // Every rank holds its own rows (of the global batch, or of its own data): add the counts up.
      PretrainCounts global = pretrain_counts(b);
      double c[2] = {double(global.masked), double(global.nsp)};
      comm_.allreduce_sum(c, 2, "the batch counts");
      global.masked = int64_t(c[0]), global.nsp = int64_t(c[1]);
      so.mlm_normalizer = std::max<int64_t>(global.masked, 1);
      so.nsp_normalizer = std::max<int64_t>(global.nsp, 1);
      micro_sums_.insert(micro_sums_.end(), {0.0, 0.0, double(global.masked), double(global.nsp)});
    }
    so.grads_ready = mo.grads_ready;
    so.loss_scale = mo.loss_scale;
    so.activations = cfg_.activations;
    so.hidden_dropout = float(cfg_.hidden_dropout);
    so.attention_dropout = float(cfg_.attention_dropout);
    so.seed = cfg_.seed;
    so.step = mo.step;
    so.micro = mo.micro;
    so.reuse_weight_copies = true;  // micro > 0: the bf16 weight copies of micro-batch 0 (no update since)
    PretrainStats s = model_->pretrain_step(ctx, b, so);
    micro_losses_ += s.loss;
    if (world_ > 1) {
      micro_sums_[micro_sums_.size() - 4] = s.mlm_loss_sum;
      micro_sums_[micro_sums_.size() - 3] = s.nsp_loss_sum;
    }
    sum_.mlm_loss_sum += s.mlm_loss_sum, sum_.mlm_count += s.mlm_count, sum_.mlm_correct += s.mlm_correct;
    sum_.nsp_loss_sum += s.nsp_loss_sum, sum_.nsp_count += s.nsp_count, sum_.nsp_correct += s.nsp_correct;
    sum_.sequences += s.sequences, sum_.tokens += s.tokens;
    std::vector<int64_t> lens;
    const int32_t* mask = b.input_mask.data<int32_t>();
    for (int64_t r = 0; r < b.input_mask.size(0); ++r) {
      int64_t n = 0;
      for (int64_t t = 0; t < b.input_mask.size(1); ++t) n += mask[r * b.input_mask.size(1) + t] != 0;
      lens.push_back(n);
    }
    return bert_train_flops(model_->config(), lens, s.mlm_count);  // this rank's work
  }

  StepSummary finish_step() override {
    const int64_t accumulation = cfg_.accumulation;
    double loss_sum = micro_losses_;
    if (world_ > 1) {
      // Statistics: global. The loss of each micro-batch is the global mean, then the mean over
      // micro-batches, as on one rank.
      std::vector<double> totals = micro_sums_;
      const size_t at = totals.size();
      totals.resize(at + 8, 0.0);
      double* t = totals.data() + at;
      t[0] = double(sum_.mlm_correct), t[1] = double(sum_.nsp_correct), t[2] = double(sum_.sequences), t[3] = double(sum_.tokens);
      t[4] = double(sum_.mlm_count), t[5] = double(sum_.nsp_count), t[6] = sum_.mlm_loss_sum, t[7] = sum_.nsp_loss_sum;
      comm_.allreduce_sum(totals.data(), int64_t(totals.size()), "the step statistics");
      loss_sum = 0;
      for (int64_t micro = 0; micro < accumulation; ++micro) {
        const double* m = totals.data() + 4 * micro;  // the counts were global already: divide by world
        const double masked = m[2] / world_, nsp_n = m[3] / world_;
        loss_sum += (masked > 0 ? m[0] / masked : 0.0) + (nsp_n > 0 ? m[1] / nsp_n : 0.0);
      }
      sum_.mlm_correct = int64_t(t[0]), sum_.nsp_correct = int64_t(t[1]);
      sum_.sequences = int64_t(t[2]), sum_.tokens = int64_t(t[3]);
      sum_.mlm_count = int64_t(t[4]), sum_.nsp_count = int64_t(t[5]);
      sum_.mlm_loss_sum = t[6], sum_.nsp_loss_sum = t[7];
    }
    StepSummary s;
    s.loss = loss_sum / double(accumulation);
    const double mlm_acc = sum_.mlm_count ? double(sum_.mlm_correct) / double(sum_.mlm_count) : 0;
    s.accuracy = mlm_acc;
    s.samples = sum_.sequences, s.tokens = sum_.tokens;
    s.extras = {{"mlm_loss", sum_.mlm_count ? sum_.mlm_loss_sum / double(sum_.mlm_count) : 0},
                {"nsp_loss", sum_.nsp_count ? sum_.nsp_loss_sum / double(sum_.nsp_count) : 0},
                {"mlm_acc", mlm_acc},
                {"nsp_acc", sum_.nsp_count ? double(sum_.nsp_correct) / double(sum_.nsp_count) : 0}};
    return s;
  }

  void save_model(const std::string& dir) override { model_->save_pretrained(dir, vocab_path_, tokenizer_); }

  void save_data_state(TrainerState& st) override {
    if (cfg_.data_sharding != DataSharding::batch)  // files / local: every rank's position
      st.rank_loaders = comm_.allgather_pod<data::LoaderPosition>(loader_->position(), "the loader positions");
    st.loader = loader_->position();
    st.data_sharding = data_sharding_name(cfg_.data_sharding);
  }

 private:
  PretrainConfig cfg_;
  Communicator& comm_;
  int world_;
  std::optional<BertTrainModel> model_;
  std::optional<data::PretrainLoader> loader_;
  std::string vocab_path_, title_;
  TokenizerSettings tokenizer_;
  PretrainStats sum_;
  std::vector<double> micro_sums_;  // data parallel, per micro-batch: MLM loss sum, NSP loss sum, global counts
  double micro_losses_ = 0;
};

}  // namespace

TrainResult pretrain(const TrainerOptions& options) {
  PretrainConfig cfg = options.config;
  cfg.validate();
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
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& w) {
    warnings.push_back(w);
    if (options.progress && root) std::fprintf(stderr, "warning: %s\n", w.c_str());
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

  // ---- the loop's settings
  LoopConfig lc;
  lc.output = cfg.output;
  lc.steps = cfg.steps;
  lc.accumulation = cfg.accumulation;
  lc.optimizer.kind = cfg.optimizer;
  lc.lr = cfg.lr;
  lc.optimizer.lr = float(cfg.lr), lc.optimizer.beta1 = float(cfg.beta1), lc.optimizer.beta2 = float(cfg.beta2);
  lc.optimizer.eps = float(cfg.eps), lc.optimizer.weight_decay = float(cfg.weight_decay);
  lc.optimizer.max_grad_norm = float(cfg.max_grad_norm);
  lc.schedule.kind = cfg.schedule;
  lc.schedule.warmup = cfg.warmup;
  lc.schedule.total_steps = cfg.steps;
  lc.schedule.degree = cfg.poly_degree;
  lc.loss_scaling = cfg.loss_scaling;
  lc.init_loss_scale = cfg.init_loss_scale;
  lc.loss_scale_window = cfg.loss_scale_window;
  lc.overlap_allreduce = cfg.overlap_allreduce;
  lc.checkpoint_every = cfg.checkpoint_every;
  lc.keep_checkpoints = cfg.keep_checkpoints;
  lc.log_every = cfg.log_every;
  lc.seed = cfg.seed;
  lc.phase = cfg.phase;
  lc.config = global_config.to_map();  // batch = the global batch; any rank count may resume it
  lc.config_hash = global_config.numeric_hash();

  // ---- where the weights come from
  LoopStart start = open_run(lc, options.resume, warn);
  // init_checkpoint may name a model (an HF directory), a training checkpoint, or a run directory
  // (its latest checkpoint). A training checkpoint gives its model/ and its optimizer moments.
  std::string init_state_dir;  // the checkpoint whose optimizer moments phase 2 takes
  if (!cfg.init_checkpoint.empty() && start.resume_dir.empty()) {
    std::string init = cfg.init_checkpoint;
    if (!is_training_checkpoint(init) && !io::file_exists(init + "/config.json")) {
      init = is_dir(init) ? latest_checkpoint(init) : "";
      if (init.empty())
        throw Error(cfg.origin.count("init_checkpoint") ? cfg.origin.at("init_checkpoint") : "config", ": init_checkpoint ",
                    cfg.init_checkpoint, " is neither a model directory (config.json) nor a run directory with checkpoints",
                    Hint("run phase 1 first, or point init_checkpoint at one of its checkpoints/step-* directories"));
    }
    if (is_training_checkpoint(init)) init_state_dir = init;
    cfg.init_checkpoint = init;
  }
  const bool random_model = cfg.model.rfind("random:", 0) == 0;
  const std::string weights_dir = !start.resume_dir.empty()      ? checkpoint_model_dir(start.resume_dir)
                                  : !cfg.init_checkpoint.empty() ? checkpoint_model_dir(cfg.init_checkpoint)
                                  : random_model                 ? ""
                                                                 : cfg.model;
  if (!weights_dir.empty() && !is_dir(weights_dir))
    throw Error("model directory ", weights_dir, " not found",
                Hint("model is an HF directory (config.json, model.safetensors) or random:tiny|mini|small|medium|base|large"));
  // DLE phase 2: the phase-1 weights and optimizer moments, the step counter back to 0.
  if (start.resume_dir.empty()) start.init_optimizer_dir = init_state_dir.empty() ? cfg.init_checkpoint : init_state_dir;

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
  if (cfg.device == Device::cpu && cfg.precision == GemmPrecision::bf16) ops::set_training_precision(ctx, "bf16");
  BertPretrainTask task(cfg, global_config, ctx, rank_data, weights_dir, start, warn);
  if (world > 1 && root && options.progress)
    std::fprintf(stderr, "data parallel: %d ranks (%s), batch %lld per rank = %lld per micro-batch, %d threads per rank\n",
                 world, comm.backend_name(), (long long)cfg.batch, (long long)(cfg.batch * world), threads);
  if (start.resume_dir.empty() && !cfg.init_checkpoint.empty() && root && options.progress)
    std::fprintf(stderr, "starting from the weights of %s (optimizer step reset to 0)\n", cfg.init_checkpoint.c_str());
  // MFU: against peak_gflops, else the CPU's FMA peak measured here (CUDA: none unless given).
  lc.peak_gflops = cfg.peak_gflops > 0 ? cfg.peak_gflops : cfg.device == Device::cuda ? 0.0 : measure_peak_gflops(ctx.num_threads());

  RunControl control;
  control.stop_signal = options.stop_signal;
  control.max_steps_this_run = options.max_steps_this_run;
  control.progress = options.progress;
  control.tty = options.tty;
  control.before_step = options.before_step;
  control.after_backward = options.after_backward;
  TrainResult r = run_training(task, ctx, lc, start, control);
  r.warnings.insert(r.warnings.begin(), warnings.begin(), warnings.end());
  return r;
}

}  // namespace unmask::train
