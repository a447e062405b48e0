// models/bert/weights.h: the parameters of a BERT model as f32 tensors.
//
// Linear weights keep HF's [out, in] layout (y = x W^T + b). q, k and v are fused into one
// [3C, C] matrix so each layer runs one QKV GEMM (N = 3C) instead of three.
//
// Packed weights (ops::pack_weight): on the first CPU forward, bert_pack_weights packs every
// encoder Linear weight plus the pooler and MLM transform weights once (the *_p fields), and the
// forward then uses ops::gemm_packed for them. The unpacked copies are let go to keep resident
// memory near the checkpoint size: file-mapped tensors keep their Tensor (shape, and a way back
// to the bytes) but their pages are released (re-read from the file only if touched again, which
// the forward no longer does); owned copies (the fused QKV matrix, converted f16/bf16 tensors,
// random weights) are dropped (undefined Tensor). The MLM decoder stays unpacked: it is tied to
// the word embeddings, which the embedding lookup keeps reading.
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "io/safetensors.h"
#include "ops/ops.h"
#include "unmask/bert.h"

namespace unmask {

struct BertLayerWeights {
  Tensor qkv_w, qkv_b;            // [3C, C], [3C]   (q rows, then k, then v)
  Tensor attn_out_w, attn_out_b;  // [C, C], [C]
  Tensor ln1_g, ln1_b;            // [C]             attention.output.LayerNorm
  Tensor ffn_in_w, ffn_in_b;      // [I, C], [I]     intermediate.dense
  Tensor ffn_out_w, ffn_out_b;    // [C, I], [C]     output.dense
  Tensor ln2_g, ln2_b;            // [C]             output.LayerNorm
  // Packed by bert_pack_weights (undefined before, or on a device without a packed GEMM).
  ops::PackedWeight qkv_p, attn_out_p, ffn_in_p, ffn_out_p;
};

struct BertGraphCache;  // bert.cc: CUDA graphs of the forward, per batch shape

struct BertWeights {
  BertConfig config;
  BertHeads heads;
  DType dtype = DType::f32;  // of every tensor below (bf16 / f16: converted by BertModel::to on CUDA)
  /// CPU: the products of the packed Linear layers (bf16: weights packed as bf16, activations f32
  /// between ops and rounded to bf16 as each GEMM reads them; BertModel::to(ctx, bf16) on the CPU).
  DType cpu_gemm = DType::f32;
  Tensor word_emb;   // [V, C]
  Tensor pos_emb;    // [P, C]
  Tensor type_emb;   // [type_vocab, C]
  Tensor emb_ln_g, emb_ln_b;  // [C]
  std::vector<BertLayerWeights> layers;
  Tensor pooler_w, pooler_b;              // [C, C], [C]
  Tensor mlm_dense_w, mlm_dense_b;        // [C, C], [C]  cls.predictions.transform.dense
  Tensor mlm_ln_g, mlm_ln_b;              // [C]
  Tensor mlm_decoder_w;                   // [V, C] (tied: the word embeddings)
  Tensor mlm_bias;                        // [V]    cls.predictions.bias
  Tensor nsp_w, nsp_b;                    // [2, C], [2]
  Tensor qa_w, qa_b;                      // [2, C], [2]
  Tensor cls_w, cls_b;                    // [num_labels, C], [num_labels]
  std::vector<io::SafeTensorsFile> files; // keeps the mappings alive
  ops::PackedWeight pooler_p, mlm_dense_p; // packed by bert_pack_weights
  std::once_flag packed_once;              // bert_pack_weights runs once
  std::shared_ptr<BertGraphCache> graphs;  // ForwardOptions::cuda_graph (CUDA builds), guarded by:
  std::mutex graphs_mutex;                 // creation / reset of `graphs` (forward is const and may be concurrent)
};

/// Packs the Linear weights for ctx's CPU GEMM (once per BertWeights; later calls return at
/// once) and lets go of the unpacked copies (see the file comment). Thread-safe.
void bert_pack_weights(Context& ctx, BertWeights& w);

/// Builds weights from opened safetensors files; validates names and shapes (one Error
/// listing every missing, unexpected and mis-shaped tensor).
std::unique_ptr<BertWeights> bert_weights_from_files(const BertConfig& config,
                                                     std::vector<io::SafeTensorsFile> files,
                                                     const std::string& origin);

/// Random normal(0, 0.02) weights, LayerNorm gamma 1 / beta 0, biases 0.
std::unique_ptr<BertWeights> bert_weights_random(const BertConfig& config, const BertHeads& heads,
                                                 uint64_t seed);

}  // namespace unmask
