#include "train/bits.h"

#include "ops/cross_entropy.h"

namespace combiner::train {

torch::Tensor subpixel_bits(const torch::Tensor& logits, const torch::Tensor& x) {
  return ops::cross_entropy_bits_composed(logits, x, false);
}

torch::Tensor mean_bits(const torch::Tensor& logits, const torch::Tensor& x) {
  return ops::cross_entropy_bits_composed(logits, x, true);
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
