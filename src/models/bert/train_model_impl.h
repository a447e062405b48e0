// models/bert/train_model_impl.h: the state behind BertTrainModel (shared by bert_train.cc, which builds,
// loads and saves it, and bert_train_step.cc, which runs the forward and backward passes).
#pragma once
#include <cstdint>
#include <vector>

#include "nn/layers.h"
#include "unmask/train.h"

namespace unmask {

struct BertTrainModel::Impl {
  BertConfig config;
  BertHeads heads;  // resolved: pooler is set whenever nsp or seqcls is

  // ---- parameters (owned f32 values + gradients) ----
  train::EmbeddingParams emb;                  // emb.word is also the MLM decoder (tied)
  std::vector<train::EncoderLayerParams> layers;
  train::PV pooler_w, pooler_b;                // [C, C], [C]
  train::PV mlm_dense_w, mlm_dense_b;          // [C, C], [C]  cls.predictions.transform.dense
  train::PV mlm_ln_g, mlm_ln_b;                // [C]
  train::PV mlm_bias;                          // [V]          cls.predictions.bias
  train::PV nsp_w, nsp_b;                      // [2, C], [2]
  train::PV qa_w, qa_b;                        // [2, C], [2]
  train::PV cls_w, cls_b;                      // [num_labels, C], [num_labels]
  /// HF-named views of the above, in HF state-dict order (built once by build_params).
  std::vector<Param> params;
  // params index ranges (build_params): the embeddings are [0, layer_first[0]), layer l is
  // [layer_first[l], layer_first[l + 1]), the heads [layer_first[L], params.size()).
  std::vector<int64_t> layer_first;

  // ---- per-step state: activations saved by the forward for the backward ----
  train::Workspace ws;
  int next_slot = 0;  // reset at the start of every step; each request takes the next slot
  train::EmbeddingSaved emb_saved;
  std::vector<train::LayerSaved> saved;  // one per layer
  train::LayerScratch scratch;
  /// The dropout key (seed and step, DropoutPlan::key) the layers' bf16 weight copies were last
  /// rounded for; weight_copies_made false until the first rounding and after anything that
  /// replaces the masters (to(), loading). TrainStepOptions::reuse_weight_copies checks both.
  uint64_t weight_copies_key = 0;
  bool weight_copies_made = false;

  /// A fresh workspace view for this step (see Workspace: one slot per request).
  Tensor take(const Shape& shape, DType dtype = DType::f32) { return ws.get(next_slot++, shape, dtype); }

  /// Every PV holding storage (fused tensors once), for zero_grad.
  std::vector<train::PV*> storages();
  /// Builds `params` from the PVs (HF names; q/k/v as row slices of the fused QKV storage).
  void build_params();
};

}  // namespace unmask
