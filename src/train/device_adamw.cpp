#include "train/device_adamw.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include "train/optimizer.h"
#include "util/torch_features.h"

namespace combiner::train {

bool DeviceAdamW::available() {
  return COMBINER_TORCH2_4_PATHS;
}

DeviceAdamW::DeviceAdamW(torch::optim::AdamW& optimizer) : optimizer_(optimizer) {
  if (!available())
    throw std::runtime_error(
        "DeviceAdamW: needs LibTorch >= 2.4 (at::_fused_adamw_ with a tensor learning rate); "
        "this is " TORCH_VERSION);
  auto& state = optimizer.state();
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) throw std::invalid_argument("DeviceAdamW: amsgrad is not supported");
    Group g;
    for (auto& p : group.params()) {
      const auto key = state_key(p);
      if (state.find(key) == state.end()) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        state[key] = std::move(fresh);
      }
      g.params.push_back(p);
      g.states.push_back(&static_cast<torch::optim::AdamWParamState&>(*state[key]));
    }
    if (g.params.empty()) continue;
    const auto on = torch::TensorOptions().dtype(torch::kFloat).device(g.params[0].device());
    g.lr = torch::zeros({}, on);
    g.steps = torch::zeros({int64_t(g.params.size())}, on);
    g.updated.assign(g.params.size(), false);
    groups_.push_back(std::move(g));
  }
}

void DeviceAdamW::prepare(double lr) {
  for (auto& g : groups_) {
    g.lr.fill_(lr);
    std::vector<float> next;
    for (const auto* s : g.states) next.push_back(float(s->step() + 1));
    if (std::all_of(next.begin(), next.end(), [&](float s) { return s == next.front(); }))
      g.steps.fill_(next.front());
    else
      g.steps.copy_(torch::tensor(next));
  }
}

void DeviceAdamW::update(const torch::Tensor& skip) {
#if COMBINER_TORCH2_4_PATHS
  torch::NoGradGuard no_grad;
  auto group_options = optimizer_.param_groups().begin();
  for (auto& g : groups_) {
    // groups_ skips empty groups: find this one's options by its first parameter.
    while (group_options->params().empty() ||
           !group_options->params().front().is_same(g.params.front()))
      ++group_options;
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group_options->options());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (size_t i = 0; i < g.params.size(); ++i) {
      g.updated[i] = g.params[i].grad().defined();
      if (!g.updated[i]) continue;  // as step(): a parameter without a gradient is left alone
      params.push_back(g.params[i]);
      grads.push_back(g.params[i].grad());
      exp_avgs.push_back(g.states[i]->exp_avg());
      exp_avg_sqs.push_back(g.states[i]->exp_avg_sq());
      steps.push_back(g.steps[int64_t(i)]);
    }
    if (params.empty()) continue;
    at::_fused_adamw_(params,
                      grads,
                      exp_avgs,
                      exp_avg_sqs,
                      /*max_exp_avg_sqs=*/{},
                      steps,
                      g.lr,
                      std::get<0>(o.betas()),
                      std::get<1>(o.betas()),
                      o.weight_decay(),
                      o.eps(),
                      /*amsgrad=*/false,
                      /*maximize=*/false,
                      /*grad_scale=*/std::nullopt,
                      /*found_inf=*/skip);
    mark_changed(params);
  }
#else
  (void)skip;
#endif
}

void DeviceAdamW::count_update() {
  for (auto& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i)
      if (g.updated[i]) g.states[i]->step(g.states[i]->step() + 1);
}

}  // namespace combiner::train
