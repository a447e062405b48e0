// tests/cuda/test_cuda_attention_train.cc: the CUDA training attention
// (ops::attention_forward_train / attention_backward on Device::cuda, src/cuda/attention_train.cu)
// against the CPU ops through the same front-ends, on random data.
//
// The CPU ops are tested against the float64 reference (tests/test_train_attention*.cc), so
// agreement here ties the CUDA kernels to the reference. Cases: packed sequences of unequal
// lengths (1, 7, 128, 300: partial tiles, several tiles, a one-token sequence), padded with a
// key mask (one sequence with no real key: zero output and gradients, lse = -inf), head sizes
// 64, 32 and 80 (80: the zero-padded 96-wide tiles), dropout 0 and 0.1, q/k/v and dq/dk/dv as
// column slices of fused [N, 3C] buffers, cu_seqlens and the mask on the host and on the
// device. Outputs are poisoned with NaN first, so an element a kernel forgets fails.
// Determinism: every CUDA call runs twice and must give the same bits.
//
// Tolerance: both sides are fp32 with different summation orders (the CPU: sgemm blocks and a
// two-pass softmax; the GPU: 64-key tiles, an online softmax, fmaf chains). Each output is a
// sum of at most 512 products of O(1) values, so the rounding differences are ~1e-6 of the
// largest term; we allow |got - want| <= 1e-4 |want| + 2e-5 max|want| (max over the tensor:
// gradients such as dK are sums with cancellation, so small elements carry absolute error on
// the scale of the large ones). A dropout mask differing in one element changes the affected
// row of out by p_ij v_j / (1-p), typically 1e-3 .. 1e-1 of max|out|: far outside that.
//
// Seed: UNMASK_TEST_SEED (decimal or 0x hex), else a fixed default; each test mixes in its name.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/ops_cuda.h"
#include "ops/ops.h"
#include "cuda_test_common.h"
#include "test_harness.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;

using cuda_test::base_seed;
using cuda_test::cpu;
using cuda_test::gpu;

namespace {

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(const std::string& test) {
    uint64_t h = base_seed();
    for (const char c : test) h = (h ^ uint64_t(uint8_t(c))) * 0x100000001b3ull;
    gen.seed(h);
  }
  std::string note() const { return "seed " + std::to_string(base_seed()) + " (UNMASK_TEST_SEED)"; }
  /// A host f32 [N, C] tensor of N(0, sd) values.
  Tensor tensor(int64_t N, int64_t C, float sd) {
    Tensor t = Tensor::empty({N, C}, DType::f32);
    std::normal_distribution<float> dist(0.0f, sd);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(gen);
    return t;
  }
};

std::vector<float> values(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  h.copy_from(t);
  const float* p = h.data<float>();
  return std::vector<float>(p, p + h.numel());
}

/// [N, C] views: contiguous, or column block `which` of a fused [N, 3C] buffer (a row stride),
/// on `dev`, filled with NaN (outputs) or with src's values.
Tensor place(const Tensor* src, int64_t N, int64_t C, bool fused, int which, Device dev) {
  Tensor h = Tensor::empty({N, fused ? 3 * C : C}, DType::f32);
  std::fill(h.data<float>(), h.data<float>() + h.numel(), std::numeric_limits<float>::quiet_NaN());
  Tensor buf = h.to(dev);
  Tensor view = fused ? buf.slice(1, which * C, (which + 1) * C) : buf;
  if (src) view.copy_from(*src);
  return view;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (float w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::fabs(double(w)));
  int64_t bad = 0, worst = -1;
  double max_err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;  // lse = -inf for no real key
    const double err = std::fabs(double(got[i]) - double(want[i]));
    const double tol = 1e-4 * std::fabs(double(want[i])) + 2e-5 * scale;
    if (!(err <= tol)) {
      ++bad;
      if (worst < 0) worst = int64_t(i);
    }
    if (err > max_err || std::isnan(err)) max_err = err;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements off; first [" << worst << "] got "
                    << (worst >= 0 ? got[size_t(worst)] : 0.0f) << " want "
                    << (worst >= 0 ? want[size_t(worst)] : 0.0f) << " (max err " << max_err << ", max|want| "
                    << scale << ")";
}

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what << ": two runs differ";
}

struct Case {
  std::string name;
  int64_t NH = 2, HS = 64;
  std::vector<int32_t> lens;    // packed when non-empty
  int64_t B = 0, T = 0;         // padded
  std::vector<int32_t> mask;    // padded: [B, T] i32 (empty: none)
  bool index_on_device = false;  // cu_seqlens / mask on the device
  bool fused = false;
  float dropout = 0.0f;
};

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

Result run(const Case& c, Context& ctx, Device dev, const Tensor& q, const Tensor& k, const Tensor& v,
           const Tensor& dout, const Tensor* cu_host, const Tensor* mask_host) {
  const int64_t N = q.size(0), C = q.size(1);
  Tensor qd = place(&q, N, C, c.fused, 0, dev), kd = place(&k, N, C, c.fused, 1, dev);
  Tensor vd = place(&v, N, C, c.fused, 2, dev), dod = place(&dout, N, C, false, 0, dev);
  Tensor out = place(nullptr, N, C, false, 0, dev);
  Tensor lse = place(nullptr, c.NH, N, false, 0, dev);
  Tensor dq = place(nullptr, N, C, c.fused, 0, dev), dk = place(nullptr, N, C, c.fused, 1, dev);
  Tensor dv = place(nullptr, N, C, c.fused, 2, dev);
  Tensor cu_dev, mask_dev;
  ops::AttentionArgs args;
  args.num_heads = int(c.NH);
  args.scale = float(1.0 / std::sqrt(double(c.HS)));
  const bool on_dev = dev == Device::cuda && c.index_on_device;
  if (cu_host) {
    cu_dev = on_dev ? cu_host->to(Device::cuda) : *cu_host;
    args.cu_seqlens = &cu_dev;
  } else {
    args.padded_seq_len = c.T;
    if (mask_host) {
      mask_dev = on_dev ? mask_host->to(Device::cuda) : *mask_host;
      args.key_padding_mask = &mask_dev;
    }
  }
  ops::AttentionTrainArgs train;
  train.dropout_p = c.dropout;
  train.dropout_seed = 0x1234abcdull;
  train.dropout_offset = 977;  // not a multiple of 4: Philox blocks straddle rows
  ops::attention_forward_train(ctx, qd, kd, vd, out, lse, args, train);
  ops::attention_backward(ctx, qd, kd, vd, out, lse, dod, dq, dk, dv, args, train);
  return {values(out), values(lse), values(dq), values(dk), values(dv)};
}

void check_case(const Case& c) {
  SCOPED_TRACE(c.name);
  Rng rng("CudaAttentionTrain/" + c.name);
  SCOPED_TRACE(rng.note());
  Tensor cu_host, mask_host;
  int64_t N = 0;
  if (!c.lens.empty()) {
    cu_host = Tensor::empty({int64_t(c.lens.size()) + 1}, DType::i32);
    int32_t* cu = cu_host.data<int32_t>();
    cu[0] = 0;
    for (size_t b = 0; b < c.lens.size(); ++b) cu[b + 1] = cu[b] + c.lens[b];
    N = cu[c.lens.size()];
  } else {
    N = c.B * c.T;
    if (!c.mask.empty()) {
      mask_host = Tensor::empty({c.B, c.T}, DType::i32);
      std::copy(c.mask.begin(), c.mask.end(), mask_host.data<int32_t>());
    }
  }
  const int64_t C = c.NH * c.HS;
  const Tensor q = rng.tensor(N, C, 1.0f), k = rng.tensor(N, C, 1.0f), v = rng.tensor(N, C, 1.0f);
  const Tensor dout = rng.tensor(N, C, 1.0f);
  const Tensor* cu = c.lens.empty() ? nullptr : &cu_host;
  const Tensor* mask = c.mask.empty() ? nullptr : &mask_host;
  const Result want = run(c, cpu(), Device::cpu, q, k, v, dout, cu, mask);
  const Result got = run(c, gpu(), Device::cuda, q, k, v, dout, cu, mask);
  expect_close(got.out, want.out, "out");
  expect_close(got.lse, want.lse, "lse");
  expect_close(got.dq, want.dq, "dq");
  expect_close(got.dk, want.dk, "dk");
  expect_close(got.dv, want.dv, "dv");
  const Result again = run(c, gpu(), Device::cuda, q, k, v, dout, cu, mask);
  expect_bits(again.out, got.out, "out");
  expect_bits(again.lse, got.lse, "lse");
  expect_bits(again.dq, got.dq, "dq");
  expect_bits(again.dk, got.dk, "dk");
  expect_bits(again.dv, got.dv, "dv");
}

/// Padded [B = 3, T] mask: sequence 0 has its last third padded, sequence 1 no real key,
/// sequence 2 every other key real.
std::vector<int32_t> three_masks(int64_t T) {
  std::vector<int32_t> m(size_t(3 * T), 0);
  for (int64_t t = 0; t < T; ++t) {
    m[size_t(t)] = t < 2 * T / 3 ? 1 : 0;
    m[size_t(2 * T + t)] = t % 2 == 0 ? 1 : 0;
  }
  return m;
}

}  // namespace

TEST(CudaAttentionTrain, SupportsTable) {
  for (const char* op : {"attention_forward_train", "attention_backward"}) {
    EXPECT_TRUE(ops::supports(op, Device::cuda, DType::f32)) << op;
    EXPECT_TRUE(ops::supports(op, Device::cuda, DType::bf16)) << op;  // bf16 rows: the tensor-core kernels
    EXPECT_FALSE(ops::supports(op, Device::cuda, DType::f16)) << op;
  }
}

TEST(CudaAttentionTrain, PackedUnequalLengthsMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  for (float p : {0.0f, 0.1f})
    for (bool on_dev : {false, true}) {
      Case c;
      c.name = std::string("packed HS64 p=") + std::to_string(p) + (on_dev ? " cu on device" : " cu on host");
      c.lens = {1, 7, 128, 300};
      c.dropout = p;
      c.index_on_device = on_dev;
      check_case(c);
    }
}

TEST(CudaAttentionTrain, PaddedWithKeyMaskMatchesCpu) {
  REQUIRE_CUDA_DEVICE();
  for (float p : {0.0f, 0.1f})
    for (bool on_dev : {false, true}) {
      Case c;
      c.name = std::string("padded HS64 T=100 p=") + std::to_string(p) + (on_dev ? " mask on device" : "");
      c.B = 3;
      c.T = 100;
      c.mask = three_masks(c.T);
      c.dropout = p;
      c.index_on_device = on_dev;
      check_case(c);
    }
}

TEST(CudaAttentionTrain, OtherHeadSizesAndFusedSlicesMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  for (int64_t HS : {32, 80})
    for (float p : {0.0f, 0.1f}) {
      Case c;
      c.name = "packed fused HS" + std::to_string(HS) + " p=" + std::to_string(p);
      c.NH = HS == 32 ? 3 : 2;
      c.HS = HS;
      c.lens = {65, 1, 200};
      c.fused = true;
      c.dropout = p;
      check_case(c);
      Case d = c;
      d.name = "padded fused HS" + std::to_string(HS) + " p=" + std::to_string(p);
      d.lens.clear();
      d.B = 3;
      d.T = 70;
      d.mask = three_masks(d.T);
      check_case(d);
    }
}

TEST(CudaAttentionTrain, NoMaskPaddedLongSequence) {
  REQUIRE_CUDA_DEVICE();
  Case c;
  c.name = "padded T=512 HS128 no mask p=0.1";
  c.NH = 1;
  c.HS = 128;
  c.B = 2;
  c.T = 512;
  c.dropout = 0.1f;
  c.fused = true;
  check_case(c);
}

// bf16 rows of head size 8 (no tensor-core instance): Unsupported, the front-end's contract for a shape
// a backend cannot run; f32 tensors on the wrong device: an Error.
TEST(CudaAttentionTrain, RejectsBf16HeadSize8AndMismatchedDevices) {
  REQUIRE_CUDA_DEVICE();
  const int64_t N = 8, C = 16;
  Tensor q = Tensor::zeros({N, C}, DType::bf16, Device::cuda);
  Tensor out = Tensor::zeros({N, C}, DType::bf16, Device::cuda);
  Tensor lse = Tensor::zeros({2, N}, DType::f32, Device::cuda);
  ops::AttentionArgs args;
  args.num_heads = 2;
  args.scale = 0.25f;
  args.padded_seq_len = N;
  EXPECT_THROW(ops::attention_forward_train(gpu(), q, q, q, out, lse, args, {}), Unsupported);
  Tensor qf = Tensor::zeros({N, C}, DType::f32, Device::cuda), of = Tensor::zeros({N, C}, DType::f32, Device::cuda);
  EXPECT_THROW(ops::attention_forward_train(cpu(), qf, qf, qf, of, lse, args, {}), Error);
}
