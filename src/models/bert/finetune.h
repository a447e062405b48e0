// models/bert/finetune.h: the fine-tuning loop and evaluation behind `unmask finetune` / `unmask eval`.
//
//   auto tok = cli::load_tokenizer(dir);
//   TaskData train = finetune::load_task_data(TaskKind::squad, "train-v1.1.json", tok, {}, /*training=*/true);
//   BertTrainModel model = finetune::load_model_for_task(dir, TaskKind::squad, train.labels, 42);
//   TrainResult r = finetune::train(ctx, model, train, {.epochs = 2, .batch = 8, .lr = 3e-5f}, on_log);
//   TaskData dev = finetune::load_task_data(TaskKind::squad, "dev-v1.1.json", tok, {}, false);
//   EvalResult e = finetune::evaluate(ctx, model.to_inference_model(), dev, tok, 32);
//
// Training follows Hugging Face's run_squad / run_glue / run_ner: AdamW (weight decay 0.01 on all
// but biases and LayerNorm weights, eps 1e-8, gradient clipping at norm 1), a linear schedule with
// linear warmup over the given fraction of the steps, the features reshuffled every epoch
// (std::mt19937_64 seeded with seed + epoch), dropout as in the config (0.1) drawn from
// (seed, step). Evaluation runs the inference model (no dropout) over batches of features sorted
// by length (less padding), then scores with the task's official rules (squad.h, glue.h, conll.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/text/conll.h"
#include "data/text/glue.h"
#include "data/text/squad.h"
#include "unmask/bert.h"
#include "unmask/context.h"
#include "train/trainer.h"
#include "unmask/train.h"

namespace unmask::finetune {

enum class TaskKind : uint8_t { squad, classify, tokens };

/// "squad" | "classify" | "tokens"; anything else throws naming the nearest one.
TaskKind parse_task(const std::string& name);
const char* task_name(TaskKind task);
Task train_task(TaskKind task);  // the head: qa, seqcls, tokcls

struct DataOptions {
  int64_t max_seq = 0;  // 0 = the task's default: 384 for squad, 128 otherwise
  int64_t doc_stride = 128;
  int64_t max_query = 64;
  ClassifyColumns columns;  // classify: --text-a / --text-b / --label
};
int64_t default_max_seq(TaskKind task);

/// One data file of one task, read and tokenized into features.
struct TaskData {
  TaskKind task = TaskKind::squad;
  std::string path;
  std::vector<std::string> labels;  // classify / tokens: label id -> name
  // squad
  std::vector<SquadExample> squad_examples;
  std::vector<SquadFeature> squad_features;
  SquadReadReport squad_report;
  // classify
  std::vector<ClassifyExample> classify_examples;
  std::vector<ClassifyFeature> classify_features;
  // tokens
  std::vector<ConllSentence> sentences;
  std::vector<ConllFeature> conll_features;

  size_t num_examples() const;
  size_t num_features() const;
  size_t feature_length(size_t i) const;
  TaskBatch batch(const std::vector<size_t>& rows, bool with_labels) const;
};

/// Reads and tokenizes `path`. `labels`: for classify/tokens, the label names of the model
/// (evaluation, or training a model that has them); empty = the sorted labels of this file.
/// Training data without a single feature is an error.
TaskData load_task_data(TaskKind task, const std::string& path, const text::WordPieceTokenizer& tokenizer,
                        const DataOptions& options, bool training, const std::vector<std::string>& labels = {});

/// Data without labels, for prediction: a TSV without the label column, CoNLL lines holding the
/// word only (other columns are ignored), SQuAD questions without answers. `labels` are the
/// model's (classify / tokens).
TaskData load_unlabelled_data(TaskKind task, const std::string& path, const text::WordPieceTokenizer& tokenizer,
                              const DataOptions& options, const std::vector<std::string>& labels);

/// The label names of a model's classifier: id2label where given, else "0", "1", ... (so HF's
/// default "LABEL_i" names match GLUE's numeric labels).
std::vector<std::string> model_labels(const BertConfig& config);

/// The encoder (and pooler) of the HF directory `dir` plus the task's head: the checkpoint's head
/// when it has one of the right size, else a fresh one (normal(0, 0.02), seeded). Classification
/// heads get num_labels = labels.size() and id2label = labels.
BertTrainModel load_model_for_task(const std::string& dir, TaskKind task, const std::vector<std::string>& labels,
                                   uint64_t seed);
/// The same from a model in memory (tests): a copy of `base`'s parameters (params() is not
/// const; nothing is changed) with a fresh head for the task.
BertTrainModel model_for_task(BertTrainModel& base, TaskKind task, const std::vector<std::string>& labels,
                              uint64_t seed);

struct TrainOptions {
  // The run (train/trainer.h's loop): where its checkpoints, metrics.jsonl and loss.svg go ("" =
  // nowhere: an in-memory run), the checkpoint to resume, and how it stops and reports.
  std::string run_dir;
  std::string resume;
  int64_t checkpoint_every = 0;     // steps (0 = only the final checkpoint)
  int64_t keep_checkpoints = 1;
  int64_t stop_after = 0;           // stop after this many steps of this invocation (0 = all)
  const std::atomic<int>* stop_signal = nullptr;
  bool progress = false, tty = false;
  std::function<void(const std::string&)> save_model;  // writes the model's files into a directory
  std::map<std::string, std::string> settings;         // recorded in checkpoints (resume diffs)
  int64_t epochs = 2;
  int64_t batch = 8;
  float lr = 3e-5f;
  double warmup = 0.1;         // fraction of the steps
  float weight_decay = 0.01f;
  uint64_t seed = 42;
  int64_t max_steps = 0;       // > 0: stop after this many steps (the schedule spans them)
  int64_t log_every = 50;      // steps between StepLog callbacks (the last step always logs)
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
};

struct StepLog {
  int64_t step = 0, total_steps = 0;  // step = steps done
  int64_t epoch = 0;                  // 0-based
  double loss = 0;                    // mean loss over the steps since the previous log
  double lr = 0;                      // learning rate of the last step
  double seconds = 0;                 // since the start of training
  double features_per_s = 0;
};

struct TrainResult {
  int64_t steps = 0;
  std::vector<double> losses;  // every step's loss (of this invocation)
  double seconds = 0;
  train::TrainResult run;      // the loop's account (resume point, checkpoint, signal)
};

/// Fine-tunes `model` on `data` (see the file comment for the recipe) on the training loop. With
/// options.resume, `model` must hold that checkpoint's weights (load_model_for_task on it).
TrainResult train(Context& ctx, BertTrainModel& model, const TaskData& data, const TrainOptions& options,
                  const std::function<void(const StepLog&)>& on_log = {});

struct Metric {
  std::string name;  // "exact_match", "f1", "accuracy", "precision", "recall"
  double value = 0;  // x 100
};

struct EvalResult {
  TaskKind task = TaskKind::squad;
  std::vector<Metric> metrics;
  int64_t examples = 0;                           // questions / rows / sentences
  std::map<std::string, std::string> squad_predictions;  // id -> answer text
  std::vector<std::string> classify_predictions;          // per row: label name
  std::vector<std::vector<std::string>> token_predictions;  // per sentence, per word
  double value(const std::string& name) const;  // throws for an unknown metric
};

/// Throws naming the head `task` needs when `heads` lacks it.
void require_head(const BertHeads& heads, TaskKind task);

/// Runs `model` (which must have the task's head) over `data` and scores it.
EvalResult evaluate(Context& ctx, const BertModel& model, const TaskData& data,
                    const text::WordPieceTokenizer& tokenizer, int64_t batch_size = 32);

/// Predictions with probabilities, one JSON object per line, in the data's order:
///   classify {"line", "label", "probability", "probabilities": {label: p}}  (softmax of the logits)
///   tokens   {"line", "words", "tags", "probabilities"}  (each word's tag from its first piece)
///   squad    {"id", "answer", "probability"}  (softmax over the n-best spans, as run_squad)
std::string predict_jsonl(Context& ctx, const BertModel& model, const TaskData& data,
                          const text::WordPieceTokenizer& tokenizer, int64_t batch_size = 32);
/// predictions as JSON: squad {id: text}; classify [label, ...]; tokens [[tag, ...], ...].
std::string predictions_json(const EvalResult& result);
/// {"task": ..., "examples": N, "exact_match": ..., ...}
std::string metrics_json(const EvalResult& result);

}  // namespace unmask::finetune
