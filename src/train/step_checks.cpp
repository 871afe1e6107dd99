// Both checks build their own small inputs from a fixed seed, so they neither read nor change
// the model being timed (the global generator is saved and restored). Helpers live in a named
// namespace because this folder builds as unity batches.
#include "train/step_checks.h"

#include <algorithm>
#include <cstdio>

#include "attention/attention.h"
#include "attention/decode.h"
#include "attention/reference.h"
#include "train/device_adamw.h"
#include "train/optimizer.h"

namespace combiner::train {

namespace step_checks_detail {

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

double relative_error(const torch::Tensor& out, const torch::Tensor& ref) {
  const auto r = ref.to(torch::kDouble).cpu();
  return (out.to(torch::kDouble).cpu() - r).norm().item<double>() /
         std::max(r.norm().item<double>(), 1e-30);
}

// Two AdamW optimizers over equal copies of a few parameters, split as make_optimizer splits
// them: rank >= 2 decayed, the rest not.
struct Twin {
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

Twin make_twin(const std::vector<torch::Tensor>& start) {
  Twin t;
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& s : start) {
    t.params.push_back(s.clone().requires_grad_(true));
    (s.dim() >= 2 ? decay : no_decay).push_back(t.params.back());
  }
  auto options = [](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(0.1));
  groups.emplace_back(no_decay, options(0.0));
  t.optimizer = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(1e-2));
  return t;
}

// Runs `work` with the global CPU generator's state put back afterwards.
template <typename F>
auto with_saved_rng(F&& work) {
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto saved = generator.get_state();
  auto result = work();
  generator.set_state(saved);
  return result;
}

}  // namespace step_checks_detail

UpdateCheck check_update(const torch::Device& device, int64_t steps) {
  namespace d = step_checks_detail;
  return d::with_saved_rng([&] {
    torch::manual_seed(1234);
    const auto on = torch::TensorOptions().device(device);
    std::vector<torch::Tensor> start;
    for (const auto& shape : std::vector<std::vector<int64_t>>{{96, 40}, {40}, {3, 5, 7}, {1}})
      start.push_back(torch::randn(shape, on));
    auto ours = d::make_twin(start), theirs = d::make_twin(start),
         device_twin = d::make_twin(start);
    std::unique_ptr<DeviceAdamW> device_adamw;
    if (DeviceAdamW::available())
      device_adamw = std::make_unique<DeviceAdamW>(*device_twin.optimizer);
    UpdateCheck check;
    for (int64_t s = 0; s < steps; ++s) {
      // Gradient norms of about 40 (clipped to 1) on even steps, 0.04 (not clipped) on odd.
      const double scale = s % 2 == 0 ? 1.0 : 1e-3;
      for (size_t i = 0; i < start.size(); ++i) {
        const auto grad = torch::randn_like(start[i]) * scale;
        ours.params[i].mutable_grad() = grad.clone();
        theirs.params[i].mutable_grad() = grad.clone();
        device_twin.params[i].mutable_grad() = grad.clone();
      }
      const auto norm = clip_gradients(ours.params, 1.0);
      const double their_norm = torch::nn::utils::clip_grad_norm_(theirs.params, 1.0);
      // The norm relative to itself: a device may sum the squares in another order.
      check.clip = std::max(check.clip, std::abs(norm.item<double>() - their_norm) / their_norm);
      for (size_t i = 0; i < start.size(); ++i)
        check.clip =
            std::max(check.clip, d::max_abs_diff(ours.params[i].grad(), theirs.params[i].grad()));
      adamw_step(*ours.optimizer);
      theirs.optimizer->step();
      if (device_adamw) {
        clip_gradients(device_twin.params, 1.0);
        device_adamw->prepare(1e-2);
        device_adamw->update(torch::zeros({}, on));
        device_adamw->count_update();
      }
    }
    for (size_t i = 0; i < start.size(); ++i) {
      const auto& a = static_cast<torch::optim::AdamWParamState&>(
          *ours.optimizer->state().at(state_key(ours.params[i])));
      const auto& b = static_cast<torch::optim::AdamWParamState&>(
          *theirs.optimizer->state().at(state_key(theirs.params[i])));
      check.adamw = std::max({check.adamw,
                              d::max_abs_diff(ours.params[i], theirs.params[i]),
                              d::max_abs_diff(a.exp_avg(), b.exp_avg()),
                              d::max_abs_diff(a.exp_avg_sq(), b.exp_avg_sq()),
                              double(std::abs(a.step() - b.step()))});
      if (!device_adamw) continue;
      const auto& c = static_cast<torch::optim::AdamWParamState&>(
          *device_twin.optimizer->state().at(state_key(device_twin.params[i])));
      check.device_adamw = std::max({check.device_adamw,
                                     d::max_abs_diff(device_twin.params[i], theirs.params[i]),
                                     d::max_abs_diff(c.exp_avg(), b.exp_avg()),
                                     d::max_abs_diff(c.exp_avg_sq(), b.exp_avg_sq()),
                                     double(std::abs(c.step() - b.step()))});
    }
    if (device_adamw) {  // an update the kernel skips changes nothing
      std::vector<torch::Tensor> before;
      for (auto& p : device_twin.params) {
        before.push_back(p.detach().clone());
        p.mutable_grad() = torch::randn_like(p);
      }
      device_adamw->prepare(1e-2);
      device_adamw->update(torch::ones({}, on));
      check.device_skip = 0;
      for (size_t i = 0; i < before.size(); ++i)
        check.device_skip =
            std::max(check.device_skip, d::max_abs_diff(device_twin.params[i], before[i]));
    }
    return check;
  });
}

AttentionCheck check_attention(const attention::AttentionOptions& options,
                               int64_t length,
                               int64_t heads,
                               int64_t head_dim,
                               const torch::Device& device,
                               torch::ScalarType dtype) {
  namespace d = step_checks_detail;
  return d::with_saved_rng([&] {
    AttentionCheck check;
    int64_t layout = 64;
    if (attention::uses_block(options.type)) layout = options.block;
    if (attention::uses_row_len(options.type)) layout = options.row_len;
    check.prefix = std::min(length, 2 * layout);
    check.tolerance = dtype == torch::kBFloat16 ? 3e-2 : 1e-4;
    torch::manual_seed(99);
    auto reference_module = attention::make_attention(options, length, head_dim);
    torch::manual_seed(99);
    auto module = attention::make_attention(options, length, head_dim);
    module->to(device);
    torch::NoGradGuard no_grad;
    const auto on = torch::TensorOptions().device(device).dtype(dtype);
    auto q = torch::randn({1, heads, check.prefix, head_dim}, on);
    auto k = torch::randn({1, heads, check.prefix, head_dim}, on);
    auto v = torch::randn({1, heads, check.prefix, head_dim}, on);
    const auto out = module->forward(q, k, v);
    auto as_cpu = [](const torch::Tensor& x) { return x.to(torch::kCPU, torch::kFloat); };
    const auto ref =
        attention::reference_attention(options, *reference_module, as_cpu(q), as_cpu(k), as_cpu(v));
    check.forward = d::relative_error(out, ref);
    auto state = module->start_decoding(length);
    std::vector<torch::Tensor> steps;
    for (int64_t i = 0; i < check.prefix; ++i)
      steps.push_back(state->step(q.select(2, i), k.select(2, i), v.select(2, i)));
    check.decode = d::relative_error(torch::stack(steps, 2), out);
    return check;
  });
}

std::string describe(const UpdateCheck& update, const AttentionCheck& attention) {
  char device[96] = "";
  if (update.device_adamw >= 0)
    std::snprintf(device,
                  sizeof device,
                  ", %.2e (captured step's AdamW), %.0e (its skipped update)",
                  update.device_adamw,
                  update.device_skip);
  char line[420];
  std::snprintf(line,
                sizeof line,
                "update vs torch::optim::AdamW::step + clip_grad_norm_: max abs diff %.2e "
                "(AdamW), %.2e (clipping)%s; attention vs float64 reference over %lld positions: "
                "%.2e, decode vs forward %.2e (tolerance %.0e)",
                update.adamw,
                update.clip,
                device,
                static_cast<long long>(attention.prefix),
                attention.forward,
                attention.decode,
                attention.tolerance);
  return line;
}

}  // namespace combiner::train
