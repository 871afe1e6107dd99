// Exponential moving average of the weights, kept beside the model and saved in checkpoints:
// after every update, ema <- decay * ema + (1 - decay) * weights. Evaluation and sampling can
// use it instead of the raw weights (--ema).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace combiner::train {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// A copy of the model's parameters and buffers (capture_model's names and order).
NamedTensors start_ema(const torch::nn::Module& model);

// One update; buffers and non-floating tensors are copied as they are.
void update_ema(NamedTensors& ema, const torch::nn::Module& model, double decay);

// The same update decided on the device, for a captured step: none when `skip` (a 0-dim float
// tensor, 1 or 0) is 1, with nothing read back. Each average moves by lerp, average +
// (1 - decay) x (weights - average), which rounds apart from the update above by an ulp or so,
// and leaves it exactly as it was when skipped.
void update_ema(NamedTensors& ema,
                const torch::nn::Module& model,
                double decay,
                const torch::Tensor& skip);

}  // namespace combiner::train
