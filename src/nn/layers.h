// nn/layers.h: the layers models share (parameter holders with their bf16 copies, linear, embedding,
// the post-LN encoder layer of BERT) as explicit forward/backward pairs for training.
//
// Every activation is a 2-D row matrix over the N real tokens of a PACKED batch (sequences back
// to back, cu_seqlens), so no GEMM, attention or elementwise work is spent on padding. Each
// forward writes what its backward needs into a Saved struct (views into a Workspace that is
// allocated once and grown only when a batch needs more rows); each backward takes the gradient
// of the layer output, returns the gradient of the layer input in the same buffer, and
// ACCUMULATES (+=) into the parameter gradients (ops.h training conventions).
//
// Encoder layer (post-LN, HF BertLayer), C hidden, I intermediate, NH heads:
//   qkv[N,3C] = x Wqkv^T + bqkv                   saved (q, k, v for the attention backward)
//   ctx[N,C]  = attention(q, k, v) (+ prob dropout) saved, with lse [NH, N]
//   h[N,C]    = dropout(ctx Wo^T + bo)            saved (the LayerNorm backward re-reads it)
//   x1[N,C]   = LN(h + x)                         saved with mean1/rstd1 [N]
//   fp[N,I]   = x1 W1^T + b1                      saved: the pre-activation (GELU backward)
//   f[N,I]    = act(fp)                           saved (the W2 gradient reads it)
//   h2[N,C]   = dropout(f W2^T + b2)              saved
//   out[N,C]  = LN(h2 + x1)                       saved with mean2/rstd2: the next layer's input
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ops/ops.h"
#include "unmask/bert.h"
#include "unmask/tensor.h"

namespace unmask::train {

/// One parameter's storage: an owned contiguous f32 value and its gradient (same shape), and for
/// the layers that run with bf16 activations a bf16 copy of the value (`half`, rounded from
/// `value` by refresh_halves before each step's forward; the optimizer updates `value` only).
struct PV {
  Tensor value, grad, half;
  bool defined() const { return value.defined(); }
};
/// p->half = dtype(p->value) for every PV, rounded to nearest even on its device (allocated on
/// first use), in one ops::copy_many (a few launches on CUDA, not one a tensor).
void refresh_halves(Context& ctx, const std::vector<PV*>& pvs, DType dtype);
/// The value a linear layer multiplies activations of `dtype` by: value (f32) or half.
const Tensor& value_for(const PV& p, DType dtype);
/// An owned contiguous copy of `src` (any float layout already widened to f32) with a zero grad,
/// on the CPU (BertTrainModel::to moves the PVs to a device).
PV make_pv(const Tensor& src);
/// A host PV of `shape` whose values are draw() in order, with a zero grad (a model's init).
PV filled_pv(const Shape& shape, const std::function<float()>& draw);
/// `p`'s value and gradient copied to `device` (p itself when already there).
PV pv_to(const PV& p, Device device);
/// Every PV of `pvs` moved to ctx's device (pv_to), ctx made current first so that the new device
/// memory is tagged with its stream: a model's to(ctx), before it rebuilds its Param views.
void pvs_to(Context& ctx, const std::vector<PV*>& pvs);

/// Zeroes a contiguous tensor on its device (CUDA: cudaMemset on the legacy default stream,
/// ordered with a Context's blocking stream, see src/cuda/copy.h).
void zero_tensor(Tensor& t);
/// Zeroes the gradients of `pvs` on ctx's stream (ops::zero_many: a few multi-tensor launches on
/// CUDA): the models' zero_grad(ctx).
void zero_grads(Context& ctx, const std::vector<PV*>& pvs);

struct EmbeddingParams {
  PV word, pos, type;    // [V, C], [P, C], [type_vocab, C]
  PV ln_g, ln_b;         // [C]
};

struct EncoderLayerParams {
  PV qkv_w, qkv_b;           // [3C, C], [3C]: q rows, then k, then v (Params are row slices)
  PV attn_out_w, attn_out_b; // [C, C], [C]
  PV ln1_g, ln1_b;           // [C]
  PV ffn_in_w, ffn_in_b;     // [I, C], [I]
  PV ffn_out_w, ffn_out_b;   // [C, I], [C]
  PV ln2_g, ln2_b;           // [C]
};

/// Growable scratch memory: slot s holds one flat buffer, grown (with 25% headroom) when a
/// request needs more elements or another dtype. A view stays valid until the same slot is
/// requested again with a larger size, so every tensor a step keeps gets its own slot. Buffers
/// live on `device()`.
class Workspace {
 public:
  /// A contiguous view of `shape` and `dtype` over slot `slot` (uninitialised).
  Tensor get(int slot, const Shape& shape, DType dtype = DType::f32);
  int64_t bytes() const;
  Device device() const { return device_; }
  /// Frees every buffer; later requests allocate on `device`.
  void set_device(Device device);

 private:
  std::vector<Tensor> buffers_;
  Device device_ = Device::cpu;
};

/// Where a dropout site draws its mask (ops::dropout's seed and counter offset; p = 0: off).
struct DropoutSite {
  float p = 0.0f;
  uint64_t seed = 0, offset = 0;
};

/// The embeddings' saved activations: e = word + pos + type (the LayerNorm input) and its
/// statistics; out = dropout(LN(e)) is the first layer's input.
struct EmbeddingSaved {
  Tensor e, mean, rstd, out;  // [N, C], [N], [N], [N, C]
};

struct LayerSaved {
  Tensor qkv;                 // [N, 3C]
  Tensor ctx, lse;            // [N, C], [NH, N]
  Tensor h, x1, mean1, rstd1; // [N, C], [N, C], [N], [N]
  Tensor fp, f;               // [N, I] pre-activation and activation
  Tensor h2, out, mean2, rstd2;
};

/// Backward scratch (one set, shared by all layers).
struct LayerScratch {
  Tensor t1, t2;  // [N, C]
  Tensor df;      // [N, I]
  Tensor dqkv;    // [N, 3C]
};

/// Packed token ids of a batch (i32 [N] each) and the attention arguments.
struct PackedTokens {
  Tensor ids, type_ids, pos_ids;  // on the model's device (the embedding ops read them there)
  Tensor host_ids;    // ids on the host (the same tensor as ids on the CPU)
  /// i32 [B+1], on the HOST on every device: the step's index arithmetic reads it, and the
  /// attention front-end takes the longest sequence (its dropout stride) from it; the CUDA
  /// attention uploads the B+1 values itself.
  Tensor cu_seqlens;
  int64_t B = 0, N = 0, T = 0;  // T: the longest sequence
};

struct EncoderShape {
  int64_t C = 0, I = 0, NH = 0;
  float eps = 1e-12f;
  ops::Activation act = ops::Activation::gelu;
  /// The encoder layers' activation dtype (their saved tensors, gradients and scratch): f32, or
  /// bf16 (layer weights through PV::half; LayerNorm statistics, lse and every parameter
  /// gradient stay f32). The layer functions follow the dtype of the tensors they are given.
  DType activations = DType::f32;
};

// ---- embeddings -------------------------------------------------------------------------------
void embedding_forward(Context& ctx, const EmbeddingParams& p, const PackedTokens& tok,
                       const EncoderShape& s, const DropoutSite& drop, EmbeddingSaved& saved);
/// dy: gradient of saved.out [N, C] (clobbered). Rows whose id is `pad_id` add nothing to the
/// word-embedding gradient (nn.Embedding padding_idx, as HF's BertEmbeddings).
void embedding_backward(Context& ctx, EmbeddingParams& p, const PackedTokens& tok,
                        const EncoderShape& s, const DropoutSite& drop, const EmbeddingSaved& saved,
                        Tensor& dy, int64_t pad_id);

// ---- encoder layer --------------------------------------------------------------------------
/// Dropout sites of one layer: attention probabilities, attention output, FFN output.
struct LayerDropout {
  DropoutSite attn_probs, attn_out, ffn_out;
};
void layer_forward(Context& ctx, const EncoderLayerParams& p, const Tensor& x,
                   const ops::AttentionArgs& aa, const EncoderShape& s, const LayerDropout& drop,
                   LayerSaved& saved);
/// g: in: gradient of saved.out; out: gradient of the layer input x. [N, C]
void layer_backward(Context& ctx, EncoderLayerParams& p, const Tensor& x, const LayerSaved& saved,
                    const ops::AttentionArgs& aa, const EncoderShape& s, const LayerDropout& drop,
                    Tensor& g, LayerScratch& scratch);

// ---- linear layers (heads) ------------------------------------------------------------------
/// y = x W^T + b. x [M, K], W [N_out, K], y [M, N_out]. bf16 x and y use w.half and b.half.
void linear_forward(Context& ctx, const Tensor& x, const PV& w, const PV& b, Tensor& y,
                    ops::Activation act = ops::Activation::none);
/// dW += dy^T x, db += colsum(dy) (f32 gradients for any activation dtype); dx = dy W (+ dx
/// when accumulate_dx) unless dx is null.
void linear_backward(Context& ctx, const Tensor& x, PV& w, PV& b, const Tensor& dy, Tensor* dx,
                     bool accumulate_dx = false);
/// linear_backward's input gradient alone: dx = dy W (+ dx when accumulate_dx), W in dy's dtype.
void linear_input_grad(Context& ctx, const PV& w, const Tensor& dy, Tensor& dx, bool accumulate_dx = false);

/// The soft-target cross-entropy of a classifier: mean over the B rows of sum_k -t[b, k]
/// log_softmax(z[b])[k] (double sums); dlogits (allocated, f32 [B, K]) = loss_scale x its
/// gradient, (softmax(z) sum(t) - t) / B. logits, targets: host f32 [B, K].
double soft_target_cross_entropy(const Tensor& logits, const Tensor& targets, float loss_scale, Tensor& dlogits);

}  // namespace unmask::train
