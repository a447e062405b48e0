// train/schedule.cc: learning-rate multipliers (times the optimizer's base lr).
//
// `step` is the 0-based index of the update about to be taken (opt.step_count() before
// opt.step()). Each kind reproduces the learning rates its reference gives that update:
//   poly     NVIDIA DLE schedulers.py PolyWarmUpScheduler. DLE sets last_epoch = (updates done)
//            + 1 before each update, so p = (step + 1) / total; p < warmup: p / warmup, else
//            (1 - p)^degree. Past the end (p > 1) DLE would raise a negative number to a
//            fractional power (NaN); here it is 0. (DLE HEAD evaluates it in f32 tensors; this is
//            the same formula in double.)
//   linear   HF get_linear_schedule_with_warmup, whose LambdaLR gives update k the value at
//            k: k < W: k / max(1, W), else max(0, (total - k) / max(1, total - W)).
//   cosine   HF get_cosine_schedule_with_warmup (half a cycle): the same warmup, then
//            max(0, 0.5 (1 + cos(pi q))), q = (k - W) / max(1, total - W), q capped at 1 (HF's
//            curve rises again past the end; here it stays at 0).
//   constant HF get_constant_schedule_with_warmup: the same warmup, then 1.
// W = ceil(warmup * total) warmup steps, as the HF Trainer derives them from warmup_ratio.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "unmask/train.h"

namespace unmask {

double lr_multiplier(const ScheduleConfig& schedule, int64_t step) {
  UNMASK_CHECK(schedule.total_steps >= 1, "lr schedule: total_steps must be >= 1, got ", schedule.total_steps);
  UNMASK_CHECK(std::isfinite(schedule.warmup) && schedule.warmup >= 0.0 && schedule.warmup <= 1.0,
               "lr schedule: warmup is a fraction of total_steps in [0, 1], got ", schedule.warmup);
  UNMASK_CHECK(step >= 0, "lr schedule: step must be >= 0 (0 = the first update), got ", step);
  UNMASK_CHECK(std::isfinite(schedule.min_ratio) && schedule.min_ratio >= 0.0 && schedule.min_ratio <= 1.0,
               "lr schedule: min_ratio (the cosine floor as a fraction of the base lr) must be in [0, 1], got ",
               schedule.min_ratio);
  const double total = double(schedule.total_steps);
  if (schedule.kind == ScheduleConfig::Kind::poly) {
    UNMASK_CHECK(std::isfinite(schedule.degree) && schedule.degree > 0.0,
                 "lr schedule: poly degree must be finite and > 0, got ", schedule.degree);
    const double p = double(step + 1) / total;
    if (p < schedule.warmup) return p / schedule.warmup;
    return p >= 1.0 ? 0.0 : std::pow(1.0 - p, schedule.degree);
  }
  const double k = double(step);
  const double warmup_steps = std::ceil(schedule.warmup * total);
  if (k < warmup_steps) return k / std::max(1.0, warmup_steps);
  const double decay_steps = std::max(1.0, total - warmup_steps);
  switch (schedule.kind) {
    case ScheduleConfig::Kind::linear: return std::max(0.0, (total - k) / decay_steps);
    case ScheduleConfig::Kind::cosine: {
      const double q = std::min(1.0, (k - warmup_steps) / decay_steps);  // HF would rise again past the end
      // VideoMAE utils.cosine_scheduler: final + 0.5 (base - final)(1 + cos), final = min_ratio base
      const double m = schedule.min_ratio;
      return m + (1.0 - m) * std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * q)));
    }
    case ScheduleConfig::Kind::constant: return 1.0;
    case ScheduleConfig::Kind::poly: break;
  }
  throw Error("lr schedule: unknown kind ", int(schedule.kind));
}

}  // namespace unmask
