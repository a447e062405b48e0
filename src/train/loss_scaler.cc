// train/loss_scaler.cc: DynamicLossScaler (see loss_scaler.h).
#include "train/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::train {

DynamicLossScaler::DynamicLossScaler(const LossScalerConfig& c) : config_(c), scale_(c.init_scale) {
  if (!(c.min_scale > 0) || !(c.max_scale >= c.min_scale) || !std::isfinite(c.max_scale))
    throw Error("loss scaler: need 0 < min_scale <= max_scale < inf, got ", c.min_scale, " and ", c.max_scale);
  if (!(c.init_scale >= c.min_scale && c.init_scale <= c.max_scale))
    throw Error("loss scaler: the initial scale ", c.init_scale, " is outside [", c.min_scale, ", ", c.max_scale, "]",
                Hint("DLE starts at 2^20 = 1048576"));
  if (!(c.growth > 1) || !(c.backoff > 0 && c.backoff < 1) || c.window < 1)
    throw Error("loss scaler: need growth > 1, 0 < backoff < 1 and window >= 1, got ", c.growth, ", ", c.backoff,
                ", ", c.window);
}

bool DynamicLossScaler::unscale(Context& ctx, std::vector<Param>& params) {
  std::vector<const Tensor*> grads;
  for (const Param& p : params)
    if (p.grad.defined()) grads.push_back(&p.grad);
  double total = 0;
  for (double s : ops::sum_squares_many(ctx, grads)) total += s;
  if (!std::isfinite(total)) {
    scale_ = std::max(config_.min_scale, scale_ * config_.backoff);
    good_steps_ = 0;
    ++overflows_;
    return false;
  }
  const float inverse = float(1.0 / scale_);
  if (inverse != 1.0f)
    for (Param& p : params)
      if (p.grad.defined()) ops::scale_inplace(ctx, p.grad, inverse);
  if (++good_steps_ >= config_.window) {
    scale_ = std::min(config_.max_scale, scale_ * config_.growth);
    good_steps_ = 0;
  }
  return true;
}

void DynamicLossScaler::restore(double scale, int64_t good_steps) {
  if (!(scale >= config_.min_scale && scale <= config_.max_scale) || good_steps < 0)
    throw Error("loss scaler: the checkpoint's scale ", scale, " (", good_steps, " good steps) is outside [",
                config_.min_scale, ", ", config_.max_scale, "]");
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace unmask::train
