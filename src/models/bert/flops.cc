// models/bert/flops.cc: the analytic FLOP count of one BERT training step (the MFU numerator).
//
// Matmuls only (elementwise ops, softmax, LayerNorm and embedding lookups are not counted, as
// in MFU conventions); a multiply-add is 2 FLOPs, so an [M, K] x [K, N] product costs 2 M N K.
// With H = hidden, I = intermediate, L = layers, V = vocab, NH heads of HS = H / NH, a batch of
// B sequences of lengths s_b (N = sum_b s_b tokens, nothing spent on padding) and M masked
// positions in all:
//
//   per encoder layer, forward:
//     Q, K, V projections          3 x 2 N H H
//     attention output projection      2 N H H
//     FFN up + down                2 x 2 N H I
//     scores Q K^T, per sequence b and head: 2 s_b s_b HS   -> sum over heads: 2 s_b^2 H
//     context P V, the same                                  -> 2 s_b^2 H
//     = N (8 H^2 + 4 H I) + 4 H sum_b s_b^2
//   pooler (dense on [CLS], B rows)      2 B H H
//   NSP classifier (2 classes)           2 B H 2
//   MLM head on the M masked rows only (DLE's dense sequence output):
//     transform dense                    2 M H H
//     decoder (tied word embeddings)     2 M H V
//
//   forward = L [N (8 H^2 + 4 H I) + 4 H sum s_b^2] + B (2 H^2 + 4 H) + M (2 H^2 + 2 H V)
//   train   = 3 x forward  (the backward computes two products per forward product: the
//             gradients of the input and of the weight, or of both operands of Q K^T and P V)
#include "unmask/train.h"

namespace unmask {

double bert_train_flops(const BertConfig& config, const std::vector<int64_t>& seq_lens,
                        int64_t masked_positions) {
  const double H = double(config.hidden_size), I = double(config.intermediate_size);
  const double L = double(config.num_hidden_layers), V = double(config.vocab_size);
  UNMASK_CHECK(H > 0 && I > 0 && L > 0 && V > 0, "bert_train_flops: config sizes must be positive, got hidden ",
               H, ", intermediate ", I, ", layers ", L, ", vocab ", V);
  double tokens = 0, sum_sq_lens = 0;
  for (size_t b = 0; b < seq_lens.size(); ++b) {
    UNMASK_CHECK(seq_lens[b] >= 1, "bert_train_flops: seq_lens[", b, "] = ", seq_lens[b], " must be >= 1");
    tokens += double(seq_lens[b]);
    sum_sq_lens += double(seq_lens[b]) * double(seq_lens[b]);
  }
  UNMASK_CHECK(masked_positions >= 0 && double(masked_positions) <= tokens, "bert_train_flops: masked_positions ",
               masked_positions, " must lie in [0, ", int64_t(tokens), "] (the batch's tokens)");
  const double B = double(seq_lens.size()), M = double(masked_positions);
  const double per_layer = tokens * (8 * H * H + 4 * H * I) + 4 * H * sum_sq_lens;
  const double forward = L * per_layer + B * (2 * H * H + 4 * H) + M * (2 * H * H + 2 * H * V);
  return 3 * forward;
}

}  // namespace unmask
