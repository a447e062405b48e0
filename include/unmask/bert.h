// unmask/bert.h: BERT encoders from Hugging Face model directories, on CPU or CUDA (f32, bf16, f16).
//
// Usage:
//   unmask::Context ctx({.num_threads = 2});
//   auto model = unmask::BertModel::load("bert-base-uncased/");   // config.json + model.safetensors
//   unmask::BertInput in;                                        // packed: no compute on padding
//   in.input_ids = ...;        // i32 [N]: all sequences back to back
//   in.cu_seqlens = ...;       // i32 [B+1]: sequence b is rows cu[b]..cu[b+1]-1
//   unmask::BertOutputs out = model.forward(ctx, in);
//   out.last_hidden_state;     // f32 [N, C]
//
// Weights stored as F32 are used in place from the memory-mapped file; F16/BF16 are widened
// to f32 once at load. Parameter names are HF's (`bert.encoder.layer.0...`), also accepted:
// a bare BertModel saved without the `bert.` prefix and legacy `LayerNorm.gamma/beta`.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask {

/// Activation of the feed-forward block (config "hidden_act").
enum class HiddenAct : uint8_t { gelu, gelu_tanh };

/// The tokenizer settings a model directory carries in tokenizer_config.json (the keys of HF's
/// BertTokenizer). Every checkpoint unmask writes holds them, so a cased model stays cased.
struct TokenizerSettings {
  bool do_lower_case = true;
  std::optional<bool> strip_accents;  // nullopt = follow do_lower_case (HF's strip_accents=None)
  bool tokenize_chinese_chars = true;
};

/// Hugging Face BertConfig fields unmask uses. Dimension names: C hidden, L layers, NH heads,
/// I intermediate, V vocabulary, P positions.
struct BertConfig {
  int64_t vocab_size = 30522;          // V
  int64_t hidden_size = 768;           // C
  int64_t num_hidden_layers = 12;      // L
  int64_t num_attention_heads = 12;    // NH
  int64_t intermediate_size = 3072;    // I
  int64_t max_position_embeddings = 512;  // P
  int64_t type_vocab_size = 2;
  int64_t pad_token_id = 0;
  int64_t num_labels = 2;              // classification heads
  double layer_norm_eps = 1e-12;
  HiddenAct hidden_act = HiddenAct::gelu;
  std::vector<std::string> architectures;
  std::vector<std::string> id2label;

  /// Reads config.json; missing required keys or absurd values throw an Error naming the
  /// file and key.
  static BertConfig from_json_file(const std::string& path);
  static BertConfig from_json_string(const std::string& json, const std::string& origin);
  /// Throws if sizes are non-positive, too large, or heads do not divide the hidden size.
  void validate(const std::string& origin) const;
  std::string to_json() const;

  static BertConfig base();   // bert-base-uncased
  static BertConfig large();  // bert-large-uncased
};

/// Which heads the checkpoint has (all may be absent: a bare BertModel without pooler).
struct BertHeads {
  bool pooler = false;
  bool mlm = false;     // cls.predictions.* (decoder tied to word embeddings, separate bias)
  bool nsp = false;     // cls.seq_relationship.*
  bool qa = false;      // qa_outputs.*      [2, C]
  bool seqcls = false;  // classifier.* on the pooled output  [num_labels, C]
  bool tokcls = false;  // classifier.* on every token        [num_labels, C]
};

/// One batch. Either packed (cu_seqlens given; input_ids [N]) or padded (input_ids [B, T],
/// optional attention_mask [B, T], 1 = real token). ids may be i32 or i64.
struct BertInput {
  Tensor input_ids;
  Tensor token_type_ids;   // same shape as input_ids; undefined = all zeros
  Tensor cu_seqlens;       // i32 [B+1]: packed mode
  Tensor attention_mask;   // [B, T]: padded mode, optional
};

/// What to compute beyond the encoder.
struct ForwardOptions {
  bool pooler = true;
  bool mlm = true;
  bool nsp = true;
  bool qa = true;
  bool classifier = true;
  bool embeddings = true;  // false: input_ids ignored, `hidden_in` [N, C] is the encoder input
  const Tensor* hidden_in = nullptr;
  /// Pack the Linear weights for the CPU GEMM on this call if not done yet (a one-time cost of
  /// a few forwards' worth; worth it for repeated calls, not for a single one-shot forward).
  bool pack_weights = true;
  /// CUDA: run the forward as a CUDA graph, one per batch shape (padded or packed, B, longest
  /// sequence, N, mask, the options above), captured on the first call of that shape and
  /// replayed on later ones: one launch instead of ~100. Inputs are copied into the graph's
  /// buffers and outputs out of them, so results never alias a later call's. Each graph holds
  /// its activations' memory until clear_cuda_graphs() or the model's end. Ignored on the CPU.
  bool cuda_graph = false;
};

/// Outputs in the input's layout: packed rows [N, ...] or padded [B, T, ...]. Tensors for
/// heads the model lacks (or that were not requested) are undefined.
struct BertOutputs {
  Tensor last_hidden_state;  // [N, C] | [B, T, C]
  Tensor pooler_output;      // [B, C]
  Tensor mlm_logits;         // [N, V] | [B, T, V]
  Tensor nsp_logits;         // [B, 2]
  Tensor qa_start_logits;    // [N] | [B, T]
  Tensor qa_end_logits;      // [N] | [B, T]
  Tensor seqcls_logits;      // [B, num_labels]
  Tensor tokcls_logits;      // [N, num_labels] | [B, T, num_labels]

  /// Every field above, in order (for code that treats all outputs alike).
  std::array<Tensor*, 8> tensors() {
    return {&last_hidden_state, &pooler_output, &mlm_logits,    &nsp_logits,
            &qa_start_logits,   &qa_end_logits, &seqcls_logits, &tokcls_logits};
  }
};

struct BertWeights;  // src/models/bert/weights.h

class BertModel {
 public:
  /// Loads config.json and model.safetensors (or a sharded index) from `dir`. Missing,
  /// unexpected or mis-shaped tensors give one Error listing all of them.
  static BertModel load(const std::string& dir);
  /// Random weights (normal(0, 0.02); LayerNorm 1/0) for benchmarks, with the given heads.
  static BertModel random(const BertConfig& config, const BertHeads& heads, uint64_t seed);

  BertModel(BertModel&&) noexcept;
  BertModel& operator=(BertModel&&) noexcept;
  ~BertModel();

  const BertConfig& config() const;
  const BertHeads& heads() const;
  /// Overrides the feed-forward activation (bench --activation fast_gelu).
  void set_hidden_act(HiddenAct act);
  /// Bytes of parameters (as f32 in memory).
  int64_t parameter_bytes() const;
  int64_t num_parameters() const;

  /// Runs on ctx's device: the weights must be there (to()). Inputs may be host tensors; the
  /// outputs are on ctx's device.
  BertOutputs forward(Context& ctx, const BertInput& input, const ForwardOptions& options = {}) const;
  /// Moves every weight to ctx's device (a no-op when they are there). Call it before the first
  /// CPU forward if the model is to move: that forward packs the CPU weights and lets go of the
  /// unpacked copies (an Error then says so).
  void to(Context& ctx);
  /// The same, converting every weight to `dtype` on the way: bf16 or f16 for inference on
  /// CUDA (activations then have that dtype too; the kernels compute in fp32 inside and round
  /// once per op, as PyTorch's model.to(torch.bfloat16)). f32 keeps the weights as they are.
  /// bf16 on the CPU (one with a bf16 matrix unit, ops::cpu_bf16_unit): the Linear layers'
  /// weights are packed as bf16 at the first forward and their inputs rounded to bf16, products
  /// accumulated in fp32 (as PyTorch's CPU autocast); everything else and the outputs stay f32.
  /// The weights must still be f32 (a model converted once cannot change dtype again).
  void to(Context& ctx, DType dtype);
  Device device() const;
  /// Element type of the weights and of the forward's outputs.
  DType dtype() const;
  /// CUDA graphs held (ForwardOptions::cuda_graph), and a way to let go of them and their memory.
  size_t num_cuda_graphs() const;
  void clear_cuda_graphs();

 private:
  friend class BertTrainModel;  // to_inference_model() builds one from its parameters
  explicit BertModel(std::unique_ptr<BertWeights> w);
  std::unique_ptr<BertWeights> w_;
};

}  // namespace unmask
