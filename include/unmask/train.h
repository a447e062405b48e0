// unmask/train.h: training BERT on the op front-ends (CPU, or CUDA after model.to(cuda_ctx)).
//
// Usage (one optimizer step of gradient accumulation over two micro-batches):
//   unmask::Context ctx({.num_threads = 2});
//   auto model = unmask::BertTrainModel::load("bert-tiny/");           // HF dir, owned f32 copy
//   unmask::OptimizerConfig oc;  oc.kind = unmask::OptimizerKind::lamb;  oc.lr = 6e-3f;
//   unmask::Optimizer opt(oc, model.params());
//   model.zero_grad();
//   for (const PretrainBatch& mb : micro_batches) {
//     TrainStepOptions o{.loss_scale = 0.5f, .seed = 42, .step = opt.step_count(), .micro = i};
//     PretrainStats s = model.pretrain_step(ctx, mb, o);                // forward + backward
//   }
//   opt.step(ctx, oc.lr * float(unmask::lr_multiplier(schedule, opt.step_count())));
//   model.save_pretrained("run/checkpoints/step-1", "vocab.txt");
//
// Gradients accumulate in Param::grad until zero_grad(). Dropout is counter-based: the mask of
// every dropout site is a pure function of (seed, step, micro, site), so a resumed run draws the
// same masks as an uninterrupted one.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "unmask/bert.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask {

/// One parameter tensor under its Hugging Face name, with its gradient.
struct Param {
  std::string name;          // HF name, e.g. "bert.encoder.layer.0.attention.self.query.weight"
  Tensor value;              // f32, contiguous (may be a row-slice view of a fused buffer)
  Tensor grad;               // f32, same shape; accumulated by backward passes
  bool weight_decay = true;  // false for biases and LayerNorm weights (DLE's no_decay list)
  float lr_scale = 1.0f;     // multiplies the step's lr for this param (layer-wise lr decay)
};

/// A pretraining micro-batch in DLE's padded layout (what the HDF5 shards hold), all i32.
/// Real tokens come first in every row (input_mask 1...1 0...0).
struct PretrainBatch {
  Tensor input_ids;             // [B, T]
  Tensor segment_ids;           // [B, T]
  Tensor input_mask;            // [B, T]
  Tensor masked_lm_positions;   // [B, P], padded with 0 (position 0 is [CLS], never masked)
  Tensor masked_lm_ids;         // [B, P], padded with 0
  Tensor next_sentence_labels;  // [B]: 1 = B is a random sentence
};

struct TrainStepOptions {
  float loss_scale = 1.0f;       // gradients are of loss_scale * loss (1/accumulation steps)
  float hidden_dropout = 0.1f;   // config hidden_dropout_prob (0 = off)
  float attention_dropout = 0.1f;// config attention_probs_dropout_prob
  uint64_t seed = 0;             // dropout seed of the run
  int64_t step = 0;              // optimizer step (dropout counter)
  int64_t micro = 0;             // micro-batch within the step (dropout counter)
  bool backward = true;          // false: forward and loss only (evaluation)
  /// The encoder layers' activations: f32, or bf16 (saved activations, their gradients and the
  /// layer GEMMs in bf16 with fp32 accumulation; bf16 copies of the layer weights rounded from
  /// the fp32 master weights at the start of every forward, i.e. each micro-batch, unless
  /// reuse_weight_copies below; LayerNorm
  /// statistics, parameter gradients, embeddings and heads stay f32). bf16 halves the activation memory and traffic.
  /// On CUDA it needs head size 64, 80, 88 or 128; on the CPU it is emulated (f32 arithmetic,
  /// rounded on every store: for checking, not speed).
  DType activations = DType::f32;
  /// bf16 activations: take the bf16 weight copies the previous forward of this model rounded
  /// instead of rounding the fp32 masters again (one pass over the layer weights: ~0.7 ms a
  /// micro-batch for BERT-large on an H200). Only for micro-batches after the first of one
  /// optimizer step, whose weights cannot have changed: it is honoured when micro > 0 and the
  /// copies were made for this same `step` (and seed) since the last zero_grad(), and ignored
  /// (the copies are remade) otherwise. The trainer and `bench train --accumulate` set it on
  /// every micro-batch.
  bool reuse_weight_copies = false;
  /// Data parallelism: divide the summed MLM / NSP losses by these counts instead of the
  /// micro-batch's own (0 = own). Ranks holding slices of one batch pass the batch's global counts
  /// (pretrain_counts summed over ranks), so the SUM of their gradients is the gradient of the
  /// whole batch's loss.
  int64_t mlm_normalizer = 0, nsp_normalizer = 0;
  /// The same for task_step's heads (task_counts summed over ranks): [0] the labels (seqcls: rows,
  /// tokcls: tokens) or qa's valid start positions, [1] qa's valid end positions. With them the
  /// returned loss is this slice's share of the global batch's mean loss.
  int64_t task_normalizer[2] = {0, 0};
  /// Called during the backward pass as the gradients of params()[first, end) become final for
  /// this micro-batch: the heads, then each encoder layer from the last, then the embeddings
  /// (the tied word embedding last). Data parallelism starts each bucket's all-reduce from here
  /// on the last micro-batch, overlapping it with the rest of the backward.
  std::function<void(int64_t first, int64_t end)> grads_ready;
};

/// What pretrain_step normalises by, counted from a batch without running it: masked positions
/// (each row's masked_lm_positions up to the first 0) and NSP labels >= 0.
struct PretrainCounts {
  int64_t masked = 0, nsp = 0;
};
PretrainCounts pretrain_counts(const PretrainBatch& batch);

/// What one pretrain_step measured (sums, so micro-batches add up).
struct PretrainStats {
  double loss = 0;             // mean MLM loss + mean NSP loss of this micro-batch
  double mlm_loss_sum = 0;     // over masked positions
  int64_t mlm_count = 0, mlm_correct = 0;
  double nsp_loss_sum = 0;
  int64_t nsp_count = 0, nsp_correct = 0;
  int64_t sequences = 0, tokens = 0;  // real tokens (input_mask 1)
};

/// Fine-tuning tasks (heads on top of the encoder).
enum class Task : uint8_t { qa, seqcls, tokcls };

/// A fine-tuning / evaluation batch, padded, i32.
struct TaskBatch {
  Tensor input_ids, token_type_ids, attention_mask;  // [B, T]
  Tensor start_positions, end_positions;             // qa: [B]  (undefined when evaluating)
  Tensor labels;  // seqcls: [B]; tokcls: [B, T], negative = ignored (HF's -100)
};

/// What task_step normalises by, counted from a batch without running it: [0] labels >= 0
/// (seqcls: one per row; tokcls: one per real token) or qa's start positions inside their
/// sequence, [1] qa's end positions inside their sequence.
struct TaskCounts {
  int64_t counts[2] = {0, 0};
};
TaskCounts task_counts(const TaskBatch& batch, Task task);

struct TaskResult {
  double loss = 0;       // mean loss of the batch (0 without labels)
  int64_t count = 0, correct = 0;
  Tensor logits;         // seqcls [B, L]; tokcls [B, T, L]; qa: [B, T, 2] (start, end)
};

/// A BERT with owned, trainable f32 parameters and their gradients.
class BertTrainModel {
 public:
  /// From an HF directory (config.json + safetensors). Heads absent from the checkpoint are
  /// created (normal(0, 0.02) weights, zero bias, seeded by `seed`) when `heads` asks for them.
  static BertTrainModel load(const std::string& dir, const BertHeads& heads, uint64_t seed);
  static BertTrainModel random(const BertConfig& config, const BertHeads& heads, uint64_t seed);

  BertTrainModel(BertTrainModel&&) noexcept;
  BertTrainModel& operator=(BertTrainModel&&) noexcept;
  ~BertTrainModel();

  const BertConfig& config() const;
  const BertHeads& heads() const;
  /// Every parameter once (the tied MLM decoder is the word embedding), in a fixed order.
  std::vector<Param>& params();
  /// Zeroes every gradient. With a context, queued on its stream as a few multi-tensor launches
  /// (ops::zero_many); without one, a cudaMemset per tensor on the legacy default stream.
  void zero_grad();
  void zero_grad(Context& ctx);

  /// Where the parameters live (load/random create them on the CPU).
  Device device() const;
  /// Moves the parameters and gradients to ctx.device() (e.g. a Context({.device =
  /// Device::cuda})); a no-op when they are there. The Param tensors are replaced, so build the
  /// Optimizer after this call. pretrain_step/task_step then need a context on that device;
  /// batches stay host tensors. save_pretrained and to_inference_model copy to the host.
  void to(Context& ctx);

  /// Forward + backward (unless options.backward is false) of loss = mean MLM cross-entropy over
  /// the masked positions + mean NSP cross-entropy. The MLM head runs on the masked rows only.
  PretrainStats pretrain_step(Context& ctx, const PretrainBatch& batch, const TrainStepOptions& options);
  /// Forward (+ backward) for a fine-tuning head.
  TaskResult task_step(Context& ctx, const TaskBatch& batch, Task task, const TrainStepOptions& options);

  /// Writes an HF directory: config.json, model.safetensors (HF names, unfused q/k/v), and
  /// vocab.txt copied from `vocab_path` with tokenizer_config.json (`tokenizer`) and
  /// special_tokens_map.json beside it (all three skipped when vocab_path is empty). Atomic: a
  /// temporary directory renamed into place, so an existing `dir` is replaced whole or not at all.
  void save_pretrained(const std::string& dir, const std::string& vocab_path,
                       const TokenizerSettings& tokenizer = {}) const;
  /// Copies the parameters into an inference model (for evaluation with BertModel::forward).
  BertModel to_inference_model() const;

  struct Impl;
 private:
  explicit BertTrainModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- optimizers and learning-rate schedules ------------------------------------------------

enum class OptimizerKind : uint8_t { adamw, lamb };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::lamb;
  float lr = 1e-3f;            // base learning rate (the schedule multiplies it)
  float beta1 = 0.9f, beta2 = 0.999f;
  float eps = 1e-6f;
  float weight_decay = 0.01f;  // applied to params with Param::weight_decay only
  float max_grad_norm = 1.0f;  // global-norm clipping before the update; <= 0 disables
};

/// The state of an optimizer as named tensors (for checkpoints): for every param P
/// "P.exp_avg" and "P.exp_avg_sq", plus the step count.
struct OptimizerState {
  int64_t step = 0;
  std::vector<std::pair<std::string, Tensor>> tensors;
};

struct OptimizerStepStats {
  double grad_norm = 0;   // global L2 norm of the gradients (after grad_scale, before clipping)
  double clip_factor = 1; // factor the gradients were multiplied by (1 = not clipped)
};

class Optimizer {
 public:
  /// Keeps a reference to `params` (their value/grad tensors must outlive the optimizer).
  Optimizer(const OptimizerConfig& config, std::vector<Param>& params);
  /// One update from the accumulated gradients (each multiplied by grad_scale first, e.g. for
  /// averaging). AdamW: torch.optim.AdamW. LAMB: apex FusedLAMB as DLE uses it (bias correction,
  /// adam_w_mode, grad averaging, global-norm clip to max_grad_norm, trust ratio
  /// ||p|| / ||u|| only for params with weight decay, 1 when either norm is 0).
  OptimizerStepStats step(Context& ctx, float lr, float grad_scale = 1.0f);
  int64_t step_count() const;
  const OptimizerConfig& config() const;
  OptimizerState state() const;                // tensors are copies
  void load_state(const OptimizerState& state); // throws naming a missing / mis-shaped tensor

 private:
  OptimizerConfig config_;
  std::vector<Param>* params_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // per param, its shape and device
  int64_t step_ = 0;
};

/// Learning-rate schedules (multiplying the optimizer's base lr). `step` is the 0-based index of
/// the update about to be taken (opt.step_count() before opt.step()); each kind reproduces its
/// reference's sequence of learning rates from that index.
///   poly:     DLE PolyWarmUpScheduler: p = (step+1)/total (DLE counts updates from 1);
///             p < warmup: p/warmup; else (1-p)^degree, 0 past the end
///   cosine:   linear warmup over warmup*total steps, then m + (1 - m) 0.5 (1 + cos(pi * progress)),
///             m = min_ratio
///   linear:   linear warmup, then linear decay to 0 (HF get_linear_schedule_with_warmup)
///   constant: 1 (after linear warmup)
struct ScheduleConfig {
  enum class Kind : uint8_t { poly, cosine, linear, constant } kind = Kind::poly;
  double warmup = 0.01;       // fraction of total_steps
  int64_t total_steps = 1;
  double degree = 0.5;        // poly
  double min_ratio = 0.0;     // cosine: decays to min_ratio instead of 0 (VideoMAE's min_lr / lr)
};
double lr_multiplier(const ScheduleConfig& schedule, int64_t step);

// ---- cost model -----------------------------------------------------------------------------

/// Analytic FLOPs of one training step (forward + backward = 3x forward matmul FLOPs; multiply-
/// add = 2 FLOPs) for a batch with the given sequence lengths and number of masked positions:
/// encoder GEMMs, attention scores and context, the pooler + NSP head and the MLM head on the
/// masked rows. Elementwise ops are not counted (as in MFU conventions).
double bert_train_flops(const BertConfig& config, const std::vector<int64_t>& seq_lens,
                        int64_t masked_positions);

}  // namespace unmask
