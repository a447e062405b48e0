// cuda/ops_cuda.h: the CUDA backend's op entry points, called by the op front-ends
// (src/ops/*.cc) under #ifdef UNMASK_WITH_CUDA once they have validated the tensors.
//
// Same semantics as the ops of ops/ops.h, for tensors on Device::cuda, run on the context's
// stream (asynchronously: errors of the kernels themselves surface at the next synchronising
// call). Element types: f32, bf16 and f16 for every op, with fp32 arithmetic inside; GEMMs
// take bf16/f16 (fp32 accumulation) or f32 (TF32 only when CudaState::allow_tf32). Parameter
// vectors (bias, gamma, beta) may be f32 or the activations' dtype.
//
// Each function re-checks what the kernels rely on (devices, dtypes agreeing, innermost
// stride 1) and throws Error / Unsupported with the actual values; the shape validation
// itself belongs to the front-ends.
//
//   Context ctx({.device = Device::cuda});
//   Tensor x = Tensor::empty({N, C}, DType::bf16, Device::cuda);
//   cuda::layernorm(ctx, x, &res, gamma, beta, 1e-12f, x);
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/op_params.h"
#include "ops/ops.h"
#include "ops/tubelet_geometry.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask::cuda {

/// c = act(alpha * op(a) @ op(b) + bias + beta * c); 2-D or 3-D (batched, b may have batch 1).
/// cuBLASLt (gemm_cublaslt.h), epilogues fused where cuBLASLt can.
void gemm(Context& ctx, const Tensor& a, ops::Trans ta, const Tensor& b, ops::Trans tb, Tensor& c,
          const ops::GemmArgs& args);

/// y = LayerNorm(x + residual) * gamma + beta over the last dim. y may alias x or residual.
void layernorm(Context& ctx, const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor& beta,
               float eps, Tensor& y);

/// y = act(x); y may alias x.
void activation(Context& ctx, const Tensor& x, Tensor& y, ops::Activation act);

/// Row softmax over the last dim; y may alias x.
void softmax(Context& ctx, const Tensor& x, Tensor& y);

/// dst = src (same shape; same dtype with either side host or device, or a float conversion
/// f32/bf16/f16 with both on the device, cast_rows; rows with innermost stride 1),
/// queued on ctx's stream (cudaMemcpy2DAsync: device-to-device copies can be captured in a
/// CUDA graph; a copy from pageable host memory returns once the source is staged, a copy to
/// it once the data is there).
void copy(Context& ctx, const Tensor& src, Tensor& dst);

/// out[i, :] = table[ids[i], :] (+ out when accumulate). ids on the device are trusted; ids on
/// the host are range-checked and uploaded.
void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out, bool accumulate);

/// out = LayerNorm(word[ids] + pos[pos_ids] + type[type_ids]) * gamma + beta, one kernel
/// (BERT's embedding block). ids, pos_ids, type_ids: i32 [N] on the device (type_ids may be
/// null: all type 0); tables [*, C] contiguous of out's dtype; out [N, C].
void embedding_layernorm(Context& ctx, const Tensor& ids, const Tensor& pos_ids, const Tensor* type_ids,
                         const Tensor& word, const Tensor& pos, const Tensor& type, const Tensor& gamma,
                         const Tensor& beta, float eps, Tensor& out);

/// Multi-head attention (ops::attention semantics): flash kernel for bf16/f16 with HS in
/// {64, 80, 88, 128}, naive kernel otherwise. cu_seqlens / key_padding_mask may live on the
/// host (uploaded) or the device. Packed mode needs the longest sequence to size the grid:
/// pass max_seqlen when cu_seqlens is on the device, else it is read back (a stream sync).
void attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const ops::AttentionArgs& args, int64_t max_seqlen = 0);

/// Training attention (ops::attention_forward_train / attention_backward semantics), f32,
/// head size <= 128 (attention_train.cu: tiled fp32 kernels, deterministic, no atomics).
/// cu_seqlens / key_padding_mask may live on the host (uploaded) or the device; with
/// cu_seqlens on the device the lengths are read back (a stream sync: T sets the dropout
/// counters). The backward uses an [NH, N] f32 scratch buffer.
void attention_forward_train(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                             Tensor& lse, const ops::AttentionArgs& args, const ops::AttentionTrainArgs& train);
void attention_backward(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv,
                        const ops::AttentionArgs& args, const ops::AttentionTrainArgs& train);

// ---- f32 raw-pointer forms, called by the current op front-ends (src/ops/*.cc) ----------
// Device pointers of f32 rows (ld = row stride in elements), sizes already validated.

/// ops::GemmParams (f32 a, b, c, bias) through cuBLASLt.
void gemm(Context& ctx, const ops::GemmParams& p);
/// y = act(x + bias), x/y [N, C]; bias [C] or null.
void bias_act(Context& ctx, const float* x, int64_t ldx, const float* bias, float* y, int64_t ldy, int64_t N,
              int64_t C, ops::Activation act);
/// y = LayerNorm(x + residual) * gamma + beta; residual may be null.
void layernorm(Context& ctx, const float* x, int64_t ldx, const float* residual, int64_t ldr, const float* gamma,
               const float* beta, float eps, float* y, int64_t ldy, int64_t N, int64_t C);
/// Row softmax of x [N, C] into y.
void softmax(Context& ctx, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t N, int64_t C);

// ---- training (f32 raw-pointer forms; ops_cuda_train.cc, kernels in train_kernels.h) --------
// Semantics of the ops.h "training" section; called by the front-ends after validation.
// Parameter gradients (dgamma, dbeta, dbias, dtable) accumulate (+=) and are deterministic
// (no float atomics: run twice, the same bits).

/// The training row ops take their activations as `dtype` (f32, bf16 or f16; fp32 arithmetic
/// inside, one rounding on the store); statistics, gamma and parameter gradients are f32.
/// layernorm with the row statistics mean, rstd (f32 [N]); y must not alias x or residual.
void layernorm_stats(Context& ctx, const void* x, int64_t ldx, const void* residual, int64_t ldr, const float* gamma,
                     const float* beta, float eps, void* y, int64_t ldy, float* mean, float* rstd, int64_t N,
                     int64_t C, DType dtype);
void layernorm_backward(Context& ctx, const void* x, int64_t ldx, const void* residual, int64_t ldr,
                        const float* gamma, const float* mean, const float* rstd, const void* dy, int64_t lddy,
                        void* dx, int64_t lddx, float* dgamma, float* dbeta, int64_t N, int64_t C, DType dtype,
                        bool accumulate_dx);
/// dbias (optional): ops::activation_backward's (the column sums of dx in the same pass).
void activation_backward(Context& ctx, const void* x, int64_t ldx, const void* dy, int64_t lddy, void* dx,
                         int64_t lddx, int64_t N, int64_t C, ops::Activation act, DType dtype, void* y = nullptr,
                         int64_t ldy = 0, float* dbias = nullptr);
void bias_grad(Context& ctx, const void* dy, int64_t lddy, float* dbias, int64_t N, int64_t C, DType dtype);
void softmax_backward(Context& ctx, const float* y, int64_t ldy, const float* dy, int64_t lddy, float* dx,
                      int64_t lddx, int64_t N, int64_t C);
/// Dropout (and its backward: the same call on dy): the CPU's Philox mask bit for bit.
void dropout(Context& ctx, const void* x, int64_t ldx, void* y, int64_t ldy, int64_t N, int64_t C, float p,
             uint64_t seed, uint64_t offset, DType dtype);
/// ids: i32/i64 [N] in device memory (trusted: an id outside [0, V) is skipped) or host
/// memory (range-checked, uploaded).
void embedding_backward(Context& ctx, const void* ids, DType id_dtype, const float* dout, int64_t ldo, float* dtable,
                        int64_t ldt, int64_t V, int64_t N, int64_t C);
/// targets: i32 [M] on the device (a target >= V throws after the kernels ran, as on the CPU);
/// losses may be null (a scratch buffer is used). Synchronises the stream (returns host totals).
ops::CrossEntropyStats cross_entropy(Context& ctx, const float* logits, int64_t ld, const int32_t* targets,
                                     float* losses, float* dlogits, int64_t lddl, float grad_scale, int64_t M,
                                     int64_t V);
// Optimizer updates on contiguous f32 arrays of n elements (scalars computed as the CPU op).
void adamw_update(Context& ctx, float* p, const float* g, float* m, float* v, int64_t n, float lr,
                  const ops::AdamArgs& args);
void lamb_moments(Context& ctx, const float* p, const float* g, float* m, float* v, float* update, int64_t n,
                  const ops::AdamArgs& args);
void axpy(Context& ctx, float alpha, const float* x, float* y, int64_t n);
/// y += alpha x, n contiguous bf16 / f16 elements.
void axpy_half(Context& ctx, float alpha, const void* x, void* y, int64_t n, DType dtype);
/// Deterministic double sum of squares; synchronises the stream.
double sum_squares(Context& ctx, const float* x, int64_t n);
/// out[i] = sum_squares(xs[i], ns[i]) bitwise, into device memory out [count]; no sync. xs, ns:
/// host arrays of device pointers (null where ns[i] = 0) and sizes.
void sum_squares_many(Context& ctx, const float* const* xs, const int64_t* ns, int64_t count, double* out);
/// The same, copied back to the host: one stream sync.
std::vector<double> sum_squares_many(Context& ctx, const float* const* xs, const int64_t* ns, int64_t count);
/// The multi-tensor optimizer ops (ops::adamw_update_many, lamb_moments_many, lamb_apply_many)
/// on items the front-end validated (f32, contiguous, on ctx's device): a launch per 32
/// tensors (optim.cu), no sync.
void adamw_update_many(Context& ctx, const std::vector<ops::AdamItem>& items);
void lamb_moments_many(Context& ctx, const std::vector<ops::AdamItem>& items);
void lamb_apply_many(Context& ctx, const std::vector<ops::LambApplyItem>& items);
/// ops::lamb_update_many: the fused two-pass LAMB step (train_kernels.h lamb_update_many_n).
void lamb_update_many(Context& ctx, const std::vector<ops::AdamItem>& items);
/// ops::copy_many's batched items (contiguous f32 -> bf16 / f16 on ctx's device, validated):
/// a launch per 32 tensors of each target dtype (optim.cu's multi-tensor apply), no sync.
void copy_many(Context& ctx, const std::vector<ops::CopyItem>& items);
/// ops::zero_many (validated: contiguous, on ctx's device): the tensors of whole 4-byte words
/// at 4-byte-aligned addresses in a launch per 32 (optim.cu's multi-tensor apply), any other
/// one by cudaMemsetAsync; all on ctx's stream, no sync.
void zero_many(Context& ctx, const std::vector<Tensor*>& tensors);
/// LAMB stage 2 with the squared norms in device memory (ops::lamb_apply); no sync.
void lamb_apply(Context& ctx, float lr, const double* param_sq, const double* update_sq, const float* update,
                float* p, int64_t n);
void scale_inplace(Context& ctx, float* x, int64_t n, float s);

// Video tokens (ops.h, video.cu): videos f32 [B, C, T, H, W] contiguous and ids i32 [R] in
// device memory (trusted: the front-ends range-check host ids only; an id outside [0, B Np)
// gives a row of zeros / no loss rather than a stray read).
/// ops::conv2d through cuDNN (conv_cudnn.cc; loaded at the first call: an Error naming the
/// library where it is missing). fp32, FMA math (no TF32).
void conv2d(Context& ctx, const ops::Conv2dParams& p);

/// Windowed attention with bias and mask (ops::window_attention semantics, validated params on
/// the device; window_attention.cu): fp32, head size <= 128, windows of <= 512 tokens. The
/// backward needs the forward's lse and accumulates dbias in window order (no atomics).
void window_attention_forward(Context& ctx, const ops::WindowAttentionParams& p);
void window_attention_backward(Context& ctx, const ops::WindowAttentionParams& p);

/// The layout ops of ops.h (layout.cu), validated by the front-end; no sync.
void transpose(Context& ctx, const float* x, float* y, int64_t B, int64_t R, int64_t C);
void max_pool2x2(Context& ctx, const float* x, float* y, int64_t planes, int64_t H, int64_t W);
void argmax_channels(Context& ctx, const float* x, int32_t* ids, int64_t B, int64_t C, int64_t P);
void scale_rows(Context& ctx, const float* x, int64_t ldx, const float* scales, int64_t rows_per_group, float* y,
                int64_t ldy, int64_t R, int64_t C);

void tubelet_gather(Context& ctx, const float* videos, const ops::TubeletGeometry& g, const int32_t* ids, int64_t R,
                    float* cols);
void tubelet_target(Context& ctx, const float* videos, const ops::TubeletGeometry& g, const int32_t* ids, int64_t R,
                    const std::vector<float>& mean, const std::vector<float>& stdev, float* target);
/// Whether tubelet_target takes the warp-per-token kernel for g (else the block kernel:
/// 1 or 3 channels, p a power of two of at most 16, tt p p a multiple of 32 up to 512); tests.
bool tubelet_target_warp_applies(const ops::TubeletGeometry& g);
/// row_weight: u8 [R] in device memory or null; synchronises the stream (returns the host sum).
double mse_rows(Context& ctx, const float* pred, const float* target, const uint8_t* row_weight, double grad_scale,
                float* dpred, int64_t R, int64_t K);
/// ops::videomae_index on device masks (u8 [B, Np]; decoder_mask null = none) whose rows the
/// front-end has checked to hold Nv visible and Nd decoded tokens each: one block per clip.
/// lists: i32 in ops.h's layout; loss_weight: u8 [B Nd] or null. No sync.
void videomae_index(Context& ctx, const uint8_t* mask, const uint8_t* decoder_mask, int64_t B, int64_t Np, int64_t Nv,
                    int64_t Nd, int32_t* lists, uint8_t* loss_weight);

}  // namespace unmask::cuda
