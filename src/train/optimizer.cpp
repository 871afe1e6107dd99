// The update math follows torch::optim::AdamW::step() (LibTorch's adamw.cpp) operation by
// operation: decay, moments, denominator, step. Helpers live in a named namespace because this
// folder builds as unity batches.
#include "train/optimizer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "util/torch_features.h"

namespace combiner::train {

namespace optimizer_detail {

template <typename Key>
Key key_of(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // what c10::guts::to_string gives for a pointer
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

// The parameters of one group that have a gradient, with their state, each step counted.
struct GroupTensors {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<int64_t> steps;  // the step counts after this update
};

// As step() does: parameters without a gradient are left alone; a parameter's state is made on
// its first update, with zeros in its own memory format.
GroupTensors gather(torch::optim::AdamW& optimizer, torch::optim::OptimizerParamGroup& group) {
  GroupTensors g;
  auto& state = optimizer.state();
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    const auto key = state_key(p);
    if (state.find(key) == state.end()) {
      auto fresh = std::make_unique<AdamWParamState>();
      fresh->step(0);
      fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      state[key] = std::move(fresh);
    }
    auto& s = static_cast<AdamWParamState&>(*state[key]);
    s.step(s.step() + 1);
    g.params.push_back(p);
    g.grads.push_back(p.grad());
    g.exp_avgs.push_back(s.exp_avg());
    g.exp_avg_sqs.push_back(s.exp_avg_sq());
    g.steps.push_back(s.step());
  }
  return g;
}

// step()'s arithmetic with one foreach call per operation. On the CPU each foreach op loops
// over the tensors with the kernel step() calls, with the same scalars: bitwise the same.
void foreach_update(GroupTensors& g, const AdamWOptions& o) {
  const double lr = o.lr(), beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  if (o.weight_decay() != 0) at::_foreach_mul_(g.params, 1 - lr * o.weight_decay());
  at::_foreach_mul_(g.exp_avgs, beta1);
  at::_foreach_add_(g.exp_avgs, g.grads, 1 - beta1);
  at::_foreach_mul_(g.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(g.exp_avg_sqs, g.grads, g.grads, 1 - beta2);
  std::vector<at::Scalar> correction2_sqrt, step_sizes;
  for (const int64_t step : g.steps) {
    const double correction1 = 1 - std::pow(beta1, step);
    const double correction2 = 1 - std::pow(beta2, step);
    correction2_sqrt.emplace_back(std::sqrt(correction2));
    step_sizes.emplace_back(-(lr / correction1));
  }
  auto denominators = at::_foreach_sqrt(g.exp_avg_sqs);
  at::_foreach_div_(denominators, correction2_sqrt);
  at::_foreach_add_(denominators, o.eps());
  at::_foreach_addcdiv_(g.params, g.exp_avgs, denominators, step_sizes);
}

#if COMBINER_TORCH2_PATHS
// at::_fused_adamw_ takes tensors of one dtype, layout and strides per parameter.
bool fusable(const GroupTensors& g) {
  for (size_t i = 0; i < g.params.size(); ++i)
    for (const auto* t : {&g.grads[i], &g.exp_avgs[i], &g.exp_avg_sqs[i]})
      if (!t->is_cuda() || t->device() != g.params[i].device() ||
          t->scalar_type() != g.params[i].scalar_type() || t->strides() != g.params[i].strides() ||
          !t->is_non_overlapping_and_dense())
        return false;
  return !g.params.empty() && g.params[0].is_cuda() && g.params[0].is_non_overlapping_and_dense();
}

// The same update in one multi-tensor kernel. Its step counts are float tensors on the device:
// one fill when the group's counts agree (always, unless some parameter once had no gradient).
void fused_update(GroupTensors& g, const AdamWOptions& o) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(g.params[0].device());
  std::vector<torch::Tensor> steps;
  const bool same =
      std::all_of(g.steps.begin(), g.steps.end(), [&](int64_t s) { return s == g.steps.front(); });
  if (same) {
    steps = torch::full({int64_t(g.steps.size())}, double(g.steps.front()), options).unbind(0);
  } else {
    for (const int64_t s : g.steps) steps.push_back(torch::scalar_tensor(double(s), options));
  }
  at::_fused_adamw_(g.params,
                    g.grads,
                    g.exp_avgs,
                    g.exp_avg_sqs,
                    /*max_exp_avg_sqs=*/{},
                    steps,
                    o.lr(),
                    std::get<0>(o.betas()),
                    std::get<1>(o.betas()),
                    o.weight_decay(),
                    o.eps(),
                    /*amsgrad=*/false,
                    /*maximize=*/false);
  mark_changed(g.params);
}
#endif

}  // namespace optimizer_detail

std::unique_ptr<torch::optim::AdamW> make_optimizer(model::ImageTransformer& model,
                                                    const config::TrainConfig& t) {
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(t.lr).betas({t.beta1, t.beta2}).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(t.weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(t.lr));
}

OptimizerStateKey state_key(const torch::Tensor& parameter) {
  return optimizer_detail::key_of<OptimizerStateKey>(parameter);
}

void set_learning_rate(torch::optim::AdamW& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

void mark_changed(const std::vector<torch::Tensor>& tensors) {
  for (const auto& t : tensors) t.unsafeGetTensorImpl()->bump_version();
}

std::string adamw_kernel(const torch::Device& device) {
  return COMBINER_TORCH2_PATHS && device.is_cuda() ? "fused" : "foreach";
}

void adamw_step(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad())
      throw std::invalid_argument(
          "adamw_step: amsgrad is not supported (make_optimizer sets it off)");
    auto g = optimizer_detail::gather(optimizer, group);
    if (g.params.empty()) continue;
#if COMBINER_TORCH2_PATHS
    // Its argument checks run before any kernel: if they refuse, nothing has changed yet and the
    // foreach update takes over, for this and every later step, with a warning.
    static std::atomic<bool> fused_refused{false};
    if (!fused_refused && optimizer_detail::fusable(g)) {
      try {
        optimizer_detail::fused_update(g, o);
        continue;
      } catch (const c10::OutOfMemoryError&) {
        throw;  // out of memory is no refusal: the other path needs more
      } catch (const c10::Error& e) {
        fused_refused = true;
        spdlog::warn("at::_fused_adamw_ refused the update ({}); the foreach update runs instead",
                     std::string(e.what()).substr(0, std::string(e.what()).find('\n')));
      }
    }
#endif
    optimizer_detail::foreach_update(g, o);
  }
}

torch::Tensor clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return torch::zeros({});  // clip_grad_norm_'s 0.0
  const auto norms = at::_foreach_norm(grads, 2);
  const auto total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  // clip_grad_norm_'s own expression, so the coefficient rounds the same way.
  const auto coefficient = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
#if COMBINER_TORCH2_1_PATHS
  if (grads.front().is_cuda()) {
    at::_foreach_mul_(grads, coefficient);
    return total;
  }
#endif
  for (auto& grad : grads) grad.mul_(coefficient);
  return total;
}

}  // namespace combiner::train
