// tests/cuda/test_cuda_bert_infer.cc: BertModel (inference) on a CUDA context (BertModel::to)
// against the same model on the CPU, the path `unmask infer/forward/bench infer --device cuda`
// takes. Same random weights with every head, the same host batch:
//   * padded [B, T] with an attention mask of unequal lengths (key padding on the GPU);
//   * packed (cu_seqlens), the same sequences without their padding;
// every output (hidden states, pooler, MLM/NSP/QA/classifier logits) within 1e-4 of its own max
// abs value (fp32 on both sides, different summation orders; TF32 off). Also: a forward on a
// context of the other device is an Error, and to() after a packing CPU forward is an Error.
// Without a CUDA device every test skips.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <map>
#include <thread>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_common.h"
#include "ops/ops.h"
#include "test_harness.h"
#include "unmask/bert.h"
#include "unmask/context.h"
#include "unmask/error.h"
#include "unmask/tensor.h"

using namespace unmask;

using cuda_test::base_seed;
using cuda_test::cpu;
using cuda_test::gpu;

namespace {

BertConfig tiny_config() {
  BertConfig c;
  c.vocab_size = 211;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;  // head size 32
  c.intermediate_size = 256;
  c.max_position_embeddings = 64;
  c.num_labels = 3;
  return c;
}

const BertHeads kAllHeads{.pooler = true, .mlm = true, .nsp = true, .qa = true, .seqcls = true};

void expect_same_outputs(const BertOutputs& g, const BertOutputs& c, const std::string& what) {
  const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> pairs[] = {
      {"last_hidden_state", {&g.last_hidden_state, &c.last_hidden_state}},
      {"pooler_output", {&g.pooler_output, &c.pooler_output}},
      {"mlm_logits", {&g.mlm_logits, &c.mlm_logits}},
      {"nsp_logits", {&g.nsp_logits, &c.nsp_logits}},
      {"qa_start_logits", {&g.qa_start_logits, &c.qa_start_logits}},
      {"qa_end_logits", {&g.qa_end_logits, &c.qa_end_logits}},
      {"seqcls_logits", {&g.seqcls_logits, &c.seqcls_logits}},
  };
  for (const auto& [name, p] : pairs) {
    ASSERT_TRUE(p.first->defined() && p.second->defined()) << what << ": " << name;
    EXPECT_EQ(p.first->device(), Device::cuda) << what << ": " << name << " should stay on the GPU";
    const double e = cuda_test::max_relative_error(*p.first, *p.second);
    EXPECT_LE(e, 1e-4) << what << ": " << name;
  }
}

}  // namespace

TEST(CudaBertInfer, PaddedAndPackedMatchCpu) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = tiny_config();
  BertModel on_cpu = BertModel::random(cfg, kAllHeads, base_seed() ^ 0x1f3);
  BertModel on_gpu = BertModel::random(cfg, kAllHeads, base_seed() ^ 0x1f3);
  on_gpu.to(gpu());
  EXPECT_EQ(on_gpu.device(), Device::cuda);

  const std::vector<int64_t> lengths = {24, 17, 9, 20, 2};
  const int64_t B = int64_t(lengths.size()), T = 24;
  std::mt19937_64 rng(base_seed() ^ 0xb3e7);
  std::uniform_int_distribution<int64_t> tok(5, cfg.vocab_size - 1);
  BertInput padded;
  padded.input_ids = Tensor::zeros({B, T}, DType::i64);
  padded.token_type_ids = Tensor::zeros({B, T}, DType::i64);
  padded.attention_mask = Tensor::zeros({B, T}, DType::i64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lengths[size_t(b)]; ++t) {
      padded.input_ids.data<int64_t>()[b * T + t] = tok(rng);
      padded.token_type_ids.data<int64_t>()[b * T + t] = t >= lengths[size_t(b)] / 2;
      padded.attention_mask.data<int64_t>()[b * T + t] = 1;
    }
  ForwardOptions all;
  all.mlm = all.nsp = all.qa = all.classifier = all.pooler = true;
  all.pack_weights = false;  // the CPU side keeps its unpacked weights (the reference)
  expect_same_outputs(on_gpu.forward(gpu(), padded, all), on_cpu.forward(cpu(), padded, all), "padded");

  int64_t N = 0;
  for (int64_t l : lengths) N += l;
  BertInput packed;
  packed.input_ids = Tensor::empty({N}, DType::i64);
  packed.token_type_ids = Tensor::empty({N}, DType::i64);
  packed.cu_seqlens = Tensor::empty({B + 1}, DType::i32);
  packed.cu_seqlens.data<int32_t>()[0] = 0;
  for (int64_t b = 0, r = 0; b < B; ++b) {
    for (int64_t t = 0; t < lengths[size_t(b)]; ++t, ++r) {
      packed.input_ids.data<int64_t>()[r] = padded.input_ids.data<int64_t>()[b * T + t];
      packed.token_type_ids.data<int64_t>()[r] = padded.token_type_ids.data<int64_t>()[b * T + t];
    }
    packed.cu_seqlens.data<int32_t>()[b + 1] = packed.cu_seqlens.data<int32_t>()[b] + int32_t(lengths[size_t(b)]);
  }
  expect_same_outputs(on_gpu.forward(gpu(), packed, all), on_cpu.forward(cpu(), packed, all), "packed");
}

TEST(CudaBertInfer, DeviceMismatchAndPackedWeightsAreErrors) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = tiny_config();
  BertModel m = BertModel::random(cfg, BertHeads{.pooler = true}, 3);
  BertInput in;
  in.input_ids = Tensor::zeros({1, 8}, DType::i64);
  EXPECT_THROW(m.forward(gpu(), in), Error);  // weights on the CPU, context on the GPU
  ForwardOptions packing;
  packing.pack_weights = true;
  m.forward(cpu(), in, packing);  // packs the CPU weights and drops the unpacked copies
  bool threw = false;
  try {
    m.to(gpu());
  } catch (const Error&) {
    threw = true;
  }
  // Only an Error when packing really happened (ForwardOptions::pack_weights false keeps the weights).
  if (!threw) EXPECT_EQ(m.device(), Device::cuda);
}

// The inputs are read on the host (the layout's checks, position ids): device tensors are an
// Error naming the input, not a host dereference of a device pointer.
TEST(CudaBertInfer, DeviceResidentInputsAreErrors) {
  REQUIRE_CUDA_DEVICE();
  BertModel m = BertModel::random(tiny_config(), BertHeads{}, base_seed());
  m.to(gpu());
  BertInput in;
  in.input_ids = Tensor::zeros({1, 4}, DType::i32).to(Device::cuda);
  try {
    m.forward(gpu(), in, ForwardOptions{});
    ADD_FAILURE() << "device input_ids were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input_ids must be a host tensor"), std::string::npos) << e.what();
  }
}

// ContextOptions::cuda_stream must be a blocking stream: host copies are ordered with the
// context's kernels through the legacy default stream.
TEST(CudaContext, RefusesANonBlockingExternalStream) {
  REQUIRE_CUDA_DEVICE();
  cudaStream_t non_blocking = nullptr, blocking = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  try {
    Context ctx(ContextOptions{.num_threads = 1, .device = Device::cuda, .cuda_stream = non_blocking});
    ADD_FAILURE() << "a non-blocking external stream was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-blocking"), std::string::npos) << e.what();
  }
  {
    Context ctx(ContextOptions{.num_threads = 1, .device = Device::cuda, .cuda_stream = blocking});
    EXPECT_EQ(ctx.cuda_stream(), static_cast<void*>(blocking));
  }
  cudaStreamDestroy(non_blocking);
  cudaStreamDestroy(blocking);
  gpu().make_current();  // the destroyed context was this thread's current stream
}

// The op profiler on a CUDA context: event pairs on the stream, read back by take(), reused on
// the next round (bench ... --profile).
TEST(CudaContext, OpProfileTimesDeviceWork) {
  REQUIRE_CUDA_DEVICE();
  Context& ctx = gpu();
  const Tensor a = Tensor::zeros({256, 512}, DType::f32).to(Device::cuda), b = Tensor::zeros({512, 384}, DType::f32).to(Device::cuda);
  Tensor c = Tensor::empty({256, 384}, DType::f32, Device::cuda);
  ctx.set_op_profiling(true);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 3 - round; ++i) ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::no, c);
    const std::vector<OpTime> got = ctx.take_op_profile();
    ASSERT_EQ(got.size(), 1u) << "round " << round;
    EXPECT_EQ(got[0].op, "gemm");
    EXPECT_EQ(got[0].calls, 3 - round) << "round " << round;
    EXPECT_GT(got[0].ms, 0.0) << "round " << round << ": device time between the events";
  }
  ctx.set_op_profiling(false);
  EXPECT_TRUE(ctx.take_op_profile().empty());
}

// The gap before an op: the device idles while the host sleeps between a synchronisation and
// the next op, and that idle time is booked before that op, not spread or lost; host_ms is the
// front-end's own host time, not the sleep.
TEST(CudaContext, OpProfileBooksTheIdleGapBeforeTheNextOp) {
  REQUIRE_CUDA_DEVICE();
  Context& ctx = gpu();
  const Tensor a = Tensor::zeros({256, 512}, DType::f32).to(Device::cuda), b = Tensor::zeros({512, 384}, DType::f32).to(Device::cuda);
  Tensor c = Tensor::empty({256, 384}, DType::f32, Device::cuda);
  ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::no, c);  // plan made before timing
  const Tensor gamma = Tensor::zeros({384}, DType::f32).to(Device::cuda), beta = Tensor::zeros({384}, DType::f32).to(Device::cuda);
  ops::layernorm(ctx, c, nullptr, gamma, beta, 1e-5f, c);
  ctx.synchronize();
  ctx.set_op_profiling(true);
  ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::no, c);
  ctx.synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ops::layernorm(ctx, c, nullptr, gamma, beta, 1e-5f, c);
  std::map<std::string, OpTime> m;
  for (const OpTime& t : ctx.take_op_profile()) m[t.op] = t;
  ctx.set_op_profiling(false);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at("gemm").gap_before_ms, 0.0) << "the first op timed has nothing before it";
  EXPECT_GE(m.at("layernorm").gap_before_ms, 29.0) << "the device idled through the host's 30 ms sleep";
  EXPECT_LT(m.at("layernorm").gap_before_ms, 1000.0);
  EXPECT_EQ(m.at("layernorm").gap_mostly_after, "gemm") << "the gap sat between the gemm and the layernorm";
  EXPECT_EQ(m.at("layernorm").gap_mostly_after_ms, m.at("layernorm").gap_before_ms) << "its only gap";
  EXPECT_TRUE(m.at("gemm").gap_mostly_after.empty());
  EXPECT_LT(m.at("layernorm").host_ms, 29.0) << "the sleep was outside the front-end";
  EXPECT_GT(m.at("layernorm").host_ms, 0.0);
}
