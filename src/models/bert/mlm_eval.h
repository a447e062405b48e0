// models/bert/mlm_eval.h: held-out masked-LM quality of a pretrained BERT, beside a unigram baseline.
//
//   MlmEvalResult r = train::evaluate_mlm(ctx, model, data::list_shards("heldout"), {.batch = 16});
//
// The shards' stored masks are scored (prepare-text's static masking: the same positions for
// every model, so two checkpoints compare on equal terms), with dropout off. The baseline knows
// only token frequencies: it predicts every masked token from the unigram distribution of the
// shards' own real tokens (add-one smoothed over the vocabulary), so its accuracy is the share
// of the most frequent token and its loss the unigram cross-entropy. A model that learned
// nothing beyond word frequencies lands there; one that uses context lands below its loss.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "unmask/context.h"
#include "unmask/train.h"

namespace unmask::train {

struct MlmEvalOptions {
  int64_t batch = 16;
  int64_t max_sequences = 0;  // 0 = every instance of the shards
  std::vector<int32_t> special_ids;  // [CLS], [SEP], [PAD], ...: not words, left out of the baseline's counts
};

struct MlmEvalResult {
  int64_t sequences = 0, masked = 0;
  double loss = 0, accuracy = 0, perplexity = 0;           // the model, over masked positions
  double nsp_accuracy = -1;                                // -1 when the model has no NSP head
  double unigram_loss = 0, unigram_accuracy = 0, unigram_perplexity = 0;
  int32_t unigram_top_id = -1;
  double seconds = 0;
};

MlmEvalResult evaluate_mlm(Context& ctx, BertTrainModel& model, const std::vector<std::string>& shards,
                           const MlmEvalOptions& options = {});

/// {"sequences": ..., "masked": ..., "mlm_loss": ..., ...}
std::string mlm_eval_json(const MlmEvalResult& r);

}  // namespace unmask::train
