// tests/test_patch_embed.cc: the patch / tubelet embedding layer (nn/patch_embed.h) against a
// float64 Conv3d with kernel = stride written directly on the 5-D clips (no gather, no GEMM):
// the embedding of a subset of tokens in any order, a 2-D image stream (T = tubelet = 1), and
// the weight and bias gradients accumulated onto nonzero ones.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/patch_embed.h"
#include "op_test_util.h"
#include "unmask/context.h"
#include "unmask/error.h"

using namespace unmask;
using namespace unmask::test;

namespace {

struct Geometry {
  int64_t B, C, T, H, W, tt, p, D;
};

// x[r, d] = b[d] + sum_{c, dt, dy, dx} W[d, c, dt, dy, dx] clips[b, c, t0 + dt, y0 + dy, x0 + dx]
// for token id = b Np + (t gh + y) gw + x, in float64.
std::vector<double> conv3d_tokens(const Geometry& g, const std::vector<float>& clips, const std::vector<float>& w,
                                  const std::vector<float>& bias, const std::vector<int32_t>& ids) {
  const int64_t gt = g.T / g.tt, gh = g.H / g.p, gw = g.W / g.p, Np = gt * gh * gw;
  std::vector<double> out(ids.size() * size_t(g.D));
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t b = ids[r] / Np, j = ids[r] % Np, t = j / (gh * gw), y = (j / gw) % gh, x = j % gw;
    for (int64_t d = 0; d < g.D; ++d) {
      double acc = bias[size_t(d)];
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t dt = 0; dt < g.tt; ++dt)
          for (int64_t dy = 0; dy < g.p; ++dy)
            for (int64_t dx = 0; dx < g.p; ++dx) {
              const double v = clips[size_t((((b * g.C + c) * g.T + t * g.tt + dt) * g.H + y * g.p + dy) * g.W +
                                            x * g.p + dx)];
              acc += double(w[size_t((((d * g.C + c) * g.tt + dt) * g.p + dy) * g.p + dx)]) * v;
            }
      out[r * size_t(g.D) + size_t(d)] = acc;
    }
  }
  return out;
}

std::vector<float> random_values(TestRng& rng, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n), 0.0f);
  for (auto& x : v) x = float(rng.uniform(-1, 1));
  return v;
}

Tensor tensor_of(const std::vector<float>& v, Shape shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

}  // namespace

TEST(PatchEmbed, MatchesAFloat64Conv3dAndItsGradients) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  // Video Swin's 2 x 4 x 4 patches of a 2-clip batch, and an image stream (one frame, 1 x 4 x 4).
  for (const Geometry g : {Geometry{2, 3, 4, 8, 12, 2, 4, 5}, Geometry{3, 3, 1, 8, 8, 1, 4, 6}}) {
    const int64_t Np = (g.T / g.tt) * (g.H / g.p) * (g.W / g.p), K = g.C * g.tt * g.p * g.p;
    const std::vector<float> clips = random_values(rng, g.B * g.C * g.T * g.H * g.W);
    const std::vector<float> w = random_values(rng, g.D * K), bias = random_values(rng, g.D);
    // Every other token, backwards: a masked autoencoder's visible subset in any order.
    std::vector<int32_t> ids;
    for (int64_t i = g.B * Np - 1; i >= 0; i -= 2) ids.push_back(int32_t(i));
    const int64_t R = int64_t(ids.size());
    train::PV pw = train::make_pv(tensor_of(w, {g.D, K})), pb = train::make_pv(tensor_of(bias, {g.D}));
    const std::vector<float> gw0 = random_values(rng, g.D * K), gb0 = random_values(rng, g.D);
    std::copy(gw0.begin(), gw0.end(), pw.grad.data<float>());
    std::copy(gb0.begin(), gb0.end(), pb.grad.data<float>());
    Tensor id_t = Tensor::empty({R}, DType::i32);
    std::copy(ids.begin(), ids.end(), id_t.data<int32_t>());
    Tensor x = Tensor::empty({R, g.D}, DType::f32);
    train::PatchEmbedSaved saved;
    train::patch_embed_forward(ctx, tensor_of(clips, {g.B, g.C, g.T, g.H, g.W}), id_t, ops::Tubelet{g.tt, g.p}, pw,
                               pb, x, saved);
    const std::vector<double> want = conv3d_tokens(g, clips, w, bias, ids);
    for (int64_t i = 0; i < R * g.D; ++i)
      ASSERT_NEAR(x.data<float>()[i], want[size_t(i)], 1e-5 * (1 + std::fabs(want[size_t(i)]))) << "element " << i;
    // Backward of sum(x * dx): dW = dx^T cols (cols read straight from the clips), db = sum of dx.
    const std::vector<float> dx = random_values(rng, R * g.D);
    train::patch_embed_backward(ctx, saved, pw, pb, tensor_of(dx, {R, g.D}));
    for (int64_t d = 0; d < g.D; ++d) {
      double db = gb0[size_t(d)];
      for (int64_t r = 0; r < R; ++r) db += dx[size_t(r * g.D + d)];
      EXPECT_NEAR(pb.grad.data<float>()[d], db, 1e-5 * (1 + std::fabs(db)));
      for (int64_t k = 0; k < K; ++k) {
        // the weight gradient of element (d, k) is the forward's derivative: the pixel under k
        std::vector<float> unit(size_t(g.D * K), 0.0f), zero(size_t(g.D), 0.0f);
        unit[size_t(d * K + k)] = 1.0f;
        const std::vector<double> pix = conv3d_tokens(g, clips, unit, zero, ids);
        double dw = gw0[size_t(d * K + k)];
        for (int64_t r = 0; r < R; ++r) dw += double(dx[size_t(r * g.D + d)]) * pix[size_t(r * g.D + d)];
        ASSERT_NEAR(pw.grad.data<float>()[d * K + k], dw, 1e-5 * (1 + std::fabs(dw))) << "dW " << d << ", " << k;
      }
    }
  }
}

TEST(PatchEmbed, AllTokenIdsAndAWrongWeightShape) {
  const Tensor ids = train::all_token_ids(5, Device::cpu);
  ASSERT_EQ(ids.size(0), 5);
  for (int32_t i = 0; i < 5; ++i) EXPECT_EQ(ids.data<int32_t>()[i], i);
  Context ctx({.num_threads = 1});
  train::PV w = train::make_pv(Tensor::zeros({4, 47}, DType::f32)), b = train::make_pv(Tensor::zeros({4}, DType::f32));
  Tensor x = Tensor::empty({2, 4}, DType::f32);
  train::PatchEmbedSaved saved;
  EXPECT_THROW(train::patch_embed_forward(ctx, Tensor::zeros({1, 3, 2, 4, 4}, DType::f32), train::all_token_ids(2, Device::cpu),
                                          ops::Tubelet{2, 4}, w, b, x, saved),
               Error);
}
