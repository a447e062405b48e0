// tests/cuda/test_cuda_bert_graph.cc: BERT inference on CUDA in bf16 / f16 (BertModel::to(ctx,
// dtype)) and as CUDA graphs (ForwardOptions::cuda_graph), the path `unmask bench infer
// --device cuda --precision bf16` and `unmask infer --device cuda --precision bf16` take.
//   * bf16 / f16 against the CPU's f32 forward of the same weights: every output within a bound
//     set by the format's precision (head size 64, so the flash kernel runs);
//   * a graph replay gives the eager forward's bits, for the input it was captured with and for
//     a new input of the same shape (a graph that kept reading the old input would fail);
//   * packed batches with other lengths but the same B, N and longest sequence reuse the graph;
//     a new shape captures a second one;
//   * results do not alias: an earlier output is unchanged by later calls;
//   * the graph's memory is its own: tensors allocated after the capture, of the activations'
//     and the f32 scratch's sizes, are unchanged by replays (a graph whose blocks went back to
//     the shared cache would overwrite them);
//   * the encoder-only form (hidden states in) and padded batches without a mask;
//   * the residual in the projection GEMM (UNMASK_CUDA_RESIDUAL_GEMM=1) against the residual in
//     the LayerNorm (the default).
// Without a CUDA device every test skips.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../scoped_env.h"
#include "cuda/cuda_state.h"
#include "cuda_test_common.h"
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

BertConfig small_config() {
  BertConfig c;
  c.vocab_size = 301;
  c.hidden_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;  // head size 64: the flash kernel
  c.intermediate_size = 512;
  c.max_position_embeddings = 128;
  c.num_labels = 3;
  return c;
}

const BertHeads kHeads{.pooler = true, .mlm = true, .nsp = true, .qa = true, .seqcls = true};

ForwardOptions all_outputs(bool graph) {
  ForwardOptions o;
  o.pack_weights = false;
  o.cuda_graph = graph;
  return o;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu), hb = b.to(Device::cpu);
  return ha.shape() == hb.shape() && ha.dtype() == hb.dtype() && std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

std::vector<const Tensor*> outputs_of(const BertOutputs& o) {
  return {&o.last_hidden_state, &o.pooler_output, &o.mlm_logits, &o.nsp_logits,
          &o.qa_start_logits,   &o.qa_end_logits, &o.seqcls_logits};
}

BertInput padded_batch(const BertConfig& cfg, const std::vector<int64_t>& lengths, int64_t T, uint64_t seed) {
  const int64_t B = int64_t(lengths.size());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> tok(5, cfg.vocab_size - 1);
  BertInput in;
  in.input_ids = Tensor::zeros({B, T}, DType::i64);
  in.attention_mask = Tensor::zeros({B, T}, DType::i64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lengths[size_t(b)]; ++t) {
      in.input_ids.data<int64_t>()[b * T + t] = tok(rng);
      in.attention_mask.data<int64_t>()[b * T + t] = 1;
    }
  return in;
}

BertInput packed_batch(const BertConfig& cfg, const std::vector<int32_t>& lengths, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(5, int32_t(cfg.vocab_size - 1));
  BertInput in;
  in.cu_seqlens = Tensor::empty({int64_t(lengths.size()) + 1}, DType::i32);
  int32_t* cu = in.cu_seqlens.data<int32_t>();
  cu[0] = 0;
  for (size_t b = 0; b < lengths.size(); ++b) cu[b + 1] = cu[b] + lengths[b];
  in.input_ids = Tensor::empty({cu[lengths.size()]}, DType::i32);
  for (int64_t i = 0; i < in.input_ids.numel(); ++i) in.input_ids.data<int32_t>()[i] = tok(rng);
  return in;
}

}  // namespace

TEST(CudaBertLowPrecision, Bf16AndFp16StayNearTheCpuForward) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = small_config();
  BertModel ref = BertModel::random(cfg, kHeads, base_seed() ^ 0x51);
  const BertInput padded = padded_batch(cfg, {40, 33, 7}, 40, base_seed() ^ 0x52);
  const BertInput packed = packed_batch(cfg, {17, 40, 3, 29}, base_seed() ^ 0x53);
  const BertOutputs want_padded = ref.forward(cpu(), padded, all_outputs(false));
  const BertOutputs want_packed = ref.forward(cpu(), packed, all_outputs(false));
  // Unit roundoff: bf16 2^-8 = 3.9e-3, f16 2^-11 = 4.9e-4. Every op rounds its output once and
  // two post-LN layers keep the scale at ~1, so the worst element stays within ~16 units
  // (a wrong kernel is off by O(1)).
  for (const auto& [dt, bound] : {std::pair{DType::bf16, 6e-2}, std::pair{DType::f16, 8e-3}}) {
    SCOPED_TRACE(dtype_name(dt));
    BertModel m = BertModel::random(cfg, kHeads, base_seed() ^ 0x51);
    m.to(gpu(), dt);
    ASSERT_EQ(m.dtype(), dt);
    for (const auto& [what, in, want] : {std::tuple{"padded", &padded, &want_padded}, {"packed", &packed, &want_packed}}) {
      const BertOutputs got = m.forward(gpu(), *in, all_outputs(false));
      const auto g = outputs_of(got), w = outputs_of(*want);
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_TRUE(g[i]->defined()) << what << " output " << i;
        EXPECT_EQ(g[i]->dtype(), dt) << what << " output " << i;
        // Padded rows of the padded batch are compared too: HF computes them the same way.
        EXPECT_LE(cuda_test::max_relative_error(*g[i], *w[i]), bound) << what << " output " << i;
      }
    }
  }
  // A converted model cannot be converted again (it would round twice).
  BertModel m = BertModel::random(cfg, kHeads, 1);
  m.to(gpu(), DType::bf16);
  EXPECT_THROW(m.to(gpu(), DType::f16), Error);
}

// A switch of a kernel that was measured and deleted is refused when the context is made, not
// silently ignored (a benchmark would report the default's figures as the switch's).
TEST(CudaBertLowPrecision, ASwitchOfADeletedKernelIsRefused) {
  REQUIRE_CUDA_DEVICE();
  for (const char* gone : {"UNMASK_CUDA_RESIDUAL_GEMM", "UNMASK_CUDA_LN_DROPOUT", "UNMASK_FLASH_BWD_SHORT"}) {
    test::ScopedEnv env(gone, "1");
    EXPECT_THROW(Context({.device = Device::cuda}), Error) << gone;
  }
}

// A graph is keyed by the CudaState settings that change the captured work: flipping TF32 on a
// live context (an f32 model) captures another graph, whose replay gives that setting's eager
// bits, not the first graph's.
TEST(CudaBertGraph, ASettingThatChangesTheWorkGetsItsOwnGraph) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = small_config();
  Context ctx({.device = Device::cuda});
  cuda::CudaState& cs = cuda::cuda_state(ctx);
  BertModel m = BertModel::random(cfg, kHeads, base_seed() ^ 0x81);
  m.to(ctx, DType::f32);
  const BertInput in = padded_batch(cfg, {32, 20}, 32, base_seed() ^ 0x82);
  Tensor hidden[2];
  for (int tf32 = 1; tf32 >= 0; --tf32) {
    cs.allow_tf32 = tf32 == 1;
    const BertOutputs graphed = m.forward(ctx, in, all_outputs(true));
    const BertOutputs eager = m.forward(ctx, in, all_outputs(false));
    EXPECT_TRUE(same_bits(graphed.last_hidden_state, eager.last_hidden_state)) << "tf32 " << tf32;
    hidden[tf32] = eager.last_hidden_state;
  }
  EXPECT_EQ(m.num_cuda_graphs(), 2u) << "the second setting replayed the first setting's graph";
  EXPECT_FALSE(same_bits(hidden[0], hidden[1])) << "the two settings gave the same bits: one path is not taken";
  cs.allow_tf32 = false;
}

TEST(CudaBertGraph, ReplayGivesTheEagerBitsForEveryInput) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = small_config();
  for (DType dt : {DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    BertModel m = BertModel::random(cfg, kHeads, base_seed() ^ 0x61);
    m.to(gpu(), dt);
    const BertInput a = padded_batch(cfg, {32, 20}, 32, base_seed() ^ 0x62);
    const BertInput b = padded_batch(cfg, {9, 32}, 32, base_seed() ^ 0x63);  // same shape, other data
    const BertOutputs eager_a = m.forward(gpu(), a, all_outputs(false));
    const BertOutputs eager_b = m.forward(gpu(), b, all_outputs(false));
    const BertOutputs graph_a = m.forward(gpu(), a, all_outputs(true));  // capture + replay
    EXPECT_EQ(m.num_cuda_graphs(), 1u);
    const Tensor graph_a_hidden_before = graph_a.last_hidden_state.to(Device::cpu);
    const BertOutputs graph_b = m.forward(gpu(), b, all_outputs(true));  // replay, new input
    const BertOutputs graph_a2 = m.forward(gpu(), a, all_outputs(true));
    EXPECT_EQ(m.num_cuda_graphs(), 1u);
    const auto ea = outputs_of(eager_a), eb = outputs_of(eager_b), ga = outputs_of(graph_a),
               gb = outputs_of(graph_b), ga2 = outputs_of(graph_a2);
    for (size_t i = 0; i < ea.size(); ++i) {
      EXPECT_TRUE(same_bits(*ga[i], *ea[i])) << "output " << i << ": first replay";
      EXPECT_TRUE(same_bits(*gb[i], *eb[i])) << "output " << i << ": replay with a new input";
      EXPECT_TRUE(same_bits(*ga2[i], *ea[i])) << "output " << i << ": third replay";
    }
    EXPECT_FALSE(same_bits(graph_a.last_hidden_state, graph_b.last_hidden_state)) << "different inputs, same output";
    // The first result is still what it was: outputs are copies, not the graph's buffers.
    EXPECT_TRUE(same_bits(graph_a.last_hidden_state, graph_a_hidden_before));
  }
}

TEST(CudaBertGraph, PackedLengthsShareAGraphAndNewShapesGetTheirOwn) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = small_config();
  BertModel m = BertModel::random(cfg, kHeads, base_seed() ^ 0x71);
  m.to(gpu(), DType::bf16);
  // B = 3, N = 60, longest 30 in both; the lengths differ.
  const BertInput p1 = packed_batch(cfg, {30, 20, 10}, base_seed() ^ 0x72);
  const BertInput p2 = packed_batch(cfg, {5, 25, 30}, base_seed() ^ 0x73);
  const BertInput p3 = packed_batch(cfg, {30, 30}, base_seed() ^ 0x74);  // a new shape
  for (const BertInput* in : {&p1, &p2, &p1}) {
    const BertOutputs g = m.forward(gpu(), *in, all_outputs(true));
    const BertOutputs e = m.forward(gpu(), *in, all_outputs(false));
    const auto go = outputs_of(g), eo = outputs_of(e);
    for (size_t i = 0; i < go.size(); ++i) EXPECT_TRUE(same_bits(*go[i], *eo[i])) << "output " << i;
  }
  EXPECT_EQ(m.num_cuda_graphs(), 1u);
  const BertOutputs g3 = m.forward(gpu(), p3, all_outputs(true));
  const BertOutputs e3 = m.forward(gpu(), p3, all_outputs(false));
  EXPECT_TRUE(same_bits(g3.last_hidden_state, e3.last_hidden_state));
  EXPECT_EQ(m.num_cuda_graphs(), 2u);
  m.clear_cuda_graphs();
  EXPECT_EQ(m.num_cuda_graphs(), 0u);
  const BertOutputs again = m.forward(gpu(), p1, all_outputs(true));  // captured again
  EXPECT_EQ(m.num_cuda_graphs(), 1u);
  EXPECT_TRUE(same_bits(again.mlm_logits, m.forward(gpu(), p1, all_outputs(false)).mlm_logits));
}

TEST(CudaBertGraph, ReplaysDoNotTouchMemoryAllocatedAfterTheCapture) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = small_config();
  BertModel m = BertModel::random(cfg, kHeads, base_seed() ^ 0x81);
  m.to(gpu(), DType::bf16);
  const BertInput in = packed_batch(cfg, {48, 48, 48, 48}, base_seed() ^ 0x82);
  const int64_t N = 192, C = cfg.hidden_size, I = cfg.intermediate_size;
  m.forward(gpu(), in, all_outputs(true));  // capture
  gpu().synchronize();
  // Tensors of every activation size the forward uses, filled with a known pattern: with the
  // graph's blocks back in the shared cache, some of these would be given the same addresses.
  // [N, cols] for every width the forward uses, in bf16 (its activations, qkv, the MLM logits, the
  // head outputs) and in f32 (the GEMMs' f32 scratch for exact GELU and the tanh pooler): with
  // the allocator's size classes, every class the graph's pool holds (x/attn/h, qkv, the FFN
  // rows, the logits, the f32 scratches, the small heads) is among them. Each tensor holds bit
  // pattern `k` in every 16-bit half.
  std::vector<Tensor> held;
  std::vector<uint16_t> pattern;
  for (int rep = 0; rep < 3; ++rep)
    for (int64_t cols : {C, 3 * C, I, cfg.vocab_size, int64_t(1), int64_t(2)})
      for (DType dt : {DType::bf16, DType::f32}) {
        Tensor h = Tensor::empty({N, cols}, dt);
        const uint16_t bits = uint16_t(0x3f80 + held.size());
        uint16_t* p = static_cast<uint16_t*>(h.raw());
        for (size_t i = 0; i < h.nbytes() / 2; ++i) p[i] = bits;
        held.push_back(h.to(Device::cuda));
        pattern.push_back(bits);
      }
  for (int i = 0; i < 3; ++i) m.forward(gpu(), in, all_outputs(true));
  gpu().synchronize();
  for (size_t k = 0; k < held.size(); ++k) {
    const Tensor h = held[k].to(Device::cpu);
    const uint16_t* p = static_cast<const uint16_t*>(h.raw());
    size_t changed = 0;
    for (size_t i = 0; i < h.nbytes() / 2; ++i) changed += p[i] != pattern[k];
    EXPECT_EQ(changed, 0u) << "tensor " << k << " " << h.describe() << " was overwritten by a replay";
  }
}

// The encoder-only form (`bench infer --encoders-only`: hidden states in, the first op a device
// copy inside the graph) and a padded batch without a mask.
TEST(CudaBertGraph, EncoderOnlyAndUnmaskedPaddedBatches) {
  REQUIRE_CUDA_DEVICE();
  const BertConfig cfg = small_config();
  BertModel m = BertModel::random(cfg, kHeads, base_seed() ^ 0x91);
  m.to(gpu(), DType::bf16);
  BertInput padded = padded_batch(cfg, {24, 24, 24}, 24, base_seed() ^ 0x92);
  padded.attention_mask = Tensor();  // every token real
  const BertOutputs ge = m.forward(gpu(), padded, all_outputs(true));
  const BertOutputs ee = m.forward(gpu(), padded, all_outputs(false));
  for (size_t i = 0; i < outputs_of(ge).size(); ++i)
    EXPECT_TRUE(same_bits(*outputs_of(ge)[i], *outputs_of(ee)[i])) << "unmasked padded, output " << i;

  const int64_t N = 72;
  std::mt19937_64 rng(base_seed() ^ 0x93);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int round = 0; round < 2; ++round) {  // capture, then a replay with new hidden states
    Tensor h = Tensor::empty({N, cfg.hidden_size}, DType::f32);
    for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = nd(rng);
    const Tensor hidden = h.cast(DType::bf16).to(Device::cuda);
    ForwardOptions g = all_outputs(true), e = all_outputs(false);
    g.embeddings = e.embeddings = false;
    g.hidden_in = e.hidden_in = &hidden;
    const BertOutputs go = m.forward(gpu(), padded, g), eo = m.forward(gpu(), padded, e);
    for (size_t i = 0; i < outputs_of(go).size(); ++i)
      EXPECT_TRUE(same_bits(*outputs_of(go)[i], *outputs_of(eo)[i])) << "encoder only, round " << round << ", output " << i;
  }
  EXPECT_EQ(m.num_cuda_graphs(), 2u);  // with and without the embeddings
}
