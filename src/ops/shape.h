// A tensor's shape as the ops' error messages print it: "[2, 3]".
#pragma once

#include <torch/torch.h>

#include <string>

namespace combiner::ops {

inline std::string shape_of(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace combiner::ops
