// bfloat16 autocast, switched on and off in scopes: the blocks' matmuls run in bf16 while
// weights, the residual stream, attention scores and softmax, and the output logits stay fp32.
#pragma once

#include <torch/torch.h>

namespace combiner::model {

// Sets bf16 autocast on or off for `device`'s type while alive; restores the previous state.
class AutocastGuard {
 public:
  AutocastGuard(bool enabled, const torch::Device& device);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool cuda_;
  bool enabled_;
  bool previous_;
  at::ScalarType previous_dtype_;
};

// Whether autocast is on for `device`'s type right now.
bool autocast_enabled(const torch::Device& device);

}  // namespace combiner::model
