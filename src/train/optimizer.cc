// train/optimizer.cc: AdamW (torch.optim.AdamW) and LAMB (apex FusedLAMB as NVIDIA DLE's BERT
// pretraining runs it) over a model's parameter list, on the optimizer op front-ends.
//
// One step, for both kinds:
//   1. global gradient norm over ALL params: ||gs * g|| = |gs| sqrt(sum_p sum_squares(g_p)),
//      gs = grad_scale (accumulation averaging); the sum is deterministic (ops::sum_squares).
//   2. clipping to max_grad_norm (when > 0), folded into the gradient scale:
//        AdamW: torch.nn.utils.clip_grad_norm_: factor = min(1, max / (norm + 1e-6))
//        LAMB:  apex:                           factor = norm > max ? max / norm : 1
//   3. per param, wd = config.weight_decay if Param::weight_decay else 0, t = step (1-based):
//        AdamW: ops::adamw_update: p = p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)
//        LAMB:  ops::lamb_moments: u = m_hat / (sqrt(v_hat) + eps) + wd p  (m with (1-b1) g)
//               ratio = ||p|| / ||u|| if wd != 0 and both norms > 0, else 1 (use_nvlamb=False)
//               p -= lr ratio u   (ops::lamb_apply; ops::axpy when wd = 0)
// Every piece is deterministic, so an optimizer rebuilt from state() takes bit-identical steps.
//
// Host round trips: one per step (the global norm, which decides the clipping and is reported).
// The updates go through the multi-tensor ops: adamw_update_many, and for LAMB
// lamb_update_many, whose norms stay on the params' device (CUDA: two passes over the params,
// u never stored, a few launches per 32 params and no sync); on the CPU the arithmetic is the
// per-param sum_squares / moments / sqrt / divide / axpy sequence it always was, bit for bit.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "unmask/train.h"

namespace unmask {
namespace {

void validate_config(const OptimizerConfig& c) {
  UNMASK_CHECK(c.kind == OptimizerKind::adamw || c.kind == OptimizerKind::lamb,
               "optimizer: unknown kind ", int(c.kind));
  UNMASK_CHECK(std::isfinite(c.lr) && c.lr >= 0.0f, "optimizer: lr must be finite and >= 0, got ", c.lr);
  UNMASK_CHECK(c.beta1 >= 0.0f && c.beta1 < 1.0f && c.beta2 >= 0.0f && c.beta2 < 1.0f,
               "optimizer: betas must lie in [0, 1), got beta1 = ", c.beta1, ", beta2 = ", c.beta2);
  UNMASK_CHECK(std::isfinite(c.eps) && c.eps >= 0.0f, "optimizer: eps must be finite and >= 0, got ", c.eps);
  UNMASK_CHECK(std::isfinite(c.weight_decay) && c.weight_decay >= 0.0f,
               "optimizer: weight_decay must be finite and >= 0, got ", c.weight_decay);
  UNMASK_CHECK(std::isfinite(c.max_grad_norm), "optimizer: max_grad_norm must be finite (<= 0 disables clipping), got ",
               c.max_grad_norm);
}

// A parameter the optimizer can drive: f32 contiguous value and grad of one shape and device.
void validate_param(const Param& p, size_t index) {
  UNMASK_CHECK(p.value.defined() && p.grad.defined(), "optimizer: param ", index, " '", p.name,
               "' has an undefined value or grad", Hint("allocate the gradients before building the optimizer"));
  UNMASK_CHECK(p.value.dtype() == DType::f32 && p.grad.dtype() == DType::f32, "optimizer: param '", p.name,
               "' must have f32 value and grad, got value ", p.value.describe(), ", grad ", p.grad.describe());
  UNMASK_CHECK(p.value.is_contiguous() && p.grad.is_contiguous(), "optimizer: param '", p.name,
               "' must have contiguous value and grad, got value ", p.value.describe(), ", grad ",
               p.grad.describe());
  UNMASK_CHECK(p.value.shape() == p.grad.shape() && p.value.device() == p.grad.device(), "optimizer: param '",
               p.name, "' grad ", p.grad.describe(), " does not match its value ", p.value.describe());
  UNMASK_CHECK(std::isfinite(p.lr_scale) && p.lr_scale >= 0.0f, "optimizer: param '", p.name,
               "' has lr_scale ", p.lr_scale, "; it must be finite and >= 0");
}

}  // namespace

Optimizer::Optimizer(const OptimizerConfig& config, std::vector<Param>& params)
    : config_(config), params_(&params) {
  validate_config(config_);
  std::set<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    validate_param(p, i);
    UNMASK_CHECK(names.insert(p.name).second, "optimizer: two params are named '", p.name,
                 "' (the optimizer state is keyed by name)");
    exp_avg_.push_back(Tensor::zeros(p.value.shape(), DType::f32, p.value.device()));
    exp_avg_sq_.push_back(Tensor::zeros(p.value.shape(), DType::f32, p.value.device()));
  }
}

int64_t Optimizer::step_count() const { return step_; }

const OptimizerConfig& Optimizer::config() const { return config_; }

OptimizerStepStats Optimizer::step(Context& ctx, float step_lr, float grad_scale) {
  std::vector<Param>& params = *params_;
  UNMASK_CHECK(std::isfinite(step_lr) && step_lr >= 0.0f, "optimizer step: lr must be finite and >= 0, got ", step_lr);
  UNMASK_CHECK(std::isfinite(grad_scale), "optimizer step: grad_scale must be finite, got ", grad_scale);
  UNMASK_CHECK(params.size() == exp_avg_.size(), "optimizer step: the model has ", params.size(),
               " params but the optimizer was built for ", exp_avg_.size(),
               Hint("build the optimizer after the parameter list is final"));
  for (size_t i = 0; i < params.size(); ++i) {
    validate_param(params[i], i);
    UNMASK_CHECK(params[i].value.shape() == exp_avg_[i].shape(), "optimizer step: param '", params[i].name,
                 "' is now ", params[i].value.describe(), " but its state is ", exp_avg_[i].describe());
  }

  // 1. global norm of the scaled gradients (double; before clipping): the per-param sums in
  //    one batched call (one host sync on CUDA), added in param order.
  std::vector<const Tensor*> grads;
  grads.reserve(params.size());
  for (const Param& p : params) grads.push_back(&p.grad);
  double sum_sq = 0.0;
  for (double s : ops::sum_squares_many(ctx, grads)) sum_sq += s;
  OptimizerStepStats stats;
  stats.grad_norm = std::sqrt(sum_sq) * std::fabs(double(grad_scale));
  if (!std::isfinite(stats.grad_norm))
    throw Error("optimizer step ", step_ + 1, ": the global gradient norm is ", stats.grad_norm,
                " (grad_scale ", grad_scale, "); parameters and optimizer state are unchanged",
                Hint("a gradient overflowed or is NaN: lower the learning rate or the loss scale; a caller "
                     "may skip the step by zeroing the gradients and continuing"));

  // 2. clipping, folded into the gradient scale the kernels apply.
  if (config_.max_grad_norm > 0.0f) {
    const double max_norm = config_.max_grad_norm;
    if (config_.kind == OptimizerKind::adamw)
      stats.clip_factor = std::min(1.0, max_norm / (stats.grad_norm + 1e-6));
    else if (stats.grad_norm > max_norm)
      stats.clip_factor = max_norm / stats.grad_norm;
  }
  const float scale = float(double(grad_scale) * stats.clip_factor);

  // 3. the per-param updates, through the multi-tensor ops (CUDA: a launch per 32 params; the
  //    CPU: the one-tensor op per param, bit for bit either way).
  ++step_;
  std::vector<ops::AdamItem> items;
  for (size_t i = 0; i < params.size(); ++i) {
    Param& p = params[i];
    if (p.value.numel() == 0) continue;
    ops::AdamItem it;
    it.p = &p.value, it.g = &p.grad, it.m = &exp_avg_[i], it.v = &exp_avg_sq_[i];
    it.lr = float(double(step_lr) * double(p.lr_scale));  // timm-style param-group lr
    it.args.beta1 = config_.beta1;
    it.args.beta2 = config_.beta2;
    it.args.eps = config_.eps;
    it.args.weight_decay = p.weight_decay ? config_.weight_decay : 0.0f;
    it.args.step = step_;
    it.args.grad_scale = scale;
    items.push_back(it);
  }
  if (config_.kind == OptimizerKind::adamw)
    ops::adamw_update_many(ctx, items);
  else  // LAMB: the trust ratio ||p|| / ||u|| per param with weight decay, ratio 1 without
    ops::lamb_update_many(ctx, items);
  return stats;
}

OptimizerState Optimizer::state() const {
  OptimizerState s;
  s.step = step_;
  const std::vector<Param>& params = *params_;
  for (size_t i = 0; i < exp_avg_.size() && i < params.size(); ++i) {
    s.tensors.emplace_back(params[i].name + ".exp_avg", exp_avg_[i].to(Device::cpu));
    s.tensors.emplace_back(params[i].name + ".exp_avg_sq", exp_avg_sq_[i].to(Device::cpu));
  }
  return s;
}

void Optimizer::load_state(const OptimizerState& state) {
  const std::vector<Param>& params = *params_;
  UNMASK_CHECK(params.size() == exp_avg_.size(), "optimizer load_state: the model has ", params.size(),
               " params but the optimizer was built for ", exp_avg_.size());
  UNMASK_CHECK(state.step >= 0, "optimizer load_state: step must be >= 0, got ", state.step);
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : state.tensors) {
    UNMASK_CHECK(by_name.emplace(name, &t).second, "optimizer load_state: tensor '", name, "' appears twice");
  }
  // Validate everything first, so a bad state leaves the optimizer unchanged.
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  for (size_t i = 0; i < params.size(); ++i) {
    for (int which = 0; which < 2; ++which) {
      const std::string name = params[i].name + (which == 0 ? ".exp_avg" : ".exp_avg_sq");
      Tensor& dst = which == 0 ? exp_avg_[i] : exp_avg_sq_[i];
      auto it = by_name.find(name);
      if (it == by_name.end())
        throw Error("optimizer load_state: missing tensor '", name, "' (the state holds ", state.tensors.size(),
                    " tensors for step ", state.step, ")",
                    Hint("the checkpoint was saved for a different model; start the optimizer fresh or load "
                         "the matching checkpoint"));
      const Tensor& src = *it->second;
      UNMASK_CHECK(src.dtype() == DType::f32 && src.shape() == dst.shape(), "optimizer load_state: tensor '",
                   name, "' is ", src.describe(), ", expected f32", dst.shape().str(), " (the param's shape)",
                   Hint("the checkpoint was saved for a model of another size"));
      copies.emplace_back(&dst, &src);
      by_name.erase(it);
    }
  }
  if (!by_name.empty())
    throw Error("optimizer load_state: tensor '", by_name.begin()->first, "' matches no param (",
                by_name.size(), " unmatched)", Hint("the checkpoint was saved for a different model"));
  for (auto& [dst, src] : copies) dst->copy_from(*src);
  step_ = state.step;
}

}  // namespace unmask
