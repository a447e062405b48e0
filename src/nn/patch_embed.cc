// nn/patch_embed.cc: see patch_embed.h.
#include "nn/patch_embed.h"

#include "unmask/error.h"

namespace unmask::train {

void patch_embed_forward(Context& ctx, const Tensor& clips, const Tensor& ids, ops::Tubelet tubelet, const PV& w,
                         const PV& b, Tensor& x, PatchEmbedSaved& saved) {
  UNMASK_CHECK(clips.ndim() == 5, "patch embedding: clips must be [B, C, T, H, W], got ", clips.describe());
  UNMASK_CHECK(ids.ndim() == 1, "patch embedding: ids must be [R], got ", ids.describe());
  const int64_t R = ids.size(0), K = clips.size(1) * tubelet.tubelet * tubelet.patch * tubelet.patch;
  UNMASK_CHECK(w.value.ndim() == 2 && w.value.size(1) == K, "patch embedding: the weight must be [D, ", K,
               "] (the Conv3d weight [D, C, tt, p, p] viewed as a matrix), got ", w.value.describe());
  if (!saved.cols.defined() || saved.cols.size(0) != R || saved.cols.size(1) != K ||
      saved.cols.device() != clips.device())
    saved.cols = Tensor::empty({R, K}, DType::f32, clips.device());
  ops::tubelet_gather(ctx, clips, ids, tubelet, saved.cols);
  linear_forward(ctx, saved.cols, w, b, x);
}

void patch_embed_backward(Context& ctx, const PatchEmbedSaved& saved, PV& w, PV& b, const Tensor& dx) {
  UNMASK_CHECK(saved.cols.defined(), "patch embedding backward: no saved forward");
  linear_backward(ctx, saved.cols, w, b, dx, nullptr);
}

Tensor all_token_ids(int64_t tokens, Device device) {
  UNMASK_CHECK(tokens >= 0 && tokens < (int64_t(1) << 31), "patch embedding: ", tokens, " tokens exceed i32 ids");
  Tensor ids = Tensor::empty({tokens}, DType::i32);
  for (int64_t i = 0; i < tokens; ++i) ids.data<int32_t>()[i] = int32_t(i);
  return device == Device::cpu ? ids : ids.to(device);
}

}  // namespace unmask::train
