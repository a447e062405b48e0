// ops/ops.h: the op front-ends every layer and model calls.
//
// Each op validates its tensors at this boundary (dtype, shape, device, strides; messages
// carry the actual and expected values), derives the sizes, and dispatches on the device:
// the CPU backend (src/cpu, fp32, ISA chosen at run time) or the CUDA backend (src/cuda,
// later). Kernels behind these functions see raw pointers and trust their inputs. Every op
// has a float64 reference in src/ref used by the tests.
//
// Dimension vocabulary: B batch, T sequence, C channels (hidden), NH heads, HS head size,
// V vocabulary, N rows (tokens over a batch), M/N/K GEMM sizes.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask::ops {

/// Whether a backend implements `op` ("gemm", "layernorm", "activation", "softmax",
/// "embedding", "attention", the training ops) for tensors on `device` with element type
/// `dtype`. Tests loop over the supported cases; an unsupported call throws Unsupported naming
/// all three. On the CPU, bf16 / f16 are emulated (f32 arithmetic, one rounding of each output:
/// correct, not fast) by gemm, layernorm, activation and the training ops of the encoder layers.
bool supports(std::string_view op, Device device, DType dtype);
/// Every op name the table knows (op_table.cc), in its order.
std::vector<std::string_view> supported_ops();

/// Elementwise activations (also GEMM epilogues).
enum class Activation : uint8_t {
  none,
  gelu,       // exact: 0.5 x (1 + erf(x / sqrt 2))  (HF "gelu")
  gelu_tanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (HF "gelu_new", AIT "fast_gelu")
  tanh,       // pooler
  relu,       // max(x, 0) (the DALL-E tokenizer); its derivative at 0 is taken as 0, as PyTorch does
};
const char* activation_name(Activation a);

enum class Trans : uint8_t { no, yes };

struct GemmArgs {
  float alpha = 1.0f;
  float beta = 0.0f;               // c = ... + beta * c (accumulate)
  const Tensor* bias = nullptr;    // f32 [N], added before the activation
  Activation act = Activation::none;
  /// beta times `addend` instead of beta times c's old values: c = ... + beta * addend, c only
  /// written (a residual branch's out = residual + x W^T + b without first copying the residual
  /// into out). c's shape, dtype, device and strides; it may be c itself, not partly overlap it.
  /// cuBLASLt reads it as its C operand (D = c); elsewhere it is copied into c first.
  const Tensor* addend = nullptr;
};

/// c = act(alpha * op(a) @ op(b) + bias + beta * (addend or c)).
/// 2-D: a [M,K] ([K,M] if ta), b [K,N] ([N,K] if tb), c [M,N].
/// 3-D: the same with a leading batch dim on a, b and c (b may have batch 1 = shared).
/// Innermost stride must be 1; row strides may be larger (slices of wider buffers).
void gemm(Context& ctx, const Tensor& a, Trans ta, const Tensor& b, Trans tb, Tensor& c,
          const GemmArgs& args = {});

/// A weight matrix W [N_out, K] (HF Linear layout; the GEMM uses op(b) = W^T) pre-packed once
/// into the CPU backend's GEMM layout, so a call does not re-pack the weights (at M = 128
/// tokens the BLAS re-pack of a [3072, 768] matrix is a large share of the call). Opaque and
/// cheap to copy (shared, immutable); the packed buffers live as long as any copy. Holds no
/// reference to the source tensor, so the caller may free it (or release its pages).
class PackedWeight {
 public:
  /// Backend-specific contents (src/cpu/gemm_packed_cpu.cc).
  struct Impl {
    virtual ~Impl() = default;
  };
  PackedWeight() = default;
  PackedWeight(std::shared_ptr<const Impl> impl, int64_t n_out, int64_t k, Device device,
               int64_t nbytes, DType compute = DType::f32)
      : impl_(std::move(impl)), n_out_(n_out), k_(k), device_(device), nbytes_(nbytes), compute_(compute) {}
  bool defined() const { return impl_ != nullptr; }
  int64_t n_out() const { return n_out_; }   // N_out: rows of W, columns of the GEMM output
  int64_t k() const { return k_; }           // K: columns of W, the reduction length
  Device device() const { return device_; }
  int64_t nbytes() const { return nbytes_; } // bytes held by the packed buffers
  DType compute() const { return compute_; } // f32, or bf16: the products' inputs rounded to bf16
  const Impl* impl() const { return impl_.get(); }

 private:
  std::shared_ptr<const Impl> impl_;
  int64_t n_out_ = 0, k_ = 0;
  Device device_ = Device::cpu;
  int64_t nbytes_ = 0;
  DType compute_ = DType::f32;
};

/// Packs w (f32 [N_out, K], contiguous) for gemm_packed on ctx's device; the split of N_out
/// across threads is chosen for ctx.num_threads() (other thread counts still work).
/// compute bf16 (CPU): W is stored as bf16 and each call rounds its rows of `a` to bf16, the
/// products accumulating in fp32 on the CPU's bf16 matrix unit (cpu_bf16_unit(); refused
/// without one).
PackedWeight pack_weight(Context& ctx, const Tensor& w, DType compute = DType::f32);

/// c = act(alpha * a @ W^T + bias + beta * c) with W packed by pack_weight: the same result as
/// gemm(ctx, a, Trans::no, W, Trans::yes, c, args) within fp32 rounding.
///   a [M, K], c [M, N_out] (row strides allowed, innermost stride 1), bias f32 [N_out].
void gemm_packed(Context& ctx, const Tensor& a, const PackedWeight& w, Tensor& c,
                 const GemmArgs& args = {});

/// y = LayerNorm(x + residual) * gamma + beta over the last dim C (statistics in fp32 or
/// wider). x, residual, y: [N, C] (row stride allowed); gamma, beta: [C]. y may alias x.
///
/// Training: when `mean` and `rstd` are given (f32 [N] each) the row statistics of
/// s = x + residual are written there for layernorm_backward; y must then not alias x or
/// residual (the backward re-reads them).
void layernorm(Context& ctx, const Tensor& x, const Tensor* residual, const Tensor& gamma,
               const Tensor& beta, float eps, Tensor& y, Tensor* mean = nullptr,
               Tensor* rstd = nullptr);

/// y = act(x) elementwise, same shape; y may alias x.
void activation(Context& ctx, const Tensor& x, Tensor& y, Activation act);

/// Row-wise softmax over the last dim; y may alias x.
void softmax(Context& ctx, const Tensor& x, Tensor& y);

/// dst = src: same shape and dtype (any), on any devices, innermost stride 1 or contiguous; or,
/// on one device, a float conversion between f32, bf16 and f16 (widening exact, narrowing
/// rounds to nearest even: the boundaries of bf16 training activations).
/// Queued on ctx's stream when a side is on CUDA (capturable in a CUDA graph when both are);
/// a copy to host memory has finished when it returns. dst must not overlap src.
void copy(Context& ctx, const Tensor& src, Tensor& dst);

/// One tensor of copy_many: *dst = *src under copy's rules.
struct CopyItem {
  const Tensor* src = nullptr;
  Tensor* dst = nullptr;
};
/// copy for every item, the same bits. On CUDA the contiguous f32 -> bf16 / f16 items (the bf16
/// weight copies that training with bf16 activations refreshes before each step: ~200 tensors of
/// BERT-large) go in a few launches, 32 tensors each; every other item takes copy. No item's dst
/// may overlap another item's src or dst (checked), so the order of the items does not matter.
void copy_many(Context& ctx, const std::vector<CopyItem>& items);

/// Every byte of every tensor set to 0 (any dtype; each contiguous, on ctx's device; null or
/// empty tensors are an error / skipped). Queued on ctx's stream on CUDA: a launch per 32 tensors
/// (the gradients a step zeroes before its backward: ~200-400 tensors) instead of a cudaMemset
/// each on the legacy default stream, which serialises against the context's stream.
void zero_many(Context& ctx, const std::vector<Tensor*>& tensors);

/// out[i, :] = table[ids[i], :] (+ out[i, :] when accumulate). ids: i32 or i64 [N];
/// table [V, C]; out [N, C]. An id outside [0, V) throws naming the position and the id.
void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out,
               bool accumulate = false);

/// BERT's embedding block: out = LayerNorm(word[ids] + pos[pos_ids] + type[type_ids]) * gamma
/// + beta. ids, pos_ids, type_ids: i32 [N] on out's device (type_ids may be null: all type 0);
/// word, pos, type: [*, C] of out's dtype; gamma, beta: [C]; out: [N, C].
/// CPU: embedding, two accumulating embeddings and layernorm (the same bits as calling them).
/// CUDA: one fused kernel (f32, bf16, f16; sum and statistics in fp32), ids trusted.
void embedding_layernorm(Context& ctx, const Tensor& ids, const Tensor& pos_ids, const Tensor* type_ids,
                         const Tensor& word, const Tensor& pos, const Tensor& type, const Tensor& gamma,
                         const Tensor& beta, float eps, Tensor& out);

/// Multi-head scaled-dot-product attention without projections, never materialising
/// B x NH x T x T (blocked, online softmax).
///   q, k, v: [N, NH*HS] row views (row stride allowed: slices of a fused [N, 3C] buffer)
///   out:     [N, NH*HS]
/// Sequences are given either packed, by cu_seqlens (i32 [B+1], sequence b is rows
/// cu[b]..cu[b+1]-1), or padded, by padded_seq_len T (N = B*T) with an optional
/// key_padding_mask [B, T] (nonzero = real token). Padded query rows still get an output
/// (attending over the real keys), as in HF.
struct AttentionArgs {
  int num_heads = 0;
  float scale = 0.0f;                       // usually 1/sqrt(HS)
  const Tensor* cu_seqlens = nullptr;       // packed mode
  int64_t padded_seq_len = 0;               // padded mode
  const Tensor* key_padding_mask = nullptr; // padded mode, optional
  /// Packed mode with cu_seqlens on the device: the longest sequence, if the caller knows it
  /// (it sizes the CUDA grid; 0 = read the lengths back, a stream sync, which a CUDA graph
  /// capture cannot do). Must be >= every sequence's length.
  int64_t max_seqlen = 0;
};
void attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const AttentionArgs& args);

// ==== training: backward ops, losses, dropout, optimizer updates ================================
//
// Conventions: gradients of ACTIVATIONS are overwritten; gradients of PARAMETERS (dgamma, dbeta,
// dbias, dtable, GEMM weight gradients via beta = 1) are ACCUMULATED (+=) so micro-batches of a
// gradient-accumulation step add up; the trainer zeroes them once per optimizer step. All f32.

/// Backward of layernorm(x, residual, gamma, beta, eps, y, &mean, &rstd).
///   x, residual (may be null), dy, dx: [N, C]; gamma: [C]; mean, rstd: [N] from the forward.
///   dx (overwritten) is also the gradient of the residual. dgamma, dbeta: [C], accumulated.
///   dx may alias dy.
/// accumulate_dx: dx += the gradient instead (fp32 sum, one rounding for bf16/f16), for a
///   pre-LN block whose residual stream's gradient already sits in dx (ViT: g += LN2'(dln) in
///   one pass instead of a write of dln and an axpy); dx must then not overlap dy.
void layernorm_backward(Context& ctx, const Tensor& x, const Tensor* residual, const Tensor& gamma,
                        const Tensor& mean, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                        Tensor& dgamma, Tensor& dbeta, bool accumulate_dx = false);

/// dx = dy * act'(x) elementwise, x the activation's INPUT (pre-activation). dx may alias dy.
/// y (optional; x's shape, dtype and device, overlapping none of x, dy, dx): also act(x), the
/// bits of activation(x, y). For a layer that recomputes its activation output in the backward
/// instead of keeping it (the ViT blocks' recompute_gelu): on CUDA one pass over x instead of
/// two; on the CPU the two ops in sequence.
/// dbias (optional; f32 [C] on x's device, accumulated): also dbias += the column sums of dx, the
/// bits of bias_grad(dx, dbias) after this op: the bias gradient of the linear layer whose output
/// x is (an MLP's first). On CUDA formed in the same pass (no second read of dx).
void activation_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor& dx,
                         Activation act, Tensor* y = nullptr, Tensor* dbias = nullptr);

/// dbias[c] += sum_n dy[n, c].  dy: [N, C] (row stride allowed); dbias: [C].
void bias_grad(Context& ctx, const Tensor& dy, Tensor& dbias);

/// The parameter gradients of a linear layer y = x W^T + b: dw += dy^T x and, when db is given,
/// db += sum_n dy[n, :]. dy [N, N_out] and x [N, K] share a dtype (f32; bf16/f16 on CUDA,
/// emulated on the CPU); dw f32 [N_out, K], db f32 [N_out]: bias_grad, then the GEMM (cuBLASLt's
/// BGRADB epilogue summing dy's columns inside the GEMM was slower on an H200, BENCHMARKS.md).
void linear_param_grads(Context& ctx, const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* db);

/// dx = y * (dy - rowsum(dy * y)) for y = softmax(x) over the last dim. [N, C]; dx may alias dy.
void softmax_backward(Context& ctx, const Tensor& y, const Tensor& dy, Tensor& dx);

/// dtable[ids[n], :] += dout[n, :] (repeated ids add up). ids i32/i64 [N]; dout [N, C];
/// dtable [V, C]. Deterministic: the result does not depend on the thread count.
void embedding_backward(Context& ctx, const Tensor& ids, const Tensor& dout, Tensor& dtable);

/// Softmax cross-entropy over the rows of logits [M, V] with targets i32 [M]; a negative target
/// marks an ignored row (loss 0, gradient 0). Writes losses[m] (f32 [M], may be null) and, when
/// dlogits is given ([M, V], may alias logits), dlogits = grad_scale * (softmax(row) - onehot).
/// Returns the sums needed for mean loss and accuracy over the non-ignored rows.
struct CrossEntropyStats {
  double loss_sum = 0;   // sum of -log p(target) over non-ignored rows
  int64_t count = 0;     // non-ignored rows
  int64_t correct = 0;   // non-ignored rows whose argmax (first maximum) equals the target
};
CrossEntropyStats cross_entropy(Context& ctx, const Tensor& logits, const Tensor& targets,
                                Tensor* losses, Tensor* dlogits, float grad_scale);

/// Counter-based dropout (Philox-4x32-10, src/core/philox.h): element i of x (flat row-major
/// index over x's logical shape) is kept iff philox_uniform(seed, offset + i) >= p, and kept
/// elements are scaled by 1/(1-p). The same (seed, offset) gives the same mask on every device
/// and thread count, so the backward recomputes it instead of storing it. p = 0 copies.
/// x, y: same shape (2-D, row stride allowed); y may alias x.
void dropout(Context& ctx, const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t offset);
/// dx = dy * mask / (1-p) with the forward's mask. dx may alias dy.
void dropout_backward(Context& ctx, const Tensor& dy, Tensor& dx, float p, uint64_t seed,
                      uint64_t offset);

/// Attention for training: as attention() and additionally
///   * writes lse (f32 [NH, N]): log(sum_j exp(scale q.k_j)) over the real keys of each
///     query row (the backward recomputes the probabilities from it; -inf for a query whose
///     sequence has no real key);
///   * applies dropout with probability dropout_p to the normalised probabilities: the
///     (head h, query row r, key position j within the sequence) element is dropped iff
///     philox_uniform(seed, offset + (h * N + r) * T + j) < p, T the longest sequence
///     (padded: padded_seq_len), kept ones scaled by 1/(1-p).
struct AttentionTrainArgs {
  float dropout_p = 0.0f;
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;
};
void attention_forward_train(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                             Tensor& out, Tensor& lse, const AttentionArgs& args,
                             const AttentionTrainArgs& train);
/// Gradients of sum(out * dout) w.r.t. q, k, v (overwritten; dq/dk/dv may be column slices of
/// one fused [N, 3C] buffer). q, k, v, out, lse and the args are the forward's.
void attention_backward(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq,
                        Tensor& dk, Tensor& dv, const AttentionArgs& args,
                        const AttentionTrainArgs& train);

// ---- convolution (the DALL-E tokenizer's; inference) ----------------------------------------------

/// y = F.conv2d(x, w, bias, stride, padding): x f32 [B, Cin, H, W] NCHW contiguous, w [Cout, Cin,
/// k, k], bias [Cout] or null, y [B, Cout, OH, OW] (OH = (H + 2 padding - k) / stride + 1). CPU:
/// each image unfolded (im2col) and one GEMM (oneDNN's matmul in a oneDNN build); CUDA: cuDNN,
/// fp32 FMA math (loaded at the first call). Float64 oracle: ref/conv_ref.h.
struct Conv2dArgs {
  int64_t stride = 1, padding = 0;
  const Tensor* bias = nullptr;
};
void conv2d(Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, const Conv2dArgs& args);

// ---- windowed attention with an additive bias (Swin, Video Swin, BEVT) --------------------------
//
// Rows come in windows of `window` tokens (window w = rows w N .. w N + N - 1: the caller has
// rolled and partitioned the tokens); the C = NH HS columns split into heads. Per window w, head h:
//   S = scale q_h k_h^T + bias[h] (+ mask[w mod M]),  P = softmax(S),  out_h = P v_h
// bias: f32 [NH, N, N] contiguous (a relative-position table gathered for the block), or null;
// mask: f32 [M, N, N] contiguous (0 inside a shifted-window region, -100 across), window w
// taking mask w mod M (the windows of a sample in order, samples one after another), or null.
// Float64 oracle: ref/window_attention_ref.h. f32 on the CPU and on CUDA.
struct WindowAttentionArgs {
  int num_heads = 0;
  int64_t window = 0;          // N tokens per window (Video Swin 8x7x7 = 392, Swin 7x7 = 49)
  float scale = 0.0f;          // usually 1/sqrt(HS)
  const Tensor* bias = nullptr;
  const Tensor* mask = nullptr;
};
/// out (overwritten) and, when lse is given (training), lse f32 [NH, R] = log sum_j exp(S_rj)
/// per head and row. q, k, v, out: f32 [R, NH HS] rows (row stride allowed: column slices of a
/// fused [R, 3C] buffer), R a multiple of N.
void window_attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const WindowAttentionArgs& args, Tensor* lse = nullptr);
/// Gradients of sum(out * dout): dq, dk, dv overwritten (like q; may be column slices of one
/// buffer); dbias (f32 [NH, N, N], when given) ACCUMULATES the sum over windows of dS, in window
/// order whatever the thread count. q, k, v, out, lse and args are the forward's.
void window_attention_backward(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv,
                               Tensor* dbias, const WindowAttentionArgs& args);

// ---- layout and small tensor ops (BEVT's tokenizer, neck and drop path on any device) --------

/// y[b, j, i] = x[b, i, j]: x f32 [B, R, C] or [R, C] (B = 1), y [B, C, R] / [C, R]; both
/// contiguous on one device, not overlapping. Exact (a permutation).
void transpose(Context& ctx, const Tensor& x, Tensor& y);
/// 2 x 2 max pooling at stride 2 (torch.nn.functional.max_pool2d(x, 2)): x f32 [B, C, H, W]
/// contiguous, H and W even -> y [B, C, H/2, W/2]. A NaN in a window gives NaN, as PyTorch's.
void max_pool2x2(Context& ctx, const Tensor& x, Tensor& y);
/// ids[b, p] = argmax over c of x[b, c, p] (the first maximum; the first NaN if there is one, as
/// torch.argmax): x f32 [B, C, P] contiguous -> ids i32 [B, P]. The DALL-E tokenizer's code per cell.
void argmax_channels(Context& ctx, const Tensor& x, Tensor& ids);
/// y[r, :] = scales[r / rows_per_group] * x[r, :] (drop path's per-sample branch scale):
/// x, y f32 [R, C] (row stride allowed; y may alias x), scales f32 [R / rows_per_group] on the
/// same device, R a multiple of rows_per_group.
void scale_rows(Context& ctx, const Tensor& x, const Tensor& scales, int64_t rows_per_group, Tensor& y);

// ---- optimizer updates (elementwise, parallel; the optimizer in src/train drives them) -----

/// One Adam-family moment update with bias correction and decoupled weight decay:
///   g' = grad_scale * g;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
///   u  = (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps) + weight_decay * p
struct AdamArgs {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.0f;
  int64_t step = 1;        // 1-based, for the bias correction
  float grad_scale = 1.0f; // clipping and accumulation factors folded in
};
/// AdamW (torch.optim.AdamW): p -= lr * (m_hat / (sqrt(v_hat) + eps)) + lr * wd * p, i.e.
/// p = p * (1 - lr*wd) - lr * m_hat/(sqrt(v_hat)+eps). p, g, m, v: same shape, contiguous.
void adamw_update(Context& ctx, Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr,
                  const AdamArgs& args);
/// LAMB stage 1: updates m and v and writes u (as above, weight decay included) into `update`.
void lamb_moments(Context& ctx, const Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                  Tensor& update, const AdamArgs& args);
/// y += alpha * x (same shape, contiguous).
void axpy(Context& ctx, float alpha, const Tensor& x, Tensor& y);
/// sum of x^2 in double; deterministic (fixed-size chunks summed in a fixed order, whatever the
/// thread count).
double sum_squares(Context& ctx, const Tensor& x);
/// out[i] = sum_squares(ctx, *xs[i]), bit for bit on each device, without a host round trip per
/// tensor (CUDA: a few launches over all tensors, stream-ordered, no sync). xs: f32 contiguous
/// tensors on ctx's device; out: f64 contiguous [xs.size()] on the same device (written).
void sum_squares_many(Context& ctx, const std::vector<const Tensor*>& xs, Tensor& out);
/// The same, returned to the host: one stream sync for all the tensors.
std::vector<double> sum_squares_many(Context& ctx, const std::vector<const Tensor*>& xs);
/// LAMB stage 2 with the trust ratio read from device memory (no host sync on CUDA):
///   ratio = sqrt(param_sq) / sqrt(update_sq) if both > 0, else 1   (double)
///   p += float(-double(lr) * ratio) * update                       (axpy's bits)
/// param_sq, update_sq: f64 [1] on p's device (||p||^2 before the update, ||u||^2, e.g. from
/// sum_squares_many); update, p: f32 contiguous, same shape.
void lamb_apply(Context& ctx, float lr, const Tensor& param_sq, const Tensor& update_sq, const Tensor& update,
                Tensor& p);
/// x *= s (in place).
void scale_inplace(Context& ctx, Tensor& x, float s);

/// One parameter's operands for the multi-tensor optimizer ops below.
struct AdamItem {
  Tensor* p = nullptr;       // adamw_update_many: updated; lamb_moments_many: read
  const Tensor* g = nullptr;
  Tensor* m = nullptr;
  Tensor* v = nullptr;
  Tensor* update = nullptr;  // lamb_moments_many: u is written here
  float lr = 0.0f;           // adamw_update_many
  AdamArgs args;
};
/// adamw_update / lamb_moments for many parameters (the optimizer's step): bit for bit the
/// one-tensor op on each item, each item validated as that op validates it. CUDA: a
/// multi-tensor apply, one launch per 32 tensors (the one-tensor form costs a launch per
/// parameter: hundreds a step for BERT-large); the CPU runs the one-tensor op per item.
/// Items must not share memory with each other (each item's own operands are checked; on CUDA
/// the items run in one launch, so an overlap between items would race).
void adamw_update_many(Context& ctx, const std::vector<AdamItem>& items);
void lamb_moments_many(Context& ctx, const std::vector<AdamItem>& items);
/// LAMB stage 2 for many parameters: item i is lamb_apply(lr, *param_sq, *update_sq, *update,
/// *p), or with param_sq null axpy(float(-double(lr)), *update, *p) (a parameter without weight
/// decay: trust ratio 1). Bit for bit those ops; CUDA: one launch per 32 tensors.
struct LambApplyItem {
  float lr = 0.0f;
  const Tensor* param_sq = nullptr;   // f64 [1] on p's device, or null (ratio 1)
  const Tensor* update_sq = nullptr;  // f64 [1] (with param_sq)
  const Tensor* update = nullptr;
  Tensor* p = nullptr;
};
void lamb_apply_many(Context& ctx, const std::vector<LambApplyItem>& items);
/// The whole LAMB step of many parameters (items' p, g, m, v, lr, args; `update` unused). Item i
/// is: with weight decay (args.weight_decay != 0) param_sq = ||p||^2 before the step,
/// lamb_moments into a u, update_sq = ||u||^2, then lamb_apply(lr, param_sq, update_sq, u, p);
/// without, lamb_moments and axpy(float(-double(lr)), u, p) (ratio 1). The CPU runs exactly that
/// sequence per item (the bits of those ops). CUDA never stores u: pass 1 updates m and v and
/// sums p^2 and u^2 per chunk, pass 2 recomputes u from the new m, v and p (the same IEEE
/// operations, the same bits) and steps p: 40 bytes of memory traffic an element against 48
/// for the three-op sequence, and no u buffer. Its norms are summed in sum_squares's chunks and
/// order, so on CUDA too the result is the bits of lamb_moments_many, sum_squares_many and
/// lamb_apply_many. Validated as adamw_update_many validates; items must not share memory with
/// each other.
void lamb_update_many(Context& ctx, const std::vector<AdamItem>& items);

// ---- video tokens (VideoMAE pretraining; ops/video_ops.cc) -----------------------------------
//
// Tubelet geometry: videos f32 [B, C, T, H, W] contiguous; token j of clip b has the flat id
// b * Np + j, Np = (T / tt) (H / p) (W / p), (t, h, w) row-major, and covers frames
// [t tt, (t + 1) tt), rows [h p, (h + 1) p) and columns [w p, (w + 1) p). K = C tt p p.
struct Tubelet {
  int64_t tubelet = 2;  // tt, frames per token
  int64_t patch = 16;   // p, pixels per token side
};

/// cols[r, :] = the pixels of token ids[r] in the Conv3d weight's column order (c, dt, dy, dx):
/// the rows of the tubelet unfold that ids selects. ids: i32 [R] flat token ids on the videos'
/// device (checked against B Np on the CPU); cols: f32 [R, K].
void tubelet_gather(Context& ctx, const Tensor& videos, const Tensor& ids, Tubelet t, Tensor& cols);

/// VideoMAE's normalised-pixel target of token ids[r] (engine_for_pretraining.py): per channel
/// c, x = video * stdev[c] + mean[c] over the token's tt p p pixels, then
/// (x - mean(x)) / (sqrt(unbiased var(x)) + 1e-6), columns (dt, dy, dx, c) ("(p0 p1 p2) c").
/// mean, stdev: C values each. CPU: float64 arithmetic, rounded once; CUDA: float64 sums.
/// target: f32 [R, K].
void tubelet_target(Context& ctx, const Tensor& videos, const Tensor& ids, Tubelet t, const std::vector<float>& mean,
                    const std::vector<float>& stdev, Tensor& target);

/// Squared-error loss over rows: returns sum over the rows r with row_weight[r] != 0 of
/// sum_k (pred[r, k] - target[r, k])^2 (double; the rows summed in a fixed order), and writes
/// dpred[r, :] = float(grad_scale * (pred[r, :] - target[r, :])) on those rows, 0 on the others.
/// pred, target, dpred: f32 [R, K] contiguous, same device (dpred may alias pred);
/// row_weight: u8 [R] on that device, or null = every row. One host sync on CUDA.
double mse_rows(Context& ctx, const Tensor& pred, const Tensor& target, const Tensor* row_weight, double grad_scale,
                Tensor& dpred);

/// The token lists of a VideoMAE step, from its host masks: mask u8 [B, Np] (nonzero = masked by
/// the encoder) and, optionally, decoder_mask u8 [B, Np] (nonzero = not decoded; without it the
/// decoder reconstructs the encoder-masked tokens). Every clip must have the same numbers of
/// visible (Nv) and decoded (Nd) tokens; Nt = Nv + Nd, nv = B Nv, nd = B Nd, nt = B Nt. Per clip
/// b, the visible positions and the decoded ones ascending, `lists` (i32, contiguous, on ctx's
/// device) holds, in this order:
///   vis_id   [nv]  b Np + j of visible token i (row r = b Nv + i)        tubelet_gather ids
///   vis_pos  [nv]  its position j                                         encoder pos table
///   dec_src  [nt]  decoder input row b Nt + i -> row of [e2d (nv rows); mask token]: b Nv + i
///                  for i < Nv, else nv
///   dec_tok  [nt]  that row's position j                                  decoder pos table
///   dec_rows [nd]  b Nt + Nv + i: the decoder output rows of the decoded tokens
///   dec_id   [nd]  their flat ids b Np + j                                tubelet_target ids
///   grad_src [nt]  decoder output gradient row -> row of [dln (nd rows); 0]: nd for i < Nv,
///                  else b Nd + i - Nv
///   vis_rows [nv]  b Nt + i: the visible rows of the decoder input gradient
/// and loss_weight (u8 [nd] on ctx's device, optional) 1 where a decoded token is encoder-masked
/// (in the loss). CUDA: the masks are uploaded (B Np bytes each) and one block per clip writes
/// its lists, instead of the host writing and uploading ~16 bytes per token. Returns nothing;
/// the counts are the caller's (it checked them); a row with other counts is an error here.
void videomae_index(Context& ctx, const Tensor& mask, const Tensor* decoder_mask, int64_t Nv, int64_t Nd,
                    Tensor& lists, Tensor* loss_weight);

}  // namespace unmask::ops
