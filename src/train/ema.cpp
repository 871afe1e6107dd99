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
  for (size_t i = 0; i < ema.size(); ++i) {
    auto& average = ema[i].second;
    const auto& now = current[i].second;
    if (average.is_floating_point()) {
      average.mul_(decay).add_(now, 1.0 - decay);
    } else {
      average.copy_(now);
    }
  }
}

}  // namespace combiner::train
