// models/bert/finetune.cc: task data, model set-up, the fine-tuning loop and evaluation (see
// finetune.h).
#include "models/bert/finetune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <memory>
#include <numeric>
#include <random>

#include "models/bert/finetune_batch.h"
#include "models/bert/checkpoint.h"
#include "train/config.h"
#include "train/task.h"
#include "data/rng.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::finetune {
namespace {

constexpr const char* kTaskNames[] = {"squad", "classify", "tokens"};

BertHeads heads_for(TaskKind task) {
  BertHeads h;
  if (task == TaskKind::squad) h.qa = true;
  if (task == TaskKind::classify) h.seqcls = true;
  if (task == TaskKind::tokens) h.tokcls = true;
  return h;
}

bool has_architecture(const BertConfig& cfg, const char* what) {
  return std::any_of(cfg.architectures.begin(), cfg.architectures.end(),
                     [&](const std::string& a) { return a.find(what) != std::string::npos; });
}

// Copies every parameter of `from` whose name and shape `to` shares (the task head only when
// keep_head).
void copy_params(BertTrainModel& from, BertTrainModel& to, bool keep_head) {
  std::map<std::string, const Param*> by_name;
  for (const Param& p : from.params()) by_name[p.name] = &p;
  for (Param& p : to.params()) {
    const bool head = p.name.rfind("classifier.", 0) == 0 || p.name.rfind("qa_outputs.", 0) == 0;
    auto it = by_name.find(p.name);
    if (it == by_name.end() || (head && !keep_head) || it->second->value.shape() != p.value.shape()) continue;
    UNMASK_CHECK(p.value.is_contiguous() && it->second->value.is_contiguous(), "copy_params: ", p.name, " is not contiguous");
    std::memcpy(p.value.raw(), it->second->value.raw(), p.value.nbytes());
  }
}

}  // namespace

TaskKind parse_task(const std::string& name) {
  for (size_t i = 0; i < 3; ++i)
    if (name == kTaskNames[i]) return TaskKind(i);
  // Other names for the same tasks point at ours.
  static const std::map<std::string, const char*> aliases = {
      {"qa", "squad"}, {"question-answering", "squad"}, {"glue", "classify"}, {"seqcls", "classify"},
      {"classification", "classify"}, {"mrpc", "classify"}, {"sst-2", "classify"}, {"ner", "tokens"},
      {"conll", "tokens"}, {"tokcls", "tokens"}, {"token-classification", "tokens"}, {"tagging", "tokens"}};
  std::string suggestion;
  if (auto it = aliases.find(name); it != aliases.end()) {
    suggestion = it->second;
  } else {
    size_t best = SIZE_MAX;
    for (const char* t : kTaskNames)
      if (size_t d = train::edit_distance(name, t); d < best) best = d, suggestion = t;
    if (best > 3) suggestion.clear();
  }
  throw Error("unknown task '", name, "'",
              Hint(suggestion.empty() ? std::string("--task is one of squad, classify, tokens")
                                      : "did you mean --task " + suggestion + "? (one of squad, classify, tokens)"));
}

const char* task_name(TaskKind task) { return kTaskNames[int(task)]; }

Task train_task(TaskKind task) {
  return task == TaskKind::squad ? Task::qa : task == TaskKind::classify ? Task::seqcls : Task::tokcls;
}

int64_t default_max_seq(TaskKind task) { return task == TaskKind::squad ? 384 : 128; }

// ---- TaskData ---------------------------------------------------------------------------------

size_t TaskData::num_examples() const {
  return task == TaskKind::squad ? squad_examples.size()
         : task == TaskKind::classify ? classify_examples.size() : sentences.size();
}
size_t TaskData::num_features() const {
  return task == TaskKind::squad ? squad_features.size()
         : task == TaskKind::classify ? classify_features.size() : conll_features.size();
}
size_t TaskData::feature_length(size_t i) const {
  return task == TaskKind::squad ? squad_features[i].input_ids.size()
         : task == TaskKind::classify ? classify_features[i].input_ids.size() : conll_features[i].input_ids.size();
}
TaskBatch TaskData::batch(const std::vector<size_t>& rows, bool with_labels) const {
  if (task == TaskKind::squad) return qa_batch(squad_features, rows, with_labels);
  if (task == TaskKind::classify) return classify_batch(classify_features, rows, with_labels);
  return tokens_batch(conll_features, rows, with_labels);
}

namespace {

// What a data file is read for: training and evaluation need its labels, prediction reads none
// (a TSV's label column, CoNLL's tags and SQuAD's answers may be absent) and takes the model's.
enum class DataUse : uint8_t { training, evaluation, prediction };

TaskData load_data(TaskKind task, const std::string& path, const text::WordPieceTokenizer& tokenizer,
                   const DataOptions& options, DataUse use, const std::vector<std::string>& labels) {
  const bool training = use == DataUse::training, predicting = use == DataUse::prediction;
  TaskData d;
  d.task = task;
  d.path = path;
  const int64_t max_seq = options.max_seq > 0 ? options.max_seq : default_max_seq(task);
  if (task == TaskKind::squad) {
    d.squad_examples = read_squad(path, training, &d.squad_report);
    d.squad_features = squad_features(
        d.squad_examples, tokenizer,
        {.max_seq_length = max_seq, .doc_stride = options.doc_stride, .max_query_length = options.max_query}, training);
  } else if (task == TaskKind::classify) {
    const TsvTable table = read_tsv(path);
    ClassifyColumnIndex columns = resolve_columns(table, options.columns, !predicting);
    if (predicting) columns.label = -1;  // a label column, if the file has one, is not read
    d.classify_examples = classify_examples(table, columns);
    d.labels = labels.empty() && !predicting ? label_list(d.classify_examples) : labels;
    if (training && d.labels.size() < 2)
      throw Error("classify: ", path, " has ", d.labels.size(), " distinct label(s); classification needs at least 2",
                  Hint("check --label: it names the column holding the class"));
    d.classify_features = classify_features(d.classify_examples, d.labels, tokenizer, max_seq, predicting);
  } else {
    d.sentences = read_conll(path, predicting);
    d.labels = labels.empty() && !predicting ? conll_label_list(d.sentences) : labels;
    d.conll_features = conll_features(d.sentences, d.labels, tokenizer, max_seq, !training);
  }
  if (d.num_features() == 0)
    throw Error(task_name(task), ": ", path, " gave no ", training ? "training " : "", "examples",
                Hint(task == TaskKind::squad && d.squad_report.skipped > 0
                         ? "every question was skipped; the first warning: " + d.squad_report.warnings.front()
                         : "the file holds no usable rows"));
  return d;
}

}  // namespace

TaskData load_task_data(TaskKind task, const std::string& path, const text::WordPieceTokenizer& tokenizer,
                        const DataOptions& options, bool training, const std::vector<std::string>& labels) {
  return load_data(task, path, tokenizer, options, training ? DataUse::training : DataUse::evaluation, labels);
}

// ---- models -----------------------------------------------------------------------------------

std::vector<std::string> model_labels(const BertConfig& config) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < config.num_labels; ++i) {
    const std::string fallback = std::to_string(i);
    const std::string name = size_t(i) < config.id2label.size() ? config.id2label[size_t(i)] : "";
    out.push_back(name.empty() || name == "LABEL_" + fallback ? fallback : name);
  }
  return out;
}

namespace {

BertTrainModel with_task_head(BertTrainModel& base, TaskKind task, const std::vector<std::string>& labels,
                              uint64_t seed, bool keep_head) {
  BertConfig cfg = base.config();
  if (task != TaskKind::squad) {
    if (labels.size() < 2) throw Error(task_name(task), ": ", labels.size(), " label(s); a classifier needs at least 2");
    cfg.num_labels = int64_t(labels.size());
    cfg.id2label = labels;
  }
  BertTrainModel model = BertTrainModel::random(cfg, heads_for(task), seed);
  copy_params(base, model, keep_head);
  return model;
}

}  // namespace

BertTrainModel model_for_task(BertTrainModel& base, TaskKind task, const std::vector<std::string>& labels,
                              uint64_t seed) {
  return with_task_head(base, task, labels, seed, false);
}

BertTrainModel load_model_for_task(const std::string& dir, TaskKind task, const std::vector<std::string>& labels,
                                   uint64_t seed) {
  if (task == TaskKind::squad) return BertTrainModel::load(dir, heads_for(task), seed);
  // The checkpoint's classifier is kept when it is of the same kind and size (and the label
  // names, which only random() can set, are applied to a copy).
  const BertConfig cfg = read_bert_checkpoint_config(dir);
  const bool same_kind = has_architecture(cfg, task == TaskKind::classify ? "SequenceClassification" : "TokenClassification");
  BertTrainModel base = BertTrainModel::load(dir, heads_for(task), seed);
  const bool keep = same_kind && base.config().num_labels == int64_t(labels.size()) && model_labels(base.config()) == labels;
  return with_task_head(base, task, labels, seed, keep);
}

// ---- training ---------------------------------------------------------------------------------

namespace {

// One task's fine-tuning as the loop's task: the features of each epoch in a permutation from
// std::mt19937_64(seed + epoch), global batch after global batch (the last one of an epoch may be
// short); the data position is the number of batches taken. Data parallel: a global batch is
// `batch` features a rank, rank r taking the r-th slice; every rank holds the whole data, so it
// counts the global batch's labels itself (task_counts) and divides its losses by them: the sum
// of the ranks' gradients is the global batch mean's, as one process would compute it. Dropout
// masks are each rank's own (keyed by the rank): the same distribution, not the same bits.
class BertFinetuneTask final : public train::TrainTask {
 public:
  BertFinetuneTask(BertTrainModel& model, const TaskData& data, const TrainOptions& o, int64_t batches_done)
      : model_(model), data_(data), o_(o), n_(int64_t(data.num_features())), batches_(batches_done) {
    Communicator& comm = Communicator::world();
    world_ = comm.size(), rank_ = comm.rank();
    global_batch_ = o.batch * world_;
    per_epoch_ = (n_ + global_batch_ - 1) / global_batch_;
  }
  std::string title() const override {
    return o_.run_dir + ": fine-tuning (" + task_name(data_.task) + ") on " + data_.path + ", batch " +
           std::to_string(global_batch_) + ", AdamW lr " + std::to_string(o_.lr);
  }
  std::string sample_name() const override { return "features"; }
  std::vector<Param>& params() override { return model_.params(); }
  void zero_grad(Context& ctx) override {
    model_.zero_grad(ctx);
    loss_ = 0, micro_ = 0, rows_ = 0, tokens_ = 0;
  }
  double micro_batch(Context& ctx, const train::MicroBatchOptions& mo) override {
    const int64_t epoch = batches_ / per_epoch_, first = (batches_ % per_epoch_) * global_batch_;
    if (epoch != order_epoch_) {
      order_.resize(size_t(n_));
      std::iota(order_.begin(), order_.end(), size_t(0));
      std::mt19937_64 rng(o_.seed + uint64_t(epoch));
      std::shuffle(order_.begin(), order_.end(), rng);
      order_epoch_ = epoch;
    }
    const int64_t end = std::min(n_, first + global_batch_);  // this global batch: [first, end)
    const int64_t mine = std::min(end, first + rank_ * o_.batch), mine_end = std::min(end, mine + o_.batch);
    const std::vector<size_t> rows(order_.begin() + mine, order_.begin() + mine_end);
    ++batches_;
    ++micro_;
    epoch_ = epoch;
    TrainStepOptions so;
    so.hidden_dropout = o_.hidden_dropout;
    so.attention_dropout = o_.attention_dropout;
    so.seed = world_ > 1 ? data::derive_key(o_.seed, {uint64_t(rank_)}) : o_.seed;
    so.step = mo.step * mo.accumulation + mo.micro;  // dropout masks keyed by the micro-batch
    so.loss_scale = mo.loss_scale;
    if (world_ > 1) {  // the global batch's label counts
      const std::vector<size_t> all(order_.begin() + first, order_.begin() + end);
      const TaskCounts c = task_counts(data_.batch(all, true), train_task(data_.task));
      so.task_normalizer[0] = c.counts[0], so.task_normalizer[1] = c.counts[1];
    }
    if (rows.empty()) return 0;  // the epoch's short last batch left this rank nothing
    const TaskBatch batch = data_.batch(rows, true);
    const TaskResult r = model_.task_step(ctx, batch, train_task(data_.task), so);
    loss_ += r.loss;  // data parallel: this slice's share of the global batch's mean
    rows_ += int64_t(rows.size());
    for (size_t i : rows) tokens_ += int64_t(data_.feature_length(i));
    return 0;
  }
  train::StepSummary finish_step() override {
    double t[3] = {loss_, double(rows_), double(tokens_)};
    if (world_ > 1) Communicator::world().allreduce_sum(t, 3, "the step's loss");
    train::StepSummary s;
    s.loss = micro_ ? t[0] / double(micro_) : 0;
    s.samples = int64_t(t[1]), s.tokens = int64_t(t[2]);
    s.extras = {{"epoch", double(epoch_)}};
    return s;
  }
  void save_model(const std::string& dir) override {
    if (o_.save_model) o_.save_model(dir);
    else model_.save_pretrained(dir, "", {});
  }
  void save_data_state(train::TrainerState& st) override { st.data["feature_batches"] = batches_; }

 private:
  BertTrainModel& model_;
  const TaskData& data_;
  const TrainOptions& o_;
  int64_t n_, per_epoch_ = 1, batches_;
  int world_ = 1, rank_ = 0;
  int64_t global_batch_ = 1;
  std::vector<size_t> order_;
  int64_t order_epoch_ = -1, epoch_ = 0;
  double loss_ = 0;
  int64_t micro_ = 0, rows_ = 0, tokens_ = 0;
};

}  // namespace

TrainResult train(Context& ctx, BertTrainModel& model, const TaskData& data, const TrainOptions& options,
                  const std::function<void(const StepLog&)>& on_log) {
  const int64_t N = int64_t(data.num_features());
  if (N == 0) throw Error("finetune: no training features");
  if (options.batch < 1) throw Error("finetune: --batch must be at least 1, got ", options.batch);
  if (options.epochs < 1 && options.max_steps < 1) throw Error("finetune: --epochs must be at least 1, got ", options.epochs);
  if (!(options.warmup >= 0 && options.warmup <= 1)) throw Error("finetune: --warmup must be in [0, 1], got ", options.warmup);
  if (!(options.lr > 0) || !std::isfinite(options.lr)) throw Error("finetune: --lr must be positive, got ", options.lr);
  const int64_t global_batch = options.batch * Communicator::world().size();
  const int64_t per_epoch = (N + global_batch - 1) / global_batch;
  const int64_t total = options.max_steps > 0 ? options.max_steps : options.epochs * per_epoch;

  train::LoopConfig lc;
  lc.output = options.run_dir;
  lc.steps = total;
  lc.lr = double(options.lr);
  lc.optimizer.kind = OptimizerKind::adamw;
  lc.optimizer.lr = options.lr;
  lc.optimizer.eps = 1e-8f;  // HF's adam_epsilon
  lc.optimizer.weight_decay = options.weight_decay;
  lc.optimizer.max_grad_norm = 1.0f;
  lc.schedule.kind = ScheduleConfig::Kind::linear;
  lc.schedule.warmup = options.warmup;
  lc.schedule.total_steps = total;
  lc.checkpoint_every = options.checkpoint_every;
  lc.keep_checkpoints = options.keep_checkpoints;
  lc.log_every = std::max<int64_t>(options.log_every, 1);
  lc.seed = options.seed;
  lc.config = options.settings;
  lc.config["batch"] = std::to_string(global_batch);  // any rank count giving it may resume
  lc.config_hash = train::settings_hash(lc.config);
  const train::LoopStart start = train::open_run(lc, options.resume, [&](const std::string& w) {
    if (options.progress && Communicator::world().is_root()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  });
  int64_t batches_done = 0;
  if (!start.resume_dir.empty()) {
    auto it = start.resumed.data.find("feature_batches");
    if (it == start.resumed.data.end())
      throw Error("the checkpoint ", start.resume_dir, " records no data position (data.feature_batches)",
                  Hint("it was not written by `unmask finetune`; resume a finetune run"));
    batches_done = it->second;
  }
  BertFinetuneTask task(model, data, options, batches_done);
  train::RunControl control;
  control.stop_signal = options.stop_signal;
  control.max_steps_this_run = options.stop_after;
  control.progress = options.progress;
  control.tty = options.tty;
  // The caller's log lines: every log_every steps and the last, with the mean loss since the last.
  if (on_log) {
    auto window = std::make_shared<std::pair<double, int64_t>>(0.0, 0);
    auto t0 = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    auto features = std::make_shared<int64_t>(0);
    control.after_step = [=, &on_log](const train::StepMetrics& m) {
      window->first += m.loss, ++window->second;
      *features += m.samples;
      if (m.step % lc.log_every != 0 && m.step != total) return;
      StepLog log;
      log.step = m.step;
      log.total_steps = total;
      log.epoch = int64_t(m.extra("epoch"));
      log.loss = window->first / double(window->second);
      log.lr = m.lr;
      log.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - *t0).count();
      log.features_per_s = log.seconds > 0 ? double(*features) / log.seconds : 0;
      on_log(log);
      *window = {0.0, 0};
    };
  }
  TrainResult result;
  result.run = train::run_training(task, ctx, lc, start, control);
  result.steps = result.run.end_step;
  for (const train::StepMetrics& m : result.run.steps) result.losses.push_back(m.loss);
  result.seconds = result.run.invocation_s;
  return result;
}

// ---- evaluation -------------------------------------------------------------------------------

void require_head(const BertHeads& h, TaskKind task) {
  const bool has_head = task == TaskKind::squad ? h.qa : task == TaskKind::classify ? h.seqcls : h.tokcls;
  if (has_head) return;
  const char* head = task == TaskKind::squad ? "question-answering (qa_outputs)"
                     : task == TaskKind::classify ? "sequence-classification (classifier on the pooled output)"
                                                  : "token-classification (classifier on every token)";
  throw Error("the model has no ", head, " head for --task ", task_name(task),
              Hint(std::string("fine-tune it first: unmask finetune --task ") + task_name(task) + " ..."));
}

double EvalResult::value(const std::string& name) const {
  for (const Metric& m : metrics)
    if (m.name == name) return m.value;
  throw Error("eval: no metric '", name, "' for task ", task_name(task));
}

namespace {

// Every feature's head logits, in feature order: squad start/end per token; classify [L] per
// feature; tokens [T, L] per feature. Features run in batches sorted by length (less padding).
struct HeadLogits {
  std::vector<SquadLogits> qa;
  std::vector<std::vector<float>> rows;
};

HeadLogits run_task_heads(Context& ctx, const BertModel& model, const TaskData& data, int64_t batch_size) {
  const TaskKind task = data.task;
  require_head(model.heads(), task);
  const int64_t L = model.config().num_labels;
  if (task != TaskKind::squad && int64_t(data.labels.size()) != L)
    throw Error("eval: the data has ", data.labels.size(), " labels but the model's classifier has ", L);
  if (batch_size < 1) throw Error("eval: batch size must be at least 1, got ", batch_size);
  const size_t F = data.num_features();
  std::vector<size_t> order(F);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return data.feature_length(a) < data.feature_length(b); });
  ForwardOptions fo;
  fo.mlm = fo.nsp = false;
  fo.pooler = task == TaskKind::classify;
  fo.qa = task == TaskKind::squad;
  fo.classifier = task != TaskKind::squad;
  HeadLogits h;
  h.qa.resize(task == TaskKind::squad ? F : 0);
  h.rows.resize(task == TaskKind::squad ? 0 : F);
  for (size_t first = 0; first < F; first += size_t(batch_size)) {
    const std::vector<size_t> rows(order.begin() + int64_t(first), order.begin() + int64_t(std::min(F, first + size_t(batch_size))));
    const TaskBatch b = data.batch(rows, false);
    BertInput in;
    in.input_ids = b.input_ids;
    in.token_type_ids = b.token_type_ids;
    in.attention_mask = b.attention_mask;
    const BertOutputs out = model.forward(ctx, in, fo);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t n = int64_t(data.feature_length(rows[i]));
      if (task == TaskKind::squad) {
        h.qa[rows[i]].start = batch_row(out.qa_start_logits, int64_t(i), n);
        h.qa[rows[i]].end = batch_row(out.qa_end_logits, int64_t(i), n);
      } else if (task == TaskKind::classify) {
        h.rows[rows[i]] = batch_row(out.seqcls_logits, int64_t(i), L);
      } else {
        h.rows[rows[i]] = batch_row(out.tokcls_logits, int64_t(i), n);
      }
    }
  }
  return h;
}

// Softmax of logits[0, n): the probabilities, in float64.
std::vector<double> softmax(const float* logits, int64_t n) {
  const float mx = *std::max_element(logits, logits + n);
  std::vector<double> p(static_cast<size_t>(n), 0.0);
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += p[size_t(k)] = std::exp(double(logits[k]) - double(mx));
  for (double& v : p) v /= sum;
  return p;
}

}  // namespace

EvalResult evaluate(Context& ctx, const BertModel& model, const TaskData& data,
                    const text::WordPieceTokenizer& tokenizer, int64_t batch_size) {
  const TaskKind task = data.task;
  const int64_t L = model.config().num_labels;
  const size_t F = data.num_features();
  HeadLogits h = run_task_heads(ctx, model, data, batch_size);
  const std::vector<SquadLogits>& qa = h.qa;
  const std::vector<std::vector<float>>& rows_logits = h.rows;

  EvalResult r;
  r.task = task;
  r.examples = int64_t(data.num_examples());
  if (task == TaskKind::squad) {
    r.squad_predictions = squad_predict(data.squad_examples, data.squad_features, qa, tokenizer, {});
    const SquadScore s = squad_evaluate(data.squad_examples, r.squad_predictions);
    r.metrics = {{"exact_match", s.exact_match}, {"f1", s.f1}};
  } else if (task == TaskKind::classify) {
    std::vector<int32_t> gold, predicted;
    for (size_t i = 0; i < F; ++i) {
      const std::vector<float>& lg = rows_logits[i];
      const int32_t p = int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
      predicted.push_back(p);
      gold.push_back(data.classify_features[i].label);
      r.classify_predictions.push_back(data.labels[size_t(p)]);
    }
    const ClassifyScore s = classify_score(gold, predicted, L, positive_label_index(data.labels));
    r.metrics = {{"accuracy", s.accuracy}, {"f1", s.f1}};
  } else {
    const auto words = conll_word_predictions(data.conll_features, rows_logits, L, data.sentences);
    std::vector<std::vector<std::string>> gold;
    for (size_t s = 0; s < data.sentences.size(); ++s) {
      gold.push_back(data.sentences[s].labels);
      std::vector<std::string> tags;
      for (int32_t id : words[s]) tags.push_back(id >= 0 ? data.labels[size_t(id)] : "O");
      r.token_predictions.push_back(std::move(tags));
    }
    const ChunkScore s = chunk_score(gold, r.token_predictions);
    r.metrics = {{"precision", s.precision}, {"recall", s.recall}, {"f1", s.f1}, {"accuracy", s.accuracy}};
  }
  return r;
}

TaskData load_unlabelled_data(TaskKind task, const std::string& path, const text::WordPieceTokenizer& tokenizer,
                              const DataOptions& options, const std::vector<std::string>& labels) {
  return load_data(task, path, tokenizer, options, DataUse::prediction, labels);
}

std::string predict_jsonl(Context& ctx, const BertModel& model, const TaskData& data,
                          const text::WordPieceTokenizer& tokenizer, int64_t batch_size) {
  const HeadLogits h = run_task_heads(ctx, model, data, batch_size);
  const int64_t L = model.config().num_labels;
  std::string out;
  auto line = [&](const nlohmann::ordered_json& j) {
    out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  if (data.task == TaskKind::squad) {
    std::map<std::string, double> prob;
    const auto answers = squad_predict(data.squad_examples, data.squad_features, h.qa, tokenizer, {}, &prob);
    for (const SquadExample& ex : data.squad_examples)
      line({{"id", ex.id}, {"answer", answers.at(ex.id)}, {"probability", prob.at(ex.id)}});
  } else if (data.task == TaskKind::classify) {
    for (size_t i = 0; i < data.classify_examples.size(); ++i) {
      const std::vector<double> p = softmax(h.rows[i].data(), L);
      const size_t best = size_t(std::max_element(p.begin(), p.end()) - p.begin());
      nlohmann::ordered_json all;
      for (int64_t k = 0; k < L; ++k) all[data.labels[size_t(k)]] = p[size_t(k)];
      line({{"line", data.classify_examples[i].line}, {"label", data.labels[best]}, {"probability", p[best]},
            {"probabilities", all}});
    }
  } else {
    // Each word's tag and probability from its first piece (a later window overwrites an
    // earlier one, as conll_word_predictions).
    std::vector<std::vector<std::pair<int32_t, double>>> words(data.sentences.size());
    for (size_t s = 0; s < data.sentences.size(); ++s) words[s].assign(data.sentences[s].words.size(), {-1, 0.0});
    for (size_t i = 0; i < data.conll_features.size(); ++i) {
      const ConllFeature& f = data.conll_features[i];
      for (size_t t = 0; t < f.word_of_token.size(); ++t) {
        if (f.word_of_token[t] < 0) continue;
        const std::vector<double> p = softmax(h.rows[i].data() + t * size_t(L), L);
        const size_t best = size_t(std::max_element(p.begin(), p.end()) - p.begin());
        words.at(size_t(f.sentence)).at(size_t(f.word_of_token[t])) = {int32_t(best), p[best]};
      }
    }
    for (size_t s = 0; s < data.sentences.size(); ++s) {
      std::vector<std::string> tags;
      std::vector<double> probs;
      for (const auto& [id, p] : words[s]) tags.push_back(id >= 0 ? data.labels[size_t(id)] : "O"), probs.push_back(p);
      line({{"line", data.sentences[s].line}, {"words", data.sentences[s].words}, {"tags", tags}, {"probabilities", probs}});
    }
  }
  return out;
}

std::string predictions_json(const EvalResult& result) {
  if (result.task == TaskKind::squad) return squad_predictions_json(result.squad_predictions);
  nlohmann::json j = result.task == TaskKind::classify ? nlohmann::json(result.classify_predictions)
                                                       : nlohmann::json(result.token_predictions);
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string metrics_json(const EvalResult& result) {
  nlohmann::ordered_json j;
  j["task"] = task_name(result.task);
  j["examples"] = result.examples;
  for (const Metric& m : result.metrics) j[m.name] = m.value;
  return j.dump(2) + "\n";
}

}  // namespace unmask::finetune
