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

// at::linear(x, weight, bias) under the autocast in effect. On the CPU under bf16 autocast it takes
// the product a GPU takes there: the operands cast to bf16 (autocast's casts), summed in float32,
// the output and the gradients rounded to bf16, the ops LibTorch records a GPU's (the casts, one
// addmm; in backward two mms, the bias's sum and the casts back). LibTorch 1.13's CPU bf16 matmul
// sums in bf16: at the 12,544 tokens of a Fashion-MNIST batch its weight gradient's sums of
// positive terms come out at a fifth of their value, a step's gradient norm 15% low.
torch::Tensor autocast_linear(const torch::Tensor& x,
                              const torch::Tensor& weight,
                              const torch::Tensor& bias);

}  // namespace combiner::model
