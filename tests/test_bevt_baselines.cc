// tests/test_bevt_baselines.cc: the masked-token baselines BEVT's training reports beside its
// accuracy (models/bevt/pretrain.h): `majority` (the batch's commonest masked target) and
// `context` (each sample's commonest visible target, i.e. what copying the context scores),
// checked against hand counts on given target ids (the tokenizer is not run).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "models/bevt/pretrain.h"
#include "unmask/context.h"

using namespace unmask;

TEST(BevtBaselines, MajorityAndContextMatchHandCounts) {
  bevt::SwinConfig c;
  c.embed_dim = 8, c.depths = {1, 1, 1, 1}, c.heads = {1, 1, 1, 1}, c.window = {2, 2, 2};
  bevt::BevtPretrainModel model = bevt::BevtPretrainModel::random(c, 8, 1);
  Context ctx({.num_threads = 1});
  // Two 64 x 64 images: a 4 x 4 grid of 16-px cells each.
  video::BevtBatch batch;
  batch.images = Tensor::empty({2, 3, 64, 64}, DType::f32);
  for (int64_t i = 0; i < batch.images.numel(); ++i) batch.images.data<float>()[i] = float(i % 7) * 0.1f;
  // Image 0: cells 0-2 masked, targets 3 3 5; visible: nine 3s, three 4s, one 2: mode 3.
  // Image 1: cells 0-1 masked, targets 1 1; visible: seven 7s, six 1s, one 3: mode 7 (counting
  // the masked cells too would make it 1).
  batch.image_masks = {1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                       1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<int32_t> ids = {3, 3, 5, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 2,
                                    1, 1, 7, 7, 7, 7, 7, 7, 7, 1, 1, 1, 1, 1, 1, 3};
  bevt::BevtStepOptions o;
  o.image_ids = &ids;
  const bevt::BevtStepStats st = bevt::bevt_pretrain_step(ctx, model, nullptr, batch, o);
  EXPECT_EQ(st.image.masked, 5);
  EXPECT_EQ(st.image.majority, 2);  // ids 3 and 1: two of the five masked targets each
  EXPECT_EQ(st.image.context, 2);   // image 0: 3, 3 (not 5); image 1: none (7 guessed)
  EXPECT_EQ(st.video.masked, 0);
}
