// tests/cuda/test_cuda_bevt_ops.cc: BEVT's CUDA ops: ops::window_attention and its backward on a CUDA
// context (cuda/window_attention.cu) against the float64 oracle (ref/window_attention_ref.h).
//
// Shapes: Video Swin's 8 x 7 x 7 = 392-token windows (head size 32, 2 heads, 3 windows, a
// 3-window shift mask) and Swin's 49-token image windows (4 heads, 6 windows, mask period 2,
// no bias), both with q, k, v as column slices of one [R, 3C] buffer; a case with N = 40 and
// head size 80 (lanes holding 3 dims, keys spilling into a second chunk). Checked: out and lse
// (within 2e-5 of the largest value), dq, dk, dv (2e-4 of their largest magnitude) and dbias
// accumulated onto a non-zero start (2e-4); two backward runs give the same bits (dbias is summed
// in window order, no atomics). Also ops::conv2d through cuDNN and the layout ops (transpose,
// max pooling, argmax, row scaling, relu) against the CPU. Without a CUDA
// device every test skips.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_common.h"
#include "ops/ops.h"
#include "ref/window_attention_ref.h"
#include "test_harness.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;
using cuda_test::gpu;

namespace {

struct Case {
  int64_t NH, HS, N, W, M;  // M = 0: no mask
  bool bias;
};

std::vector<double> host_values(const Tensor& t) {
  const Tensor h = t.device() == Device::cpu ? t.contiguous() : t.to(Device::cpu).contiguous();
  return std::vector<double>(h.data<float>(), h.data<float>() + h.numel());
}

double rel_err(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i])), scale = std::max(scale, std::fabs(want[i]));
  return err / std::max(scale, 1e-30);
}

Tensor normal_tensor(std::mt19937_64& gen, const unmask::Shape& shape, float sd) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::normal_distribution<float> n(0.0f, sd);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(gen);
  return t;
}

void run_case(const Case& s, uint64_t seed) {
  std::mt19937_64 gen(seed);
  const int64_t C = s.NH * s.HS, R = s.N * s.W;
  Tensor qkv = normal_tensor(gen, {R, 3 * C}, 1.0f), dout = normal_tensor(gen, {R, C}, 1.0f);
  Tensor bias = normal_tensor(gen, {s.NH, s.N, s.N}, 0.5f), dbias0 = normal_tensor(gen, {s.NH, s.N, s.N}, 0.1f);
  Tensor mask = Tensor::empty({std::max<int64_t>(s.M, 1), s.N, s.N}, DType::f32);
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = (i * 7 / 5) % 3 == 0 ? -100.0f : 0.0f;
  ops::WindowAttentionArgs a;
  a.num_heads = int(s.NH), a.window = s.N, a.scale = float(1.0 / std::sqrt(double(s.HS)));
  // float64 oracle
  std::vector<double> q(R * C), k(R * C), v(R * C), bd = host_values(bias), md = host_values(mask), go = host_values(dout);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      q[r * C + c] = qkv.data<float>()[r * 3 * C + c];
      k[r * C + c] = qkv.data<float>()[r * 3 * C + C + c];
      v[r * C + c] = qkv.data<float>()[r * 3 * C + 2 * C + c];
    }
  const ref::WindowLayout lay{s.NH, s.HS, s.N, s.W, s.M};
  std::vector<double> out(R * C), lse(s.NH * R), dq(R * C), dk(R * C), dv(R * C), dbias = host_values(dbias0);
  ref::window_attention_forward(q.data(), k.data(), v.data(), s.bias ? bd.data() : nullptr, s.M ? md.data() : nullptr,
                                out.data(), lse.data(), lay, a.scale);
  ref::window_attention_backward(q.data(), k.data(), v.data(), s.bias ? bd.data() : nullptr,
                                 s.M ? md.data() : nullptr, go.data(), dq.data(), dk.data(), dv.data(), dbias.data(),
                                 lay, a.scale);
  // CUDA
  Context& ctx = gpu();
  const Tensor qkv_g = qkv.to(Device::cuda), dout_g = dout.to(Device::cuda), bias_g = bias.to(Device::cuda),
               mask_g = mask.to(Device::cuda);
  if (s.bias) a.bias = &bias_g;
  if (s.M) a.mask = &mask_g;
  const Tensor qg = qkv_g.slice(1, 0, C), kg = qkv_g.slice(1, C, 2 * C), vg = qkv_g.slice(1, 2 * C, 3 * C);
  Tensor out_g = Tensor::empty({R, C}, DType::f32, Device::cuda), lse_g = Tensor::empty({s.NH, R}, DType::f32, Device::cuda);
  ops::window_attention(ctx, qg, kg, vg, out_g, a, &lse_g);
  Tensor dqkv = Tensor::empty({R, 3 * C}, DType::f32, Device::cuda);
  Tensor dq_g = dqkv.slice(1, 0, C), dk_g = dqkv.slice(1, C, 2 * C), dv_g = dqkv.slice(1, 2 * C, 3 * C);
  Tensor dbias_g = dbias0.to(Device::cuda);
  ops::window_attention_backward(ctx, qg, kg, vg, out_g, lse_g, dout_g, dq_g, dk_g, dv_g, &dbias_g, a);
  ctx.synchronize();
  const std::string what = "NH " + std::to_string(s.NH) + " HS " + std::to_string(s.HS) + " N " + std::to_string(s.N);
  const double e_out = rel_err(host_values(out_g), out), e_lse = rel_err(host_values(lse_g), lse);
  const double e_dq = rel_err(host_values(dq_g), dq), e_dk = rel_err(host_values(dk_g), dk);
  const double e_dv = rel_err(host_values(dv_g), dv), e_db = rel_err(host_values(dbias_g), dbias);
  std::printf("[ window attention %s ] out %.2e lse %.2e dq %.2e dk %.2e dv %.2e dbias %.2e\n", what.c_str(), e_out,
              e_lse, e_dq, e_dk, e_dv, e_db);
  EXPECT_LE(e_out, 2e-5) << what;
  EXPECT_LE(e_lse, 2e-5) << what;
  EXPECT_LE(e_dq, 2e-4) << what;
  EXPECT_LE(e_dk, 2e-4) << what;
  EXPECT_LE(e_dv, 2e-4) << what;
  EXPECT_LE(e_db, 2e-4) << what;
  // Deterministic: a second backward from the same start gives the same bits.
  Tensor dqkv2 = Tensor::empty({R, 3 * C}, DType::f32, Device::cuda);
  Tensor dq2 = dqkv2.slice(1, 0, C), dk2 = dqkv2.slice(1, C, 2 * C), dv2 = dqkv2.slice(1, 2 * C, 3 * C);
  Tensor dbias2 = dbias0.to(Device::cuda);
  ops::window_attention_backward(ctx, qg, kg, vg, out_g, lse_g, dout_g, dq2, dk2, dv2, &dbias2, a);
  ctx.synchronize();
  EXPECT_TRUE(host_values(dbias2) == host_values(dbias_g)) << what << ": dbias differs between runs";
  EXPECT_TRUE(host_values(dqkv2) == host_values(dqkv)) << what << ": dq, dk, dv differ between runs";
}

}  // namespace

TEST(CudaWindowAttention, VideoSwinWindowsMatchFloat64) {
  REQUIRE_CUDA_DEVICE();
  run_case({2, 32, 392, 3, 3, true}, 11);
}

TEST(CudaWindowAttention, ImageWindowsMatchFloat64) {
  REQUIRE_CUDA_DEVICE();
  run_case({4, 32, 49, 6, 2, false}, 12);
}

TEST(CudaWindowAttention, OddHeadSizeAndWindowMatchFloat64) {
  REQUIRE_CUDA_DEVICE();
  run_case({3, 80, 40, 2, 0, true}, 13);
}

// ops::conv2d on CUDA (cuDNN, fp32 FMA math) against the CPU's (itself tied to the float64
// oracle by test_ops): the DALL-E encoder's shapes (7 x 7 stride 1 padding 3 input conv, 3 x 3
// and 1 x 1 convs), a strided one, with and without bias; within 1e-5 of the output's scale.
TEST(CudaConv2d, MatchesTheCpu) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937_64 gen(21);
  struct ConvCase {
    int64_t B, Cin, H, Cout, k, stride, padding;
    bool bias;
  };
  for (const ConvCase& c : {ConvCase{2, 3, 32, 16, 7, 1, 3, true}, ConvCase{2, 16, 16, 32, 3, 1, 1, true},
                            ConvCase{3, 32, 8, 64, 1, 1, 0, false}, ConvCase{1, 8, 15, 8, 3, 2, 1, true}}) {
    const int64_t OH = (c.H + 2 * c.padding - c.k) / c.stride + 1;
    const Tensor x = normal_tensor(gen, {c.B, c.Cin, c.H, c.H}, 1.0f);
    const Tensor w = normal_tensor(gen, {c.Cout, c.Cin, c.k, c.k}, 0.2f), b = normal_tensor(gen, {c.Cout}, 1.0f);
    Tensor y = Tensor::empty({c.B, c.Cout, OH, OH}, DType::f32);
    Context cpu_ctx({.num_threads = 2});
    ops::conv2d(cpu_ctx, x, w, y, {.stride = c.stride, .padding = c.padding, .bias = c.bias ? &b : nullptr});
    const Tensor xg = x.to(Device::cuda), wg = w.to(Device::cuda), bg = b.to(Device::cuda);
    Tensor yg = Tensor::empty({c.B, c.Cout, OH, OH}, DType::f32, Device::cuda);
    ops::conv2d(gpu(), xg, wg, yg, {.stride = c.stride, .padding = c.padding, .bias = c.bias ? &bg : nullptr});
    gpu().synchronize();
    const double e = rel_err(host_values(yg), host_values(y));
    std::printf("[ conv2d %lldx%lld k%lld s%lld ] max |cuda - cpu| / max |cpu| %.2e\n", (long long)c.Cin,
                (long long)c.Cout, (long long)c.k, (long long)c.stride, e);
    EXPECT_LE(e, 1e-5) << "k " << c.k << " stride " << c.stride;
  }
}

// The layout ops (cuda/layout.cu) against the CPU's (tests/test_layout_ops.cc ties those to index
// arithmetic): all exact, so bit for bit. Shapes with partial 32 x 32 tiles, NaN in the pooled and
// arg-maxed values, strided rows for scale_rows, the relu activation BEVT's tokenizer adds.
TEST(CudaLayoutOps, MatchTheCpuBitForBit) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937_64 gen(31);
  Context& cpu = cuda_test::cpu();
  const float nan = std::nanf("");
  {
    const Tensor x = normal_tensor(gen, {3, 45, 70}, 1.0f);
    Tensor y = Tensor::empty({3, 70, 45}, DType::f32), yg = Tensor::empty({3, 70, 45}, DType::f32, Device::cuda);
    ops::transpose(cpu, x, y);
    ops::transpose(gpu(), x.to(Device::cuda), yg);
    EXPECT_TRUE(host_values(yg) == host_values(y)) << "transpose";
  }
  {
    Tensor x = normal_tensor(gen, {2, 5, 14, 10}, 1.0f);
    x.data<float>()[37] = nan;
    Tensor y = Tensor::empty({2, 5, 7, 5}, DType::f32), yg = Tensor::empty({2, 5, 7, 5}, DType::f32, Device::cuda);
    ops::max_pool2x2(cpu, x, y);
    ops::max_pool2x2(gpu(), x.to(Device::cuda), yg);
    const std::vector<double> a = host_values(yg), b = host_values(y);
    int64_t wrong = 0;
    for (size_t i = 0; i < a.size(); ++i) wrong += !(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])));
    EXPECT_EQ(wrong, 0) << "max_pool2x2";
  }
  {
    Tensor x = normal_tensor(gen, {3, 300, 49}, 1.0f);
    x.data<float>()[(1 * 300 + 120) * 49 + 7] = nan;
    x.data<float>()[(2 * 300 + 3) * 49 + 9] = 50.0f, x.data<float>()[(2 * 300 + 200) * 49 + 9] = 50.0f;  // a tie
    Tensor ids = Tensor::empty({3, 49}, DType::i32), idg = Tensor::empty({3, 49}, DType::i32, Device::cuda);
    ops::argmax_channels(cpu, x, ids);
    ops::argmax_channels(gpu(), x.to(Device::cuda), idg);
    const Tensor h = idg.to(Device::cpu);
    EXPECT_EQ(std::memcmp(h.raw(), ids.raw(), size_t(ids.nbytes())), 0) << "argmax_channels";
    EXPECT_EQ(h.data<int32_t>()[1 * 49 + 7], 120);
    EXPECT_EQ(h.data<int32_t>()[2 * 49 + 9], 3);
  }
  {
    const Tensor wide = normal_tensor(gen, {40, 24}, 1.0f), scales = normal_tensor(gen, {5}, 1.0f);
    const Tensor x = wide.slice(1, 3, 19);
    Tensor y = Tensor::empty({40, 16}, DType::f32), yg = Tensor::empty({40, 16}, DType::f32, Device::cuda);
    ops::scale_rows(cpu, x, scales, 8, y);
    const Tensor wg = wide.to(Device::cuda);
    ops::scale_rows(gpu(), wg.slice(1, 3, 19), scales.to(Device::cuda), 8, yg);
    EXPECT_TRUE(host_values(yg) == host_values(y)) << "scale_rows";
  }
  {
    const Tensor x = normal_tensor(gen, {33, 65}, 2.0f), dy = normal_tensor(gen, {33, 65}, 1.0f);
    Tensor y = Tensor::empty({33, 65}, DType::f32), yg = Tensor::empty({33, 65}, DType::f32, Device::cuda);
    ops::activation(cpu, x, y, ops::Activation::relu);
    ops::activation(gpu(), x.to(Device::cuda), yg, ops::Activation::relu);
    EXPECT_TRUE(host_values(yg) == host_values(y)) << "relu";
    Tensor dx = Tensor::empty({33, 65}, DType::f32), dxg = Tensor::empty({33, 65}, DType::f32, Device::cuda);
    ops::activation_backward(cpu, x, dy, dx, ops::Activation::relu);
    ops::activation_backward(gpu(), x.to(Device::cuda), dy.to(Device::cuda), dxg, ops::Activation::relu);
    EXPECT_TRUE(host_values(dxg) == host_values(dx)) << "relu backward";
  }
}
