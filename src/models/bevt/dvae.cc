// models/bevt/dvae.cc: see dvae.h.
#include "models/bevt/dvae.h"

#include <cmath>
#include <random>

#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::bevt {

namespace {

DalleConv random_conv(std::mt19937_64& gen, int64_t in, int64_t out, int64_t k) {
  DalleConv c;
  c.w = Tensor::empty({out, in, k, k}, DType::f32);
  std::normal_distribution<float> n(0.0f, float(1.0 / std::sqrt(double(in * k * k))));
  for (int64_t i = 0; i < c.w.numel(); ++i) c.w.data<float>()[i] = n(gen);
  c.b = Tensor::zeros({out}, DType::f32);
  return c;
}

Tensor conv(Context& ctx, const DalleConv& c, const Tensor& x) {
  const int64_t k = c.w.size(2);
  Tensor y = Tensor::empty({x.size(0), c.w.size(0), x.size(2), x.size(3)}, DType::f32, x.device());
  ops::Conv2dArgs a;
  a.padding = (k - 1) / 2;
  a.bias = &c.b;
  ops::conv2d(ctx, x, c.w, y, a);
  return y;
}

Tensor relu(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::f32, x.device());
  ops::activation(ctx, x, y, ops::Activation::relu);
  return y;
}

Tensor max_pool2(Context& ctx, const Tensor& x) {
  Tensor y = Tensor::empty({x.size(0), x.size(1), x.size(2) / 2, x.size(3) / 2}, DType::f32, x.device());
  ops::max_pool2x2(ctx, x, y);
  return y;
}

}  // namespace

DalleEncoder DalleEncoder::random(const DalleEncoderConfig& c, uint64_t seed) {
  std::mt19937_64 gen(seed);
  DalleEncoder e;
  e.config = c;
  e.input = random_conv(gen, c.channels, c.hidden, 7);
  int64_t width = c.hidden;
  for (int64_t g = 0; g < c.groups; ++g) {
    const int64_t out = c.hidden << g;
    std::vector<DalleEncoderBlock> blocks;
    for (int64_t i = 0; i < c.blocks_per_group; ++i) {
      const int64_t in = i == 0 ? width : out, mid = out / 4;
      DalleEncoderBlock b;
      b.has_id_conv = in != out;
      if (b.has_id_conv) b.id = random_conv(gen, in, out, 1);
      b.res[0] = random_conv(gen, in, mid, 3);
      b.res[1] = random_conv(gen, mid, mid, 3);
      b.res[2] = random_conv(gen, mid, mid, 3);
      b.res[3] = random_conv(gen, mid, out, 1);
      blocks.push_back(std::move(b));
    }
    e.groups.push_back(std::move(blocks));
    width = out;
  }
  e.output = random_conv(gen, width, c.vocab, 1);
  return e;
}

std::vector<std::pair<std::string, Tensor*>> DalleEncoder::named() {
  std::vector<std::pair<std::string, Tensor*>> out;
  auto add = [&](const std::string& prefix, DalleConv& c) {
    out.emplace_back(prefix + ".w", &c.w);
    out.emplace_back(prefix + ".b", &c.b);
  };
  add("blocks.input", input);
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const std::string pre = "blocks.group_" + std::to_string(g + 1) + ".block_" + std::to_string(i + 1) + ".";
      DalleEncoderBlock& b = groups[g][i];
      if (b.has_id_conv) add(pre + "id_path", b.id);
      for (int r = 0; r < 4; ++r) add(pre + "res_path.conv_" + std::to_string(r + 1), b.res[r]);
    }
  add("blocks.output.conv", output);
  return out;
}

DalleEncoder DalleEncoder::to(Device device) const {
  DalleEncoder e = *this;
  for (auto& [name, t] : e.named())
    if (t->device() != device) *t = t->to(device);
  return e;
}

Tensor DalleEncoder::logits(Context& ctx, const Tensor& x) const {
  const DalleEncoderConfig& c = config;
  UNMASK_CHECK(x.dtype() == DType::f32 && x.ndim() == 4 && x.size(1) == c.channels && x.is_contiguous() &&
                   x.size(2) % 8 == 0 && x.size(3) % 8 == 0,
               "DALL-E encoder: the input must be contiguous f32 [B, ", c.channels,
               ", H, W] with H and W multiples of 8, got ", x.describe());
  const float post_gain = float(1.0 / double((c.groups * c.blocks_per_group) * (c.groups * c.blocks_per_group)));
  Tensor h = conv(ctx, input, x);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const DalleEncoderBlock& b : groups[g]) {
      Tensor r = h;
      for (int k = 0; k < 4; ++k) r = conv(ctx, b.res[k], relu(ctx, r));
      Tensor sum = b.has_id_conv ? conv(ctx, b.id, h) : Tensor::empty(h.shape(), DType::f32, h.device());
      if (!b.has_id_conv) ops::copy(ctx, h, sum);
      ops::axpy(ctx, post_gain, r, sum);  // id + post_gain res
      h = sum;
    }
    if (g + 1 < groups.size()) h = max_pool2(ctx, h);
  }
  return conv(ctx, output, relu(ctx, h));
}

Tensor DalleEncoder::tokens(Context& ctx, const Tensor& x) const {
  const Tensor l = logits(ctx, x);
  Tensor ids = Tensor::empty({l.size(0), l.size(2) * l.size(3)}, DType::i32, l.device());
  ops::argmax_channels(ctx, l.view({l.size(0), l.size(1), l.size(2) * l.size(3)}), ids);
  return ids;
}

}  // namespace unmask::bevt
