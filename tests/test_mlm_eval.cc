// tests/test_mlm_eval.cc: train/mlm_eval.h on a shard small enough to score by hand: the unigram
// baseline's loss and accuracy, and the model's loss equal to pretrain_step's over the same rows
// whatever the batch size (every instance counted once).
#include <gtest/gtest.h>

#include <cmath>

#include "data/text/pretrain_data.h"
#include "temp_dir.h"
#include "models/bert/mlm_eval.h"

namespace unmask {
namespace {

TEST(MlmEval, UnigramBaselineByHandAndBatchingCountsEveryRowOnce) {
  test::TempDir dir;
  // Two instances, S = 6, P = 3, V = 10. Restored tokens: [2 5 7 6 3] and [2 7 7 8 3] (7 and
  // 8 are masked, shown as 4); frequencies 2:2 3:2 5:1 6:1 7:3 8:1 of 10 real tokens. The
  // prediction after the first zero position of row 0 is padding (pretrain_step stops there).
  data::PretrainShard sh;
  sh.num_instances = 2, sh.seq_length = 6, sh.max_predictions = 3;
  sh.input_ids = {2, 5, 4, 6, 3, 0, 2, 7, 7, 4, 3, 0};
  sh.input_mask = {1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0};
  sh.segment_ids = {0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0};
  sh.masked_lm_positions = {2, 0, 4, 3, 0, 0};
  sh.masked_lm_ids = {7, 0, 3, 8, 0, 0};
  sh.next_sentence_labels = {0, 1};
  data::write_shard(dir / "shard_00000.hdf5", sh);

  BertConfig c;
  c.vocab_size = 10, c.hidden_size = 16, c.num_hidden_layers = 1, c.num_attention_heads = 2;
  c.intermediate_size = 32, c.max_position_embeddings = 16;
  BertTrainModel model = BertTrainModel::random(c, {.pooler = true, .mlm = true, .nsp = true}, 3);
  Context ctx({.num_threads = 1});
  const train::MlmEvalResult one = train::evaluate_mlm(ctx, model, {dir / "shard_00000.hdf5"}, {.batch = 1});
  const train::MlmEvalResult two = train::evaluate_mlm(ctx, model, {dir / "shard_00000.hdf5"}, {.batch = 2});
  EXPECT_EQ(one.sequences, 2);
  EXPECT_EQ(one.masked, 2);
  // p(t) = (freq + 1) / (10 + 10): label 7 -> 4/20, label 8 -> 2/20; the argmax is 7.
  EXPECT_NEAR(one.unigram_loss, -(std::log(0.2) + std::log(0.1)) / 2, 1e-12);
  EXPECT_EQ(one.unigram_top_id, 7);
  EXPECT_DOUBLE_EQ(one.unigram_accuracy, 0.5);
  EXPECT_NEAR(one.unigram_perplexity, std::exp(one.unigram_loss), 1e-9);
  EXPECT_NEAR(one.loss, two.loss, 1e-5);
  EXPECT_DOUBLE_EQ(one.accuracy, two.accuracy);
  EXPECT_NEAR(one.perplexity, std::exp(one.loss), 1e-6);
  EXPECT_TRUE(std::isfinite(one.loss) && one.loss > 0);
  EXPECT_NEAR(one.loss, std::log(10.0), 0.5) << "a random model scores near ln V";
  // Special tokens ([CLS] = 2, [SEP] = 3 here) out of the counts: 5:1 6:1 7:3 8:1 of 6.
  const train::MlmEvalResult words =
      train::evaluate_mlm(ctx, model, {dir / "shard_00000.hdf5"}, {.batch = 2, .special_ids = {2, 3}});
  EXPECT_NEAR(words.unigram_loss, -(std::log(4.0 / 16) + std::log(2.0 / 16)) / 2, 1e-12);
  EXPECT_EQ(words.unigram_top_id, 7);
  // max_sequences stops after the first row.
  EXPECT_EQ(train::evaluate_mlm(ctx, model, {dir / "shard_00000.hdf5"}, {.batch = 2, .max_sequences = 1}).sequences, 1);
}

}  // namespace
}  // namespace unmask
