// tests/test_op_profile.cc: per-op timing (Context::set_op_profiling, ops/op_profile.h), what
// `bench train|videomae|infer --profile` prints: every op front-end call is counted under its
// name, a nested op stays inside the outer one, take() empties, and off means no profiler.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>
#include <string>

#include "ops/op_profile.h"
#include "ops/ops.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;

namespace {
std::map<std::string, OpTime> by_name(const std::vector<OpTime>& v) {
  std::map<std::string, OpTime> m;
  for (const OpTime& t : v) m[t.op] = t;
  return m;
}
}  // namespace

TEST(OpProfile, CountsEveryFrontEndCallByName) {
  Context ctx({.num_threads = 2});
  EXPECT_EQ(ctx.op_profiler(), nullptr);
  const Tensor a = Tensor::zeros({64, 48}, DType::f32), b = Tensor::zeros({48, 32}, DType::f32);
  Tensor c = Tensor::empty({64, 32}, DType::f32);
  const Tensor gamma = Tensor::zeros({32}, DType::f32), beta = Tensor::zeros({32}, DType::f32);
  ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::no, c);  // before profiling: not counted
  ctx.set_op_profiling(true);
  ASSERT_NE(ctx.op_profiler(), nullptr);
  for (int i = 0; i < 3; ++i) ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::no, c);
  for (int i = 0; i < 2; ++i) ops::layernorm(ctx, c, nullptr, gamma, beta, 1e-5f, c);
  ops::activation(ctx, c, c, ops::Activation::gelu);
  const std::vector<OpTime> got = ctx.take_op_profile();
  const auto m = by_name(got);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m.at("gemm").calls, 3);
  EXPECT_EQ(m.at("layernorm").calls, 2);
  EXPECT_EQ(m.at("activation").calls, 1);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_GE(got[i].ms, 0.0);
    if (i > 0) EXPECT_LE(got[i].ms, got[i - 1].ms) << "most time first";
  }
  EXPECT_TRUE(ctx.take_op_profile().empty()) << "take() resets";
  ctx.set_op_profiling(false);
  EXPECT_EQ(ctx.op_profiler(), nullptr);
  EXPECT_TRUE(ctx.take_op_profile().empty());
}

// Profiling by shape (set_op_profiling(true, true), `bench --profile-shapes`): each GEMM shape and
// epilogue gets its own row, named M x N x K (from c and a, whatever the transposes), dtypes and
// transposes; other ops keep their names; without it every GEMM is one "gemm" row, also after
// switching back on a live context.
TEST(OpProfile, ShapeModeSplitsGemmsByShape) {
  const Tensor a = Tensor::zeros({64, 48}, DType::f32), b = Tensor::zeros({48, 32}, DType::f32);
  const Tensor at = Tensor::zeros({48, 64}, DType::f32), bias = Tensor::zeros({32}, DType::f32);
  Tensor c = Tensor::empty({64, 32}, DType::f32), c2 = Tensor::empty({16, 32}, DType::f32);
  const Tensor a2 = Tensor::zeros({16, 48}, DType::f32);
  const auto run = [&](Context& ctx) {
    ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::no, c);
    ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::no, c);
    ops::gemm(ctx, at, ops::Trans::yes, b, ops::Trans::no, c);  // the same M, N, K, a transposed
    ops::GemmArgs args;
    args.bias = &bias;
    args.act = ops::Activation::gelu;
    ops::gemm(ctx, a2, ops::Trans::no, b, ops::Trans::no, c2, args);
    ops::activation(ctx, c, c, ops::Activation::gelu);
  };
  {
    Context ctx({.num_threads = 2});
    ctx.set_op_profiling(true, true);
    run(ctx);
    const auto m = by_name(ctx.take_op_profile());
    ASSERT_EQ(m.size(), 4u);
    EXPECT_EQ(m.at("gemm 64x32x48 f32->f32 NN").calls, 2);
    EXPECT_EQ(m.at("gemm 64x32x48 f32->f32 TN").calls, 1);
    EXPECT_EQ(m.at("gemm 16x32x48 f32->f32 NN +bias gelu").calls, 1);
    EXPECT_EQ(m.at("activation").calls, 1);
  }
  Context ctx({.num_threads = 2});
  for (const bool by_shape : {true, false}) {  // the second profile is by op again
    ctx.set_op_profiling(true, by_shape);
    run(ctx);
  }
  const auto m = by_name(ctx.take_op_profile());
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at("gemm").calls, 4);
}

// The host time outside any op before an op's call is booked as that op's gap: a 20 ms sleep
// between two front-end calls shows up before the second, not the first, and not inside either.
TEST(OpProfile, BooksTheTimeBetweenOpsAsTheGapBeforeTheNext) {
  OpProfiler p(nullptr, false);
  p.begin("first");
  p.end();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p.begin("second");
  p.end();
  const auto m = by_name(p.take());
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at("first").gap_before_ms, 0.0) << "nothing timed before it";
  EXPECT_GE(m.at("second").gap_before_ms, 19.0);
  EXPECT_LT(m.at("second").ms, 19.0) << "the sleep is not inside an op";
  EXPECT_EQ(m.at("second").host_ms, m.at("second").ms) << "on the CPU an op's time is host time";
  p.begin("first");  // after take(): no gap carried over from before it
  p.end();
  EXPECT_EQ(by_name(p.take()).at("first").gap_before_ms, 0.0);
}

TEST(OpProfile, NestedOpsCountOnceInTheOuterOne) {
  OpProfiler p(nullptr, false);
  p.begin("outer");
  p.begin("inner");
  p.end();
  p.begin("inner");
  p.end();
  p.end();
  p.begin("inner");
  p.end();
  const auto m = by_name(p.take());
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at("outer").calls, 1);
  EXPECT_EQ(m.at("inner").calls, 1) << "only the call outside `outer` counts";
}

TEST(OpProfile, AnOpThatThrowsStillEndsItsTiming) {
  Context ctx({.num_threads = 1});
  ctx.set_op_profiling(true);
  const Tensor a = Tensor::zeros({4, 5}, DType::f32), b = Tensor::zeros({6, 7}, DType::f32);
  Tensor c = Tensor::empty({4, 7}, DType::f32);
  EXPECT_THROW(ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::no, c), Error);  // 5 != 6
  ops::activation(ctx, c, c, ops::Activation::tanh);
  const auto m = by_name(ctx.take_op_profile());
  EXPECT_EQ(m.at("gemm").calls, 1);
  EXPECT_EQ(m.at("activation").calls, 1) << "a throwing op left the profiler nested";
}
