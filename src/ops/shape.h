// A tensor's shape as the ops' error messages print it: "[2, 3]".
#pragma once

#include <torch/torch.h>

#include <string>

namespace combiner::ops {

inline std::string shape_of(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}
inline std::string shape_of(const torch::Tensor& t) {
  return shape_of(t.sizes());
}

}  // namespace combiner::ops
