#include "train/bits.h"

#include <cmath>

namespace combiner::train {

torch::Tensor subpixel_bits(const torch::Tensor& logits, const torch::Tensor& x) {
  auto log_probs = torch::log_softmax(logits.to(torch::kFloat), -1);
  auto nats = -log_probs.gather(-1, x.to(torch::kLong).unsqueeze(-1)).squeeze(-1);
  return nats / std::log(2.0);
}

torch::Tensor mean_bits(const torch::Tensor& logits, const torch::Tensor& x) {
  auto flat = logits.to(torch::kFloat).reshape({-1, logits.size(-1)});
  return torch::nn::functional::cross_entropy(flat, x.to(torch::kLong).reshape({-1})) /
         std::log(2.0);
}

}  // namespace combiner::train
