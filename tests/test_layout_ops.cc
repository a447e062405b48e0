// tests/test_layout_ops.cc: the layout ops BEVT runs on every device (ops/layout_ops.cc):
// transpose, 2 x 2 max pooling, argmax over channels and per-group row scaling, on the CPU against
// index arithmetic written here (every op is exact, so the comparisons are bitwise), with the
// cases that break naive versions: partial 32 x 32 tiles, ties and NaN in max and argmax, strided
// and aliased rows, a zero scale. The CUDA kernels are compared to these in
// tests/cuda/test_cuda_bevt_ops.cc.
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <limits>
#include <random>
#include <vector>

#include "error_test_util.h"
#include "ops/ops.h"
#include <gtest/gtest.h>
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;

namespace {

Tensor random_tensor(std::mt19937_64& gen, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(gen);
  return t;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST(LayoutOps, TransposeIsThePermutation) {
  std::mt19937_64 gen(1);
  Context ctx({.num_threads = 2});
  for (const auto& [B, R, C] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {1, 33, 70}, {3, 64, 32}, {5, 4, 97}}) {
    const Tensor x = random_tensor(gen, {B, R, C});
    Tensor y = Tensor::empty({B, C, R}, DType::f32);
    ops::transpose(ctx, x, y);
    int64_t wrong = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c)
          wrong += !same_bits(y.data<float>()[(b * C + c) * R + r], x.data<float>()[(b * R + r) * C + c]);
    EXPECT_EQ(wrong, 0) << B << " x " << R << " x " << C;
  }
  const Tensor x2 = random_tensor(gen, {7, 40});  // 2-D: one matrix
  Tensor y2 = Tensor::empty({40, 7}, DType::f32);
  ops::transpose(ctx, x2, y2);
  EXPECT_TRUE(same_bits(y2.data<float>()[39 * 7 + 6], x2.data<float>()[6 * 40 + 39]));
  EXPECT_TRUE(same_bits(y2.data<float>()[3 * 7 + 5], x2.data<float>()[5 * 40 + 3]));
}

TEST(LayoutOps, MaxPoolTakesEachWindowsMaximumAndNaN) {
  std::mt19937_64 gen(2);
  Context ctx({.num_threads = 2});
  Tensor x = random_tensor(gen, {2, 3, 6, 10});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[(1 * 6 + 3) * 10 + 5] = nan;  // sample 0, channel 1, row 3, column 5: window (1, 2)
  Tensor y = Tensor::empty({2, 3, 3, 5}, DType::f32);
  ops::max_pool2x2(ctx, x, y);
  int64_t wrong = 0;
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        float m = -INFINITY;
        bool has_nan = false;
        for (int64_t u = 0; u < 2; ++u)
          for (int64_t v = 0; v < 2; ++v) {
            const float e = x.data<float>()[(p * 6 + 2 * i + u) * 10 + 2 * j + v];
            has_nan |= std::isnan(e);
            m = std::max(m, e);
          }
        const float got = y.data<float>()[(p * 3 + i) * 5 + j];
        wrong += has_nan ? !std::isnan(got) : !same_bits(got, m);
      }
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(std::isnan(y.data<float>()[(1 * 3 + 1) * 5 + 2]));
}

TEST(LayoutOps, ArgmaxTakesTheFirstMaximumOrTheFirstNaN) {
  std::mt19937_64 gen(3);
  Context ctx({.num_threads = 2});
  const int64_t B = 3, C = 37, P = 11;
  Tensor x = random_tensor(gen, {B, C, P});
  auto at = [&](int64_t b, int64_t c, int64_t p) -> float& { return x.data<float>()[(b * C + c) * P + p]; };
  at(0, 5, 2) = 9.0f, at(0, 20, 2) = 9.0f;  // a tie: the first wins
  at(1, 30, 4) = 50.0f, at(1, 33, 4) = std::numeric_limits<float>::quiet_NaN();  // NaN after the max: NaN wins
  at(2, 0, 7) = std::numeric_limits<float>::quiet_NaN(), at(2, 1, 7) = 99.0f;   // NaN first
  Tensor ids = Tensor::empty({B, P}, DType::i32);
  ops::argmax_channels(ctx, x, ids);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < P; ++p) {
      int64_t want = 0;
      for (int64_t c = 0; c < C; ++c) {
        if (std::isnan(at(b, c, p))) {
          want = c;
          break;
        }
        if (at(b, c, p) > at(b, want, p)) want = c;
      }
      EXPECT_EQ(ids.data<int32_t>()[b * P + p], want) << "b " << b << " p " << p;
    }
  EXPECT_EQ(ids.data<int32_t>()[0 * P + 2], 5);
  EXPECT_EQ(ids.data<int32_t>()[1 * P + 4], 33);
  EXPECT_EQ(ids.data<int32_t>()[2 * P + 7], 0);
}

TEST(LayoutOps, ScaleRowsScalesEachGroup) {
  std::mt19937_64 gen(4);
  Context ctx({.num_threads = 2});
  const int64_t R = 12, C = 5, group = 4;
  Tensor wide = random_tensor(gen, {R, 2 * C});
  const Tensor x = wide.slice(1, 1, 1 + C);  // strided rows
  Tensor scales = Tensor::empty({R / group}, DType::f32);
  scales.data<float>()[0] = 0.0f, scales.data<float>()[1] = 1.25f, scales.data<float>()[2] = -3.0f;
  Tensor y = Tensor::empty({R, C}, DType::f32);
  ops::scale_rows(ctx, x, scales, group, y);
  int64_t wrong = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c)
      wrong += !same_bits(y.data<float>()[r * C + c], scales.data<float>()[r / group] * wide.data<float>()[r * 2 * C + 1 + c]);
  EXPECT_EQ(wrong, 0);
  Tensor z = y.contiguous();  // in place
  ops::scale_rows(ctx, z, scales, group, z);
  EXPECT_TRUE(same_bits(z.data<float>()[5 * C + 2], 1.25f * y.data<float>()[5 * C + 2]));
  EXPECT_EQ(z.data<float>()[1 * C + 3], 0.0f);
}

TEST(LayoutOps, BadArgumentsAreErrorsThatSayWhat) {
  using test::error_of;
  Context ctx({.num_threads = 1});
  Tensor x = Tensor::zeros({2, 3, 4}, DType::f32), y = Tensor::zeros({2, 3, 4}, DType::f32);
  EXPECT_NE(error_of([&] { ops::transpose(ctx, x, y); }).find("transpose: y must be [2,4,3]"), std::string::npos);
  Tensor odd = Tensor::zeros({1, 1, 3, 4}, DType::f32), pooled = Tensor::zeros({1, 1, 1, 2}, DType::f32);
  EXPECT_NE(error_of([&] { ops::max_pool2x2(ctx, odd, pooled); }).find("H and W even"), std::string::npos);
  Tensor ids = Tensor::zeros({2, 3}, DType::i32);
  EXPECT_NE(error_of([&] { ops::argmax_channels(ctx, x, ids); }).find("ids must be contiguous i32 [2, 4]"),
            std::string::npos);
  Tensor rows = Tensor::zeros({6, 2}, DType::f32), scales = Tensor::zeros({2}, DType::f32);
  EXPECT_NE(error_of([&] { ops::scale_rows(ctx, rows, scales, 4, rows); }).find("not whole groups of 4"),
            std::string::npos);
  Tensor few = Tensor::zeros({2}, DType::f32);
  EXPECT_NE(error_of([&] { ops::scale_rows(ctx, rows, few, 2, rows); }).find("scales"), std::string::npos);
}
