// tests/test_nan_propagation.cc: a NaN in the input of an op must come out as NaN (or make the
// op report it), never be clamped into a plausible finite value. The fast exp clamps its
// argument, and x86 max/min return their second operand when either is NaN, so an operand order
// slip silently turns exp(NaN) into exp(-87) ~ 0: these tests pin the order down for every ISA.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpu/kernels.h"
#include "ops/ops.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor rows(int64_t N, int64_t C, float base) {
  Tensor t = Tensor::empty({N, C}, DType::f32);
  for (int64_t i = 0; i < N * C; ++i) t.data<float>()[i] = base + 0.01f * float(i % 17);
  return t;
}

struct IsaScope {
  explicit IsaScope(std::string_view isa) { cpu::kernels_override_for_testing(isa); }
  ~IsaScope() { cpu::kernels_override_for_testing(""); }
};

TEST(NanPropagation, ActivationsAndSoftmaxEveryIsa) {
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    SCOPED_TRACE(std::string(isa));
    const int64_t N = 2, C = 37;  // vector body and tail
    for (int64_t pos : {int64_t(3), int64_t(35)}) {
      for (ops::Activation act : {ops::Activation::gelu, ops::Activation::gelu_tanh, ops::Activation::tanh}) {
        Tensor x = rows(N, C, 0.5f), y = Tensor::empty({N, C}, DType::f32);
        x.data<float>()[C + pos] = kNaN;
        ops::activation(ctx, x, y, act);
        EXPECT_TRUE(std::isnan(y.data<float>()[C + pos])) << ops::activation_name(act) << " pos " << pos;
        EXPECT_FALSE(std::isnan(y.data<float>()[0])) << "row 0 has no NaN";
      }
      Tensor x = rows(N, C, -1.0f), y = Tensor::empty({N, C}, DType::f32);
      x.data<float>()[C + pos] = kNaN;
      ops::softmax(ctx, x, y);
      for (int64_t c = 0; c < C; ++c) EXPECT_TRUE(std::isnan(y.data<float>()[C + c])) << "softmax col " << c;
      EXPECT_FALSE(std::isnan(y.data<float>()[0]));
    }
  }
}

TEST(NanPropagation, AttentionInferenceAndTraining) {
  Context ctx({.num_threads = 2});
  const int64_t B = 1, T = 20, NH = 2, HS = 16, C = NH * HS, N = B * T;
  Tensor q = rows(N, C, 0.1f), k = rows(N, C, -0.2f), v = rows(N, C, 0.3f);
  k.data<float>()[5 * C + 1] = kNaN;  // key 5, head 0
  Tensor cu = Tensor::empty({2}, DType::i32);
  cu.data<int32_t>()[0] = 0, cu.data<int32_t>()[1] = int32_t(N);
  ops::AttentionArgs args;
  args.num_heads = int(NH);
  args.scale = 0.25f;
  args.cu_seqlens = &cu;
  Tensor out = Tensor::empty({N, C}, DType::f32);
  ops::attention(ctx, q, k, v, out, args);
  // Every query of head 0 sees the NaN key: its outputs must be NaN; head 1 stays finite.
  EXPECT_TRUE(std::isnan(out.data<float>()[0])) << "inference attention swallowed a NaN score";
  EXPECT_FALSE(std::isnan(out.data<float>()[HS])) << "head 1 has no NaN";
  Tensor out2 = Tensor::empty({N, C}, DType::f32), lse = Tensor::empty({NH, N}, DType::f32);
  ops::attention_forward_train(ctx, q, k, v, out2, lse, args, {});
  EXPECT_TRUE(std::isnan(out2.data<float>()[0])) << "training attention swallowed a NaN score";
  EXPECT_FALSE(std::isnan(out2.data<float>()[HS]));
}

}  // namespace
}  // namespace unmask
