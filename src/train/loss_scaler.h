// train/loss_scaler.h: dynamic loss scaling (apex / torch.cuda.amp's GradScaler rule; DLE's BERT
// starts at 2^20), for fp16 training where small gradients would flush to zero.
//
//   train::DynamicLossScaler scaler({.init_scale = 1 << 20});
//   so.loss_scale = float(1.0 / accumulation) * scaler.scale();   // gradients of scale x loss
//   model.pretrain_step(ctx, batch, so);  ...  grad_sync.finish();
//   if (!scaler.unscale(ctx, model.params())) continue;  // overflow: no update, scale halved
//   opt.step(ctx, lr);
//
// unscale() multiplies every gradient by 1 / scale and tells whether all of them are finite (one
// fused sum of squares: a sum of f32 squares in f64 is non-finite only if an element is). Then
//   overflow:  scale *= backoff (not below min_scale), the run of good steps restarts;
//   finite:    after `window` finite steps in a row, scale *= growth (not above max_scale).
// With a power-of-two scale every gradient is exactly `scale` times the unscaled one (absent
// overflow and underflow), so an fp32 run with scaling takes the unscaled run's steps bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "unmask/context.h"
#include "unmask/train.h"

namespace unmask::train {

struct LossScalerConfig {
  double init_scale = 1048576.0;  // 2^20 (DLE's BERT)
  double growth = 2.0, backoff = 0.5;
  int64_t window = 2000;          // finite steps in a row before the scale grows (apex's scale_window)
  double min_scale = 1.0, max_scale = 16777216.0;  // 2^24 (apex's default ceiling)
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerConfig& config);
  float scale() const { return float(scale_); }
  /// Gradients *= 1 / scale; true when every gradient is finite. Then the scale moves (above).
  bool unscale(Context& ctx, std::vector<Param>& params);
  int64_t good_steps() const { return good_steps_; }
  int64_t overflows() const { return overflows_; }
  /// Checkpoint state: the current scale and the run of finite steps.
  void restore(double scale, int64_t good_steps);

 private:
  LossScalerConfig config_;
  double scale_;
  int64_t good_steps_ = 0, overflows_ = 0;
};

}  // namespace unmask::train
