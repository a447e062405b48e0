// tests/cuda/test_cuda_autocast.cc: the bf16 and fp16 autocast of f32 GEMMs (CudaState::autocast,
// precision = "bf16" / "fp16"). ops::gemm on f32 tensors must equal, to fp32 accumulation error, the
// float64 product of the operands rounded to bf16 (round to nearest even) - for a Linear layer
// (b transposed), a transposed a, a bias epilogue and a batched GEMM with a shared operand -
// and stay within bf16's rounding of the exact f32 product. The error against the f32 product
// must also be at most 2x that of a naive bf16 GEMM (inputs rounded, the product rounded to
// bf16). A BERT pretrain step with autocast stays within 2e-2 of the fp32 CPU loss.
// Without a CUDA device every test skips.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "cuda/cuda_state.h"
#include "cuda_test_common.h"
#include "ops/ops.h"
#include "test_harness.h"
#include "unmask/context.h"
#include "unmask/tensor.h"
#include "unmask/train.h"

using namespace unmask;

using cuda_test::base_seed;
using cuda_test::cpu;
using cuda_test::gpu;

namespace {

struct AutocastScope {
  cuda::CudaState& st;
  DType saved_autocast;
  bool saved_tf32;
  explicit AutocastScope(Context& ctx, DType to = DType::bf16)
      : st(cuda::cuda_state(ctx)), saved_autocast(st.autocast), saved_tf32(st.allow_tf32) {
    st.autocast = to;
    st.allow_tf32 = false;
  }
  ~AutocastScope() { st.autocast = saved_autocast, st.allow_tf32 = saved_tf32; }
};

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }
float round_to(DType half, float x) { return half == DType::f16 ? round_f16(x) : round_bf16(x); }

Tensor random_matrix(std::mt19937_64& gen, const Shape& s) {
  Tensor t = Tensor::empty(s, DType::f32);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(gen);
  return t;
}

// c[M, N] = op(a) op(b) (+ bias) in float64 from host tensors, operands rounded to `half` (bf16 or
// f16) or not (f32).
std::vector<double> reference(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor* bias, int64_t M,
                              int64_t N, int64_t K, DType half) {
  auto at = [&](const Tensor& t, int64_t r, int64_t c) {
    const float v = t.data<float>()[r * t.size(1) + c];
    return double(half == DType::f32 ? v : round_to(half, v));
  };
  std::vector<double> c(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = bias ? double(bias->data<float>()[j]) : 0.0;
      for (int64_t k = 0; k < K; ++k) s += (ta ? at(a, k, i) : at(a, i, k)) * (tb ? at(b, j, k) : at(b, k, j));
      c[size_t(i * N + j)] = s;
    }
  return c;
}

void check_gemm(bool ta, bool tb, bool with_bias, int64_t M, int64_t N, int64_t K, DType half = DType::bf16) {
  std::mt19937_64 gen(base_seed() ^ uint64_t(M * 131 + N * 7 + K + ta * 3 + tb * 5));
  const Tensor a = random_matrix(gen, ta ? Shape{K, M} : Shape{M, K});
  const Tensor b = random_matrix(gen, tb ? Shape{N, K} : Shape{K, N});
  const Tensor bias = random_matrix(gen, {1, N}).view({N});
  Tensor c = Tensor::empty({M, N}, DType::f32, Device::cuda);
  {
    AutocastScope on(gpu(), half);
    ops::GemmArgs args;
    const Tensor bias_dev = bias.to(Device::cuda);
    if (with_bias) args.bias = &bias_dev;
    ops::gemm(gpu(), a.to(Device::cuda), ta ? ops::Trans::yes : ops::Trans::no, b.to(Device::cuda),
              tb ? ops::Trans::yes : ops::Trans::no, c, args);
    gpu().synchronize();
  }
  const Tensor got = c.to(Device::cpu);
  const std::vector<double> r16 = reference(a, ta, b, tb, with_bias ? &bias : nullptr, M, N, K, half);
  const std::vector<double> r32 = reference(a, ta, b, tb, with_bias ? &bias : nullptr, M, N, K, DType::f32);
  double err16 = 0, err32 = 0, naive = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    const double g = got.data<float>()[i];
    err16 = std::max(err16, std::fabs(g - r16[size_t(i)]));
    err32 = std::max(err32, std::fabs(g - r32[size_t(i)]));
    naive = std::max(naive, std::fabs(double(round_to(half, float(r16[size_t(i)]))) - r32[size_t(i)]));
  }
  const double scale = std::sqrt(double(K));  // |c| ~ sqrt(K) for unit normal operands
  const std::string name(dtype_name(half));
  EXPECT_LE(err16, 2e-6 * scale * 8) << name << " ta " << ta << " tb " << tb << ": not the rounded-operand product";
  EXPECT_LE(err32, 2.0 * naive) << name << " ta " << ta << " tb " << tb << ": worse than 2x a naive GEMM in " << name;
  EXPECT_GT(err32, 0.0) << "the operands were not rounded to " << name << " (autocast off?)";
  std::printf("[ autocast %s ] M %lld N %lld K %lld ta %d tb %d: err vs rounded-operand ref %.3g, vs f32 ref %.3g "
              "(naive %.3g)\n", name.c_str(), (long long)M, (long long)N, (long long)K, int(ta), int(tb), err16, err32, naive);
}

}  // namespace

TEST(CudaAutocast, GemmIsTheBf16OperandProduct) {
  REQUIRE_CUDA_DEVICE();
  check_gemm(false, true, true, 96, 80, 136);   // a Linear layer: x W^T + b
  check_gemm(true, false, false, 64, 48, 200);  // a weight gradient: x^T dy
  check_gemm(false, false, false, 33, 17, 65);  // odd sizes
}

TEST(CudaAutocast, GemmIsTheFp16OperandProduct) {
  REQUIRE_CUDA_DEVICE();
  check_gemm(false, true, true, 96, 80, 136, DType::f16);
  check_gemm(true, false, false, 64, 48, 200, DType::f16);
  check_gemm(false, false, false, 33, 17, 65, DType::f16);
}

TEST(CudaAutocast, BertStepStaysNearFp32) {
  REQUIRE_CUDA_DEVICE();
  BertConfig cfg;
  cfg.vocab_size = 500, cfg.hidden_size = 64, cfg.num_hidden_layers = 2, cfg.num_attention_heads = 2;
  cfg.intermediate_size = 256, cfg.max_position_embeddings = 32;
  const BertHeads heads{.pooler = true, .mlm = true, .nsp = true};
  BertTrainModel want = BertTrainModel::random(cfg, heads, 5), got = BertTrainModel::random(cfg, heads, 5);
  got.to(gpu());
  const int64_t B = 4, T = 24, P = 4;
  PretrainBatch b;
  b.input_ids = Tensor::zeros({B, T}, DType::i32);
  b.segment_ids = Tensor::zeros({B, T}, DType::i32);
  b.input_mask = Tensor::zeros({B, T}, DType::i32);
  b.masked_lm_positions = Tensor::zeros({B, P}, DType::i32);
  b.masked_lm_ids = Tensor::zeros({B, P}, DType::i32);
  b.next_sentence_labels = Tensor::zeros({B}, DType::i32);
  std::mt19937_64 gen(base_seed());
  for (int64_t r = 0; r < B; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      b.input_ids.data<int32_t>()[r * T + t] = int32_t(104 + gen() % 390);
      b.input_mask.data<int32_t>()[r * T + t] = 1;
    }
    for (int64_t k = 0; k < P; ++k) {
      b.masked_lm_positions.data<int32_t>()[r * P + k] = int32_t(1 + 5 * k);
      b.masked_lm_ids.data<int32_t>()[r * P + k] = int32_t(104 + gen() % 390);
    }
    b.next_sentence_labels.data<int32_t>()[r] = int32_t(r % 2);
  }
  TrainStepOptions so;
  so.hidden_dropout = so.attention_dropout = 0.0f;
  const PretrainStats sw = want.pretrain_step(cpu(), b, so);
  for (const DType half : {DType::bf16, DType::f16}) {
    PretrainStats sg;
    got.zero_grad();
    {
      AutocastScope on(gpu(), half);
      sg = got.pretrain_step(gpu(), b, so);
    }
    EXPECT_NEAR(sg.loss, sw.loss, 2e-2 * std::fabs(sw.loss)) << dtype_name(half);
    std::printf("[ autocast ] BERT step loss fp32 cpu %.6f, %s autocast %.6f\n", sw.loss, std::string(dtype_name(half)).c_str(), sg.loss);
  }
}
