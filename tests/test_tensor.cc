// tests/test_tensor.cc: Tensor views, copies and Context::parallel_for.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>

#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;

TEST(Tensor, EmptyHasContiguousStrides) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::f32);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.nbytes(), 96u);
}

TEST(Tensor, SliceSelectAndContiguousCopy) {
  Tensor t = Tensor::empty({3, 4}, DType::f32);
  float* p = t.data<float>();
  std::iota(p, p + 12, 0.0f);
  Tensor cols = t.slice(1, 1, 3);  // [3,2] strided
  EXPECT_FALSE(cols.is_contiguous());
  Tensor c = cols.contiguous();
  const float* q = c.data<float>();
  EXPECT_EQ(q[0], 1.0f);
  EXPECT_EQ(q[1], 2.0f);
  EXPECT_EQ(q[2], 5.0f);
  EXPECT_EQ(q[5], 10.0f);
  Tensor row = t.select(0, 2);
  EXPECT_EQ(row.ndim(), 1);
  EXPECT_EQ(row.data<float>()[3], 11.0f);
}

TEST(Tensor, ErrorsNameTheProblem) {
  Tensor t = Tensor::empty({3, 4}, DType::f32);
  EXPECT_THROW(t.data<int32_t>(), Error);
  EXPECT_THROW(t.view({5, 2}), Error);
  EXPECT_THROW(t.slice(0, 2, 5), Error);
  try {
    t.view({5, 2});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32[3,4]"), std::string::npos) << e.what();
  }
}

TEST(Context, ParallelForCoversRangeOnce) {
  Context ctx({.num_threads = 3});
  for (int64_t n : {1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    ctx.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(Context, ParallelForPropagatesErrors) {
  Context ctx({.num_threads = 2});
  EXPECT_THROW(ctx.parallel_for(10, [&](int64_t b, int64_t) {
    if (b > 0) throw Error("boom");
  }), Error);
  // the pool is still usable afterwards
  std::atomic<int> sum{0};
  ctx.parallel_for(10, [&](int64_t b, int64_t e) { sum += int(e - b); });
  EXPECT_EQ(sum.load(), 10);
}
