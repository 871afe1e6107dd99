#include "train/ema.h"

#include "train/checkpoint.h"

namespace combiner::train {

NamedTensors start_ema(const torch::nn::Module& model) {
  NamedTensors ema;
  for (const auto& [name, tensor] : capture_model(model))
    ema.emplace_back(name, tensor.detach().clone());
  return ema;
}

void update_ema(NamedTensors& ema, const torch::nn::Module& model, double decay) {
  torch::NoGradGuard no_grad;
  const auto current = capture_model(model);
  TORCH_CHECK(current.size() == ema.size(), "EMA: the model has changed shape");
  // average = average * decay + now * (1 - decay), over every float tensor in two foreach calls
  // (per tensor on the CPU: the same kernels as mul_ then add_ on each).
  std::vector<torch::Tensor> averages, nows;
  for (size_t i = 0; i < ema.size(); ++i) {
    if (ema[i].second.is_floating_point()) {
      averages.push_back(ema[i].second);
      nows.push_back(current[i].second);
    } else {
      ema[i].second.copy_(current[i].second);
    }
  }
  if (averages.empty()) return;
  at::_foreach_mul_(averages, decay);
  at::_foreach_add_(averages, nows, 1.0 - decay);
}

void update_ema(NamedTensors& ema,
                const torch::nn::Module& model,
                double decay,
                const torch::Tensor& skip) {
  torch::NoGradGuard no_grad;
  const auto current = capture_model(model);
  TORCH_CHECK(current.size() == ema.size(), "EMA: the model has changed shape");
  const auto weight = (1.0 - skip) * (1.0 - decay);  // 0 when skipped
  for (size_t i = 0; i < ema.size(); ++i) {
    auto& average = ema[i].second;
    if (average.is_floating_point())
      average.lerp_(current[i].second, weight.to(average.scalar_type()));
    else
      average.copy_(current[i].second);
  }
}

}  // namespace combiner::train
