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
// the product a GPU takes there (ops/gemm.h: the bf16 operands summed in float32, where LibTorch
// 1.13's CPU matmul sums in bf16), the output and the gradients rounded to bf16, and the ops
// LibTorch records are a GPU's: autocast's casts and one addmm; in backward two mms, the bias's
// sum and the casts back.
torch::Tensor autocast_linear(const torch::Tensor& x,
                              const torch::Tensor& weight,
                              const torch::Tensor& bias);

}  // namespace combiner::model
