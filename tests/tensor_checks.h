// Comparing tensors in tests.
#pragma once

#include <torch/torch.h>

namespace combiner::testing {

// The largest |a - b| over all elements, computed in float64 whatever the two dtypes.
inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace combiner::testing
