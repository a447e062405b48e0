// models/bert/finetune_batch.h: features -> padded TaskBatch (include/unmask/train.h) for the three tasks.
//
//   std::vector<size_t> rows = {4, 9, 2};                       // feature indexes of one batch
//   TaskBatch b = finetune::qa_batch(features, rows, /*with_labels=*/true);
//   // b.input_ids [3, T] with T = the longest of the three; pad id 0, attention_mask 0 on padding
//
// Batches are padded to their longest sequence (not to max_seq): the attention mask keeps
// padding out of every real position, so the outputs on real tokens do not depend on it.
#pragma once
#include <cstddef>
#include <vector>

#include "data/text/conll.h"
#include "data/text/glue.h"
#include "data/text/squad.h"
#include "unmask/train.h"

namespace unmask::finetune {

/// input_ids, token_type_ids, attention_mask [B, T]; start/end_positions [B] when with_labels.
TaskBatch qa_batch(const std::vector<SquadFeature>& features, const std::vector<size_t>& rows, bool with_labels);
/// labels [B] when with_labels (a feature without a label gets -100, ignored).
TaskBatch classify_batch(const std::vector<ClassifyFeature>& features, const std::vector<size_t>& rows, bool with_labels);
/// labels [B, T] (kIgnoreLabel on non-first pieces, specials and padding) when with_labels.
TaskBatch tokens_batch(const std::vector<ConllFeature>& features, const std::vector<size_t>& rows, bool with_labels);

/// Row b of a [B, T, ...] f32 tensor's first `n` rows of `inner` values each, as a vector
/// (n * inner floats), e.g. the token-classification logits of one feature. `column` picks one
/// value of the last dimension when >= 0 (qa logits [B, T, 2]: 0 = start, 1 = end).
std::vector<float> batch_row(const Tensor& logits, int64_t b, int64_t n, int64_t column = -1);

}  // namespace unmask::finetune
