// tests/bert_train_test_util.h: the random pretraining batches and parameter jitter that the
// BERT training tests (f32 and bf16 activations) build their checks on.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "op_test_util.h"
#include "unmask/train.h"

namespace unmask::test {

inline constexpr BertHeads kPretraining{.pooler = true, .mlm = true, .nsp = true};

/// An i32 tensor of `shape` holding `v` (its size must match).
inline Tensor i32(const Shape& shape, const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty(shape, DType::i32);
  EXPECT_EQ(int64_t(v.size()), t.numel());
  std::memcpy(t.raw(), v.data(), std::min<size_t>(v.size(), size_t(t.numel())) * sizeof(int32_t));
  return t;
}

/// A PretrainBatch of B rows of T tokens and P prediction slots from its host vectors.
inline PretrainBatch pretrain_batch(int64_t B, int64_t T, int64_t P, const std::vector<int32_t>& ids,
                                    const std::vector<int32_t>& segments, const std::vector<int32_t>& mask,
                                    const std::vector<int32_t>& positions, const std::vector<int32_t>& masked_ids,
                                    const std::vector<int32_t>& nsp) {
  PretrainBatch batch;
  batch.input_ids = i32({B, T}, ids);
  batch.segment_ids = i32({B, T}, segments);
  batch.input_mask = i32({B, T}, mask);
  batch.masked_lm_positions = i32({B, P}, positions);
  batch.masked_lm_ids = i32({B, P}, masked_ids);
  batch.next_sentence_labels = i32({B}, nsp);
  return batch;
}

/// A random right-padded batch: B rows of the given lengths in [B, T], P = 4 prediction slots
/// (row 1 has none), mixed NSP labels. Padding holds `pad_fill` ids (0 in DLE's shards).
inline PretrainBatch make_batch(TestRng& rng, const std::vector<int64_t>& lens, int64_t T, int64_t V,
                                int32_t pad_fill = 0) {
  const int64_t B = int64_t(lens.size()), P = 4;
  std::vector<int32_t> ids(B * T, pad_fill), seg(B * T, 0), mask(B * T, 0), pos(B * P, 0), mid(B * P, 0), nsp(B);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < lens[b]; ++t) {
      ids[b * T + t] = int32_t(rng.integer(1, V - 1));
      seg[b * T + t] = t > lens[b] / 2 ? 1 : 0;
      mask[b * T + t] = 1;
    }
    for (int64_t t = lens[b]; t < T; ++t) seg[b * T + t] = pad_fill ? int32_t(t % 2) : 0;  // no draw: same stream
    const int64_t n = b == 1 ? 0 : std::min<int64_t>(P, lens[b] - 1);
    std::vector<int32_t> cand;
    for (int32_t t = 1; t < lens[b]; ++t) cand.push_back(t);
    std::shuffle(cand.begin(), cand.end(), std::mt19937(uint32_t(rng.integer(0, 1 << 30))));
    std::sort(cand.begin(), cand.begin() + n);
    for (int64_t j = 0; j < n; ++j) {
      pos[b * P + j] = cand[size_t(j)];
      mid[b * P + j] = int32_t(rng.integer(0, V - 1));
    }
    nsp[b] = int32_t(b % 2);
  }
  return pretrain_batch(B, T, P, ids, seg, mask, pos, mid, nsp);
}

/// Random biases and LayerNorm parameters (random() starts them at 0 / 1) and 5x larger weights,
/// so every parameter takes part in the checks and activations are less trivial.
inline void jitter(BertTrainModel& m, TestRng& rng) {
  for (Param& p : m.params()) {
    float* v = p.value.data<float>();
    const bool ln_weight = p.name.find("LayerNorm.weight") != std::string::npos;
    if (p.name.find("bias") != std::string::npos || ln_weight)
      for (int64_t i = 0; i < p.value.numel(); ++i) v[i] = (ln_weight ? 1.0f : 0.0f) + 0.1f * float(rng.normal());
    else
      for (int64_t i = 0; i < p.value.numel(); ++i) v[i] *= 5.0f;
  }
}

}  // namespace unmask::test
