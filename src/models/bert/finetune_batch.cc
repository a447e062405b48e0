// models/bert/finetune_batch.cc: padding features into TaskBatch tensors (see batch.h).
#include "models/bert/finetune_batch.h"

#include <algorithm>

#include "unmask/error.h"

namespace unmask::finetune {
namespace {

// The common [B, T] tensors: ids (pad 0), segments (pad 0), mask (1 on real tokens).
template <typename Feature, typename Segments>
TaskBatch padded_inputs(const std::vector<Feature>& features, const std::vector<size_t>& rows, Segments segments_of) {
  if (rows.empty()) throw Error("batch: no rows");
  size_t T = 0;
  for (size_t r : rows) {
    if (r >= features.size()) throw Error("batch: row ", r, " of ", features.size(), " features");
    T = std::max(T, features[r].input_ids.size());
  }
  const int64_t B = int64_t(rows.size());
  TaskBatch b;
  b.input_ids = Tensor::zeros({B, int64_t(T)}, DType::i32);
  b.token_type_ids = Tensor::zeros({B, int64_t(T)}, DType::i32);
  b.attention_mask = Tensor::zeros({B, int64_t(T)}, DType::i32);
  int32_t* ids = b.input_ids.data<int32_t>();
  int32_t* seg = b.token_type_ids.data<int32_t>();
  int32_t* mask = b.attention_mask.data<int32_t>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Feature& f = features[rows[i]];
    const std::vector<int32_t>* segments = segments_of(f);
    for (size_t t = 0; t < f.input_ids.size(); ++t) {
      ids[i * T + t] = f.input_ids[t];
      seg[i * T + t] = segments ? (*segments)[t] : 0;
      mask[i * T + t] = 1;
    }
  }
  return b;
}

}  // namespace

TaskBatch qa_batch(const std::vector<SquadFeature>& features, const std::vector<size_t>& rows, bool with_labels) {
  TaskBatch b = padded_inputs(features, rows, [](const SquadFeature& f) { return &f.segment_ids; });
  if (with_labels) {
    const int64_t B = int64_t(rows.size());
    b.start_positions = Tensor::empty({B}, DType::i32);
    b.end_positions = Tensor::empty({B}, DType::i32);
    for (size_t i = 0; i < rows.size(); ++i) {
      b.start_positions.data<int32_t>()[i] = int32_t(features[rows[i]].start_position);
      b.end_positions.data<int32_t>()[i] = int32_t(features[rows[i]].end_position);
    }
  }
  return b;
}

TaskBatch classify_batch(const std::vector<ClassifyFeature>& features, const std::vector<size_t>& rows,
                         bool with_labels) {
  TaskBatch b = padded_inputs(features, rows, [](const ClassifyFeature& f) { return &f.segment_ids; });
  if (with_labels) {
    b.labels = Tensor::empty({int64_t(rows.size())}, DType::i32);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int32_t label = features[rows[i]].label;
      b.labels.data<int32_t>()[i] = label < 0 ? kIgnoreLabel : label;
    }
  }
  return b;
}

TaskBatch tokens_batch(const std::vector<ConllFeature>& features, const std::vector<size_t>& rows, bool with_labels) {
  TaskBatch b = padded_inputs(features, rows, [](const ConllFeature&) { return static_cast<const std::vector<int32_t>*>(nullptr); });
  if (with_labels) {
    const int64_t B = b.input_ids.size(0), T = b.input_ids.size(1);
    b.labels = Tensor::empty({B, T}, DType::i32);
    int32_t* labels = b.labels.data<int32_t>();
    std::fill(labels, labels + B * T, kIgnoreLabel);
    for (size_t i = 0; i < rows.size(); ++i) {
      const ConllFeature& f = features[rows[i]];
      std::copy(f.labels.begin(), f.labels.end(), labels + int64_t(i) * T);
    }
  }
  return b;
}

std::vector<float> batch_row(const Tensor& logits, int64_t b, int64_t n, int64_t column) {
  if (!logits.defined() || logits.dtype() != DType::f32 || logits.ndim() < 2)
    throw Error("batch_row: logits must be f32 [B, T, ...], got ", logits.defined() ? logits.describe() : "undefined");
  const Tensor c = logits.is_contiguous() ? logits : logits.contiguous();
  const int64_t B = c.size(0), T = c.size(1);
  const int64_t inner = c.numel() / std::max<int64_t>(B * T, 1);
  if (b < 0 || b >= B || n > T) throw Error("batch_row: row ", b, " / ", n, " positions of ", c.describe());
  const float* base = c.data<float>() + b * T * inner;
  std::vector<float> out;
  if (column >= 0) {
    if (column >= inner) throw Error("batch_row: column ", column, " of ", c.describe());
    out.resize(size_t(n));
    for (int64_t t = 0; t < n; ++t) out[size_t(t)] = base[t * inner + column];
  } else {
    out.assign(base, base + n * inner);
  }
  return out;
}

}  // namespace unmask::finetune
