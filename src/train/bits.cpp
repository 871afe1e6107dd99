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

void backward_share(const torch::Tensor& loss, int64_t count, torch::Tensor& bits) {
  if (count == 1) {
    loss.backward();
    bits = loss.detach().to(torch::kDouble).reshape({1});
    return;
  }
  (loss / double(count)).backward();
  const auto share = loss.detach().to(torch::kDouble).reshape({1}) / double(count);
  if (bits.defined())
    bits += share;
  else
    bits = share;
}

}  // namespace combiner::train
