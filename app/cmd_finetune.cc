// app/cmd_finetune.cc: `unmask finetune` (SQuAD v1.1, GLUE-style TSV classification, CoNLL
// token classification on an HF model directory) and `unmask eval` (the task's metrics for a
// fine-tuned directory). The work is in src/models/bert/finetune.h; this file parses options and
// prints.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "cli.h"
#include "core/signals.h"
#include "models/bert/finetune.h"
#include "train/checkpoint.h"
#include "io/file.h"
#include "model_dir.h"
#include "data/text/pretrain_data.h"
#include "models/bert/checkpoint.h"
#include "models/bert/mlm_eval.h"
#include "data/text/tokenizer_config.h"
#include "unmask/bert.h"
#include "unmask/context.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::cli {
namespace {

using finetune::TaskKind;

int64_t positive_int(const Args& args, const std::string& name, int64_t min = 1) {
  const int64_t v = args.get_int(name);
  if (v < min) throw Error("--", name, " must be at least ", min, ", got ", v);
  return v;
}

// The data options shared by both commands; max_seq is checked against the model's positions.
finetune::DataOptions data_options(const Args& args, TaskKind task, const BertConfig& config) {
  finetune::DataOptions o;
  o.max_seq = args.has("max-seq") ? positive_int(args, "max-seq", 4) : finetune::default_max_seq(task);
  if (o.max_seq > config.max_position_embeddings)
    throw Error("--max-seq ", o.max_seq, " is longer than the model's ", config.max_position_embeddings, " positions",
                Hint("use --max-seq " + std::to_string(config.max_position_embeddings) + " or less"));
  o.doc_stride = positive_int(args, "doc-stride");
  o.max_query = positive_int(args, "max-query");
  o.columns = {args.get("text-a"), args.get("text-b"), args.get("label")};
  return o;
}

const std::vector<OptionSpec> kDataSpecs = {
    {"max-seq", "N", "tokens per sequence, specials included (default: 384 for squad, 128 otherwise)", ""},
    {"doc-stride", "N", "squad: document tokens between the starts of consecutive windows", "128"},
    {"max-query", "N", "squad: question tokens kept", "64"},
    {"text-a", "COL", "classify: the first text column (header name or 0-based index; default by GLUE layout)", ""},
    {"text-b", "COL", "classify: the second text column ('none' for single sentences)", ""},
    {"label", "COL", "classify: the label column", ""},
    {"threads", "N", "CPU threads (0 = all cores)", "0"},
};

std::vector<OptionSpec> with_data_specs(std::vector<OptionSpec> specs) {
  specs.insert(specs.end(), kDataSpecs.begin(), kDataSpecs.end());
  return specs;
}

std::string describe_data(const finetune::TaskData& d) {
  const char* unit = d.task == TaskKind::squad ? "questions" : d.task == TaskKind::classify ? "rows" : "sentences";
  std::string s = std::to_string(d.num_examples()) + " " + unit + " -> " + std::to_string(d.num_features()) + " features";
  if (!d.labels.empty()) s += ", " + std::to_string(d.labels.size()) + " labels";
  if (d.squad_report.skipped) s += ", " + std::to_string(d.squad_report.skipped) + " questions skipped";
  return s;
}

void print_warnings(const char* command, const finetune::TaskData& d) {
  const auto& w = d.squad_report.warnings;
  for (size_t i = 0; i < w.size() && i < 5; ++i) std::fprintf(stderr, "unmask %s: warning: %s\n", command, w[i].c_str());
  if (w.size() > 5) std::fprintf(stderr, "unmask %s: warning: ... and %zu more skipped questions\n", command, w.size() - 5);
}

void print_metrics(const finetune::EvalResult& r, const std::string& data_path, const std::string& format) {
  if (format == "json") {
    std::fputs(finetune::metrics_json(r).c_str(), stdout);
    return;
  }
  std::printf("%-12s %s\n", "task", finetune::task_name(r.task));
  std::printf("%-12s %s (%lld examples)\n", "data", data_path.c_str(), (long long)r.examples);
  for (const finetune::Metric& m : r.metrics) std::printf("%-12s %.2f\n", m.name.c_str(), m.value);
}

std::string check_format(const Args& args) {
  const std::string f = args.get("format");
  if (f != "table" && f != "json") throw Error("--format must be table or json, got '", f, "'");
  return f;
}

}  // namespace

int cmd_finetune(int argc, char** argv) {
  const std::vector<OptionSpec> specs = with_data_specs({
      {"task", "squad|classify|tokens", "squad: SQuAD v1.1 JSON; classify: GLUE-style TSV; tokens: CoNLL (label in the last column)", ""},
      {"init-from", "DIR", "Hugging Face model directory to start from (config.json, model.safetensors, vocab.txt)", ""},
      {"data", "FILE", "training data", ""},
      {"val", "FILE", "held-out data, scored after training (metrics also written to OUTPUT/eval_results.json)", ""},
      {"output", "DIR", "where the fine-tuned model is written (HF layout; replaced whole if it exists)", ""},
      {"epochs", "N", "passes over the training features", "2"},
      {"batch", "N", "features per optimizer step (per rank under mpirun / srun)", "8"},
      {"lr", "LR", "peak learning rate (AdamW, linear warmup then linear decay to 0)", "3e-5"},
      {"warmup", "F", "fraction of the steps spent warming up", "0.1"},
      {"weight-decay", "W", "AdamW weight decay (not on biases and LayerNorm weights)", "0.01"},
      {"seed", "N", "seed of the head initialisation, shuffling and dropout", "42"},
      {"max-steps", "N", "stop after N steps (0 = --epochs); the schedule spans them", "0"},
      {"log-every", "N", "steps between loss reports", "50"},
      {"run-dir", "DIR", "the run's checkpoints (model, optimizer, trainer state), metrics.jsonl and loss.svg, kept "
       "beside --output rather than in it (default: OUTPUT-run; a new run replaces it, as it replaces --output)", ""},
      {"checkpoint-every", "N", "write a checkpoint every N steps (0 = only at the end)", "0"},
      {"resume", "", "continue the run in --run-dir from its latest checkpoint (the same options)", ""},
      {"stop-after", "N", "stop after N steps of this invocation with a checkpoint (continue with --resume)", "0"},
      {"hidden-dropout", "P", "dropout on the hidden states and the classifier input (HF hidden_dropout_prob)", "0.1"},
      {"attention-dropout", "P", "dropout on the attention probabilities (HF attention_probs_dropout_prob)", "0.1"},
      {"eval-batch", "N", "features per forward when evaluating --val", "32"},
      {"format", "table|json", "how the dev metrics are printed", "table"},
  });
  auto args = parse_with_config("finetune", "Fine-tunes a BERT model on SQuAD v1.1, a GLUE-style TSV or CoNLL data.",
                                specs, argc, argv, 2, {"resume", "stop-after"});
  if (!args) return 0;
  const TaskKind task = finetune::parse_task(args->require("task"));
  const std::string model_dir = args->require("init-from");
  const std::string train_path = args->require("data");
  const std::string output = args->require("output");
  const std::string format = check_format(*args);
  if (io::paths_overlap(output, model_dir)) {
    std::string base = model_dir;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    throw Error("--output ", output, " and --init-from ", model_dir,
                " are the same directory (or one holds the other): the fine-tuned model would replace the model it "
                "starts from",
                Hint("write it elsewhere, e.g. --output " + base + "-finetuned"));
  }
  finetune::TrainOptions to;
  to.epochs = positive_int(*args, "epochs");
  to.batch = positive_int(*args, "batch");
  to.lr = float(args->get_double("lr"));
  to.warmup = args->get_double("warmup");
  to.weight_decay = float(args->get_double("weight-decay"));
  to.seed = uint64_t(positive_int(*args, "seed", 0));
  to.max_steps = positive_int(*args, "max-steps", 0);
  to.log_every = positive_int(*args, "log-every");
  std::string run_dir = args->get("run-dir");
  if (run_dir.empty()) {
    run_dir = output;
    while (run_dir.size() > 1 && run_dir.back() == '/') run_dir.pop_back();
    run_dir += "-run";
  }
  if (io::paths_overlap(run_dir, output))
    throw Error("--run-dir ", run_dir, " and --output ", output, " overlap: the checkpoints would land in the model directory",
                Hint("keep the run directory beside --output (the default is OUTPUT-run)"));
  to.run_dir = run_dir;
  to.checkpoint_every = positive_int(*args, "checkpoint-every", 0);
  to.stop_after = positive_int(*args, "stop-after", 0);
  Communicator& comm = Communicator::world();
  const bool root = comm.is_root();
  if (args->has("resume")) to.resume = run_dir;
  else if (root)  // a new run replaces the earlier one's state, as it replaces --output
    for (const char* old : {"checkpoints", "metrics.jsonl", "loss.svg"}) std::filesystem::remove_all(run_dir + "/" + old);
  if (comm.size() > 1) comm.barrier("the run directory's reset");
  to.settings = args->values();
  to.hidden_dropout = float(args->get_double("hidden-dropout"));
  to.attention_dropout = float(args->get_double("attention-dropout"));
  for (const char* k : {"output", "run-dir", "val", "threads", "log-every", "checkpoint-every", "resume", "stop-after",
                        "eval-batch", "format", "config", "set", "print-config"})
    to.settings.erase(k);
  const int64_t eval_batch = positive_int(*args, "eval-batch");
  if (!(to.lr > 0)) throw Error("--lr must be positive, got ", args->get("lr"));
  if (!(to.warmup >= 0 && to.warmup <= 1)) throw Error("--warmup must be in [0, 1], got ", args->get("warmup"));
  if (to.weight_decay < 0) throw Error("--weight-decay must be >= 0, got ", args->get("weight-decay"));
  for (const char* k : {"hidden-dropout", "attention-dropout"})
    if (!(args->get_double(k) >= 0 && args->get_double(k) < 1))
      throw Error("--", k, " must be in [0, 1), got ", args->get(k));

  const BertConfig config = read_bert_checkpoint_config(model_dir);
  const finetune::DataOptions dopt = data_options(*args, task, config);
  const text::WordPieceTokenizer tok = load_tokenizer(model_dir, config.vocab_size);
  const finetune::TaskData train = finetune::load_task_data(task, train_path, tok, dopt, true);
  if (root) print_warnings("finetune", train);
  if (root) std::fprintf(stderr, "unmask finetune: train %s: %s\n", train_path.c_str(), describe_data(train).c_str());
  finetune::TaskData dev;
  if (args->has("val")) {  // read before training, so a bad file fails fast
    dev = finetune::load_task_data(task, args->get("val"), tok, dopt, false, train.labels);
    if (root) std::fprintf(stderr, "unmask finetune: val %s: %s\n", args->get("val").c_str(), describe_data(dev).c_str());
  }
  if (root && comm.size() > 1)
    std::fprintf(stderr, "unmask finetune: data parallel over %d ranks, batch %lld per rank\n", comm.size(),
                 (long long)to.batch);

  int threads = int(args->get_int("threads"));
  if (threads == 0 && comm.local_size() > 1)
    threads = std::max(1, int(std::thread::hardware_concurrency()) / comm.local_size());
  Context ctx({.num_threads = threads});
  // Resuming: the weights (head included) of the run's latest checkpoint; else --init-from's encoder.
  const std::string resume_from = to.resume.empty() ? "" : train::resolve_checkpoint(to.resume);
  BertTrainModel model = finetune::load_model_for_task(resume_from.empty() ? model_dir : train::checkpoint_model_dir(resume_from), task, train.labels, to.seed);
  // vocab.txt and tokenizer_config.json (the casing the model was tuned with) go with the model; a
  // model that came with tokenizer.json only gets its vocabulary written out as vocab.txt.
  std::string vocab_file = bert_checkpoint_dir(model_dir) + "/vocab.txt";
  if (!io::file_exists(vocab_file)) {  // written once into the run directory, beside its checkpoints
    vocab_file = run_dir + "/vocab.txt";
    if (root) {  // the model files are rank 0's to write
      std::filesystem::create_directories(run_dir);
      std::string lines;
      for (int32_t i = 0; i < tok.vocab().size(); ++i) lines += tok.vocab().token(i) + "\n";
      io::write_file_atomic(vocab_file, lines);
    }
  }
  const TokenizerSettings tok_settings = text::tokenizer_settings(tok.options());
  auto save_model = [&](const std::string& dir) { model.save_pretrained(dir, vocab_file, tok_settings); };
  to.save_model = save_model;
  to.stop_signal = install_stop_handlers("finetune");
  const finetune::TrainResult tr = finetune::train(ctx, model, train, to, [root](const finetune::StepLog& l) {
    if (root) std::fprintf(stderr, "unmask finetune: step %lld/%lld epoch %lld loss %.4f lr %.3g (%.1f features/s)\n",
                 (long long)l.step, (long long)l.total_steps, (long long)l.epoch + 1, l.loss, l.lr, l.features_per_s);
  });
  if (!root) return tr.run.stopped_by_signal ? 128 + tr.run.stopped_by_signal : 0;  // rank 0 writes and evaluates
  std::fprintf(stderr, "unmask finetune: %s\n", train::summary_line(tr.run, "fine-tuned", "features").c_str());
  if (tr.run.end_step < tr.run.total_steps) {  // stopped (signal or --stop-after): no model, no evaluation yet
    std::fprintf(stderr, "unmask finetune: checkpoint %s; continue with the same command and --resume\n",
                 tr.run.checkpoint.c_str());
    return tr.run.stopped_by_signal ? 128 + tr.run.stopped_by_signal : 0;
  }
  save_model(output);
  std::fprintf(stderr, "unmask finetune: wrote %s (run: %s)\n", output.c_str(), run_dir.c_str());

  if (args->has("val")) {
    const finetune::EvalResult r = finetune::evaluate(ctx, model.to_inference_model(), dev, tok, eval_batch);
    io::write_file_atomic(output + "/eval_results.json", finetune::metrics_json(r));
    io::write_file_atomic(output + "/predictions.json", finetune::predictions_json(r));
    print_metrics(r, args->get("val"), format);
  }
  return 0;
}

namespace {

// eval --task mlm: the shards' stored masks, dropout off, against the unigram baseline.
int eval_mlm(const Args& args) {
  const std::string model_path = args.require("model");
  const std::string format = check_format(args);
  Context ctx({.num_threads = int(args.get_int("threads"))});
  BertHeads heads;
  {
    const BertModel probe = BertModel::load(model_path);
    if (!probe.heads().mlm)
      throw Error("model ", model_path, " has no MLM head (cls.predictions.*): nothing to score masked tokens with",
                  Hint("evaluate a pretraining checkpoint (BertForPreTraining / BertForMaskedLM)"));
    heads = {.pooler = probe.heads().nsp, .mlm = true, .nsp = probe.heads().nsp};
  }
  BertTrainModel model = BertTrainModel::load(model_path, heads, 0);
  const std::vector<std::string> shards = data::list_shards(args.require("data"));
  train::MlmEvalOptions o;
  o.batch = positive_int(args, "batch");
  const text::WordPieceTokenizer tok = load_tokenizer(model_path, model.config().vocab_size);
  const text::Vocab& v = tok.vocab();
  for (int32_t id : {v.cls_id(), v.sep_id(), v.pad_id(), v.mask_id(), v.unk_id()})
    if (id >= 0) o.special_ids.push_back(id);
  const train::MlmEvalResult r = train::evaluate_mlm(ctx, model, shards, o);
  if (format == "json") {
    std::fputs(train::mlm_eval_json(r).c_str(), stdout);
    return 0;
  }
  const std::string top = "'" + v.token(r.unigram_top_id) + "'";
  std::printf("masked LM on %s: %lld sequences, %lld masked tokens (%.1f s)\n", args.get("data").c_str(),
              (long long)r.sequences, (long long)r.masked, r.seconds);
  std::printf("| %-22s | %8s | %9s | %10s |\n", "", "loss", "accuracy", "perplexity");
  std::printf("| %-22s | %8.4f | %8.2f%% | %10.1f |\n", "model", r.loss, 100 * r.accuracy, r.perplexity);
  std::printf("| %-22s | %8.4f | %8.2f%% | %10.1f |\n", ("unigram (always " + top + ")").c_str(), r.unigram_loss,
              100 * r.unigram_accuracy, r.unigram_perplexity);
  if (r.nsp_accuracy >= 0) std::printf("next-sentence accuracy: %.2f%%\n", 100 * r.nsp_accuracy);
  return 0;
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  const std::vector<OptionSpec> specs = with_data_specs({
      {"task", "squad|classify|tokens|mlm", "squad: EM/F1 (official v1.1 rules); classify: accuracy/F1; tokens: entity P/R/F1 (conlleval); mlm: masked-LM loss/accuracy/perplexity on HDF5 shards", ""},
      {"model", "DIR", "fine-tuned Hugging Face model directory with the task's head", ""},
      {"data", "FILE", "evaluation data (SQuAD v1.1 JSON, TSV with a header, or CoNLL)", ""},
      {"predictions", "OUT.json", "write the predictions (squad: {id: answer}; classify: [label]; tokens: [[tag]])", ""},
      {"batch", "N", "features per forward", "32"},
      {"format", "table|json", "output format", "table"},
  });
  auto args = Args::parse("eval",
                          "Evaluates a model: SQuAD EM/F1, classification accuracy/F1, entity P/R/F1; --task mlm: "
                          "held-out masked-LM loss, accuracy and perplexity of a pretrained model on pretraining "
                          "shards (prepare-text), beside the unigram baseline's.",
                          specs, argc, argv, 2);
  if (!args) return 0;
  if (args->require("task") == "mlm") return eval_mlm(*args);
  const TaskKind task = finetune::parse_task(args->require("task"));
  const std::string model_dir = args->require("model");
  const std::string data_path = args->require("data");
  const std::string format = check_format(*args);
  const int64_t batch = positive_int(*args, "batch");

  Context ctx({.num_threads = int(args->get_int("threads"))});
  const BertModel model = BertModel::load(model_dir);
  finetune::require_head(model.heads(), task);
  const finetune::DataOptions dopt = data_options(*args, task, model.config());
  const text::WordPieceTokenizer tok = load_tokenizer(model_dir, model.config().vocab_size);
  const std::vector<std::string> labels = task == TaskKind::squad ? std::vector<std::string>{} : finetune::model_labels(model.config());
  const finetune::TaskData data = finetune::load_task_data(task, data_path, tok, dopt, false, labels);
  const finetune::EvalResult r = finetune::evaluate(ctx, model, data, tok, batch);
  if (args->has("predictions")) io::write_file_atomic(args->get("predictions"), finetune::predictions_json(r));
  print_metrics(r, data_path, format);
  return 0;
}

int cmd_predict(int argc, char** argv) {
  const std::vector<OptionSpec> specs = with_data_specs({
      {"task", "squad|classify|tokens", "the fine-tuned head to run", ""},
      {"model", "DIR", "fine-tuned model with the task's head", ""},
      {"data", "FILE", "unlabelled data: TSV with a header (no label column needed), CoNLL words (one per line), SQuAD JSON without answers", ""},
      {"output", "FILE", "write the predictions there (JSON lines; default: standard output)", ""},
      {"batch", "N", "features per forward", "32"},
      cpu_precision_option(),
  });
  auto args = Args::parse("predict",
                          "Runs a fine-tuned model on unlabelled data and writes one JSON line per example: the class "
                          "(classify), the tag of every word (tokens) or the answer (squad), with probabilities.",
                          specs, argc, argv, 2);
  if (!args) return 0;
  const TaskKind task = finetune::parse_task(args->require("task"));
  const std::string model_dir = args->require("model"), data_path = args->require("data");
  Context ctx({.num_threads = int(args->get_int("threads"))});
  BertModel model = BertModel::load(model_dir);
  apply_cpu_precision(*args, ctx, model);
  finetune::require_head(model.heads(), task);
  const finetune::DataOptions dopt = data_options(*args, task, model.config());
  const text::WordPieceTokenizer tok = load_tokenizer(model_dir, model.config().vocab_size);
  const std::vector<std::string> labels =
      task == TaskKind::squad ? std::vector<std::string>{} : finetune::model_labels(model.config());
  const finetune::TaskData data = finetune::load_unlabelled_data(task, data_path, tok, dopt, labels);
  const std::string lines = finetune::predict_jsonl(ctx, model, data, tok, positive_int(*args, "batch"));
  if (args->has("output")) {
    io::write_file_atomic(args->get("output"), lines);
    std::fprintf(stderr, "unmask predict: %zu predictions -> %s\n", data.num_examples(), args->get("output").c_str());
  } else {
    std::fputs(lines.c_str(), stdout);
  }
  return 0;
}

}  // namespace unmask::cli
